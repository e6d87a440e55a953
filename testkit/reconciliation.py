"""Effects as the gate records them, for reconciling against a real peer: a refund sent by the
Stripe adapter and committed with the refund's id, or an effect dispatched and left there."""

from __future__ import annotations

from typing import Any

import stripe

from gate_client.adapters.stripe_refunds import StripeRefunds
from gate_client.proposal import Proposal
from gate_client.protocol import sent_body
from gate_client.targets import Sent, Tier
from notary import services
from notary.models import Tenant
from testkit.factories import leased


def refund_through_the_gate(
    tenant: Tenant, client: stripe.StripeClient, payment_intent: str, case_id: str, amount: int
) -> tuple[str, str]:
    """A refund proposed, dispatched, sent by the Stripe adapter and committed with the
    refund's id, as the gate records one: (effect id, refund id)."""
    payload = {"payment_intent": payment_intent, "amount": amount}
    effect_id = dispatched_with(tenant, "stripe_refunds", case_id, payload)
    sent = StripeRefunds(client, tier=Tier.LOOKUP).send(effect_id, payload)
    assert isinstance(sent, Sent)
    committed_as(tenant, effect_id, sent.result_ref)
    return effect_id, sent.result_ref


def dispatched_with(tenant: Tenant, target: str, case_id: str, payload: dict[str, Any]) -> str:
    """A refund of `payload` proposed and dispatched (attempt 1) under a new lease: its id."""
    lease = leased(tenant, case_id, "refund")
    proposal = Proposal(case_id, target, "refund", payload, lease.lease_id, tenant=tenant.slug)
    services.effect_propose(
        tenant=tenant, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
    )
    services.effect_dispatch(
        tenant=tenant, effect_id=proposal.effect_id, attempt=1, premises=[], recovery=False
    )
    return proposal.effect_id


def committed_as(tenant: Tenant, effect_id: str, result_ref: str) -> None:
    """COMMITTED for attempt 1, as the target answered it."""
    body = sent_body(1, result_ref, None)
    services.effect_record_outcome(tenant=tenant, effect_id=effect_id, kind="COMMITTED", body=body)
