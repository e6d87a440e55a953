"""A target declares its money once, the notary keeps the declaration and writes it into every
PROPOSED, and a proposal whose money is ambiguous is refused before anything is written."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from gate_client.money import MoneyDeclaration
from gate_client.proposal import Proposal
from ledger import selectors as ledger_selectors
from notary import services
from notary.models import Target, Tenant
from testkit.factories import CENTS_MONEY, STRIPE_MONEY, client_for, register

pytestmark = pytest.mark.django_db


class Shop:
    """Acme with a Stripe refunds target declaring `amount`, and an agent holding a standing
    lease over the refunds queue limited by `limits`."""

    def __init__(self, tenant: Tenant, limits: dict[str, int]) -> None:
        self.tenant = tenant
        self.target = register(
            tenant, "stripe_refunds", tier=2, max_inflight=timedelta(seconds=5), money=STRIPE_MONEY
        )
        approver = services.api_key_issue(tenant=tenant, role="approver", holder="maria")[0]
        self.agent = client_for(tenant, "agent", "refund-bot")
        self.lease = services.lease_grant(
            tenant=tenant,
            approver=approver,
            case_class="refunds-queue",
            action="refund",
            expires_at=timezone.now() + timedelta(hours=1),
            requested_by="refund-bot",
            limits=limits,
        )

    def propose(self, payload: dict[str, Any], **declared: Any) -> Any:
        proposal = Proposal(
            "RF-1",
            "stripe_refunds",
            "refund",
            payload,
            self.lease.lease_id,
            tenant=self.tenant.slug,
            case_class="refunds-queue",
        )
        body = proposal.proposed_body([], self.target.declaration())
        body.update(declared)
        request = {"effect_id": proposal.effect_id, "proposal": body, "dispatch": {"premises": []}}
        return self.agent.post("/v1/effects", request, format="json")

    def entries(self) -> list[Any]:
        return list(ledger_selectors.iter_entries(log=self.tenant.log))


@pytest.mark.parametrize(
    "payload",
    [
        {"payment_intent": "pi_1", "amount": 2000, "amount_cents": 1, "currency": "USD"},
        {"payment_intent": "pi_1", "amount": 2000, "refundAmount": "1"},
        {"payment_intent": "pi_1", "amount_cents": 1},  # the declared amount is missing
        {"payment_intent": "pi_1", "amount": "2000"},
        {"payment_intent": "pi_1", "amount": 0},
    ],
    ids=["second amount", "amount as text elsewhere", "no declared amount", "text", "zero"],
)
def test_a_payload_whose_money_is_ambiguous_is_refused_400_with_nothing_written(
    acme: Tenant, payload: dict[str, Any]
) -> None:
    shop = Shop(acme, {"amount": 2000})
    before = shop.entries()
    answer = shop.propose(payload)
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"] == "invalid"
    assert answer.json()["detail"].startswith("proposal.payload: the payload's amount")
    assert shop.entries() == before


def test_a_lease_limiting_another_field_than_the_declared_amount_is_refused_400_unwritten(
    acme: Tenant,
) -> None:
    """The README's standing lease is limited by amount_cents; a Stripe refund's amount is
    `amount`. Before, {"amount": 5000000} went out under a $20.00 limit on amount_cents as long
    as the payload also said amount_cents; now the limit names a field the target does not
    declare, so no proposal under it is written, whatever the payload."""
    shop = Shop(acme, {"amount_cents": 2000})
    both = shop.propose({"payment_intent": "pi_1", "amount": 5_000_000, "amount_cents": 100})
    assert both.status_code == 400, both.json()
    answer = shop.propose({"payment_intent": "pi_1", "amount": 5_000_000})
    assert answer.status_code == 400, answer.json()
    assert answer.json() == {
        "error": "invalid",
        "detail": "proposal.lease_id: the lease limits 'amount_cents'; the target's amount is "
        "'amount'",
    }
    assert [e.kind for e in shop.entries()] == ["LEASE_GRANTED"]


def test_a_proposal_declaring_its_target_otherwise_is_refused_and_one_without_gets_the_record(
    acme: Tenant,
) -> None:
    shop = Shop(acme, {"amount": 2000})
    payload = {"payment_intent": "pi_1", "amount": 1500}
    before = shop.entries()
    lying = shop.target.declaration().body()
    lying["money"] = MoneyDeclaration("amount_cents").body()
    answer = shop.propose(payload, declaration=lying)
    assert answer.status_code == 400, answer.json()
    assert "proposal.declaration is not target 'stripe_refunds''s record" in answer.json()["detail"]
    assert shop.entries() == before
    unreadable = shop.propose(payload, declaration={"tier": 9})
    assert unreadable.status_code == 400 and shop.entries() == before

    body = shop.propose(payload).json()
    assert body["dispatched"] is not None, body
    [proposed] = [e for e in shop.entries() if e.kind == "PROPOSED"]
    assert proposed.body_value()["declaration"] == shop.target.declaration().body()


def test_the_target_api_takes_and_shows_its_money_and_refuses_a_declaration_in_two_minds(
    acme: Tenant,
) -> None:
    approver = client_for(acme, "approver", "maria")
    base = {"tier": 3, "queryable": False, "max_inflight_seconds": 5}
    made = approver.post(
        "/v1/targets", {**base, "name": "payouts", "money": CENTS_MONEY}, format="json"
    )
    assert made.status_code == 201, made.json()
    assert made.json()["money"] == {**CENTS_MONEY, "currency": None, "unit": "minor"}
    plain = approver.post("/v1/targets", {**base, "name": "mail"}, format="json")
    assert plain.status_code == 201 and plain.json()["money"] is None
    for money in (
        {"amount_field": "amount", "currency_field": "currency", "currency": "USD"},
        {"amount_field": "amount", "currency_field": "amount"},
        {"amount_field": "amount", "unit": "major"},
        {"amount_field": "a.b"},
        {"currency": "USD"},
    ):
        refused = approver.post(
            "/v1/targets", {**base, "name": "bad", "money": money}, format="json"
        )
        assert refused.status_code == 400, (money, refused.json())
        assert {"error", "detail"} <= set(refused.json())
    assert not Target.objects.filter(name="bad").exists()


def test_the_database_refuses_a_money_declaration_in_two_minds(acme: Tenant) -> None:
    target = register(acme, "payouts", money=CENTS_MONEY)
    for change in (
        {"money_currency": "USD"},  # beside a currency field
        {"money_amount_field": ""},  # a currency with no amount
        {"money_currency_field": "", "money_currency": "usd"},
        {"money_currency_field": "amount_cents"},
    ):
        with pytest.raises(IntegrityError), transaction.atomic():
            Target.objects.filter(pk=target.pk).update(**change)
