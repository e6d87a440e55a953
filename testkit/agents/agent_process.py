"""An agent process for the crash matrix, killed at a crash point and restarted by the harness.

    python -m testkit.agents.agent_process ROLE [JOURNAL WORLD_FILE] --url URL --case CASE ...

    submit JOURNAL WORLD_FILE --tier N [--queryable] [--attests-before-acting] --text TEXT [NOTARY]
    recover JOURNAL WORLD_FILE --tier N [--queryable] [--attests-before-acting] [--resubmit TEXT]
        [NOTARY]
    plain --text TEXT

    NOTARY: --notary URL --notary-token TOKEN --tenant SLUG --lease LEASE_ID [--separate-steps]

`submit` sends one refund email through a Gate (HttpTarget at URL, LocalJournal at JOURNAL — or,
with --notary, the notary's journal of the tenant whose agent key TOKEN is — and one absolute
premise read from WORLD_FILE); INTERLOCK_CRASH_AT in the environment kills it on the way.
`recover` is the restarted process: the same gate runs `recover()` and, with --resubmit,
submits the case again with a re-decided text. Every receipt goes to stdout as one JSON line,
``{"step": "recover" | "submit", "receipt": Receipt.to_dict()}``.

`plain` is the unsafe system the matrix must catch: it POSTs the payload with no idempotency
key and checks nothing; its restart simply runs `plain` again. It crashes at the same
INTERLOCK_CRASH_AT points, and having no journal, the first three all fall before its request."""

from __future__ import annotations

import argparse
import json
import urllib.request
from datetime import timedelta
from pathlib import Path
from typing import Any

from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.ids import effect_id_for
from gate_client.journal import Journal, LocalJournal
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import Receipt
from gate_client.targets import Tier

TARGET = "email"
ACTION = "email"
LEASE_ID = "lease_1"
OK_STATUSES = frozenset({"succeeded", "pending"})
KEY_WINDOW = timedelta(hours=24)  # Stripe's and Resend's, for the targets that dedupe


def effect_id(case_id: str, tenant: str = "") -> str:
    return effect_id_for(case_id, TARGET, ACTION, tenant=tenant)


def payload(text: str) -> dict[str, Any]:
    return {"to": "customer@example.com", "text": text}


def refund_premise(world_file: Path) -> Premise:
    """Absolute, read from the world at each check: the refund is succeeded or pending."""

    def check() -> PremiseResult:
        status = json.loads(world_file.read_text())["refund_status"]
        return PremiseResult(status in OK_STATUSES, {"refund_status": status})

    return Premise("refund_succeeded_or_pending", check)


def build_gate(args: argparse.Namespace) -> Gate:
    target = HttpTarget(
        name=TARGET,
        base_url=args.url,
        tier=Tier(args.tier),
        queryable=args.queryable,
        key_window=KEY_WINDOW if args.tier == Tier.DEDUPES else None,
        max_inflight=timedelta(seconds=args.max_inflight),
        timeout_seconds=args.request_timeout or args.max_inflight,
        attests_before_acting=args.attests_before_acting,
    )
    premises = [refund_premise(args.world_file)]
    journal: Journal = (
        NotaryJournal(args.notary, args.notary_token, one_round_trip=not args.separate_steps)
        if args.notary
        else LocalJournal(args.journal)
    )
    return Gate(journal, {TARGET: target}, premises_for=lambda _: premises)


def proposal(args: argparse.Namespace, text: str) -> Proposal:
    return Proposal(
        case_id=args.case,
        target=TARGET,
        action=ACTION,
        payload=payload(text),
        lease_id=args.lease,
        premises=[refund_premise(args.world_file)],
        tenant=args.tenant,
    )


def emit(step: str, receipt: Receipt) -> None:
    print(json.dumps({"step": step, "receipt": receipt.to_dict()}), flush=True)


def plain_send(url: str, case_id: str, text: str) -> str:
    """No key, no lease, no premise: what a retry loop without the gate does."""
    crash_point(CrashPoint.BEFORE_PROPOSED)
    crash_point(CrashPoint.AFTER_PROPOSED)
    crash_point(CrashPoint.AFTER_DISPATCHED)
    body = json.dumps({"effect_id": effect_id(case_id), "payload": payload(text)}).encode()
    request = urllib.request.Request(
        f"{url}/effects", data=body, headers={"Content-Type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        result_ref = str(json.loads(response.read())["result_ref"])
    crash_point(CrashPoint.AFTER_RESPONSE)
    return result_ref


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--url", required=True, help="the target service's base URL")
    common.add_argument("--case", required=True)
    text = argparse.ArgumentParser(add_help=False)
    text.add_argument("--text", required=True, help="what the model decided to write")
    gated = argparse.ArgumentParser(add_help=False, parents=[common])
    gated.add_argument("journal", type=Path)
    gated.add_argument("world_file", type=Path)
    gated.add_argument("--tier", type=int, choices=[t.value for t in Tier], required=True)
    gated.add_argument("--queryable", action="store_true")
    gated.add_argument(
        "--attests-before-acting",
        action="store_true",
        help="the service attests each request to the notary before acting (declared so)",
    )
    gated.add_argument("--max-inflight", type=float, default=2.0, help="seconds")
    gated.add_argument(
        "--request-timeout",
        type=float,
        help="seconds per connect and per read (default: the max in-flight time)",
    )
    gated.add_argument("--notary", metavar="URL", help="journal at this notary, not in JOURNAL")
    gated.add_argument("--notary-token", help="the notary agent key")
    gated.add_argument("--tenant", default="", help="the notary tenant the effect belongs to")
    gated.add_argument("--lease", default=LEASE_ID)
    gated.add_argument(
        "--separate-steps", action="store_true", help="PROPOSED and DISPATCHED as two requests"
    )
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    roles = parser.add_subparsers(dest="role", required=True)
    roles.add_parser("submit", parents=[gated, text])
    recover = roles.add_parser("recover", parents=[gated])
    recover.add_argument("--resubmit", metavar="TEXT", help="then submit this re-decided text")
    roles.add_parser("plain", parents=[common, text])
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.role == "plain":
        result_ref = plain_send(args.url, args.case, args.text)
        print(json.dumps({"step": "plain", "result_ref": result_ref}), flush=True)
        return
    gate = build_gate(args)
    if args.role == "submit":
        emit("submit", gate.submit(proposal(args, args.text)))
        return
    for receipt in gate.recover():
        emit("recover", receipt)
    if args.resubmit is not None:
        emit("submit", gate.submit(proposal(args, args.resubmit)))


if __name__ == "__main__":
    main()
