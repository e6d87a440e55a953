"""How an email cell runs: a refund created in the refund world, a worker that emails "your
refund is on the way" for it through the Resend SDK to the local Resend and SIGKILLs itself at
the fault's crash point, the outage waited out, a new worker for the same case. An attempt whose
first worker never reached its crash point is discarded and rerun with a new case (the seed's
rerun rule). What it returns is what the judge reads."""

from __future__ import annotations

import json
import random
import secrets
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from experiments.kit.live_notary import NotaryTenant, TargetSpec, live_notary
from experiments.workers import email_worker
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from testkit.agents import email_agent
from testkit.paths import REPO_ROOT
from testkit.peers.resend_server import RunningResend, running_resend
from testkit.processes import armed_env
from testkit.webhook_signing import new_secret

WORKER = "experiments.workers.email_worker"
GATES = email_worker.GATE_SYSTEMS
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


FAULTS = {
    "crash_after_send": Fault(CrashPoint.AFTER_TARGET_ACTED, False, 1),
    "refused_before_send": Fault(CrashPoint.AFTER_DISPATCHED, True, 0),
    "refused_after_send": Fault(CrashPoint.AFTER_TARGET_ACTED, True, 1),
}


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
class Attempt:
    """One case run to its end: its processes, and where the judge reads its record."""

    system: str
    fault: str
    case_id: str
    world: Path
    app_log: Path
    refund: dict[str, Any]
    args: list[str]
    shop: NotaryTenant
    effect_id: str = ""
    lease_id: str = ""
    journal: Path | None = None
    first: Run | None = None
    restarted: Run | None = None
    restarted_after: float = 0.0  # seconds from the SIGKILL to the restart
    truth: Truth = field(default_factory=lambda: Truth([]))
    discarded: list[dict[str, Any]] = field(default_factory=list)

    @property
    def gated(self) -> bool:
        return self.system in GATES or self.system == WITHHELD

    @property
    def on_notary(self) -> bool:
        return self.system in ("interlock_notary", WITHHELD)


class EmailWorld:
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

    def observe(self, system: str, fault: str) -> Attempt:
        """Attempts until one reaches its crash point; the ones before it, discarded."""
        discarded: list[dict[str, Any]] = []
        for tries in range(MAX_ATTEMPTS):
            attempt = self._start(system, fault, rerun=tries > 0)
            if attempt.first is not None and attempt.first.returncode == -9:
                attempt.truth = self.truth(attempt.case_id)
                attempt.discarded = discarded
                return attempt
            discarded.append(self._discard(attempt))
        raise RuntimeError(
            f"no attempt in {MAX_ATTEMPTS} reached the crash point: "
            + json.dumps(discarded)[-2000:]
        )

    def _attempt(self, system: str, fault: str) -> Attempt:
        self.cases += 1
        case_id = f"case-{self.token}-{self.cases:03d}"
        world = self.directory / f"{case_id}.refund.json"
        app_log = self.directory / f"{case_id}.app.jsonl"
        worker_system = "interlock_notary" if system == WITHHELD else system
        args = ["--system", worker_system, "--case", case_id, "--resend", self.resend.url]
        args += ["--world", str(world), "--app-log", str(app_log)]
        attempt = Attempt(system, fault, case_id, world, app_log, {}, args, self.shop)
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
        return attempt

    def _start(self, system: str, fault: str, *, rerun: bool) -> Attempt:
        spec = FAULTS[fault]
        attempt = self._attempt(system, fault)
        fails_after = self.fails_after.get(fault)
        if rerun and fails_after is not None:
            fails_after = self.rng.uniform(*REFUND_FAILS_AFTER)
        self.resend.set_webhooks(system != WITHHELD)
        attempt.refund = email_worker.create_refund(attempt.world, fails_after=fails_after)
        attempt.first = run_worker(attempt.args, spec.crash)
        if attempt.first.returncode != -9:
            return attempt
        if spec.refund_fails:  # the outage lasts until the refund reads failed
            while email_worker.refund_status(attempt.world) != "failed":
                time.sleep(0.02)
        attempt.restarted_after = time.time() - attempt.first.ended_at
        attempt.restarted = run_worker(attempt.args, None)
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
            done: dict[str, set[str]] = {i: set() for i in self.truth(attempt.case_id).ids}
            for d in self.resend.deliveries():
                if d["email_id"] in done and d.get("outcome") in ("ok", "withheld"):
                    done[d["email_id"]].add(d["type"])
            if all(types >= wanted for types in done.values()):
                return
            time.sleep(0.1)

    def truth(self, case_id: str) -> Truth:
        marker = f"Case {case_id}:"
        return Truth([e for e in self.resend.emails() if marker in (e.get("text") or "")])

    def _discard(self, attempt: Attempt) -> dict[str, Any]:
        assert attempt.first is not None
        truth = self.truth(attempt.case_id)
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


@contextmanager
def email_world(work: Path, database_url: str | None) -> Iterator[EmailWorld]:
    """A live notary with the shop's tenant, its Resend endpoint, and the local Resend posting
    its signed webhooks there."""
    with live_notary(work / "notary", database_url=database_url) as notary:
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
            work / "resend.jsonl",
            webhook_url=hook,
            webhook_secret=secret,
            webhook_delay_seconds=WEBHOOK_DELAY_SECONDS,
        ) as resend_server:
            yield EmailWorld(work, resend_server, shop, rng=random.Random())
