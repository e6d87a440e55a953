"""An agent process that refunds through Stripe's SDK, killed at a crash point and restarted.

    python -m testkit.agents.refund_agent ROLE --stripe URL --payment PI
        --case CASE --amount CENTS [--journal PATH --tier N]

ROLE is `submit` (the gate proposes and sends one refund), `recover` (a new process runs the
gate's recover()), or `plain` (no gate: the refund sent with the case's Idempotency-Key and
retried on restart, what the SDK's docs suggest). INTERLOCK_CRASH_AT kills any of them on the
way. Gate roles print the receipt as one JSON line."""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import stripe

from gate_client.adapters.stripe_refunds import METADATA_KEY, StripeRefunds, refund_premises
from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import Gate
from gate_client.ids import effect_id_for
from gate_client.journal import LocalJournal
from gate_client.proposal import Proposal
from gate_client.targets import Tier
from testkit.peers.localstripe import stripe_client

TARGET = "stripe_refunds"
ACTION = "refund"
LEASE_ID = "lease_refund"
TIMEOUT = timedelta(seconds=2)


def effect_id(case_id: str) -> str:
    return effect_id_for(case_id, TARGET, ACTION)


def build_gate(client: stripe.StripeClient, journal: Path, tier: Tier) -> Gate:
    return Gate(
        LocalJournal(journal),
        {TARGET: StripeRefunds(client, tier=tier, max_inflight=TIMEOUT)},
        premises_for=refund_premises(client),
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["submit", "recover", "plain"])
    parser.add_argument("--stripe", required=True)
    parser.add_argument("--payment", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--amount", type=int, required=True)
    parser.add_argument("--journal", type=Path)
    parser.add_argument("--tier", type=int, default=int(Tier.LOOKUP))
    args = parser.parse_args()
    client = stripe_client(args.stripe, timeout_seconds=TIMEOUT.total_seconds())
    if args.role == "plain":
        client.v1.refunds.create(
            params={
                "payment_intent": args.payment,
                "amount": args.amount,
                "metadata": {METADATA_KEY: effect_id(args.case)},
            },
            options={"idempotency_key": effect_id(args.case)},
        )
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        return
    gate = build_gate(client, args.journal, Tier(args.tier))
    if args.role == "recover":
        receipts = gate.recover()
    else:
        payload = {"payment_intent": args.payment, "amount": args.amount}
        proposal = Proposal(args.case, TARGET, ACTION, payload, LEASE_ID)
        premises = refund_premises(client)(proposal.proposed_body([]))
        proposal = dataclasses.replace(proposal, premises=premises)
        receipts = [gate.submit(proposal)]
    for receipt in receipts:
        print(json.dumps(receipt.to_dict()), flush=True)


if __name__ == "__main__":
    main()
