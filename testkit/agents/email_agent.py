"""An agent process that emails "your refund is on the way" through Resend's SDK, killed at a
crash point and restarted: the seed's email scenario, against the local Resend.

    python -m testkit.agents.email_agent ROLE --resend URL --case CASE
        --world WORLD_FILE --system SYSTEM [--journal PATH | NOTARY] [--key-window S]

ROLE is `submit`, `recover` (a new process runs recover()) or `plain` (no gate: the SDK's send
with the case's Idempotency-Key, simply run again on restart). SYSTEM declares what the gate
may assume of Resend: `interlock` (tier 1, the probe as lookup), `interlock_noprobe` (tier 1),
`interlock_tier3` (neither), `interlock_notary` (tier 3 with the notary's webhook evidence).
NOTARY: --notary URL --notary-token TOKEN --tenant SLUG --lease LEASE_ID [--separate-steps]
(PROPOSED and DISPATCHED as two requests, so a crash can fall between them). The premise, read
from WORLD_FILE at each check, is the seed's: the refund is succeeded or pending. Gate roles
print each receipt as one JSON line."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import resend

from gate_client.adapters.resend_email import RESEND_KEY_WINDOW, ResendEmail
from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import Gate
from gate_client.ids import effect_id_for
from gate_client.journal import Journal, LocalJournal
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Proposal
from gate_client.targets import Tier
from testkit.agents.agent_process import refund_premise

TARGET = "email"
ACTION = "refund_email"
LEASE_ID = "lease_email"
TIMEOUT = timedelta(seconds=2)
# How long the notary row waits for Resend's webhooks; the notary's target record says the same.
EVIDENCE_WINDOW = timedelta(seconds=3)
PROBE_FROM = "Probe <probe@unverified.invalid>"
SYSTEMS = ("interlock", "interlock_noprobe", "interlock_tier3", "interlock_notary")


def effect_id(case_id: str, tenant: str = "") -> str:
    return effect_id_for(case_id, TARGET, ACTION, tenant=tenant)


def message(case_id: str) -> dict[str, Any]:
    return {
        "from": "Support <support@example.com>",
        "to": ["delivered@resend.dev"],
        "subject": "Your refund is on the way",
        "text": f"Case {case_id}: your refund of $20.00 is on the way.",
    }


def target_for(system: str, key_window: timedelta) -> ResendEmail:
    """What the gate may assume of Resend under each system; a request is in flight as long
    as the SDK's client waits for it."""
    if system == "interlock":
        return ResendEmail(
            name=TARGET, key_window=key_window, max_inflight=TIMEOUT, probe_from=PROBE_FROM
        )
    if system == "interlock_noprobe":
        return ResendEmail(name=TARGET, key_window=key_window, max_inflight=TIMEOUT)
    # Told Resend offers neither dedup nor lookup; the notary's evidence may still answer.
    evidence = EVIDENCE_WINDOW if system == "interlock_notary" else None
    return ResendEmail(
        name=TARGET,
        tier=Tier.NEITHER,
        key_window=None,
        max_inflight=TIMEOUT,
        evidence_window=evidence,
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["submit", "recover", "plain"])
    parser.add_argument("--resend", required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--world", type=Path)
    parser.add_argument("--system", choices=SYSTEMS, default="interlock")
    parser.add_argument("--journal", type=Path)
    parser.add_argument("--key-window", type=float, default=RESEND_KEY_WINDOW.total_seconds())
    parser.add_argument("--notary")
    parser.add_argument("--notary-token")
    parser.add_argument("--tenant", default="")
    parser.add_argument("--lease", default=LEASE_ID)
    parser.add_argument("--separate-steps", action="store_true")
    args = parser.parse_args()
    resend.api_key = "re_interlock_test"
    resend.api_url = args.resend
    resend.default_http_client = resend.RequestsClient(timeout=int(TIMEOUT.total_seconds()))
    if args.role == "plain":
        resend.Emails.send(
            message(args.case),  # type: ignore[arg-type]
            options={"idempotency_key": effect_id(args.case, args.tenant)},
        )
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        return
    target = target_for(args.system, timedelta(seconds=args.key_window))
    journal: Journal = (
        NotaryJournal(args.notary, args.notary_token, one_round_trip=not args.separate_steps)
        if args.notary
        else LocalJournal(args.journal)
    )
    premise = refund_premise(args.world)
    gate = Gate(journal, {TARGET: target}, premises_for=lambda proposed: [premise])
    if args.role == "recover":
        receipts = gate.recover()
    else:
        proposal = Proposal(
            args.case, TARGET, ACTION, message(args.case), args.lease, [premise], args.tenant
        )
        receipts = [gate.submit(proposal)]
    for receipt in receipts:
        print(json.dumps(receipt.to_dict()), flush=True)


if __name__ == "__main__":
    main()
