"""Scenario refund: the seed's refund agent, regenerated offline with real crashes.

A customer paid $100; support approved one $20 refund (a lease: the case, action "refund", at
most 2000 cents). In every cell an agent process (experiments/refund_worker.py) sets out to
refund it and SIGKILLs itself at one of the five crash points; while it is down the world changes
(or not); a new process is started at once and does what its system does on a restart; the
result is read from the payment service's own record. Each cell has its own payment service
process (or, for the Stripe rows, its own payment at one localstripe), its own journal or notary
tenant, and its own case.

    .venv/bin/python experiments/scenario_refund.py [--quick] [--results-dir DIR]

writes experiments/results/refund.md and refund.json. The notary rows (gate_tier3_notary,
interlock_attested) need a live notary: a fresh PostgreSQL database named by
EXPERIMENTS_DATABASE_URL (its name must contain "bench"; see experiments/live_notary.py)."""

from __future__ import annotations

import argparse
import itertools
import json
import os
import secrets
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

# Run as a script, the repository root is not on the path; the worker and peers live there.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import refund_worker as worker
from experiments.harness import RESULTS_DIR, Cell, Scenario, run_cells, write_results
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.protocol import standing as standing_verdict
from gate_client.receipts import Receipt, ReceiptError, derive_receipt, verify_receipt
from ledger.core.entries import Entry, EntryKind
from testkit.peers.reference_service import read_acts, running_server

if TYPE_CHECKING:
    from experiments.live_notary import LiveNotary, NotaryTenant

WORKER = "experiments.refund_worker"
PAYMENT_CENTS = 10_000
APPROVED_CENTS = 2_000
REDECIDED_CENTS = 3_000
LOCAL_ORIGIN = "gate.local/journal"
EVIDENCE_WINDOW = timedelta(seconds=5)
WEBHOOK_DELAY_SECONDS = 1.0  # how long after a refund its webhook reaches the notary
# The attesting service's request includes its own round trip to the notary: a longer in-flight
# time than the plain service's, so a busy machine does not turn the first request in doubt.
ATTESTED_MAX_INFLIGHT = timedelta(seconds=2)
PARALLEL_CELLS = 4  # a cell mostly waits on processes; two cores keep up with four
CELL_TIMEOUT_SECONDS = 60

CHANGES = ("none", "lease_revoked", "refunded_by_hand", "redecided_30")
CRASHES = tuple(point.value for point in CrashPoint)
FAULTS = tuple(f"{crash}+{change}" for change in CHANGES for crash in CRASHES)
QUICK_FAULTS = (
    "after_target_acted+none",
    "after_dispatched+lease_revoked",
    "after_dispatched+refunded_by_hand",
    "after_target_acted+redecided_30",
)


@dataclass(frozen=True)
class System:
    worker: str  # the refund_worker system
    service: str  # "reference" or "stripe"
    dedupe: bool = False  # what the reference service really does
    lookup: bool = False
    tier: int | None = None  # what the gate is told
    notary: bool = False
    attested: bool = False  # the service attests each request to the notary before acting

    @property
    def gated(self) -> bool:
        return self.worker == "gate"


SYSTEMS = {
    "plain_retry": System("plain_retry", "reference", dedupe=True),
    "idempotency_keys": System("idempotency_keys", "reference", dedupe=True),
    "durable_execution": System("durable_execution", "reference", dedupe=True),
    "gate_tier1": System("gate", "reference", dedupe=True, tier=1),
    "gate_tier2": System("gate", "reference", lookup=True, tier=2),
    "gate_tier3": System("gate", "reference", tier=3),
    "gate_tier3_notary": System("gate", "reference", tier=3, notary=True),
    "interlock_attested": System("gate", "reference", tier=3, notary=True, attested=True),
    "idempotency_keys_stripe": System("idempotency_keys", "stripe"),
    "gate_tier2_stripe": System("gate", "stripe", tier=2),
}
GATE_ROWS = tuple(name for name, system in SYSTEMS.items() if system.gated)

SYSTEM_NOTES = {
    "plain_retry": "POST the refund with no key; the restarted process runs it again (and asks "
    "the model again). Reference service started with --dedupe, which a keyless POST never uses.",
    "idempotency_keys": "the conventional fix: `Idempotency-Key: refund-<case>`, stable per "
    "case, rerun on restart; no lease and no premise check. Reference service with --dedupe "
    "(it replays the first result for a known key, whatever the body).",
    "durable_execution": "durable execution alone, no key: the model's decision is checkpointed "
    "to a file before the tool runs, the tool's result after it; a restart replays the "
    "checkpointed decision (the model is not asked again) and re-runs the tool when no result was "
    "checkpointed. Reference service with --dedupe.",
    "gate_tier1": "the gate (gate_client.Gate, local fsync'd journal) with the target declared "
    "tier 1 (dedupes on the effect id as Idempotency-Key, no lookup); reference service "
    "--dedupe. The lease (case, refund, amount_cents <= 2000) is in the journal; one premise, "
    "absolute: no refund has been made on the case's payment other than this effect's own.",
    "gate_tier2": "the same gate, target declared tier 2 (lookup by effect id, no dedupe); "
    "reference service --lookup.",
    "gate_tier3": "the same gate, target declared tier 3 (neither); reference service with no "
    "flags. It never resends a dispatch that may have acted.",
    "gate_tier3_notary": "tier 3 lifted by the notary: the gate's journal is a live notary "
    "(gunicorn on PostgreSQL, the common one-request path for PROPOSED+DISPATCHED), the target "
    f"registered tier 3 with a {int(EVIDENCE_WINDOW.total_seconds())} s evidence window, the "
    "lease granted and revoked at the notary; the service's refunds reach the notary as "
    "Stripe-signed refund.created webhooks (see Notes: the relay is emulated).",
    "interlock_attested": "write-ahead attestation: the same tier-3 reference service (no "
    "dedupe, no lookup) started with --attest, so before each refund it attests before_acting "
    "to the live notary with a service key and refunds only on its 201 (it answers 409 "
    "not_acknowledged otherwise, which the gate takes as in doubt), then attests performed with "
    "the refund's result_ref after answering. The target is registered tier 3 with "
    f"attests_before_acting and a {ATTESTED_MAX_INFLIGHT.total_seconds():.0f} s max in-flight "
    "(the request timeout, covering the service's round trip to the notary); the gate's journal "
    "is the notary, no webhooks. Support's hand refund goes through the service's dashboard, "
    "a second process on the same store that attests nothing: support is not an agent.",
    "idempotency_keys_stripe": "the idempotency-keys baseline through Stripe's official SDK "
    "(Idempotency-Key refund-<case>, SDK retries off) against localstripe, which ignores the "
    "key.",
    "gate_tier2_stripe": "the gate over gate_client.adapters.StripeRefunds (official SDK, the "
    "effect id as Idempotency-Key and in metadata) against localstripe, declared tier 2 because "
    "localstripe ignores keys: the lookup lists the payment's refunds by metadata. Premises: "
    "refund_premises (the payment succeeded and has room) and the case premise above, read "
    "through the SDK. Lease limit on Stripe's own field: amount <= 2000.",
}

