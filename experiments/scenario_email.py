"""The seed's email experiment (seeds/001), regenerated offline with real crashes, and a notary row.

Each cell is one support case: a $20 refund is created in the refund world, and a worker process
(experiments/email_worker.py) emails "your refund is on the way" for it through the Resend SDK
to the local Resend, the way its system does. The worker SIGKILLs itself at the fault's crash
point; the harness waits out the outage (the refund fails during it, in the refused faults),
starts a new worker process for the same case, and reads what happened from the local Resend's
own store. Every cell scores what the system answered against that store, and whether its own
record proves it.

    .venv/bin/python experiments/scenario_email.py [--quick] [--results-dir DIR]

writes experiments/results/email.md and email.json. The notary is served by gunicorn on a fresh
PostgreSQL database (EXPERIMENTS_DATABASE_URL; this script defaults it to
interlock_bench_email, so it can run beside other scenarios)."""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

# Run as a file, the script needs the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import email_worker
from experiments.harness import (
    RESULTS_DIR,
    Answer,
    Cell,
    Scenario,
    markdown_table,
    run_cells,
    write_results,
)
from experiments.live_notary import NotaryTenant, TargetSpec, live_notary
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.protocol import standing as standing_verdict
from gate_client.receipts import Receipt, ReceiptError, verify_receipt
from ledger.core.entries import Entry, EntryKind, entry_from_leaf
from testkit.agents import email_agent
from testkit.peers.resend_server import RunningResend, running_resend
from testkit.processes import armed_env
from testkit.webhook_signing import new_secret

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKER = "experiments.email_worker"
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/interlock_bench_email"

SYSTEMS = email_worker.SYSTEMS
GATES = email_worker.GATE_SYSTEMS
# The CI-sized subset: both gates that answer every fault on all three, and the one cell each
# where the plain retry and the idiomatic hand check go wrong.
QUICK_CELLS: dict[str, tuple[str, ...]] = {
    "interlock": ("crash_after_send", "refused_before_send", "refused_after_send"),
    "interlock_notary": ("crash_after_send", "refused_before_send", "refused_after_send"),
    "no_check": ("refused_before_send",),
    "hand_check_noprobe": ("refused_after_send",),
}
# interlock_notary again, with the local Resend told to withhold its webhooks: what the notary
# row rests on. Not a system of the seed's table: a table of its own, in the full run only.
WITHHELD = "interlock_notary_webhooks_withheld"

EVIDENCE_WINDOW = email_agent.EVIDENCE_WINDOW  # declared at the notary and by the worker
REFUND_FAILS_AFTER = (2.0, 4.0)  # seconds after its creation, in the refused faults
WEBHOOK_DELAY_SECONDS = 0.3  # the local Resend's delay before email.sent, then email.delivered
MAX_ATTEMPTS = 5  # per cell, counting the discarded ones
WORKER_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Fault:
    crash: CrashPoint
    refund_fails: bool
    wanted: int  # emails
    note: str


FAULTS = {
    "crash_after_send": Fault(
        CrashPoint.AFTER_TARGET_ACTED,
        False,
        1,
        "worker SIGKILLed right after Resend answered 200, before anything recorded it; "
        "restarted at once. Want: exactly one email, reported as sent.",
    ),
    "refused_before_send": Fault(
        CrashPoint.AFTER_DISPATCHED,
        True,
        0,
        "worker SIGKILLed right before the send; during the outage the refund fails; restarted "
        "once the refund reads failed. Want: no email.",
    ),
    "refused_after_send": Fault(
        CrashPoint.AFTER_TARGET_ACTED,
        True,
        1,
        "worker SIGKILLed right after Resend answered 200; during the outage the refund fails; "
        "restarted once the refund reads failed. Want: the one email that already went, "
        "reported as sent.",
    ),
}

SYSTEM_NOTES = {
    "no_check": "Idempotency-Key `refund-email/<case>`, send, and on restart simply send again "
    "under the same key; nothing is re-checked. Its record is its app log.",
    "hand_check": "the strongest check available with a sending-only key, not the idiomatic one: "
    "probe the key (a send from a domain Resend will not send from; 409: used, 403: not); used: "
    "replay the same body under it for the email's id and stop; else re-read the refund and skip "
    "unless it is succeeded or pending; else send with the key. Each step goes to its app log "
    "(JSON lines). The probe is observed behaviour, not documented.",
    "hand_check_noprobe": "the idiomatic check: re-read the refund right before the send, skip "
    "unless it is succeeded or pending, send with the documented Idempotency-Key, log each step.",
    "interlock": "gate_client.Gate over ResendEmail: tier 1 with the effect id as the key, the "
    "probe as the lookup (`probe_from`), the case's approval as the lease, one absolute premise "
    "(the refund is succeeded or pending) checked before the send and again at recovery. Local "
    "journal. On startup the worker runs recover() until nothing is in flight, then submits.",
    "interlock_noprobe": "the same gate without the probe (tier 1, not queryable): what the gate "
    "gets from Resend's documented features alone.",
    "interlock_tier3": "the same gate, told Resend offers neither dedup nor lookup (tier 3): a "
    "crash after the dispatch is never resent and ends AMBIGUOUS for a person.",
    "interlock_notary": "tier 3 lifted by the notary: the journal is a live notary (gunicorn, "
    "PostgreSQL), and the local Resend posts its Svix-signed email.sent / email.delivered "
    "webhooks, which carry the effect id in the `interlock_effect_id` tag, to the notary's "
    "`resend` endpoint for the email target; the notary records them as evidence and settles the "
    "effect on them. The target declares a "
    f"{EVIDENCE_WINDOW.total_seconds():.0f} s evidence window; the restarted worker waits while "
    "the notary's evidence is still unknown, then runs recover(), which asks the notary.",
}


