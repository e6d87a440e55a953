"""The review queue as a finance reviewer works it: money as money, what was to be done, how
long each effect has waited against its target's SLA, and filters and sorting by them."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.test import Client

from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries
from notary import services
from notary.groups import FINANCE_REVIEWERS
from notary.models import Effect, Tenant
from notary.selectors import effect_projection_differences
from testkit.factories import CENTS_MONEY, STRIPE_MONEY, leased, register, settled

pytestmark = pytest.mark.django_db
QUEUE = "/admin/notary/ambiguouseffect/"


@pytest.fixture
def reviewer() -> Client:
    user = User.objects.create_user("fiona", password="pw", is_staff=True)
    user.groups.add(Group.objects.get(name=FINANCE_REVIEWERS))
    client = Client()
    client.force_login(user)
    return client


def ambiguous(tenant: Tenant, case_id: str, target: str, payload: dict[str, Any]) -> Effect:
    return Effect.objects.get(effect_id=settled(tenant, case_id, target, payload, "AMBIGUOUS"))


@pytest.fixture
def queued(acme: Tenant) -> dict[str, Effect]:
    """Four AMBIGUOUS refunds: two overdue on a target with a 1 ms review SLA, two within a
    day's SLA; in dollars, in yen, and one with no amount."""
    register(acme, "payments", review_sla=timedelta(milliseconds=1), money=CENTS_MONEY)
    register(acme, "bank", money=STRIPE_MONEY)
    register(acme, "letters")  # its payloads move no money
    usd = {"currency": "usd"}
    return {
        "big": ambiguous(acme, "case-1", "payments", {"amount_cents": 1_250_000, **usd}),
        "yen": ambiguous(acme, "case-2", "bank", {"amount": 800, "currency": "jpy"}),
        "small": ambiguous(acme, "case-3", "payments", {"amount_cents": 4_999, **usd}),
        "none": ambiguous(acme, "case-4", "letters", {"note": "no amount"}),
    }


def listed(client: Client, query: str = "") -> list[str]:
    """The effect ids of the queue's rows, in the order shown."""
    html = client.get(QUEUE + query).content.decode()
    return re.findall(r'<th class="field-effect_id"><a href="[^"]+">([^<]+)</a>', html)


def test_the_queue_shows_money_action_and_waiting_time(
    reviewer: Client, queued: dict[str, Effect]
) -> None:
    html = reviewer.get(QUEUE).content.decode()
    for column in ("amount", "action", "waiting"):
        assert f'<th scope="col" class="sortable column-{column}' in html or (
            f'class="column-{column}' in html
        )
    assert '<td class="field-amount">$12,500.00</td>' in html
    assert '<td class="field-amount">¥800</td>' in html
    assert '<td class="field-amount">$49.99</td>' in html
    assert '<td class="field-amount">-</td>' in html
    assert '<td class="field-action">refund</td>' in html
    assert "amount_cents" not in html and "1250000" not in html
    assert html.count('<span class="overdue">') == 2  # the payments target's two
    assert "4 effects to review" in html


def test_the_queue_filters_by_amount_in_each_currency_and_by_sla(
    reviewer: Client, queued: dict[str, Effect]
) -> None:
    ids = {name: effect.effect_id for name, effect in queued.items()}
    assert set(listed(reviewer, "?amount=large")) == {ids["big"]}
    assert set(listed(reviewer, "?amount=small")) == {ids["small"]}  # $49.99
    assert set(listed(reviewer, "?amount=medium")) == {ids["yen"]}  # ¥800, not 8.00 of anything
    assert set(listed(reviewer, "?amount=none")) == {ids["none"]}
    assert set(listed(reviewer, "?overdue=yes")) == {ids["big"], ids["small"]}
    assert set(listed(reviewer, "?overdue=no")) == {ids["yen"], ids["none"]}
    assert set(listed(reviewer, "?currency=JPY")) == {ids["yen"]}
    assert set(listed(reviewer, "?target=bank&overdue=yes")) == set()


def test_the_queue_sorts_by_amount_and_by_waiting_time(
    reviewer: Client, queued: dict[str, Effect]
) -> None:
    ids = {name: effect.effect_id for name, effect in queued.items()}
    waited = listed(reviewer)  # default: waiting longest first
    assert waited == [ids["big"], ids["yen"], ids["small"], ids["none"]]
    header = reviewer.get(QUEUE).content.decode().split('class="sortable column-amount')[1]
    amount_column = re.search(r'href="\?o=(\d+)', header).group(1)  # type: ignore[union-attr]
    # In major units of each one's currency: $49.99 < ¥800 < $12,500.00, none last.
    assert listed(reviewer, f"?o={amount_column}") == [
        ids["small"],
        ids["yen"],
        ids["big"],
        ids["none"],
    ]
    descending = [i for i in listed(reviewer, f"?o=-{amount_column}") if i != ids["none"]]
    assert descending == [ids["big"], ids["yen"], ids["small"]]


def test_an_effect_waits_from_when_it_went_ambiguous_or_was_contradicted(
    acme: Tenant, queued: dict[str, Effect]
) -> None:
    """`queued_at` is the AMBIGUOUS entry's time; after a decision and a contradicting
    statement, the statement's. The projection stays the ledger's."""
    effect = queued["big"]
    entries = {e.kind: e for e in iter_entries(log=acme.log) if e.effect_id == effect.effect_id}
    assert effect.queued_at == entries[EntryKind.AMBIGUOUS].created_at
    services.effect_resolve(
        tenant=acme, effect_id=effect.effect_id, happened=False, reason="no refund", by="fiona"
    )
    assert Effect.objects.get(pk=effect.pk).queued_at is None
    observed, _ = services.attestation_record(
        tenant=acme,
        by="payments-service",
        effect_id=effect.effect_id,
        stage="performed",
        reference="re_1",
        detail="",
    )
    again = Effect.objects.get(pk=effect.pk)
    assert (again.contradicted, again.queued_at) == (True, observed.created_at)
    assert (again.amount_minor, again.currency) == (1_250_000, "USD")
    assert effect_projection_differences(tenant=acme) == []


def test_the_effect_page_shows_money_limits_and_json(
    reviewer: Client, queued: dict[str, Effect]
) -> None:
    effect = queued["big"]
    page = reviewer.get(f"{QUEUE}{effect.pk}/change/").content.decode()
    assert '<strong id="amount">$12,500.00</strong>' in page
    assert "$12,500.00 (amount_cents 1250000)" in page
    assert '<span id="lease-limits">no limits</span>' in page
    assert "{&#x27;" not in page and "{'" not in page  # no Python reprs
    assert "&quot;payload_hash&quot;: " in page  # ledger bodies as JSON


def test_lease_pages_show_limits_in_words(reviewer: Client, acme: Tenant) -> None:
    lease = leased(acme, "case-9", "refund", limits={"amount_cents": 5_000})
    listing = reviewer.get("/admin/notary/lease/").content.decode()
    assert "amount at most 5,000 in the payload&#x27;s minor units" in listing
    page = reviewer.get(f"/admin/notary/lease/{lease.pk}/change/").content.decode()
    assert "amount at most 5,000 in the payload&#x27;s minor units" in page
    assert "{&#x27;amount_cents&#x27;" not in page