FAULT_NOTES = {
    "a fault": "a crash point + a world change, e.g. after_target_acted+lease_revoked. The "
    "first worker SIGKILLs itself at the crash point (exit -9); the harness changes the world; a "
    "second worker starts at once. Gate workers run recover() and then submit the (possibly "
    "re-decided) proposal again; the others do what their system does on a restart.",
    "before_proposed": "the gate dies before the decision is durable. Without a journal: before "
    "anything, the request included; durable_execution: before its decision checkpoint.",
    "after_proposed": "the gate's PROPOSED is durable, nothing dispatched (on the notary's "
    "one-request path there is no such moment: the worker runs to the end, exit 0). Without a "
    "journal: before the request; durable_execution: just after its decision checkpoint.",
    "after_dispatched": "the gate's DISPATCHED is durable, the request has not left. Without a "
    "journal: before the request (durable_execution: the same moment as after_proposed).",
    "after_target_acted": "the service refunded; its response is unread. The same moment for "
    "every system.",
    "after_response": "the response is read; nothing recorded it (no COMMITTED, no log line, no "
    "result checkpoint). The same moment for every system.",
    "none": "nothing changes. Wanted: the approved $20 refunded once, or, if it never was, the "
    "system says it cannot know (tier 3's stated guarantee: at most once, ambiguity surfaced).",
    "lease_revoked": "finance revokes the lease during the outage (in the gate's journal, at the "
    "notary; the baselines hold no lease and never look). Wanted: revoked before anything was "
    "sent: 0 agent refunds; the service acted before: that one refund stands, no other.",
    "refunded_by_hand": "support refunds the $20 by hand during the outage (a refund at the "
    "payment service, not the agent's): the premise 'no refund has been made for this case "
    "yet' breaks. Wanted: before the agent's refund was sent: no agent refund; after: the "
    "agent's one refund stands, no second.",
    "redecided_30": "the restarted model re-decides $30 for the same case. Wanted: at most the "
    "one $20 refund, never $30.",
    "counted": "an agent refund is any refund at the payment service not made by support; "
    "'before the change' counts the ones the service had made when the first worker died.",
}


# --- one cell ----------------------------------------------------------------------------------


@dataclass
class Truth:
    agent: list[dict[str, Any]]  # refunds by the agent: result_ref, amount_cents, effect_id
    by_hand: list[dict[str, Any]]


@dataclass
class Setup:
    """Everything a cell's two processes are told, and what the harness keeps to read after."""

    args: list[str]
    effect_id: str
    lease_id: str
    revoke: Callable[[], None]
    refund_by_hand: Callable[[], None]
    truth: Callable[[], Truth]
    journal: Path | None = None
    tenant: NotaryTenant | None = None
    ids: dict[str, str] = field(default_factory=dict)