# --- running one attempt -------------------------------------------------------------------------
@dataclass
class Run:
    """One worker process: how it ended and what it printed."""

    returncode: int
    pid: int
    ended_at: float  # when the harness's wait() returned
    started_at: float
    stdout: str
    stderr: str

    def result(self) -> dict[str, Any] | None:
        lines = [json.loads(line) for line in self.stdout.splitlines() if line.startswith("{")]
        return lines[-1] if lines else None


def run_worker(args: Sequence[str], crash: CrashPoint | None) -> Run:
    started = time.time()
    process = subprocess.Popen(
        [sys.executable, "-m", WORKER, *args],
        cwd=REPO_ROOT,
        env=armed_env(crash),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=WORKER_TIMEOUT_SECONDS)
    except subprocess.TimeoutExpired:
        process.kill()
        stdout, stderr = process.communicate()
    return Run(process.returncode, process.pid, time.time(), started, stdout, stderr)


@dataclass
class Attempt:
    system: str
    fault: str
    case_id: str
    world: Path
    app_log: Path
    refund: dict[str, Any]
    args: list[str]
    effect_id: str = ""
    lease_id: str = ""
    journal: Path | None = None
    first: Run | None = None
    restarted: Run | None = None
    restarted_after: float = 0.0  # seconds from the SIGKILL to the restart

    @property
    def gated(self) -> bool:
        return self.system in GATES or self.system == WITHHELD

    @property
    def on_notary(self) -> bool:
        return self.system in ("interlock_notary", WITHHELD)


@dataclass
class Truth:
    """What the local Resend's own store holds for one case."""

    emails: list[dict[str, Any]]

    @property
    def sent(self) -> bool:
        return bool(self.emails)

    @property
    def ids(self) -> list[str]:
        return [str(e["id"]) for e in self.emails]

    def outcome(self) -> str:
        n = len(self.emails)
        return f"{n} email" + ("" if n == 1 else "s")

    def as_dict(self) -> dict[str, Any]:
        return {
            "source": "the local Resend's store (every email it sent, fsync'd before it answered)",
            "emails": [
                {
                    "id": e["id"],
                    "idempotency_key": e["idempotency_key"],
                    "tags": e["tags"],
                    "created_at": e["created_at"],
                    "subject": e["subject"],
                }
                for e in self.emails
            ],
            "email_count": len(self.emails),
        }


@dataclass
class Record:
    """The system's answer and what its own record proves."""

    answer: str
    claims: Any  # True, False or "unknown"
    email_id: str | None
    proves: bool
    verdict_at: float | None  # when the record reached its final word
    detail: dict[str, Any] = field(default_factory=dict)


