"""How a refund cell runs: its own payment service process (or its own payment at one
localstripe), its own journal or notary tenant, its own case; a worker SIGKILLed at the crash
point, the world changed during the outage, a second worker started at once. What it returns is
what the judge reads: the processes' output and the payment service's own record."""

from __future__ import annotations

import json
import secrets
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from experiments.workers import refund_worker as worker
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from ledger.core.entries import EntryKind
from testkit.peers.reference_service import read_acts, running_server

if TYPE_CHECKING:
    from experiments.kit.live_notary import LiveNotary, NotaryTenant
    from experiments.scenarios.refund import System

WORKER = "experiments.workers.refund_worker"
PAYMENT_CENTS = 10_000
APPROVED_CENTS = 2_000
REDECIDED_CENTS = 3_000
EVIDENCE_WINDOW = timedelta(seconds=5)
WEBHOOK_DELAY_SECONDS = 1.0  # how long after a refund its webhook reaches the notary
# The attesting service's request includes its own round trip to the notary: a longer in-flight
# time than the plain service's, so a busy machine does not turn the first request in doubt.
ATTESTED_MAX_INFLIGHT = timedelta(seconds=2)


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


@dataclass
class Observed:
    """One cell as it ran: what the judge scores."""

    system_name: str
    fault: str
    system: System
    case_id: str
    directory: Path
    setup: Setup
    processes: list[Any]  # the two workers' CompletedProcess
    crashed_at: float
    changed_at: float
    before: int  # agent refunds the service had made when the first worker died
    amount: int  # what the restarted model decided
    truth: Truth
    webhooks: list[dict[str, Any]] | None = None
    attested: list[dict[str, Any]] | None = None


@dataclass(frozen=True)
class CellTenant:
    tenant: NotaryTenant
    lease_id: str
    service_token: str  # the attesting service's key; "" for a service that attests nothing