class Runner:
    def __init__(
        self, work: Path, notary: LiveNotary | None, stripe_url: str | None, token: str
    ) -> None:
        self.work = work
        self.notary = notary
        self.stripe_url = stripe_url
        self.token = token
        self._notary_lock = threading.Lock()

    def cell(self, system_name: str, fault: str) -> Cell:
        try:
            return self._cell(system_name, fault)
        except Exception as error:
            raise RuntimeError(f"cell {system_name} / {fault}: {error}") from error
        finally:
            if SYSTEMS[system_name].notary:
                from django.db import connection

                connection.close()  # this pool thread's own connection

    def _cell(self, system_name: str, fault: str) -> Cell:
        system = SYSTEMS[system_name]
        crash_name, change = fault.split("+")
        crash = CrashPoint(crash_name)
        slug = f"{system_name}-{crash_name}-{change}".replace("_", "-")
        case_id = f"case-{self.token}-{slug}"
        directory = self.work / slug
        directory.mkdir(parents=True)
        with ExitStack() as stack:
            setup = self._setup(stack, system, case_id, directory)
            relay = None
            if system.notary and not system.attested:
                relay = stack.enter_context(self._relay(setup, directory))
            first = run_worker([*setup.args, "--amount", str(APPROVED_CENTS)], crash)
            crashed_at = time.time()
            before = len(setup.truth().agent)
            if change == "lease_revoked":
                setup.revoke()
            elif change == "refunded_by_hand":
                setup.refund_by_hand()
            changed_at = time.time()
            amount = REDECIDED_CENTS if change == "redecided_30" else APPROVED_CENTS
            restart = ["--restarted"] if system.gated else []
            second = run_worker([*setup.args, "--amount", str(amount), *restart], None)
            if relay is not None:
                relay.drain(timeout=WEBHOOK_DELAY_SECONDS + 15)
            if system.attested:
                wait_for_attestations(setup, timeout=15)
            truth = setup.truth()
            processes = [first, second]
            for n, process in enumerate(processes):
                if process.returncode not in ((-9, 0) if n == 0 else (0,)):
                    raise RuntimeError(
                        f"worker {n + 1} exited {process.returncode}: {process.stderr[-2000:]}"
                    )
            cell = Cell(
                system=system_name,
                fault=fault,
                answer="",
                outcome=outcome_text(truth),
                wanted="",
                held=False,
                answer_vs_truth="contradicts",
                record_proves_it=False,
                crash_to_settled_seconds=None,
                exit_codes=[p.returncode for p in processes],
                ids={"case": case_id, **setup.ids},
                truth={
                    "agent_refunds": truth.agent,
                    "refunds_by_hand": truth.by_hand,
                    "agent_refunds_before_change": before,
                },
                detail={
                    "crash_point": crash_name,
                    "world_change": change,
                    "crashed_at": crashed_at,
                    "world_changed_at": changed_at,
                    "restarted_amount_cents": amount,
                    "printed": [[_brief(line) for line in _lines(p.stdout)] for p in processes],
                },
            )
            if first.returncode == 0:
                cell.detail["no_crash"] = f"{crash_name} does not exist on this path"
            if relay is not None:
                cell.detail["webhooks"] = [
                    {
                        "event_id": d.event_id,
                        "result_ref": d.result_ref,
                        "status": d.status,
                        "after_refund_s": round(d.posted_at - d.acted_at, 3),
                    }
                    for d in relay.deliveries
                ]
                if relay.errors:
                    raise RuntimeError(f"webhook relay: {relay.errors}")
            if system.attested:
                cell.detail["attested"] = attestations(setup)
            if system.gated:
                judge_gate(cell, setup, processes, crashed_at)
            else:
                judge_baseline(cell, directory / "app.log", crashed_at)
            judge_world(cell, change, truth, before)
            if first.returncode == 0:
                cell.answer += " (no crash: the worker ran to the end)"
            return cell

    # --- setting a cell up ---------------------------------------------------------------------

    def _setup(self, stack: ExitStack, system: System, case_id: str, directory: Path) -> Setup:
        if system.service == "stripe":
            return self._stripe_setup(system, case_id, directory)
        store = directory / "service.store"
        attesting = self._notary_tenant(system, case_id) if system.attested else None
        server = stack.enter_context(
            running_server(
                store,
                dedupe=system.dedupe,
                lookup=system.lookup,
                attest=attesting.tenant.url if attesting else None,
                attest_token=attesting.service_token if attesting else None,
            )
        )
        # Support refunds by hand where it always does: at the service. An attesting service's
        # API would refuse a request no agent dispatched, so support uses its dashboard.
        dashboard = (
            stack.enter_context(running_server(store, dedupe=False, lookup=False))
            if attesting
            else server
        )
        payment = f"pay_{secrets.token_hex(8)}"
        args = [system.worker, "--case", case_id, "--payment", payment]
        args += ["--service", server.url]
        ids = {"payment": payment}

        def refund_by_hand() -> None:
            body = {
                "effect_id": f"by-hand-{case_id}",
                "payload": {
                    "payment": payment,
                    "amount_cents": APPROVED_CENTS,
                    "by": worker.SUPPORT,
                },
            }
            request = urllib.request.Request(
                f"{dashboard.url}/effects",
                data=json.dumps(body).encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=5) as answer:
                answer.read()

        def truth() -> Truth:
            acts = [a for a in read_acts(store) if a["payload"].get("payment") == payment]
            refunds = [
                {
                    "result_ref": a["result_ref"],
                    "amount_cents": a["payload"]["amount_cents"],
                    "effect_id": a["effect_id"],
                    "idempotency_key": a["idempotency_key"],
                    "at": a["at"],
                }
                for a in acts
            ]
            by_hand = [a["payload"].get("by") == worker.SUPPORT for a in acts]
            return Truth(
                [r for r, hand in zip(refunds, by_hand, strict=True) if not hand],
                [r for r, hand in zip(refunds, by_hand, strict=True) if hand],
            )

        if not system.gated:
            args += ["--log", str(directory / "app.log")]
            if system.worker == "durable_execution":
                args += ["--checkpoint", str(directory / "checkpoint.json")]
            key = worker.baseline_key(case_id) if system.worker == "idempotency_keys" else "none"
            ids |= {
                "idempotency_key": key,
                "approval": "support's, held by no system: never checked",
            }
            return Setup(
                args, worker.baseline_key(case_id), "", _nothing, refund_by_hand, truth, ids=ids
            )
        args += ["--tier", str(system.tier), "--store", str(store)]  # the premise reads it
        if system.notary:
            at = attesting or self._notary_tenant(system, case_id)
            return self._notary_setup(system, at, args, case_id, ids, refund_by_hand, truth)
        journal = directory / "journal"
        limits = {"amount_cents": APPROVED_CENTS}
        revoke = self._local_lease(journal, case_id, worker.LEASE_ID, limits)
        effect_id = worker.gate_effect_id(case_id)
        args += ["--journal", str(journal), "--lease", worker.LEASE_ID]
        return Setup(
            args,
            effect_id,
            worker.LEASE_ID,
            revoke,
            refund_by_hand,
            truth,
            journal=journal,
            ids={**ids, "effect_id": effect_id, "lease": worker.LEASE_ID},
        )

    def _local_lease(
        self, journal: Path, case_id: str, lease_id: str, limits: dict[str, int]
    ) -> Callable[[], None]:
        expires = datetime.now(UTC) + timedelta(hours=1)
        opened = LocalJournal(journal)
        try:
            opened.grant_lease(Lease(lease_id, case_id, "refund", expires, "support", limits))
        finally:
            opened.close()

        def revoke() -> None:
            reopened = LocalJournal(journal)
            try:
                reopened.revoke_lease(lease_id, by="finance", reason="the customer disputed it")
            finally:
                reopened.close()

        return revoke

    def _notary_tenant(self, system: System, case_id: str) -> CellTenant:
        """A tenant of the cell's own at the live notary: the target as `system` declares it,
        the lease, and for an attesting service its key."""
        from experiments.live_notary import TargetSpec

        assert self.notary is not None
        if system.attested:
            spec = TargetSpec(
                worker.TARGET,
                tier=3,
                max_inflight=ATTESTED_MAX_INFLIGHT,
                attests_before_acting=True,
            )
        else:
            spec = TargetSpec(
                worker.TARGET,
                tier=3,
                max_inflight=timedelta(seconds=worker.TIMEOUT_SECONDS),
                evidence_window=EVIDENCE_WINDOW,
            )
        with self._notary_lock:  # tenant slugs and API keys: one at a time
            tenant = self.notary.tenant(f"refund-{secrets.token_hex(6)}", targets=[spec])
            lease_id = tenant.grant_lease(
                case_id, "refund", limits={"amount_cents": APPROVED_CENTS}
            )
            token = tenant.service_token("payments") if system.attested else ""
        return CellTenant(tenant, lease_id, token)

    def _notary_setup(
        self,
        system: System,
        at: CellTenant,
        args: list[str],
        case_id: str,
        ids: dict[str, str],
        refund_by_hand: Callable[[], None],
        truth: Callable[[], Truth],
    ) -> Setup:
        tenant, lease_id = at.tenant, at.lease_id
        effect_id = worker.gate_effect_id(case_id, tenant=tenant.slug)
        args += ["--notary", tenant.url, "--notary-token", tenant.agent_token]
        args += ["--tenant", tenant.slug, "--lease", lease_id]
        if system.attested:
            args += ["--attests-before-acting"]
            args += ["--max-inflight", str(ATTESTED_MAX_INFLIGHT.total_seconds())]
        else:
            args += ["--evidence-window", str(EVIDENCE_WINDOW.total_seconds())]

        def revoke() -> None:
            tenant.revoke_lease(lease_id, reason="the customer disputed it")

        return Setup(
            args,
            effect_id,
            lease_id,
            revoke,
            refund_by_hand,
            truth,
            tenant=tenant,
            ids={**ids, "effect_id": effect_id, "lease": lease_id, "tenant": tenant.slug},
        )

    def _stripe_setup(self, system: System, case_id: str, directory: Path) -> Setup:
        from gate_client.adapters.stripe_refunds import METADATA_KEY
        from testkit.agents import refund_agent
        from testkit.peers.localstripe import paid_intent, refunds_of, stripe_client

        assert self.stripe_url is not None
        client = stripe_client(self.stripe_url)
        payment = paid_intent(client, PAYMENT_CENTS)
        args = [system.worker, "--case", case_id, "--payment", payment]
        args += ["--stripe", self.stripe_url]
        ids = {"payment_intent": payment}

        def refund_by_hand() -> None:
            params: Any = {
                "payment_intent": payment,
                "amount": APPROVED_CENTS,
                "metadata": {"by": worker.SUPPORT},
            }
            client.v1.refunds.create(params=params)

        def truth() -> Truth:
            agent: list[dict[str, Any]] = []
            by_hand: list[dict[str, Any]] = []
            # Stripe lists the newest first; the truth reads in the order they were made.
            for refund in reversed(refunds_of(client, payment)):
                metadata = refund.metadata.to_dict() if refund.metadata else {}
                row = {
                    "result_ref": refund.id,
                    "amount_cents": refund.amount,
                    "effect_id": metadata.get(METADATA_KEY),
                    "status": refund.status,
                    "at": refund.created,
                }
                (by_hand if metadata.get("by") == worker.SUPPORT else agent).append(row)
            return Truth(agent, by_hand)

        if not system.gated:
            args += ["--log", str(directory / "app.log")]
            key = worker.baseline_key(case_id)
            ids |= {"idempotency_key": key, "approval": "support's, never checked"}
            return Setup(args, key, "", _nothing, refund_by_hand, truth, ids=ids)
        journal = directory / "journal"
        revoke = self._local_lease(
            journal, case_id, refund_agent.LEASE_ID, {"amount": APPROVED_CENTS}
        )
        effect_id = refund_agent.effect_id(case_id)
        args += ["--tier", str(system.tier), "--journal", str(journal)]
        args += ["--lease", refund_agent.LEASE_ID]
        return Setup(
            args,
            effect_id,
            refund_agent.LEASE_ID,
            revoke,
            refund_by_hand,
            truth,
            journal=journal,
            ids={**ids, "effect_id": effect_id, "lease": refund_agent.LEASE_ID},
        )

    @contextmanager
    def _relay(self, setup: Setup, directory: Path) -> Iterator[Any]:
        from experiments.webhook_relay import running_relay
        from testkit.webhook_signing import new_secret

        assert setup.tenant is not None
        secret = new_secret("stripe")
        with self._notary_lock:
            url = setup.tenant.webhook_endpoint(worker.TARGET, "stripe", secret)
        store = directory / "service.store"
        with running_relay(store, url, secret, delay_seconds=WEBHOOK_DELAY_SECONDS) as relay:
            yield relay