class Experiment:
    def __init__(
        self,
        directory: Path,
        resend_server: RunningResend,
        shop: NotaryTenant,
        *,
        rng: random.Random,
    ) -> None:
        self.directory = directory
        self.resend = resend_server
        self.shop = shop
        self.rng = rng
        self.token = secrets.token_hex(3)
        self.cases = 0
        # One failure delay per fault, the same for every system of it; a rerun (a new case, a
        # new refund) draws its own.
        self.fails_after = {
            name: rng.uniform(*REFUND_FAILS_AFTER) for name, f in FAULTS.items() if f.refund_fails
        }

    # --- a cell: attempts until one reaches its crash point -------------------------------
    def cell(self, system: str, fault: str) -> Cell:
        discarded: list[dict[str, Any]] = []
        for tries in range(MAX_ATTEMPTS):
            attempt = self._start(system, fault, rerun=tries > 0)
            if attempt.first is not None and attempt.first.returncode == -9:
                return self._score(attempt, discarded)
            discarded.append(self._discard(attempt))
        raise RuntimeError(
            f"{system} / {fault}: no attempt in {MAX_ATTEMPTS} reached the crash point: "
            + json.dumps(discarded)[-2000:]
        )

    def _start(self, system: str, fault: str, *, rerun: bool) -> Attempt:
        spec = FAULTS[fault]
        self.cases += 1
        case_id = f"case-{self.token}-{self.cases:03d}"
        world = self.directory / f"{case_id}.refund.json"
        app_log = self.directory / f"{case_id}.app.jsonl"
        worker_system = "interlock_notary" if system == WITHHELD else system
        args = ["--system", worker_system, "--case", case_id, "--resend", self.resend.url]
        args += ["--world", str(world), "--app-log", str(app_log)]
        attempt = Attempt(system, fault, case_id, world, app_log, {}, args)
        if attempt.on_notary:
            attempt.lease_id = self.shop.grant_lease(case_id, email_agent.ACTION)
            attempt.effect_id = email_agent.effect_id(case_id, self.shop.slug)
            args += ["--notary", self.shop.url, "--notary-token", self.shop.agent_token]
            args += ["--tenant", self.shop.slug, "--lease", attempt.lease_id]
            args += ["--evidence-wait", str(EVIDENCE_WINDOW.total_seconds() + 5)]
        elif attempt.gated:
            attempt.journal = self.directory / f"{case_id}.journal"
            attempt.lease_id = email_agent.LEASE_ID
            attempt.effect_id = email_agent.effect_id(case_id)
            expires = datetime.now(UTC) + timedelta(hours=1)
            lease = Lease(attempt.lease_id, case_id, email_agent.ACTION, expires, "support")
            with closing(LocalJournal(attempt.journal)) as journal:
                journal.grant_lease(lease)
            args += ["--journal", str(attempt.journal)]
        fails_after = self.fails_after.get(fault)
        if rerun and fails_after is not None:
            fails_after = self.rng.uniform(*REFUND_FAILS_AFTER)
        self.resend.set_webhooks(system != WITHHELD)
        attempt.refund = email_worker.create_refund(world, fails_after=fails_after)
        attempt.first = run_worker(args, spec.crash)
        if attempt.first.returncode != -9:
            return attempt
        if spec.refund_fails:  # the outage lasts until the refund reads failed
            while email_worker.refund_status(world) != "failed":
                time.sleep(0.02)
        attempt.restarted_after = time.time() - attempt.first.ended_at
        attempt.restarted = run_worker(args, None)
        if attempt.on_notary:
            self._await_webhooks(attempt)
        self.resend.set_webhooks(True)
        return attempt

    def _await_webhooks(self, attempt: Attempt) -> None:
        """Let the case's webhooks land (or be withheld) before the record is read, so the
        receipt and the log it is verified against are read at one moment."""
        deadline = time.monotonic() + 15
        wanted = {"email.sent", "email.delivered"}
        while time.monotonic() < deadline:
            ids = set(self._truth(attempt.case_id).ids)
            done: dict[str, set[str]] = {i: set() for i in ids}
            for d in self.resend.deliveries():
                if d["email_id"] in done and d.get("outcome") in ("ok", "withheld"):
                    done[d["email_id"]].add(d["type"])
            if all(types >= wanted for types in done.values()):
                return
            time.sleep(0.1)

    def _truth(self, case_id: str) -> Truth:
        marker = f"Case {case_id}:"
        return Truth([e for e in self.resend.emails() if marker in (e.get("text") or "")])

    # --- scoring ---------------------------------------------------------------------------
    def _discard(self, attempt: Attempt) -> dict[str, Any]:
        assert attempt.first is not None
        truth = self._truth(attempt.case_id)
        result = attempt.first.result() or {}
        reads = email_worker.refund_reads(attempt.world)
        failed_read = next((r for r in reads if r["status"] == "failed"), None)
        refund = attempt.refund
        if failed_read is not None and refund["fails_at"] is not None:
            why = (
                f"case {attempt.case_id}: the first worker read the refund at "
                f"{failed_read['at'] - refund['created_at']:.2f}s after its creation, "
                f"{failed_read['at'] - refund['fails_at']:.2f}s after it failed, answered "
                f"{result.get('answer')} before the send and never reached the crash point "
                f"(exit {attempt.first.returncode}); rerun with a new case. Resend holds "
                f"{truth.outcome()} for it."
            )
        else:
            why = (
                f"case {attempt.case_id}: the first worker exited {attempt.first.returncode} "
                f"without reaching the crash point; stderr: {attempt.first.stderr[-600:]!r}"
            )
        return {
            "system": attempt.system,
            "fault": attempt.fault,
            "case": attempt.case_id,
            "exit_codes": [attempt.first.returncode],
            "answer": result.get("answer"),
            "truth": truth.as_dict(),
            "refund": refund,
            "refund_reads": reads,
            "why": why,
        }

    def _score(self, attempt: Attempt, discarded: list[dict[str, Any]]) -> Cell:
        assert attempt.first is not None and attempt.restarted is not None
        spec = FAULTS[attempt.fault]
        truth = self._truth(attempt.case_id)
        printed = attempt.restarted.result()
        if attempt.restarted.returncode != 0 or printed is None:
            raise RuntimeError(
                f"{attempt.system} / {attempt.fault}: the restarted worker exited "
                f"{attempt.restarted.returncode}: {attempt.restarted.stderr[-2000:]}"
            )
        if attempt.gated:
            record = self._gate_record(attempt, printed, truth)
        else:
            record = self._hand_record(attempt, printed, truth)
        killed_at = attempt.first.ended_at
        settled = record.verdict_at is not None and record.claims != "unknown"
        answered = None if record.verdict_at is None else round(record.verdict_at - killed_at, 3)
        ids = {"case": attempt.case_id, "refund": str(attempt.refund["refund_id"])}
        if attempt.gated:
            ids["effect_id"] = attempt.effect_id
            ids["lease_id"] = attempt.lease_id
            if attempt.on_notary:
                ids["notary_tenant"] = self.shop.slug
        else:
            ids["idempotency_key"] = email_worker.idempotency_key(attempt.case_id)
        ids["emails"] = ", ".join(truth.ids) or "none"
        margin = self._margin(attempt)
        restart_to_answer = (
            None
            if record.verdict_at is None
            else round(record.verdict_at - attempt.restarted.started_at, 3)
        )
        return Cell(
            system=attempt.system,
            fault=attempt.fault,
            answer=record.answer,
            outcome=truth.outcome(),
            wanted=f"{spec.wanted} email" + ("" if spec.wanted == 1 else "s"),
            held=len(truth.emails) == spec.wanted,
            answer_vs_truth=judge(record.claims, record.email_id, truth),
            record_proves_it=record.proves,
            crash_to_settled_seconds=answered if settled else None,
            exit_codes=[attempt.first.returncode, attempt.restarted.returncode],
            ids=ids,
            truth={
                **truth.as_dict(),
                "refund": attempt.refund,
                "refund_status_at_scoring": email_worker.refund_status(attempt.world),
            },
            discarded_attempts=discarded,
            detail={
                "system_said": {
                    "answer": record.answer,
                    "happened": record.claims,
                    "email_id": record.email_id,
                },
                "crash_to_answer_seconds": answered,
                "restarted_seconds_after_kill": round(attempt.restarted_after, 3),
                "first_worker_seconds": round(attempt.first.ended_at - attempt.first.started_at, 3),
                "restarted_worker_seconds": round(
                    attempt.restarted.ended_at - attempt.restarted.started_at, 3
                ),
                "restart_to_answer_seconds": restart_to_answer,
                "refund_reads": email_worker.refund_reads(attempt.world),
                "last_read_before_send": margin,
                "restarted_worker_printed": {
                    k: v for k, v in printed.items() if k not in ("receipt", "recovered")
                },
                **record.detail,
            },
        )

    def _margin(self, attempt: Attempt) -> dict[str, float] | None:
        """The first worker's last refund read before the send, against the refund's failure."""
        assert attempt.first is not None
        refund = attempt.refund
        reads = [
            r["at"]
            for r in email_worker.refund_reads(attempt.world)
            if r["pid"] == attempt.first.pid
        ]
        if not reads or refund["fails_at"] is None:
            return None
        last = max(reads)
        return {
            "read_after_creation_seconds": round(last - refund["created_at"], 3),
            "failed_after_creation_seconds": round(refund["fails_at"] - refund["created_at"], 3),
            "failed_after_read_seconds": round(refund["fails_at"] - last, 3),
        }

    def _hand_record(self, attempt: Attempt, printed: dict[str, Any], truth: Truth) -> Record:
        """The app log names the check and the email or the skip, and that claim is true."""
        log = email_worker.read_app_log(attempt.app_log)
        starts = [i for i, line in enumerate(log) if line["step"] == "start"]
        last_run = log[starts[-1] :] if starts else []
        final = next((line for line in reversed(last_run) if line["step"] == "verdict"), None)
        checks = [line for line in last_run if line["step"] == "check"]
        claims = printed["claims"]
        email_id = printed["email_id"]
        claim_true = claims == truth.sent and (not claims or email_id in truth.ids)
        logged = final is not None and final["verdict"] == printed["answer"]
        return Record(
            answer=printed["answer"],
            claims=claims,
            email_id=email_id,
            proves=bool(checks) and logged and claim_true,
            verdict_at=final["at"] if final is not None else None,
            detail={
                "app_log": log,
                "record": "app log: "
                + ("names its checks" if checks else "no check entry")
                + ("" if logged else "; no verdict line")
                + ("; its claim agrees with Resend" if claim_true else "; its claim is false"),
            },
        )

    def _gate_record(self, attempt: Attempt, printed: dict[str, Any], truth: Truth) -> Record:
        """verify_receipt on the journal's entries is valid and `happened` equals the truth."""
        served: list[Entry] = []
        if attempt.on_notary:
            from ledger.selectors import iter_entries

            reply = httpx.get(
                f"{self.shop.url}/v1/effects/{attempt.effect_id}/receipt",
                headers={"Authorization": f"Bearer {self.shop.agent_token}"},
                timeout=10,
            )
            reply.raise_for_status()
            shown = reply.json()
            data = shown["receipt"]
            served = [entry_from_leaf(base64.b64decode(e["leaf"])) for e in shown["entries"]]
            log = self.shop.tenant.log
            entries = list(iter_entries(log=log))
            origin = log.origin
            source = f"the notary's receipt and the tenant log {origin!r} ({len(entries)} entries)"
        else:
            assert attempt.journal is not None
            data = printed["receipt"]
            with closing(LocalJournal(attempt.journal)) as journal:
                entries = journal.entries()
                origin = journal.origin
            source = f"the worker's receipt and its local journal ({len(entries)} entries)"
        receipt = Receipt.from_dict(data)
        problem = ""
        try:
            verify_receipt(receipt, entries, origin=origin)
        except ReceiptError as error:
            problem = str(error)
        by_seq = {e.seq: e for e in entries}
        if any(by_seq.get(e.seq) != e for e in served):
            problem = problem or "the entries the notary served are not its log's"
        happened = receipt.happened
        history = [e for e in entries if e.effect_id == attempt.effect_id]
        verdict = standing_verdict(history).verdict
        verdict_at = verdict.created_at.timestamp() if verdict is not None else None
        dispatched = [e for e in history if e.kind == EntryKind.DISPATCHED]
        dispatch_to_verdict = (
            round(verdict_at - dispatched[0].created_at.timestamp(), 3)
            if dispatched and verdict_at is not None
            else None
        )
        return Record(
            answer=receipt.final_state,
            claims=happened,
            email_id=None,
            proves=not problem and happened == truth.sent,
            verdict_at=verdict_at,
            detail={
                "receipt": receipt.to_dict(),
                "receipt_verified": "valid" if not problem else f"INVALID: {problem}",
                "verified_against": source,
                "worker_receipt_differs": printed["receipt"] != receipt.to_dict(),
                "recovered_by_restarted_worker": [
                    r["final_state"] for r in printed.get("recovered", [])
                ],
                "first_dispatch_to_verdict_seconds": dispatch_to_verdict,
                "verdict_entries": [
                    {"seq": e.seq, "kind": str(e.kind), "body": e.body_value()}
                    for e in history
                    if e.kind not in (EntryKind.PROPOSED, EntryKind.DISPATCHED)
                ],
            },
        )