class RefundWorld:
    """The run's notary and localstripe, and one cell after another set up against them."""

    def __init__(
        self, work: Path, notary: LiveNotary | None, stripe_url: str | None, token: str
    ) -> None:
        self.work = work
        self.notary = notary
        self.stripe_url = stripe_url
        self.token = token
        self._notary_lock = threading.Lock()

    def observe(self, system_name: str, fault: str) -> Observed:
        from experiments.scenarios.refund import SYSTEMS

        system = SYSTEMS[system_name]
        crash_name, change = fault.split("+")
        slug = f"{system_name}-{crash_name}-{change}".replace("_", "-")
        case_id = f"case-{self.token}-{slug}"
        directory = self.work / slug
        directory.mkdir(parents=True)
        with ExitStack() as stack:
            setup = self._setup(stack, system, case_id, directory)
            relay = None
            if system.notary and not system.attested:
                relay = stack.enter_context(self._relay(setup, directory))
            first = run_worker(
                [*setup.args, "--amount", str(APPROVED_CENTS)], CrashPoint(crash_name)
            )
            crashed_at = time.time()
            before = len(setup.truth().agent)
            {"lease_revoked": setup.revoke, "refunded_by_hand": setup.refund_by_hand}.get(
                change, _nothing
            )()
            changed_at = time.time()
            amount = REDECIDED_CENTS if change == "redecided_30" else APPROVED_CENTS
            restart = ["--restarted"] if system.gated else []
            second = run_worker([*setup.args, "--amount", str(amount), *restart], None)
            if relay is not None:
                relay.drain(timeout=WEBHOOK_DELAY_SECONDS + 15)
            if system.attested:
                wait_for_attestations(setup, timeout=15)
            for n, process in enumerate((first, second)):
                if process.returncode not in ((-9, 0) if n == 0 else (0,)):
                    raise RuntimeError(
                        f"worker {n + 1} exited {process.returncode}: {process.stderr[-2000:]}"
                    )
            observed = Observed(
                system_name, fault, system, case_id, directory, setup, [first, second],
                crashed_at, changed_at, before, amount, setup.truth(),
            )  # fmt: skip
            if relay is not None:
                observed.webhooks = relay_deliveries(relay)
            if system.attested:
                observed.attested = attestations(setup)
            return observed

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
        args = [system.worker, "--case", case_id, "--payment", payment, "--service", server.url]
        ids = {"payment": payment}
        by_hand = _hand_refund(dashboard.url, case_id, payment)
        truth = _store_truth(store, payment)
        if not system.gated:
            args += ["--log", str(directory / "app.log")]
            if system.worker == "durable_execution":
                args += ["--checkpoint", str(directory / "checkpoint.json")]
            key = worker.baseline_key(case_id) if system.worker == "idempotency_keys" else "none"
            ids |= {
                "idempotency_key": key,
                "approval": "support's, held by no system: never checked",
            }
            return Setup(args, worker.baseline_key(case_id), "", _nothing, by_hand, truth, ids=ids)
        args += ["--tier", str(system.tier), "--store", str(store)]  # the premise reads it
        if system.notary:
            at = attesting or self._notary_tenant(system, case_id)
            return self._notary_setup(system, at, args, case_id, ids, by_hand, truth)
        effect_id = worker.gate_effect_id(case_id)
        return _local_setup(
            directory / "journal", case_id, worker.LEASE_ID, {"amount_cents": APPROVED_CENTS},
            effect_id, args, by_hand, truth, ids,
        )  # fmt: skip

    def _notary_tenant(self, system: System, case_id: str) -> CellTenant:
        """A tenant of the cell's own at the live notary: the target as `system` declares it,
        the lease, and for an attesting service its key."""
        from experiments.kit.live_notary import TargetSpec

        assert self.notary is not None
        if system.attested:
            spec = TargetSpec(
                worker.TARGET,
                tier=3,
                max_inflight=ATTESTED_MAX_INFLIGHT,
                attests_before_acting=True,
                money=worker.REFUND_MONEY,
            )
        else:
            spec = TargetSpec(
                worker.TARGET,
                tier=3,
                max_inflight=timedelta(seconds=worker.TIMEOUT_SECONDS),
                evidence_window=EVIDENCE_WINDOW,
                money=worker.REFUND_MONEY,
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
        from testkit.agents import refund_agent
        from testkit.peers.localstripe import paid_intent, stripe_client

        assert self.stripe_url is not None
        client = stripe_client(self.stripe_url)
        payment = paid_intent(client, PAYMENT_CENTS)
        args = [system.worker, "--case", case_id, "--payment", payment, "--stripe", self.stripe_url]
        ids = {"payment_intent": payment}

        def refund_by_hand() -> None:
            params: Any = {
                "payment_intent": payment,
                "amount": APPROVED_CENTS,
                "metadata": {"by": worker.SUPPORT},
            }
            client.v1.refunds.create(params=params)

        truth = _stripe_truth(client, payment)
        if not system.gated:
            args += ["--log", str(directory / "app.log")]
            key = worker.baseline_key(case_id)
            ids |= {"idempotency_key": key, "approval": "support's, never checked"}
            return Setup(args, key, "", _nothing, refund_by_hand, truth, ids=ids)
        args += ["--tier", str(system.tier)]
        return _local_setup(
            directory / "journal", case_id, refund_agent.LEASE_ID, {"amount": APPROVED_CENTS},
            refund_agent.effect_id(case_id), args, refund_by_hand, truth, ids,
        )  # fmt: skip

    @contextmanager
    def _relay(self, setup: Setup, directory: Path) -> Iterator[Any]:
        from experiments.workers.webhook_relay import running_relay
        from testkit.webhook_signing import new_secret

        assert setup.tenant is not None
        secret = new_secret("stripe")
        with self._notary_lock:
            url = setup.tenant.webhook_endpoint(worker.TARGET, "stripe", secret)
        store = directory / "service.store"
        with running_relay(store, url, secret, delay_seconds=WEBHOOK_DELAY_SECONDS) as relay:
            yield relay


def _local_setup(
    journal: Path,
    case_id: str,
    lease_id: str,
    limits: dict[str, int],
    effect_id: str,
    args: list[str],
    refund_by_hand: Callable[[], None],
    truth: Callable[[], Truth],
    ids: dict[str, str],
) -> Setup:
    """A gate on a local journal holding the case's lease; revoking it writes to the journal."""
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

    args += ["--journal", str(journal), "--lease", lease_id]
    ids = {**ids, "effect_id": effect_id, "lease": lease_id}
    return Setup(args, effect_id, lease_id, revoke, refund_by_hand, truth, journal, ids=ids)


def _hand_refund(url: str, case_id: str, payment: str) -> Callable[[], None]:
    """Support's refund by hand, at the reference service (or its dashboard)."""

    def refund_by_hand() -> None:
        body = {
            "effect_id": f"by-hand-{case_id}",
            "payload": {"payment": payment, "amount_cents": APPROVED_CENTS, "by": worker.SUPPORT},
        }
        request = urllib.request.Request(
            f"{url}/effects",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=5) as answer:
            answer.read()

    return refund_by_hand


def _store_truth(store: Path, payment: str) -> Callable[[], Truth]:
    """The reference service's own fsync'd record of the payment's refunds."""

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

    return truth


def _stripe_truth(client: Any, payment: str) -> Callable[[], Truth]:
    """localstripe's refund list for the payment, in the order the refunds were made."""
    from gate_client.adapters.stripe_refunds import METADATA_KEY
    from testkit.peers.localstripe import refunds_of

    def truth() -> Truth:
        agent: list[dict[str, Any]] = []
        by_hand: list[dict[str, Any]] = []
        for refund in reversed(refunds_of(client, payment)):  # Stripe lists the newest first
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

    return truth


def relay_deliveries(relay: Any) -> list[dict[str, Any]]:
    if relay.errors:
        raise RuntimeError(f"webhook relay: {relay.errors}")
    return [
        {
            "event_id": d.event_id,
            "result_ref": d.result_ref,
            "status": d.status,
            "after_refund_s": round(d.posted_at - d.acted_at, 3),
        }
        for d in relay.deliveries
    ]


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


@contextmanager
def refund_world(work: Path, database_url: str | None) -> Iterator[RefundWorld]:
    """A live notary (a fresh database, or the test's) and a localstripe, for the whole run."""
    from experiments.kit.live_notary import live_notary
    from testkit.peers.localstripe import running_localstripe

    (work / "localstripe").mkdir()
    with (
        live_notary(work / "notary", database_url=database_url) as notary,
        running_localstripe(work / "localstripe") as stripe_url,
    ):
        yield RefundWorld(work / "cells", notary, stripe_url, secrets.token_hex(3))