@dataclass(frozen=True)
class CellTenant:
    tenant: NotaryTenant
    lease_id: str
    service_token: str  # the attesting service's key; "" for a service that attests nothing


def attestations(setup: Setup) -> list[dict[str, Any]]:
    """What the service attested of the effect, in order: intent (before_acting, acknowledged:
    it acted after), performed with its reference."""
    from ledger.selectors import iter_entries

    assert setup.tenant is not None
    return [
        {
            "seq": e.seq,
            "outcome": e.body_value()["outcome"],
            "reference": e.body_value()["result_ref"],
        }
        for e in iter_entries(log=setup.tenant.tenant.log)
        if e.effect_id == setup.effect_id
        and e.kind == EntryKind.OBSERVED
        and e.body_value().get("source") == "attestation"
    ]


def wait_for_attestations(setup: Setup, *, timeout: float) -> None:
    """The service attests `performed` after it answers: wait until every refund the agent's
    effect made is attested, so the record read next is the whole of it. Past `timeout` the
    cell is read as it is (an intent with nothing after it is a finding, not an error)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        made = {r["result_ref"] for r in setup.truth().agent if r["effect_id"] == setup.effect_id}
        said = {a["reference"] for a in attestations(setup) if a["outcome"] == "performed"}
        if made <= said:
            return
        time.sleep(0.1)


def _nothing() -> None:
    """A baseline holds no lease: a revocation reaches none of its processes."""


def run_worker(args: list[str], crash: CrashPoint | None) -> Any:
    from testkit.processes import spawn_armed

    return spawn_armed(WORKER, args, crash)


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _brief(line: dict[str, Any]) -> dict[str, Any]:
    """A printed line for the JSON: the step, its time, and what it said (not the receipt)."""
    if "receipt" not in line:
        return line
    receipt = line["receipt"]
    said = {"final_state": receipt["final_state"], "happened": receipt["happened"]}
    return {"step": line["step"], "t": line["t"], **said}


# --- judging a cell ------------------------------------------------------------------------------


def dollars(cents: int) -> str:
    return f"${cents / 100:.2f}".replace(".00", "")


def outcome_text(truth: Truth) -> str:
    amounts = [r["amount_cents"] for r in truth.agent]
    text = f"{len(amounts)} agent refund{'s' if len(amounts) != 1 else ''}"
    if amounts:
        text += f" ({' + '.join(dollars(a) for a in amounts)})"
    if truth.by_hand:
        text += f" + {len(truth.by_hand)} by hand"
    return text


def judge_world(cell: Cell, change: str, truth: Truth, before: int) -> None:
    """The rules of FAULT_NOTES, from the service's own record."""
    agent = truth.agent
    amounts = [r["amount_cents"] for r in agent]
    if change in ("lease_revoked", "refunded_by_hand"):
        what = "revocation" if change == "lease_revoked" else "refund by hand"
        if before == 0:
            cell.wanted = "0 agent refunds"
        else:
            cell.wanted = f"only the agent refund made before the {what}"
        cell.held = len(agent) == min(before, 1)
    elif change == "redecided_30":
        cell.wanted = "at most one $20 agent refund, no $30"
        cell.held = len(agent) <= 1 and all(a == APPROVED_CENTS for a in amounts)
    else:
        cell.wanted = "1 agent refund of $20, or 0 said unknown"
        paid_once = amounts == [APPROVED_CENTS]
        cell.held = paid_once or (not agent and cell.answer_vs_truth == "cannot know (said so)")


def judge_baseline(cell: Cell, log: Path, crashed_at: float) -> None:
    """A baseline's answer is its app log; it names no lease or premise check, so by the seed's
    definition its record cannot prove the outcome, whatever it says."""
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    claims = [line for line in lines if "result_ref" in line]
    last = claims[-1] if claims else None
    cell.answer = f"{last['event']} {dollars(last['amount_cents'])}" if last else "nothing logged"
    claimed = {c["result_ref"]: c["amount_cents"] for c in claims}
    agent = cell.truth["agent_refunds"]
    actual = {r["result_ref"]: r["amount_cents"] for r in agent}
    cell.answer_vs_truth = "matches" if claimed == actual else "contradicts"
    cell.record_proves_it = False
    cell.crash_to_settled_seconds = (
        round(lines[-1]["at"] - crashed_at, 3) if lines and cell.exit_codes[0] == -9 else 0.0
    )
    cell.detail["log"] = lines
    cell.detail["record"] = (
        "app log: names the refund it believes it made; no lease or premise check"
    )


