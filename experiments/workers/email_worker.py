"""One attempt of the email experiment's worker: it emails "your refund is on the way" for one
support case through the Resend SDK, the way its system does, and is SIGKILLed at the fault's
crash point (INTERLOCK_CRASH_AT) or runs to its end and prints its answer as one JSON line.

    python -m experiments.workers.email_worker --system SYSTEM --case CASE --resend URL
        --world WORLD --app-log PATH
        [--journal PATH | --notary URL --notary-token TOKEN --tenant SLUG]
        [--lease LEASE_ID] [--evidence-wait SECONDS]

Every attempt runs the same code, the first one and the restarted one alike; there is no
separate recovery role. The systems (the seed's, plus the notary row):

- ``no_check``: send with the Idempotency-Key ``refund-email/<case>``; nothing is checked, and a
  restart simply sends again under the same key.
- ``hand_check``: probe the key (a send from a domain Resend will not send from: 409 says the key
  was used, 403 says it was not); used: replay the same body under it for the email's id and
  stop; else re-read the refund and skip unless it is succeeded or pending; else send.
- ``hand_check_noprobe``: re-read the refund right before the send, skip unless it is succeeded
  or pending, send with the key.
- ``interlock``, ``interlock_noprobe``, ``interlock_tier3``, ``interlock_notary``: a Gate over
  the ResendEmail target as testkit/agents/email_agent.py declares it for that
  system, with the refund premise; on startup it runs recover() until nothing is in flight,
  then submits the case as usual. ``interlock_notary`` journals at the notary and, before
  recover(), waits while the notary's evidence still says "unknown" (its evidence window is
  open and no webhook has arrived), up to --evidence-wait seconds.

The hand-written systems log each step to their app log (JSON lines, appended by every attempt
of the case): that log is their record. The gates' record is their journal.

The refund is emulated by a world file (`create_refund`): its id, when it was created and when it
fails, if it does. Every reader computes the status from the clock, so all readers agree:
"succeeded" before the failure time, "failed" from then on. Each read by a worker is appended to
the refund service's access log next to the world file, which the harness reads to say how close
a cell came to the other branch."""

from __future__ import annotations

import argparse
import json
import os
import secrets
import sys
import time
from pathlib import Path
from typing import Any

import resend
from resend.exceptions import ResendError

# Run as `python -m experiments.workers.email_worker` from the repository root, or as a file.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gate_client.adapters.resend_email import RESEND_KEY_WINDOW
from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import Gate
from gate_client.journal import Journal, LocalJournal
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.protocol import standing
from gate_client.targets import Unknown
from ledger.core.entries import EntryKind
from testkit.agents import email_agent
from testkit.agents.agent_process import OK_STATUSES

GATE_SYSTEMS = ("interlock", "interlock_noprobe", "interlock_tier3", "interlock_notary")
HAND_SYSTEMS = ("no_check", "hand_check", "hand_check_noprobe")
SYSTEMS = (*HAND_SYSTEMS, *GATE_SYSTEMS)
API_KEY = "re_interlock_experiment"
PREMISE = "refund_succeeded_or_pending"


# --- the refund (emulated) -----------------------------------------------------------------------
def create_refund(world: Path, *, fails_after: float | None) -> dict[str, Any]:
    """A $20 refund created now that fails `fails_after` seconds later (never, for None)."""
    created = time.time()
    refund = {
        "refund_id": f"re_{secrets.token_hex(12)}",
        "amount_cents": 2000,
        "created_at": created,
        "fails_at": None if fails_after is None else created + fails_after,
    }
    partial = world.with_suffix(".tmp")
    partial.write_text(json.dumps(refund))
    partial.replace(world)
    return refund


def reads_path(world: Path) -> Path:
    return world.with_suffix(".reads.jsonl")


def refund_status(world: Path, *, reader: str = "") -> str:
    """The refund's status now; a named reader's read is appended to the access log."""
    refund = json.loads(world.read_text())
    at = time.time()
    fails_at = refund["fails_at"]
    status = "failed" if fails_at is not None and at >= fails_at else "succeeded"
    if reader:
        line = {"reader": reader, "pid": os.getpid(), "at": at, "status": status}
        with reads_path(world).open("a") as log:
            log.write(json.dumps(line) + "\n")
    return status


def refund_reads(world: Path) -> list[dict[str, Any]]:
    path = reads_path(world)
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def refund_premise(world: Path, reader: str) -> Premise:
    """Absolute: the refund is succeeded or pending, read at each check."""
    refund_id = json.loads(world.read_text())["refund_id"]

    def check() -> PremiseResult:
        status = refund_status(world, reader=reader)
        return PremiseResult(status in OK_STATUSES, {"refund": refund_id, "status": status})

    return Premise(PREMISE, check)


# --- the hand-written systems --------------------------------------------------------------------
def idempotency_key(case_id: str) -> str:
    return f"refund-email/{case_id}"


class AppLog:
    """The app's own log, JSON lines; what the hand-written systems have for a record."""

    def __init__(self, path: Path, case_id: str, system: str) -> None:
        self.path = path
        self.case_id = case_id
        self.system = system

    def write(self, step: str, **fields: Any) -> float:
        at = time.time()
        line = {"at": at, "pid": os.getpid(), "system": self.system, "case": self.case_id}
        with self.path.open("a") as log:
            log.write(json.dumps({**line, "step": step, **fields}) + "\n")
            log.flush()
            os.fsync(log.fileno())
        return at


