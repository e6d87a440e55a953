"""The finance review in a real browser (Debian's Chromium, driven by Selenium, against Django's
live server): a reviewer logs in, opens the queue and an effect, decides it with a reason, and
sees it leave the queue and the RESOLVED entry appear; a reviewer revokes a lease through its
confirmation page with a reason; an auditor gets no decision to make; and a reviewer cannot edit
a ledger entry. The effect page and the revocation's confirmation are saved as screenshots."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group, User
from pytest_django.live_server_helper import LiveServer
from selenium import webdriver
from selenium.webdriver.common.by import By
from selenium.webdriver.support.select import Select
from selenium.webdriver.support.wait import WebDriverWait

from ledger.core.entries import EntryKind
from ledger.models import Entry
from ledger.selectors import iter_entries
from notary import services
from notary.groups import AUDITORS, FINANCE_REVIEWERS
from notary.models import Effect, Lease
from testkit.browser import PASSWORD, chromium, log_in, screenshot
from testkit.factories import dispatched, register

pytestmark = pytest.mark.slow


@pytest.fixture
def browser() -> Iterator[webdriver.Chrome]:
    with chromium() as driver:
        yield driver


@pytest.fixture
def ambiguous(transactional_db: None) -> Effect:
    tenant = services.tenant_create(slug="shop", name="A shop")
    register(
        tenant, "email", evidence_window=timedelta(hours=24), max_inflight=timedelta(seconds=1)
    )
    effect_id = dispatched(tenant, "email", "case-4711")
    services.effect_record_outcome(
        tenant=tenant,
        effect_id=effect_id,
        kind="AMBIGUOUS",
        body={"recheck": {"reason": "tier 3: nothing to ask, never resend"}},
    )
    for name, group in (("fiona", FINANCE_REVIEWERS), ("audrey", AUDITORS)):
        user = User.objects.create_user(name, password=PASSWORD, is_staff=True)
        user.groups.add(Group.objects.get(name=group))
    return Effect.objects.get(effect_id=effect_id)


def test_a_reviewer_resolves_an_ambiguous_effect_in_the_browser(
    browser: webdriver.Chrome, live_server: LiveServer, ambiguous: Effect
) -> None:
    log_in(browser, live_server.url, "fiona")
    browser.get(f"{live_server.url}/admin/notary/ambiguouseffect/")
    browser.find_element(By.LINK_TEXT, ambiguous.effect_id).click()
    sentence = browser.find_element(By.ID, "sentence").text
    assert sentence.startswith("Cannot know: the request may have reached email")
    screenshot(browser, "effect_page_resolving")

    browser.find_element(By.CSS_SELECTOR, "input[name=happened][value=no]").click()
    browser.find_element(By.NAME, "reason").send_keys(
        "The email service's outbox has no message for case-4711."
    )
    browser.find_element(By.CSS_SELECTOR, "#resolve input[type=submit]").click()
    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "confirm"))
    assert browser.find_element(By.ID, "confirm-decision").text == "It did not happen"
    assert not [e for e in iter_entries(log=ambiguous.tenant.log) if e.kind == EntryKind.RESOLVED]
    browser.find_element(By.CSS_SELECTOR, "#confirm input[type=submit]").click()

    WebDriverWait(browser, 10).until(lambda d: d.current_url.endswith("/ambiguouseffect/"))
    assert "Resolved " + ambiguous.effect_id in browser.page_source
    assert browser.find_elements(By.LINK_TEXT, ambiguous.effect_id) == []
    browser.get(f"{live_server.url}/admin/notary/effect/{ambiguous.pk}/change/")
    assert "Decided by fiona: it did not happen." in browser.find_element(By.ID, "sentence").text
    ledger = browser.find_element(By.ID, "ledger").text
    assert "RESOLVED" in ledger
    resolved = [e for e in iter_entries(log=ambiguous.tenant.log) if e.kind == EntryKind.RESOLVED]
    assert [e.body_value()["by"] for e in resolved] == ["fiona"]


def test_a_reviewer_revokes_a_lease_with_a_reason_in_the_browser(
    browser: webdriver.Chrome, live_server: LiveServer, ambiguous: Effect
) -> None:
    lease = Lease.objects.get(lease_id=ambiguous.lease_id)
    log_in(browser, live_server.url, "fiona")
    browser.get(f"{live_server.url}/admin/notary/lease/")
    tick = f"input[name=_selected_action][value='{lease.pk}']"
    browser.find_element(By.CSS_SELECTOR, tick).click()
    Select(browser.find_element(By.NAME, "action")).select_by_visible_text(
        "Revoke the selected leases"
    )
    browser.find_element(By.CSS_SELECTOR, "button[name=index]").click()

    WebDriverWait(browser, 10).until(lambda d: d.find_elements(By.ID, "leases"))
    row = browser.find_element(By.ID, f"lease-{lease.pk}").text
    assert lease.lease_id in row and "case-4711" in row and "not yet: it will be revoked" in row
    assert "irreversible" in browser.find_element(By.ID, "consequences").text
    assert not [e for e in iter_entries(log=ambiguous.tenant.log) if e.kind == "LEASE_REVOKED"]
    screenshot(browser, "revoke_confirmation")
    reason = "The customer withdrew the request for case-4711."
    browser.find_element(By.NAME, "reason").send_keys(reason)
    browser.find_element(By.CSS_SELECTOR, "#revoke input[type=submit]").click()

    WebDriverWait(browser, 10).until(lambda d: d.current_url.endswith("/admin/notary/lease/"))
    [revoked] = [e for e in iter_entries(log=ambiguous.tenant.log) if e.kind == "LEASE_REVOKED"]
    assert revoked.body_value() == {"lease_id": lease.lease_id, "by": "fiona", "reason": reason}
    message = browser.find_element(By.CSS_SELECTOR, ".messagelist .success").text
    assert message == f"Revoked 1 lease (ledger entry {revoked.seq})."
    assert "by fiona at" in browser.find_element(By.CSS_SELECTOR, "td.field-revoked").text


def test_an_auditor_has_no_decision_and_a_reviewer_cannot_edit_the_ledger(
    browser: webdriver.Chrome, live_server: LiveServer, ambiguous: Effect
) -> None:
    log_in(browser, live_server.url, "audrey")
    browser.get(f"{live_server.url}/admin/notary/ambiguouseffect/{ambiguous.pk}/change/")
    assert browser.find_element(By.ID, "sentence").text.startswith("Cannot know")
    assert browser.find_elements(By.ID, "resolve") == []
    browser.delete_all_cookies()  # a new session: the next person at the desk

    log_in(browser, live_server.url, "fiona")
    entry = Entry.objects.filter(effect_id=ambiguous.effect_id).order_by("seq").first()
    assert entry is not None
    browser.get(f"{live_server.url}/admin/ledger/entry/{entry.pk}/change/")
    assert browser.find_elements(By.NAME, "_save") == []
    assert browser.find_elements(By.LINK_TEXT, "Delete") == []
    assert "PROPOSED" in browser.page_source  # the page shows the entry, read only