def judge_gate(cell: Cell, setup: Setup, processes: Sequence[Any], crashed_at: float) -> None:
    entries, origin = journal_entries(setup)
    history = [e for e in entries if e.effect_id == setup.effect_id]
    printed = [line["receipt"] for p in processes for line in _lines(p.stdout) if "receipt" in line]
    if setup.tenant is not None:
        served = setup.tenant.receipt(setup.effect_id)
        if served is None:
            raise RuntimeError("the notary never heard of the effect")
        standing = Receipt.from_dict(served)
    else:
        standing = derive_receipt(entries, setup.effect_id)
        mine = [
            r for r in printed if r["proposed"]["payload_hash"] == standing.proposed["payload_hash"]
        ]
        if mine:
            standing = Receipt.from_dict(mine[-1])  # what the process said, checked below
    problems = []
    try:
        verify_receipt(standing, entries, origin=origin)
    except ReceiptError as error:
        problems.append(str(error))
    others = [
        r for r in printed if r["proposed"]["payload_hash"] != standing.proposed["payload_hash"]
    ]
    for other in others:
        try:
            verify_receipt(Receipt.from_dict(other), entries, origin=origin)
        except ReceiptError as error:
            problems.append(str(error))
    happened_truth = any(r["effect_id"] == setup.effect_id for r in cell.truth["agent_refunds"])
    answer = standing.final_state
    said = [r["final_state"] for r in printed if r["proposed"] == standing.proposed]
    if said and said[-1] != answer:
        answer += f" (the restarted process said {said[-1]})"
    if others:
        answer += f"; $30 re-decision: {others[-1]['final_state']}"
    cell.answer = answer
    if standing.happened == "unknown":
        cell.answer_vs_truth = "cannot know (said so)"
    else:
        cell.answer_vs_truth = "matches" if standing.happened == happened_truth else "contradicts"
    cell.record_proves_it = not problems and standing.happened == happened_truth
    stands = standing_verdict(history).verdict
    if stands is not None and stands.kind != EntryKind.AMBIGUOUS:
        settled = stands.created_at.timestamp() - crashed_at
        cell.crash_to_settled_seconds = round(max(settled, 0.0), 3)
    cell.detail["receipt"] = standing.to_dict()
    cell.detail["receipt_problems"] = problems
    cell.detail["entries"] = [
        {"seq": e.seq, "kind": str(e.kind), "at": e.created_at.timestamp()} for e in history
    ]


def journal_entries(setup: Setup) -> tuple[list[Entry], str]:
    if setup.tenant is not None:
        from ledger.selectors import iter_entries

        log = setup.tenant.tenant.log
        return list(iter_entries(log=log)), log.origin
    assert setup.journal is not None
    opened = LocalJournal(setup.journal)
    try:
        return opened.entries(), LOCAL_ORIGIN
    finally:
        opened.close()


# --- the scenario --------------------------------------------------------------------------------


def new_scenario() -> Scenario:
    return Scenario(
        name="refund",
        title="Scenario refund: $100 paid, one $20 refund approved, the agent SIGKILLed",
        intro=(
            "Each cell is one support case: a $100 payment and one approved $20 refund. A worker "
            "process (experiments/refund_worker.py) refunds it and SIGKILLs itself at the "
            "fault's crash point (exit code -9 recorded per cell); during the outage the world "
            "changes (or not); a second worker starts at once and does what its system does on "
            "a restart. The outcome is read from the payment service's own store (the "
            "reference service's fsync'd record of every refund it made; localstripe's refund "
            "list for the Stripe rows). Offline: no model is called; the model's decision is "
            "the amount the worker is given, $20, or $30 when it re-decides."
        ),
        systems=list(SYSTEMS),
        faults=list(FAULTS),
        fault_notes=FAULT_NOTES,
        system_notes=SYSTEM_NOTES,
    )


def run(
    *, quick: bool = False, results_dir: Path = RESULTS_DIR, database_url: str | None = None
) -> Scenario:
    """Run every cell (`quick`: four faults per system), write the results, return them."""
    from experiments.live_notary import live_notary
    from testkit.peers.localstripe import running_localstripe

    scenario = new_scenario()
    faults = list(QUICK_FAULTS if quick else FAULTS)
    systems = list(SYSTEMS)
    started = time.monotonic()
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="refund-scenario-") as temp, ExitStack() as stack:
        work = Path(temp)
        (work / "localstripe").mkdir()
        notary = stack.enter_context(live_notary(work / "notary", database_url=database_url))
        stripe_url = stack.enter_context(running_localstripe(work / "localstripe"))
        runner = Runner(work / "cells", notary, stripe_url, secrets.token_hex(3))
        with ThreadPoolExecutor(PARALLEL_CELLS) as pool:
            futures: dict[tuple[str, str], Future[Cell]] = {
                (s, f): pool.submit(runner.cell, s, f) for s in systems for f in faults
            }
            try:
                run_cells(
                    scenario,
                    lambda s, f: futures[(s, f)].result(timeout=CELL_TIMEOUT_SECONDS * 4),
                    systems=systems,
                    faults=faults,
                )
            except BaseException:
                for future in futures.values():
                    future.cancel()
                raise
    seconds = time.monotonic() - started
    scenario.extra_tables = extra_tables(scenario)
    scenario.findings = findings(scenario)
    scenario.notes = notes(scenario, seconds, load_before, quick)
    command = "python experiments/scenario_refund.py" + (" --quick" if quick else "")
    write_results(scenario, command=command, results_dir=results_dir)
    return scenario


# --- reading the numbers -------------------------------------------------------------------------


@dataclass
class Row:
    """One system's cells, counted."""

    name: str
    cells: list[Cell]

    @property
    def n(self) -> int:
        return len(self.cells)

    def count(self, test: Any) -> int:
        return sum(1 for c in self.cells if test(c))

    @property
    def violations(self) -> int:
        return self.count(lambda c: not c.held)

    @property
    def doubles(self) -> int:
        return self.count(lambda c: len(c.truth["agent_refunds"]) > 1)

    @property
    def thirty(self) -> int:
        return self.count(
            lambda c: any(r["amount_cents"] == REDECIDED_CENTS for r in c.truth["agent_refunds"])
        )

    def after_change(self, change: str) -> int:
        return self.count(
            lambda c: (
                c.fault.endswith(change)
                and len(c.truth["agent_refunds"]) > c.truth["agent_refunds_before_change"]
            )
        )

    @property
    def to_a_person(self) -> int:
        return self.count(lambda c: c.crash_to_settled_seconds is None)

    @property
    def unpaid(self) -> int:
        """Cells where nothing stood in the refund's way and no refund was made."""
        return self.count(lambda c: c.fault.endswith("+none") and not c.truth["agent_refunds"])

    @property
    def contradicts(self) -> int:
        return self.count(lambda c: c.answer_vs_truth == "contradicts")

    @property
    def proves(self) -> int:
        return self.count(lambda c: c.record_proves_it)

    def settled(self) -> list[float]:
        return [c.crash_to_settled_seconds for c in self.cells if c.crash_to_settled_seconds]

    def median(self) -> float | None:
        times = self.settled()
        return statistics.median(times) if times else None

    def seconds(self) -> str:
        times = self.settled()
        if not times:
            return "never settled"
        return f"{statistics.median(times):.2f} s (max {max(times):.2f} s)"


