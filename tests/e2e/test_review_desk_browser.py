"""The review desk as finance reviewers use it, in a real browser (headless Chromium against
Django's live server): the queue with money, filters and sorting; two reviewers deciding one
effect at once; a contradicted decision back in the queue with its banner; taking an effect
and writing a note; and both pages on a 390 px phone, without scrolling sideways. Screenshots
of the queue and an effect page, desktop and phone, are saved under var/screenshots."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from pytest_django.live_server_helper import LiveServer
from selenium.webdriver.common.by import By
from selenium.webdriver.support.wait import WebDriverWait

from ledger.core.entries import EntryKind
from ledger.selectors import effect_entries
from notary import services
from notary.groups import FINANCE_REVIEWERS
from notary.models import Effect, ReviewAssignment, Tenant
from testkit.browser import PASSWORD, chromium, fits_the_screen, log_in, screenshot
from testkit.factories import CENTS_MONEY, STRIPE_MONEY, register, settled

pytestmark = pytest.mark.slow
QUEUE = "/admin/notary/ambiguouseffect/"


@pytest.fixture
def desk(transactional_db: None) -> dict[str, Effect]:
    """A shop with three AMBIGUOUS refunds (one overdue) on targets declaring their money, and
    two reviewers."""
    tenant = services.tenant_create(slug="shop", name="A shop")
    register(tenant, "payments", review_sla=timedelta(milliseconds=1), money=CENTS_MONEY)
    register(tenant, "bank", money=STRIPE_MONEY)
    register(tenant, "cards", money=CENTS_MONEY)
    usd = {"currency": "usd"}
    made = {
        "big": settled(
            tenant, "case-1", "payments", {"amount_cents": 1_250_000, **usd}, "AMBIGUOUS"
        ),
        "yen": settled(tenant, "case-2", "bank", {"amount": 800, "currency": "jpy"}, "AMBIGUOUS"),
        "small": settled(tenant, "case-3", "cards", {"amount_cents": 4_999, **usd}, "AMBIGUOUS"),
    }
    for name in ("fiona", "gil"):
        user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
        user.groups.add(Group.objects.get(name=FINANCE_REVIEWERS))
    return {name: Effect.objects.get(effect_id=effect_id) for name, effect_id in made.items()}


def rows(browser: object) -> list[str]:
    return [a.text for a in browser.find_elements(By.CSS_SELECTOR, "th.field-effect_id a")]  # type: ignore[attr-defined]


def test_the_queue_shows_money_and_filters_and_sorts(
    live_server: LiveServer, desk: dict[str, Effect]
) -> None:
    with chromium() as browser:
        log_in(browser, live_server.url, "fiona")
        browser.get(live_server.url + QUEUE)
        amounts = [td.text for td in browser.find_elements(By.CSS_SELECTOR, "td.field-amount")]
        assert sorted(amounts) == sorted(["$12,500.00", "¥800", "$49.99"])
        assert len(browser.find_elements(By.CSS_SELECTOR, "#result_list .overdue")) == 1
        screenshot(browser, "queue")
        browser.find_element(By.LINK_TEXT, "overdue").click()
        WebDriverWait(browser, 30).until(lambda d: "overdue=yes" in d.current_url)
        assert rows(browser) == [desk["big"].effect_id]
        browser.get(live_server.url + QUEUE)
        browser.find_element(By.CSS_SELECTOR, "th.column-amount a").click()
        WebDriverWait(browser, 30).until(lambda d: "o=" in d.current_url)
        assert rows(browser) == [desk[n].effect_id for n in ("small", "yen", "big")]


def test_two_reviewers_decide_one_effect_at_once(
    live_server: LiveServer, desk: dict[str, Effect]
) -> None:
    """Both open the effect and confirm a decision; the first is written, the second is
    told who decided and why, and keeps what they wrote. One RESOLVED in the ledger."""
    effect = desk["big"]
    page = f"{live_server.url}{QUEUE}{effect.pk}/change/"
    with chromium() as fiona, chromium() as gil:
        for browser, name in ((fiona, "fiona"), (gil, "gil")):
            log_in(browser, live_server.url, name)
            browser.get(page)
        for browser, answer, reason in (
            (fiona, "no", "No refund re_ in the payments dashboard for case-1."),
            (gil, "yes", "The customer's bank statement shows the refund."),
        ):
            browser.find_element(By.CSS_SELECTOR, f"input[name=happened][value={answer}]").click()
            browser.find_element(By.NAME, "reason").send_keys(reason)
            browser.find_element(By.CSS_SELECTOR, "#resolve input[type=submit]").click()
            WebDriverWait(browser, 30).until(lambda d: d.find_elements(By.ID, "confirm"))
        fiona.find_element(By.CSS_SELECTOR, "#confirm input[type=submit]").click()
        WebDriverWait(fiona, 30).until(lambda d: d.current_url.endswith(QUEUE))
        gil.find_element(By.CSS_SELECTOR, "#confirm input[type=submit]").click()
        WebDriverWait(gil, 30).until(lambda d: d.find_elements(By.ID, "overtaken"))
        told = gil.find_element(By.ID, "decided-by").text
        assert told.startswith("Decided by fiona at ")
        assert "it did not happen — “No refund re_ in the payments dashboard" in told
        kept = gil.find_element(By.ID, "your-reason").get_attribute("value")
        assert kept == "The customer's bank statement shows the refund."
    resolved = [
        e.body_value()["by"]
        for e in effect_entries(log=effect.tenant.log, effect_id=effect.effect_id)
        if e.kind == EntryKind.RESOLVED
    ]
    assert resolved == ["fiona"]


def test_a_contradicted_decision_returns_with_a_banner(
    live_server: LiveServer, desk: dict[str, Effect]
) -> None:
    effect = desk["yen"]
    tenant: Tenant = effect.tenant
    services.effect_resolve(
        tenant=tenant, effect_id=effect.effect_id, happened=False, reason="not sent", by="gil"
    )
    with chromium() as browser:
        log_in(browser, live_server.url, "fiona")
        browser.get(live_server.url + QUEUE)
        assert effect.effect_id not in rows(browser)
        services.attestation_record(
            tenant=tenant,
            by="bank-service",
            effect_id=effect.effect_id,
            stage="performed",
            reference="tr_9",
            detail="",
        )
        browser.get(live_server.url + QUEUE)
        assert effect.effect_id in rows(browser)
        browser.find_element(By.LINK_TEXT, effect.effect_id).click()
        banner = browser.find_element(By.ID, "contradicted").text
        assert "The evidence contradicts this outcome" in banner
        sentence = browser.find_element(By.ID, "sentence").text
        assert sentence.startswith("Contradicted: gil decided it did not happen (“not sent”)")
        assert "a statement from bank-service" in sentence
        assert browser.find_elements(By.ID, "resolve")  # a person decides again


def test_a_reviewer_takes_an_effect_and_writes_a_note(
    live_server: LiveServer, desk: dict[str, Effect]
) -> None:
    effect = desk["small"]
    with chromium() as browser:
        log_in(browser, live_server.url, "fiona")
        browser.get(live_server.url + QUEUE)
        browser.find_element(
            By.CSS_SELECTOR, f"input[name=_selected_action][value='{effect.pk}']"
        ).click()
        browser.find_element(By.CSS_SELECTOR, "select[name=action] option[value=take]").click()
        browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()
        WebDriverWait(browser, 30).until(lambda d: "Assigned 1 effect to fiona." in d.page_source)
        browser.find_element(By.LINK_TEXT, effect.effect_id).click()
        assert browser.find_element(By.ID, "assignee").text == "fiona"
        browser.find_element(By.NAME, "note").send_keys("Asked the bank; answer due tomorrow.")
        browser.find_element(By.CSS_SELECTOR, "#notes input[type=submit]").click()
        WebDriverWait(browser, 30).until(lambda d: "Your note is ledger entry" in d.page_source)
        assert "Asked the bank; answer due tomorrow." in browser.find_element(By.ID, "notes").text
    assert ReviewAssignment.objects.get(effect_id=effect.effect_id).assignee.username == "fiona"


def test_the_queue_and_an_effect_page_fit_a_phone(
    live_server: LiveServer, desk: dict[str, Effect]
) -> None:
    effect = desk["big"]
    with chromium(phone=True) as phone:
        log_in(phone, live_server.url, "fiona")
        phone.get(live_server.url + QUEUE)
        assert phone.execute_script("return window.innerWidth") == 390
        assert fits_the_screen(phone)
        amount = phone.find_element(By.CSS_SELECTOR, "td.field-amount")
        assert amount.is_displayed() and amount.text.endswith("$12,500.00")
        assert phone.find_element(By.CSS_SELECTOR, "td.field-waiting").is_displayed()
        screenshot(phone, "queue_phone")
        phone.get(f"{live_server.url}{QUEUE}{effect.pk}/change/")
        assert fits_the_screen(phone)
        reason = phone.find_element(By.NAME, "reason")
        right = phone.execute_script("return arguments[0].getBoundingClientRect().right", reason)
        assert 0 < right <= 390
        screenshot(phone, "effect_page_phone")
    with chromium() as desktop:
        log_in(desktop, live_server.url, "fiona")
        desktop.get(f"{live_server.url}{QUEUE}{effect.pk}/change/")
        screenshot(desktop, "effect_page")