def judge(claims: Any, email_id: str | None, truth: Truth) -> Answer:
    if claims == "unknown":
        return "cannot know (said so)"
    if claims != truth.sent or (claims and email_id is not None and email_id not in truth.ids):
        return "contradicts"
    return "matches"


# --- findings, from the numbers ------------------------------------------------------------------
def of(scenario: Scenario, system: str) -> list[Cell]:
    return [c for c in scenario.cells if c.system == system]


def has(scenario: Scenario, *systems: str) -> bool:
    return all(of(scenario, s) for s in systems)


def median(values: Iterable[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def seconds(value: float | None) -> str:
    return "never" if value is None else f"{value:.1f}s"


def listing(items: Sequence[str]) -> str:
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def differences(scenario: Scenario, a: str, b: str) -> list[str]:
    """Faults where the two left a different number of emails or gave a different answer."""
    found = []
    for fault in scenario.faults:
        x = next((c for c in of(scenario, a) if c.fault == fault), None)
        y = next((c for c in of(scenario, b) if c.fault == fault), None)
        if x is None or y is None:
            continue
        if (x.outcome, x.answer_vs_truth) != (y.outcome, y.answer_vs_truth):
            found.append(fault)
    return found


def spread(values: Iterable[float | None]) -> str:
    present = sorted(v for v in values if v is not None)
    if not present:
        return "none settled"
    low, high = present[0], present[-1]
    return f"{low:.1f}s" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}s"


def time_finding(scenario: Scenario, hand: list[Cell], gates: list[Cell]) -> str:
    """Crash to settled, fault by fault: within a fault every system faces the same outage."""
    faults = [f for f in scenario.faults if any(c.fault == f for c in hand + gates)]
    per_fault = []
    for fault in faults:
        mine_hand = [c for c in hand if c.fault == fault]
        mine_gates = [c for c in gates if c.fault == fault]
        unsettled = sum(c.crash_to_settled_seconds is None for c in mine_gates)
        per_fault.append(
            f"{fault}: hand-written {spread(c.crash_to_settled_seconds for c in mine_hand)}, "
            f"gates {spread(c.crash_to_settled_seconds for c in mine_gates)}"
            + (f" ({unsettled} AMBIGUOUS, never settled)" if unsettled else "")
        )
    slowest_hand = {
        f: max((c.crash_to_settled_seconds or 0.0) for c in hand if c.fault == f)
        for f in {c.fault for c in hand}
    }
    fastest_hand = {
        f: min((c.crash_to_settled_seconds or 0.0) for c in hand if c.fault == f)
        for f in {c.fault for c in hand}
    }
    later = [
        c
        for c in gates
        if c.crash_to_settled_seconds is not None
        and c.fault in slowest_hand
        and c.crash_to_settled_seconds > slowest_hand[c.fault] + 0.5
    ]
    early = [
        c
        for c in gates
        if c.crash_to_settled_seconds is not None
        and c.fault in fastest_hand
        and c.crash_to_settled_seconds < fastest_hand[c.fault] - 0.5
    ]
    never = sum(c.crash_to_settled_seconds is None for c in gates)
    if later:
        word = "worse" + (f", though {len(early)} gate cell(s) settled sooner" if early else "")
    elif early:
        word = f"equal where both settle, and better in {len(early)} cell(s)"
    else:
        word = "equal where both settle"
    if never:
        word += f"; {never} gate cell(s) never settle (AMBIGUOUS, see Availability)"
    text = (
        f"Time: {word}. From the SIGKILL to a settled answer, {'; '.join(per_fault)}. Every "
        "time includes starting a Python process, and in the refused faults the outage, which "
        "lasts until the refund reads failed (the same failure delay for every system of a "
        "fault). "
    )
    if early:
        text += (
            "Settled more than 0.5 s before the fastest hand-written cell of the fault, during "
            "the outage, on Resend's webhook at the notary: "
            + listing([f"{c.system} / {c.fault}" for c in early])
            + ". "
        )
    if later:
        text += (
            "Settled more than 0.5 s after the slowest hand-written cell of the fault: "
            + listing(
                [f"{c.system} / {c.fault} {seconds(c.crash_to_settled_seconds)}" for c in later]
            )
            + "; a not-found counts only once the request's max in-flight time "
            f"({email_agent.TIMEOUT.total_seconds():.0f} s, for a lookup) or the notary's "
            f"evidence window ({EVIDENCE_WINDOW.total_seconds():.0f} s) has passed since the "
            "dispatch. "
        )
    else:
        text += (
            "No gate cell settled more than 0.5 s after the slowest hand-written cell of its "
            "fault: the waits a not-found needs (the request's max in-flight time, "
            f"{email_agent.TIMEOUT.total_seconds():.0f} s, for a lookup; the evidence window, "
            f"{EVIDENCE_WINDOW.total_seconds():.0f} s, at the notary) fell inside the outage. "
        )
    silent = [
        c for c in gates if c.system == "interlock_notary" and c.fault == "refused_before_send"
    ]
    for c in silent:
        waited = c.detail.get("first_dispatch_to_verdict_seconds")
        if waited is not None:
            text += (
                "interlock_notary cannot answer refused_before_send before its evidence window "
                f"closes: it answered {waited:.1f}s after its dispatch. With a production window "
                "(long enough to outlast the provider's webhook retries) that cell stays "
                "unanswered for as long, where the hand checks answer as soon as they restart. "
            )
    text += (
        "The seed's fixed 35 s claim TTL is gone: a tier-1 crash settles as soon as the "
        "restarted process runs."
    )
    return text


KIND_WORDS = {
    "matches": "matches Resend",
    "cannot know (said so)": "cannot know, and says so",
    "contradicts": "contradicts Resend",
}


def findings(scenario: Scenario) -> list[str]:
    main = [c for c in scenario.cells if c.system in scenario.systems]
    out: list[str] = []
    systems = [s for s in scenario.systems if of(scenario, s)]
    faults = sorted({c.fault for c in main}, key=list(scenario.faults).index)

    # Emails.
    violated = [c for c in main if not c.held]
    rereaders = [s for s in systems if s != "no_check"]
    clean = [s for s in rereaders if all(c.held for c in of(scenario, s))]
    sentence = (
        f"Emails: {'equal' if len(clean) == len(rereaders) else 'not equal'}. "
        f"{len(clean)} of the {len(rereaders)} systems that re-read the refund "
        f"({listing(rereaders)}) left Resend as wanted in every cell they ran "
        f"({sum(len(of(scenario, s)) for s in rereaders)} cells, {len(faults)} faults)."
    )
    if any(c.system in GATES for c in violated):
        gate_bad = [f"{c.system} / {c.fault}" for c in violated if c.system in GATES]
        sentence += f" A GATE ROW VIOLATED: {listing(gate_bad)}."
    else:
        gate_cells = [c for c in main if c.system in GATES]
        sentence += f" The gate rows: 0 violations in {len(gate_cells)} cells."
    for c in violated:
        if c.system == "no_check":
            sentence += (
                f" no_check, in {c.fault}, left {c.outcome} (want {c.wanted}): it sent "
                "“your refund is on the way” for a refund that had failed; the stable key stops "
                "a duplicate, not a wrong email."
            )
        elif c.system not in GATES:
            sentence += f" {c.system}, in {c.fault}, left {c.outcome} (want {c.wanted})."
    out.append(sentence)

    # Answers, against the strongest hand check.
    if has(scenario, "hand_check", "interlock"):
        diff = differences(scenario, "hand_check", "interlock")
        out.append(
            "Answers, against the strongest hand check: "
            + (
                "equal. hand_check (probe plus refund re-read) gave an answer of the same kind "
                "as interlock on every fault, and left the same emails. It ties."
                if not diff
                else f"they differ in {listing(diff)}: "
                + "; ".join(
                    f"hand_check {scenario.cell('hand_check', f).answer} "
                    f"({scenario.cell('hand_check', f).answer_vs_truth}) against interlock "
                    f"{scenario.cell('interlock', f).answer} "
                    f"({scenario.cell('interlock', f).answer_vs_truth})"
                    for f in diff
                )
                + "."
            )
        )

    # Answers, against the idiomatic hand check.
    if has(scenario, "hand_check_noprobe"):
        wrong = [c for c in of(scenario, "hand_check_noprobe") if c.answer_vs_truth != "matches"]
        if wrong:
            faults_wrong = [c.fault for c in wrong]
            gate_rows = [s for s in GATES if has(scenario, s)]
            by_kind: dict[str, list[str]] = {}
            for s in gate_rows:
                kinds = {scenario.cell(s, f).answer_vs_truth for f in faults_wrong}
                kind = kinds.pop() if len(kinds) == 1 else "mixed"
                by_kind.setdefault(kind, []).append(s)
            told = "; ".join(
                f"hand_check_noprobe answered {c.answer} in {c.fault} while Resend holds "
                f"{c.outcome}: its answer and its log contradict Resend"
                for c in wrong
            )
            right = by_kind.get("matches", [])
            sentence = (
                "Answers, against the idiomatic hand check: "
                + ("Interlock better" if right else "Interlock not better")
                + f". {told}. In the same fault"
                + ("s" if len(wrong) > 1 else "")
                + ": "
                + "; ".join(
                    listing(
                        [
                            f"{r} answered "
                            + " / ".join(scenario.cell(r, f).answer for f in faults_wrong)
                            for r in rows
                        ]
                    )
                    + f" ({KIND_WORDS.get(kind, kind)})"
                    for kind, rows in by_kind.items()
                )
                + "."
            )
            if "interlock_noprobe" in by_kind.get("cannot know (said so)", []):
                sentence += (
                    " On Resend's documented features alone (interlock_noprobe) the difference "
                    "is “wrong” against “cannot know”, not “wrong” against “right”; the right "
                    "answer comes from the undocumented probe (interlock) or from the notary's "
                    "webhook evidence (interlock_notary)."
                )
            out.append(sentence)
        else:
            out.append(
                "Answers, against the idiomatic hand check: equal in this run; "
                "hand_check_noprobe's answer matched Resend on every fault."
            )

    # The notary row.
    if has(scenario, "interlock_notary"):
        notary = of(scenario, "interlock_notary")
        matched = sum(c.answer_vs_truth == "matches" for c in notary)
        unknown = sum(c.answer_vs_truth == "cannot know (said so)" for c in notary)
        states = listing([f"{c.fault}: {c.answer}" for c in notary])
        sentence = (
            f"The notary row: interlock_notary answered {matched}/{len(notary)} cells correctly "
            f"and left {unknown} for a person ({states}); its records prove "
            f"{sum(c.record_proves_it for c in notary)}/{len(notary)}."
        )
        if has(scenario, "interlock_tier3"):
            tier3 = of(scenario, "interlock_tier3")
            t3_matched = sum(c.answer_vs_truth == "matches" for c in tier3)
            t3_unknown = sum(c.answer_vs_truth == "cannot know (said so)" for c in tier3)
            verdict = (
                "better" if matched > t3_matched else "equal" if matched == t3_matched else "worse"
            )
            sentence += (
                f" Against interlock_tier3, the same tier-3 declaration without evidence "
                f"({t3_matched}/{len(tier3)} answered, {t3_unknown} AMBIGUOUS): {verdict}."
            )
        evidence = [c for c in notary if c.answer == "COMMITTED_ON_EVIDENCE"]
        if evidence:
            sentence += (
                f" Where an email went, Resend's email.sent webhook settled the effect at the "
                f"notary {seconds(median(c.crash_to_settled_seconds for c in evidence))} "
                "(median) after the SIGKILL, before or while the restarted worker asked, with no "
                "resend and no person."
            )
        silent = [c for c in notary if c.fault == "refused_before_send"]
        for c in silent:
            sentence += (
                f" Where none went (refused_before_send), no webhook can come: the restarted "
                f"worker waited out the {EVIDENCE_WINDOW.total_seconds():.0f} s evidence window "
                f"and answered {c.answer}, since silence proves nothing; a person, or a late "
                "webhook, settles it."
            )
        sentence += (
            " What the notary adds: the target's own delivery events, signed and kept in the "
            "same hash-chained log as the dispatch they settle, answer the question a tier-3 "
            "crash leaves open, for the same target declared the same way."
        )
        out.append(sentence)

    # Record.
    proves = {s: sum(c.record_proves_it for c in of(scenario, s)) for s in systems}
    out.append(
        "Record: "
        + listing([f"{s} {proves[s]}/{len(of(scenario, s))}" for s in systems])
        + " left a record that proves the outcome. A gate's receipt is re-derived by "
        "verify_receipt from a hash-chained journal (the notary's ledger for interlock_notary) "
        "and names the approval and the premise checks that passed right before the send; the "
        "hand checks' app logs name their checks and the email id too, but they are plain lines "
        "written by the same process, not chained, and nothing checks them. A receipt that says "
        "happened: unknown is honest and proves nothing."
    )

    # Time.
    hand = [c for c in main if c.system in email_worker.HAND_SYSTEMS]
    gates = [c for c in main if c.system in GATES]
    if hand and gates:
        out.append(time_finding(scenario, hand, gates))

    # Availability.
    ambiguous = {s: sum(c.answer == "AMBIGUOUS" for c in of(scenario, s)) for s in systems}
    hand_wrong = sum(c.answer_vs_truth == "contradicts" for c in hand)
    sentence = "Availability: "
    if any(ambiguous.values()):
        sentence += (
            "worse. "
            + listing([f"{s} {n}/{len(of(scenario, s))}" for s, n in ambiguous.items() if n])
            + " cells ended AMBIGUOUS, for a person to reconcile, including crashes where the "
            "email did go: never wrong, never sent twice, never sent after the refund failed, but "
            f"not an answer. The hand-written systems always answer ({hand_wrong} of their "
            f"{len(hand)} answers contradicted Resend)."
        )
    else:
        sentence += "no cell of this run ended AMBIGUOUS."
    sentence += (
        " The gate also depends on its journal: with the notary unreachable it refuses to "
        "dispatch (fail closed), a failure the hand checks do not have; this run did not "
        "exercise it."
    )
    out.append(sentence)

    # The seed's pairs.
    pairs = [
        ("hand_check", "interlock"),
        ("hand_check_noprobe", "interlock_noprobe"),
        ("hand_check_noprobe", "interlock"),
        ("interlock_tier3", "interlock_notary"),
    ]
    compared = [
        f"{a} vs {b}: {listing(differences(scenario, a, b)) or 'none'}"
        for a, b in pairs
        if has(scenario, a, b)
    ]
    if compared:
        out.append(
            "Faults where the two systems left a different number of emails or gave a different "
            "kind of answer: " + "; ".join(compared) + "."
        )

    # Timing of the refused faults and discarded attempts.
    margins = [
        (c, c.detail["last_read_before_send"])
        for c in main
        if c.detail.get("last_read_before_send") is not None
    ]
    discarded = [d for c in scenario.cells for d in c.discarded_attempts]
    if margins:
        closest = min(margins, key=lambda m: m[1]["failed_after_read_seconds"])
        gaps = [m[1]["failed_after_read_seconds"] for m in margins]
        out.append(
            f"Timing: {len(discarded)} attempt(s) discarded under the rerun rule. In the refused "
            f"faults the refund failed {min(gaps):.2f}s to {max(gaps):.2f}s after the "
            "worker's last refund read before the send (closest: "
            f"{closest[0].system} / {closest[0].fault}); every scored cell read the refund as "
            "succeeded before its send and crashed as its fault says."
        )
    return out


def withheld_findings(scenario: Scenario) -> list[str]:
    cells = of(scenario, WITHHELD)
    if not cells:
        return []
    wrong = [c for c in cells if c.answer_vs_truth == "contradicts"]
    tier3_wrong = [c for c in of(scenario, "interlock_tier3") if c.answer_vs_truth == "contradicts"]
    word = "worse than" if len(wrong) > len(tier3_wrong) else "no worse than"
    ambiguous = [c for c in cells if c.answer == "AMBIGUOUS"]
    text = (
        f"Where the webhook does not arrive, the notary row is {word} interlock_tier3 "
        f"({len(wrong)} against {len(tier3_wrong)} wrong answers): with "
        "the local Resend withholding its webhooks, interlock_notary answered "
        + listing([f"{c.fault}: {c.answer} ({c.outcome}, {c.answer_vs_truth})" for c in cells])
        + f". Webhook evidence is positive-only: nothing seen by the end of the "
        f"{EVIDENCE_WINDOW.total_seconds():.0f} s evidence window is AMBIGUOUS "
        f"({len(ambiguous)} of {len(cells)} cells), never a resend and never a refusal that "
        "says it was not sent, because a lost webhook and an email never sent look the same."
    )
    if wrong:
        text += " It is wrong in " + listing([c.fault for c in wrong]) + "."
    retried = [c for c in cells if c.answer == "COMMITTED_BY_RETRY"]
    if retried:
        text += (
            " In "
            + listing([c.fault for c in retried])
            + " it resent, which a tier-3 declaration must never do."
        )
    text += (
        " Late webhooks still settle such an effect without a person; the window only decides "
        "how long the gate waits before saying AMBIGUOUS, and should outlast the provider's "
        "webhook retries (Svix retries for days), not the 3 s used here to keep the run short."
    )
    return [text]


def margin_table(scenario: Scenario) -> str:
    rows = []
    for c in scenario.cells:
        m = c.detail.get("last_read_before_send")
        if c.system not in scenario.systems or m is None:
            continue
        rows.append(
            [
                c.fault,
                c.system,
                f"{m['read_after_creation_seconds']:.2f}s",
                f"{m['failed_after_creation_seconds']:.2f}s",
                f"{m['failed_after_read_seconds']:.2f}s",
            ]
        )
    header = [
        "fault",
        "system",
        "last refund read before the send",
        "refund failed",
        "failed after that read",
    ]
    return (
        "How close each refused cell came to the other branch (times after the refund was "
        "created; no_check never reads it):\n\n" + markdown_table(header, rows)
    )


def withheld_table(scenario: Scenario) -> str:
    cells = of(scenario, WITHHELD)
    row = [WITHHELD, *(c.summary() for c in cells)]
    return (
        "The notary row's premise, tested: interlock_notary again with the local Resend "
        "withholding its webhooks (its delivery log records each event as withheld):\n\n"
        + markdown_table(["system", *(c.fault for c in cells)], [row])
    )


# --- the scenario --------------------------------------------------------------------------------
def scenario_skeleton() -> Scenario:
    return Scenario(
        name="email",
        title="Scenario email: an email that cannot be undone (local Resend, real crashes)",
        intro=(
            "Each cell is one support case: a $20 refund is created in the refund world, and a "
            "worker process emails “Your refund is on the way” for it to delivered@resend.dev "
            "through the official Resend SDK, pointed at the local Resend. The worker SIGKILLs "
            "itself at the fault's crash point (exit code -9, recorded per cell). The harness "
            "waits out the outage, starts a new worker process for the same case, and reads "
            "what happened from the local Resend's own store. An email cannot be recalled once "
            "Resend accepts it. The seed's table (its six systems, its three faults, its rerun "
            "rule) plus a seventh row, interlock_notary: the same tier-3 declaration as "
            "interlock_tier3, with Resend's signed delivery webhooks posted to a live notary "
            "that is the gate's journal."
        ),
        systems=SYSTEMS,
        faults=tuple(FAULTS),
        fault_notes={name: fault.note for name, fault in FAULTS.items()},
        system_notes=SYSTEM_NOTES,
    )


NOTES = [
    "Ground truth is the local Resend's own store (testkit/peers/resend_server.py): one fsync'd "
    "JSON line per email it really sent, written before it answered, with its Idempotency-Key "
    "and tags. A cell's emails are those whose text names its case, whatever key they went "
    "under. The seed could not read Resend back with its sending-only key and replayed the key "
    "instead; here the store is read directly.",
    "What is emulated: Resend is the local Resend, which keeps the documented contract (the "
    "Idempotency-Key replays for 24 h, 409 for another body under a used key, 409 while the "
    "first request is in flight) and the order the seed observed (the key is checked before the "
    "sender's domain, which is what makes the probe work), and posts Svix-signed email.sent and "
    f"email.delivered webhooks {WEBHOOK_DELAY_SECONDS} s apart. The refund is a world file with "
    "its creation and failure times (Stripe's pm_card_refundFail fails 4 to 7 s after creation; "
    f"here {REFUND_FAILS_AFTER[0]:.0f} to {REFUND_FAILS_AFTER[1]:.0f} s, drawn once per fault so "
    "every system of a fault faces the same outage), read by every worker from the clock, so "
    "all readers agree. There is no model call: the case's decision (a $20 "
    "refund, the email's text) is fixed, since the experiment is about the send, not the "
    "decision. The SIGKILLs, processes, HTTP, the notary (gunicorn on PostgreSQL) and the "
    "webhook signatures are real.",
    "interlock_tier3 and interlock_notary tell the gate Resend has no dedup and no lookup "
    "(ResendEmail tier 3, no key window), what a sending-only key leaves after Resend's 24 h "
    "key window. The send still carries the effect id as Idempotency-Key and as the "
    "interlock_effect_id tag (the tag is how the webhooks name the effect).",
    "“Answer” compares what the system itself reported (sent, not sent, or cannot know) with "
    "Resend's store. “Record proves it” is the seed's definition: for the gates, "
    "gate_client.receipts.verify_receipt re-derives the receipt from the journal (the local "
    "journal file; for interlock_notary, the receipt the notary serves over HTTP against the "
    "tenant's whole hash-chained log, the entries it served checked against the log's own) and "
    "its happened equals the truth; for the hand checks and no_check, the restarted worker's "
    "app log has a check entry and the email id or the skip, and that claim equals the truth. "
    "A log that records a skip while an email went out proves nothing.",
    "Crash to settled: from the moment the harness's wait() on the SIGKILLed worker returned "
    "to the verdict's timestamp in the system's own record (the journal's verdict entry; the "
    "app log's verdict line). It includes the outage (in the refused faults the restart waits "
    "until the refund reads failed) and starting a Python process. AMBIGUOUS is not settled (a "
    "person must): its time to the AMBIGUOUS answer is in the JSON (crash_to_answer_seconds).",
    "After 24 h (not run here): the gate compares its clock with the first DISPATCHED and "
    "treats Resend as tier 3 past the key window, so it says AMBIGUOUS (or asks the notary) "
    "instead of resending under a forgotten key, while a plain retry sends a second email; "
    "tests/gate_client/adapters/test_resend_email.py runs that with a 1 s key window.",
]


def quick_groups() -> list[tuple[list[str], tuple[str, ...]]]:
    """QUICK_CELLS as (systems, faults) products, one progress bar each."""
    groups: dict[tuple[str, ...], list[str]] = {}
    for system, faults in QUICK_CELLS.items():
        groups.setdefault(faults, []).append(system)
    return [(systems, faults) for faults, systems in groups.items()]


def run(
    *, quick: bool = False, results_dir: Path = RESULTS_DIR, database_url: str | None = None
) -> Scenario:
    """Run the cells (a CI-sized subset with `quick`), write the results, return the scenario."""
    scenario = scenario_skeleton()
    with tempfile.TemporaryDirectory(prefix="interlock-email-") as tmp:
        directory = Path(tmp)
        with live_notary(directory / "notary", database_url=database_url) as notary:
            shop = notary.tenant(
                f"shop-{secrets.token_hex(3)}",
                targets=[
                    TargetSpec(
                        email_agent.TARGET,
                        tier=3,
                        max_inflight=email_agent.TIMEOUT,
                        evidence_window=EVIDENCE_WINDOW,
                    )
                ],
            )
            secret = new_secret("resend")
            hook = shop.webhook_endpoint(email_agent.TARGET, "resend", secret)
            with running_resend(
                directory / "resend.jsonl",
                webhook_url=hook,
                webhook_secret=secret,
                webhook_delay_seconds=WEBHOOK_DELAY_SECONDS,
            ) as resend_server:
                experiment = Experiment(directory, resend_server, shop, rng=random.Random())
                if quick:
                    for systems, faults in quick_groups():
                        run_cells(scenario, experiment.cell, systems=systems, faults=faults)
                else:
                    run_cells(scenario, experiment.cell)
                    run_cells(scenario, experiment.cell, systems=[WITHHELD])
    scenario.findings = findings(scenario) + withheld_findings(scenario)
    scenario.extra_tables = [margin_table(scenario)]
    if of(scenario, WITHHELD):
        scenario.extra_tables.append(withheld_table(scenario))
    scenario.notes = list(NOTES)
    command = "python experiments/scenario_email.py" + (" --quick" if quick else "")
    write_results(scenario, command=command, results_dir=results_dir)
    return scenario


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the CI-sized subset")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    # A database of its own, so it never drops one another scenario is using.
    os.environ.setdefault("EXPERIMENTS_DATABASE_URL", DEFAULT_DATABASE_URL)
    started = time.monotonic()
    scenario = run(quick=args.quick, results_dir=args.results_dir)
    took = time.monotonic() - started
    print(f"{len(scenario.cells)} cells in {took:.0f}s; wrote {args.results_dir / 'email.md'}")


if __name__ == "__main__":
    main()