def rows(scenario: Scenario) -> dict[str, Row]:
    return {
        name: Row(name, [c for c in scenario.cells if c.system == name])
        for name in scenario.systems
        if any(c.system == name for c in scenario.cells)
    }


def extra_tables(scenario: Scenario) -> list[str]:
    from experiments.harness import markdown_table

    tables = []
    header = [
        "system",
        "world as wanted",
        "two refunds",
        "a $30 refund",
        "refund after revocation",
        "refund after the hand refund",
        "answer contradicts the service",
        "record proves it",
        "left to a person",
        "approved refund unpaid (fault none)",
        "crash to settled, median",
    ]
    body = []
    for row in rows(scenario).values():
        body.append(
            [
                row.name,
                f"{row.n - row.violations}/{row.n}",
                str(row.doubles),
                str(row.thirty),
                str(row.after_change("lease_revoked")),
                str(row.after_change("refunded_by_hand")),
                str(row.contradicts),
                f"{row.proves}/{row.n}",
                str(row.to_a_person),
                str(row.unpaid),
                row.seconds(),
            ]
        )
    tables.append("### Counts per system\n\n" + markdown_table(header, body))
    crashes = [c for c in CRASHES if any(cell.fault.startswith(c + "+") for cell in scenario.cells)]
    for change in CHANGES:
        cells = [c for c in scenario.cells if c.fault.endswith("+" + change)]
        if not cells:
            continue
        lines = []
        for name in rows(scenario):
            line = [name]
            for crash in crashes:
                cell = next(
                    (c for c in cells if (c.system, c.fault) == (name, f"{crash}+{change}")), None
                )
                line.append(short(cell) if cell else "")
            lines.append(line)
        tables.append(
            f"### World change: {change}\n\n" + markdown_table(["system", *crashes], lines)
        )
    return tables


def short(cell: Cell) -> str:
    refunds = [dollars(r["amount_cents"]) for r in cell.truth["agent_refunds"]]
    verdict = "ok" if cell.held else "VIOLATED"
    answer = cell.answer.split(" (")[0].split(";")[0]
    time_text = (
        "person"
        if cell.crash_to_settled_seconds is None
        else f"{cell.crash_to_settled_seconds:.1f}s"
    )
    crashed = "" if cell.exit_codes[0] == -9 else "no crash, "
    return f"{crashed}{answer}: {'+'.join(refunds) or '0'} {verdict}, {time_text}"


