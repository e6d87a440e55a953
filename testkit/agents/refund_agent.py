"""An agent process that refunds through Stripe's SDK, killed at a crash point and restarted.

    python -m testkit.agents.refund_agent ROLE --stripe URL --payment PI
        --case CASE --amount CENTS [--journal PATH | --notary URL --token KEY --tenant SLUG]
        [--tier N --lease ID --case-class CLASS --extra JSON]

ROLE is `submit` (the gate proposes and sends one refund), `recover` (a new process runs the
gate's recover()), or `plain` (no gate: the refund sent with the case's Idempotency-Key and
retried on restart, what the SDK's docs suggest). INTERLOCK_CRASH_AT kills any of them on the
way. Gate roles print the receipt as one JSON line; a payload whose money the gate refuses
before anything is written (AmbiguousMoney) prints {"ambiguous_money": why}. `--extra` merges
more payload fields (what a model might add), `--notary` journals at the notary instead."""

from __future__ import annotations

import argparse
import dataclasses
import json
from datetime import timedelta
from pathlib import Path

import stripe

from gate_client.adapters.stripe_refunds import METADATA_KEY, StripeRefunds, refund_premises
from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import AmbiguousMoney, Gate
from gate_client.ids import effect_id_for
from gate_client.journal import Journal, LocalJournal
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Proposal
from gate_client.targets import Tier
from testkit.peers.localstripe import stripe_client

TARGET = "stripe_refunds"
ACTION = "refund"
LEASE_ID = "lease_refund"
TIMEOUT = timedelta(seconds=2)


def effect_id(case_id: str, tenant: str = "") -> str:
    return effect_id_for(case_id, TARGET, ACTION, tenant=tenant)


def build_gate(client: stripe.StripeClient, journal: Journal, tier: Tier) -> Gate:
    return Gate(
        journal,
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
    parser.add_argument("--notary", metavar="URL", help="journal at this notary")
    parser.add_argument("--token", help="the notary agent key")
    parser.add_argument("--tenant", default="")
    parser.add_argument("--lease", default=LEASE_ID)
    parser.add_argument("--case-class", default="")
    parser.add_argument("--extra", default="{}", help="more payload fields, as JSON")
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
    journal: Journal = (
        NotaryJournal(args.notary, args.token) if args.notary else LocalJournal(args.journal)
    )
    gate = build_gate(client, journal, Tier(args.tier))
    if args.role == "recover":
        receipts = gate.recover()
    else:
        payload = {"payment_intent": args.payment, "amount": args.amount, **json.loads(args.extra)}
        proposal = Proposal(
            args.case,
            TARGET,
            ACTION,
            payload,
            args.lease,
            tenant=args.tenant,
            case_class=args.case_class,
        )
        premises = refund_premises(client)(proposal.proposed_body([]))
        proposal = dataclasses.replace(proposal, premises=premises)
        try:
            receipts = [gate.submit(proposal)]
        except AmbiguousMoney as refused:
            print(json.dumps({"ambiguous_money": str(refused)}), flush=True)
            return
    for receipt in receipts:
        print(json.dumps(receipt.to_dict()), flush=True)


if __name__ == "__main__":
    main()