def read_app_log(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def send(case_id: str) -> str:
    """The email, under the case's key; its id. The crash points bracket the request."""
    crash_point(CrashPoint.AFTER_DISPATCHED)
    email = resend.Emails.send(
        email_agent.message(case_id),  # type: ignore[arg-type]
        options={"idempotency_key": idempotency_key(case_id)},
    )
    crash_point(CrashPoint.AFTER_TARGET_ACTED)
    return str(email["id"])


def key_used(case_id: str) -> bool:
    """The seed's probe: the key from a sender on a domain Resend will not send from. Resend
    checks the key first: 409 means it was used, 403 (the domain) that it was not."""
    probe = {**email_agent.message(case_id), "from": email_agent.PROBE_FROM}
    try:
        resend.Emails.send(probe, options={"idempotency_key": idempotency_key(case_id)})  # type: ignore[arg-type]
    except ResendError as error:
        if error.error_type == "invalid_idempotent_request":
            return True
        if str(error.code) == "403" and error.error_type == "validation_error":
            return False
        raise
    raise RuntimeError("the probe sender's domain is verified: the probe sent an email")


def run_hand(system: str, case_id: str, world: Path, log: AppLog) -> dict[str, Any]:
    """One attempt of a hand-written system; its verdict, as logged."""
    log.write("start")
    if system == "hand_check":
        used = key_used(case_id)
        log.write("check", check="probe", idempotency_key=idempotency_key(case_id), used=used)
        if used:
            # Within the key window a replay of the same body returns the first email's id.
            email = resend.Emails.send(
                email_agent.message(case_id),  # type: ignore[arg-type]
                options={"idempotency_key": idempotency_key(case_id)},
            )
            return verdict(log, "ALREADY_SENT", True, str(email["id"]))
    if system in ("hand_check", "hand_check_noprobe"):
        refund = json.loads(world.read_text())["refund_id"]
        status = refund_status(world, reader=system)
        log.write("check", check="refund", refund=refund, status=status)
        if status not in OK_STATUSES:
            return verdict(log, f"SKIPPED:refund_{status}", False, None)
    log.write("sending", idempotency_key=idempotency_key(case_id))
    return verdict(log, "SENT", True, send(case_id))


def verdict(log: AppLog, answer: str, claims: bool, email_id: str | None) -> dict[str, Any]:
    at = log.write("verdict", verdict=answer, email_id=email_id)
    return {"answer": answer, "claims": claims, "email_id": email_id, "at": at}


# --- the gates -----------------------------------------------------------------------------------
def wait_for_evidence(journal: Journal, limit: float) -> None:
    """While the notary's evidence on a dispatched effect says "unknown" (no webhook yet, its
    evidence window open), wait; at most `limit` seconds in all. recover() then asks it."""
    deadline = time.monotonic() + limit
    for effect_id in journal.unsettled():
        while time.monotonic() < deadline:
            history = journal.history(effect_id)
            if standing(history).state is not None or not any(
                e.kind == EntryKind.DISPATCHED for e in history
            ):
                break
            if not isinstance(journal.evidence(effect_id), Unknown):
                break
            time.sleep(0.2)


def run_gate(args: argparse.Namespace, journal: Journal) -> dict[str, Any]:
    target = email_agent.target_for(args.system, RESEND_KEY_WINDOW)
    premise = refund_premise(args.world, args.system)
    gate = Gate(journal, {email_agent.TARGET: target}, premises_for=lambda proposed: [premise])
    if args.system == "interlock_notary":
        wait_for_evidence(journal, args.evidence_wait)
    recovered = [r.to_dict() for r in gate.recover()]
    proposal = Proposal(
        args.case,
        email_agent.TARGET,
        email_agent.ACTION,
        email_agent.message(args.case),
        args.lease,
        [premise],
        args.tenant,
    )
    receipt = gate.submit(proposal)
    return {
        "answer": receipt.final_state,
        "claims": receipt.happened,
        "email_id": None,
        "at": time.time(),
        "receipt": receipt.to_dict(),
        "recovered": recovered,
    }


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--system", choices=SYSTEMS, required=True)
    parser.add_argument("--case", required=True)
    parser.add_argument("--resend", required=True, help="Resend's API base URL")
    parser.add_argument("--world", type=Path, required=True, help="the refund's world file")
    parser.add_argument("--app-log", type=Path, required=True, help="the hand checks' record")
    parser.add_argument("--journal", type=Path, help="a gate's local journal")
    parser.add_argument("--notary", metavar="URL", help="a gate's journal at this notary")
    parser.add_argument("--notary-token")
    parser.add_argument("--tenant", default="")
    parser.add_argument("--lease", default=email_agent.LEASE_ID)
    parser.add_argument("--evidence-wait", type=float, default=10.0, help="seconds, at most")
    args = parser.parse_args(argv)
    if args.system in GATE_SYSTEMS and (args.journal is None) == (args.notary is None):
        parser.error("a gate needs one journal: --journal or --notary")
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    resend.api_key = API_KEY
    resend.api_url = args.resend
    resend.default_http_client = resend.RequestsClient(
        timeout=int(email_agent.TIMEOUT.total_seconds())
    )
    result: dict[str, Any]
    if args.system in HAND_SYSTEMS:
        log = AppLog(args.app_log, args.case, args.system)
        result = run_hand(args.system, args.case, args.world, log)
    else:
        journal: NotaryJournal | LocalJournal = (
            NotaryJournal(args.notary, args.notary_token)
            if args.notary
            else LocalJournal(args.journal)
        )
        try:
            result = run_gate(args, journal)
        finally:
            journal.close()
    print(json.dumps({"system": args.system, "case": args.case, **result}), flush=True)


if __name__ == "__main__":
    main()