def findings(scenario: Scenario) -> list[str]:
    """The seed's four findings and its better / equal / worse, every number from the cells."""
    r = rows(scenario)
    gates = [row for name, row in r.items() if name in GATE_ROWS]
    baselines = [row for name, row in r.items() if name not in GATE_ROWS]
    out = []

    def ambiguous_unpaid(row: Row) -> int:
        return row.count(
            lambda c: c.crash_to_settled_seconds is None and not c.truth["agent_refunds"]
        )

    # 1. Exactly-once belongs to the target.
    parts = []
    for row in gates:
        parts.append(
            f"{row.name} {row.n - row.to_a_person}/{row.n} answered "
            f"({row.count(lambda c: c.answer_vs_truth == 'matches')} matching the service, "
            f"{row.contradicts} contradicting it), {row.to_a_person} AMBIGUOUS"
        )
    if gates:
        text = (
            "**1. Exactly-once belongs to the target.** The same gate, journal, lease and premise "
            "in every gate row; only what the target allows differs. "
            + "; ".join(parts)
            + f". Two refunds: {sum(row.doubles for row in gates)} cells in all gate rows"
        )
        if "plain_retry" in r:
            text += f", against {r['plain_retry'].doubles}/{r['plain_retry'].n} for plain_retry"
        text += "."
        tier1, tier3 = r.get("gate_tier1"), r.get("gate_tier3")
        if tier1 is not None and tier1.to_a_person:
            text += (
                f" Tier 1 without a lookup says AMBIGUOUS in the {tier1.to_a_person} cells where "
                "the world moved after DISPATCHED: the re-check forbids the resend and nothing "
                "can be asked."
            )
        if tier3 is not None:
            text += (
                f" Tier 3 never resends: {tier3.to_a_person} AMBIGUOUS, {ambiguous_unpaid(tier3)} "
                f"of them with no refund made, {tier3.unpaid} of those an approved refund that "
                "nothing stood in the way of. At most once plus a surfaced ambiguity: the cost "
                "is on the table."
            )
        out.append(text)

    # 2. Keys are necessary and insufficient.
    keys = r.get("idempotency_keys")
    if keys is not None:
        crash_only = [c for c in keys.cells if c.fault.endswith("+none")]
        text = (
            "**2. Keys are necessary and insufficient.** idempotency_keys refunded twice in "
            f"{keys.doubles}/{keys.n} cells"
            + (f" (plain_retry: {r['plain_retry'].doubles})" if "plain_retry" in r else "")
            + f" and left the world as wanted in {sum(c.held for c in crash_only)}/"
            f"{len(crash_only)} crash-only cells, as the gate does. It still refunded under a "
            f"revoked lease in {keys.after_change('lease_revoked')} cells, after support's hand "
            f"refund in {keys.after_change('refunded_by_hand')}, and $30 in {keys.thirty}: the "
            "service cannot see the lease or the case, and a re-decision made before anything "
            "reached the service is just a first request under the key."
        )
        replayed = keys.count(
            lambda c: c.fault.endswith("redecided_30") and c.answer_vs_truth == "contradicts"
        )
        if replayed:
            text += (
                f" In {replayed} re-decided cells the service had already refunded $20; it "
                "replayed that refund for the $30 request and the agent logged a $30 refund, an "
                "answer the service contradicts (Stripe would refuse the changed body under a "
                "used key with idempotency_error; the reference service replays)."
            )
        stripe_keys = r.get("idempotency_keys_stripe")
        if stripe_keys is not None:
            text += (
                f" Against localstripe, which ignores the key, the same baseline refunded twice "
                f"in {stripe_keys.doubles}/{stripe_keys.n} cells: a key is worth what the "
                "target's dedupe is worth."
            )
        out.append(text)

    # 3. Recovery is when the world moves.
    moved = [
        c
        for row in gates
        for c in row.cells
        if c.fault.endswith(("lease_revoked", "refunded_by_hand"))
        and c.truth["agent_refunds_before_change"] == 0
    ]
    if moved:
        refused = [c for c in moved if c.answer.startswith("REFUSED")]
        ambiguous = [c for c in moved if c.crash_to_settled_seconds is None]
        acted = [c for c in moved if c.truth["agent_refunds"]]
        text = (
            "**3. Recovery is when the world moves.** In the "
            f"{len(moved)} gate cells where the lease was revoked or support refunded by hand "
            "before the agent's refund reached the service, the gate refunded in "
            f"{len(acted)}: {len(refused)} REFUSED (the lease or the premise re-checked at "
            f"recovery, or at the resubmit), {len(ambiguous)} AMBIGUOUS (tier 1 and 3: a "
            "dispatch that may have acted, a re-check that forbids the resend, nothing to ask)."
        )
        same = [
            c
            for row in baselines
            for c in row.cells
            if c.fault.endswith(("lease_revoked", "refunded_by_hand"))
            and c.truth["agent_refunds_before_change"] == 0
        ]
        if same:
            text += (
                f" The baselines refunded in {sum(1 for c in same if c.truth['agent_refunds'])}"
                f"/{len(same)} of the same cells."
            )
        durable = r.get("durable_execution")
        if durable is not None:
            text += (
                " durable_execution replays its checkpointed decision, so the $30 re-decision "
                f"reached the service only in the {durable.thirty} cell(s) where the crash came "
                "before the checkpoint; but replaying the decision is not re-checking it: it "
                f"refunded after the revocation in {durable.after_change('lease_revoked')} cells "
                f"and after the hand refund in {durable.after_change('refunded_by_hand')}, and it "
                "re-ran the tool after every crash between the request and the result "
                f"checkpoint ({durable.doubles} cells with two refunds)."
            )
        out.append(text)

    # 4. What the notary adds.
    notary, tier3 = r.get("gate_tier3_notary"), r.get("gate_tier3")
    if notary is not None:
        evidence = notary.count(lambda c: c.answer.startswith("COMMITTED_ON_EVIDENCE"))
        silent = notary.count(lambda c: c.answer.startswith("AMBIGUOUS"))
        resent = notary.count(lambda c: c.answer.startswith("COMMITTED_BY_RETRY"))
        window = int(EVIDENCE_WINDOW.total_seconds())
        text = (
            "**4. What the notary adds.** The same tier-3 service, its refund webhooks reaching "
            f"the notary: {notary.to_a_person}/{notary.n} cells left to a person"
            + (f" (gate_tier3: {tier3.to_a_person}/{tier3.n})" if tier3 is not None else "")
            + f"; {evidence} settled COMMITTED_ON_EVIDENCE by the webhook, with no resend. "
            "Webhook evidence is positive-only: while the evidence window is open the gate "
            f"waits for it ({window} s here), and an effect nothing was seen of by then is "
            f"AMBIGUOUS ({silent} cell(s)), never resent and never refused, because lost or late "
            f"webhooks look the same as a refund never sent (resent: {resent} cell(s)). "
            "All receipts verify "
            f"against the tenant's log ({notary.proves}/{notary.n} prove their outcome)."
        )
        if notary.median() is not None:
            text += f" Crash to settled: {notary.seconds()}, the webhook's delay."
        out.append(text)

    # 5. Write-ahead attestation.
    attested = r.get("interlock_attested")
    if attested is not None:
        out.append(attested_finding(attested, r))

    # Better, equal, worse.
    if gates and baselines:
        violated = ", ".join(f"{row.name} {row.violations}/{row.n}" for row in baselines)
        text = (
            f"**World: {'better' if all(row.violations == 0 for row in gates) else 'mixed'}.** "
            f"Cells not as wanted: {sum(row.violations for row in gates)} in "
            f"{sum(row.n for row in gates)} gate cells; {violated} for the baselines."
        )
        out.append(text)
        out.append(
            "**Answers and record: better.** Answers the service contradicts: "
            + ", ".join(f"{row.name} {row.contradicts}" for row in r.values())
            + ". Records that prove the outcome: "
            + ", ".join(f"{row.name} {row.proves}/{row.n}" for row in r.values())
            + ". The baselines' logs name no lease or premise check, so they prove nothing even "
            "where they are right; a gate's AMBIGUOUS receipt is honest and proves nothing "
            "either."
        )
    plain, tier1 = r.get("plain_retry"), r.get("gate_tier1")
    if plain is not None and tier1 is not None and tier1.median() is not None:
        median1 = tier1.median() or 0.0
        median0 = plain.median() or 0.0
        verdict = "equal" if median1 <= median0 * 1.5 else "worse"
        waits = [
            f"{name} {r[name].seconds()}"
            for name in (
                "gate_tier2",
                "gate_tier2_stripe",
                "gate_tier3_notary",
                "interlock_attested",
            )
            if name in r and r[name].median() is not None
        ]
        out.append(
            f"**Time: {verdict} where the gate can resend, worse where it must wait.** Crash to "
            f"settled, median: gate_tier1 {tier1.seconds()} against plain_retry "
            f"{plain.seconds()}; both include starting a Python process, and tier 1 resends at "
            "once under its key, with no claim TTL to wait out (the seed waited 35 s). "
            + (
                "A lookup's 'not found' waits until the request can no longer be in flight, "
                "and the notary waits for the webhook: " + ", ".join(waits) + ". "
                if waits
                else ""
            )
            + "An AMBIGUOUS cell never settles without a person."
        )
    if gates:
        person = "; ".join(
            f"{row.name}: {row.to_a_person} cells to a person, {row.unpaid} approved refund(s) "
            "unpaid"
            for row in gates
        )
        scoped = [
            c
            for row in gates
            for c in row.cells
            if c.fault.endswith("redecided_30") and "lease_scope" in c.answer
        ]
        refused_30 = len(scoped)
        where = {c.fault.split("+")[0] for c in scoped}
        out.append(
            f"**Availability: worse.** {person}. Every baseline ended every cell on its own and "
            "paid the refund wherever nothing stood in its way (and often where something did). "
            + (
                f"In {refused_30} re-decided cells (crash point: {', '.join(sorted(where))}) "
                "the $20 decision was never journaled before the crash and the gate refused the "
                "$30 one against the lease's limit: no refund, a new approval needed."
                if refused_30
                else ""
            )
        )
    if tier1 is not None and tier1.median() is not None:
        median = tier1.median() or 0.0
        out.append(
            f"**Tier-1 goal.** Crash to settled median {median:.2f} s over "
            f"{len(tier1.settled())} settled cells (max {max(tier1.settled()):.2f} s): the goal "
            f"of under 1 s is {'met' if median < 1 else 'NOT met'}. Violations in gate rows: "
            + ", ".join(f"{row.name} {row.violations}" for row in gates)
            + "."
        )
    return out


def attested_finding(row: Row, r: dict[str, Row]) -> str:
    """What write-ahead attestation did, from the interlock_attested cells."""

    def stages(cell: Cell) -> list[str]:
        return [a["outcome"] for a in cell.detail.get("attested", [])]

    def dispatched_at(cell: Cell) -> list[float]:
        return [e["at"] for e in cell.detail.get("entries", []) if e["kind"] == "DISPATCHED"]

    def died_unanswered(cell: Cell) -> bool:
        """The first worker died after the service refunded, before it recorded anything."""
        late = ("after_target_acted", "after_response")
        return cell.exit_codes[0] == -9 and cell.detail["crash_point"] in late

    once = [
        c
        for c in row.cells
        if len(c.truth["agent_refunds"]) == 1 and c.answer_vs_truth == "matches"
    ]
    refused = row.count(
        lambda c: c.answer.startswith("REFUSED") and not c.truth["agent_refunds"] and c.held
    )
    ambiguous = [c for c in row.cells if c.crash_to_settled_seconds is None]
    intent_only = sum(1 for c in ambiguous if stages(c) == ["intent"])
    other = row.n - len(once) - refused
    text = (
        "**5. Write-ahead attestation.** The same tier-3 service, attesting each refund to the "
        f"notary before making it: {len(once)}/{row.n} cells refunded exactly once with an answer "
        f"that matches the service, {refused}/{row.n} refused with nothing sent"
        + (f", {other} otherwise" if other else "")
        + f"; {row.doubles} with two refunds, {row.contradicts} contradicting the service, "
        f"{len(ambiguous)} AMBIGUOUS"
    )
    if ambiguous:
        text += (
            f" ({intent_only} of them an acknowledged intent with no performed attestation "
            "after it)"
        )
    resent = [c for c in row.cells if len(dispatched_at(c)) > 1]
    if resent:
        gap = min(b - a for c in resent for a, b in itertools.pairwise(dispatched_at(c)))
        text += (
            f". The gate resent in {len(resent)} cells, "
            f"{sum(len(c.truth['agent_refunds']) == 1 for c in resent)} of them refunded once, "
            f"each resend {gap:.1f} s or more after the dispatch before it (max in-flight "
            f"{ATTESTED_MAX_INFLIGHT.total_seconds():.0f} s), when no attestation meant not sent"
        )
    unanswered = [c for c in once if died_unanswered(c)]
    answered = [c for c in once if not died_unanswered(c)]
    evidence = sum(c.answer.startswith("COMMITTED_ON_EVIDENCE") for c in unanswered)
    resent_there = sum(len(dispatched_at(c)) > 1 for c in unanswered)
    text += (
        f". Where the agent died after the refund, before recording it ({len(unanswered)} "
        f"cells), {evidence} were settled COMMITTED_ON_EVIDENCE on the service's performed "
        f"attestation, {resent_there} resent"
    )
    if answered:
        own = sum(not c.answer.startswith("COMMITTED_ON_EVIDENCE") for c in answered)
        text += (
            f"; where a live gate heard the service's answer ({len(answered)} cells), the "
            f"gate's own COMMITTED stands in {own} and the notary's COMMITTED_ON_EVIDENCE in "
            f"{len(answered) - own}: the service attests right after answering, the two "
            "verdicts race, and the first recorded stands (the same refund either way)"
        )
    tier3, notary = r.get("gate_tier3"), r.get("gate_tier3_notary")
    compared = [
        f"{other_row.name} {other_row.to_a_person}/{other_row.n}"
        for other_row in (tier3, notary)
        if other_row is not None
    ]
    text += "." + (f" Left to a person elsewhere: {', '.join(compared)}." if compared else "")
    text += (
        " No silence is guessed at: a dispatch the service never attested is known not to have "
        "reached it, because the notary acknowledges none after max in-flight and the service "
        f"acts on nothing else. Records that prove the outcome: {row.proves}/{row.n}."
    )
    return text


def notes(scenario: Scenario, seconds: float, load_before: float, quick: bool) -> list[str]:
    cells = len(scenario.cells)
    return [
        f"This run: {cells} cells{' (the --quick subset)' if quick else ''} in {seconds:.0f} s, "
        f"{PARALLEL_CELLS} at a time on {os.cpu_count()} cores (load average {load_before:.2f} "
        "when it began). Times include starting the restarted worker's Python process under that "
        "load.",
        "Ground truth: the reference service writes one fsync'd JSON line each time it really "
        "refunds, before it answers; localstripe's refund list for the Stripe rows. An agent "
        "refund is any refund not made by support. Only the services write their stores; the "
        "systems under test reach them through their APIs (and the premise reads the reference "
        "store, read only).",
        "Answer: what the system itself reports. A gate's is its receipt's final state and "
        "happened (true, false, or unknown: 'cannot know (said so)'); a baseline's is its app "
        "log, the refunds it names with their amounts, compared with the service's refunds.",
        "Record proves it (the seed's definition): the system's own record, read alone, names "
        "the refund (or the refusal), the case, and the checks that ran before it, and agrees "
        "with the service. For the gates: the receipt verifies against the whole journal (or the "
        "tenant's whole notary log) and its happened equals the truth. The baselines' logs name "
        "no authority or premise check, so they prove nothing even when they are right.",
        "Crash to settled: from the moment the harness saw the first worker die to the "
        "timestamp of the verdict that stands in the journal (a baseline: its last log line). "
        "'never settled' means the verdict is AMBIGUOUS: a person decides. A worker that ran "
        "to the end (no such crash point) counts 0.",
        "What is emulated. gate_tier3_notary: the reference service sends no webhooks, so "
        "experiments/webhook_relay.py tails its store and posts, "
        f"{WEBHOOK_DELAY_SECONDS:.0f} s after each refund, a Stripe-signed refund.created "
        "event (Stripe's own library signs it with the endpoint's secret) carrying the "
        "request's effect id in metadata.interlock_effect_id, to the notary's Stripe endpoint. "
        "The notary's signature check, ingestion and settlement are the production code. "
        "Support's hand refund is relayed too and stays unmatched.",
        "Not emulated: interlock_attested's attestations are the reference service's own "
        "(testkit/peers/reference_service.py --attest) against the notary's production "
        "attestation endpoint. Support's dashboard is a second reference service process on "
        "the same store that attests nothing.",
        "What is emulated. The premise 'no refund has been made for this case yet' reads the "
        "reference service's store for the payment, standing in for a refund list endpoint "
        "the service does not have; the Stripe rows read the payment's refunds through the SDK. "
        "The model is not called: its decision is the amount given to the worker.",
        "The reference service replays the first result for a known Idempotency-Key whatever "
        "the body; Stripe answers a changed body under a used key with an idempotency_error. "
        "localstripe ignores Idempotency-Key altogether, which is why the Stripe gate row is "
        "declared tier 2 and the Stripe keys baseline refunds twice.",
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="four faults per system")
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args()
    scenario = run(quick=args.quick, results_dir=args.results_dir)
    print((args.results_dir / f"{scenario.name}.md").read_text())


if __name__ == "__main__":
    main()
