"""Measure what the notary costs per effect: Gate.submit through NotaryJournal over loopback HTTP
(gunicorn, gthread workers) on PostgreSQL, beside a direct call of the same no-op target.

1. Latency: one agent submits `--effects` effects one after another, each on its own leased
   case, through Gate + NotaryJournal to a tier-1 no-op target. The same target object called
   directly is the baseline; the overhead is submit minus direct. Floors measured with the same
   kind of client: GET /healthz (HTTP and Django, no database) and GET /v1/whoami (DRF and the
   API-key lookup). HTTP requests per effect are counted on the client's transport.
2. Where one submit's time goes: each request type timed from the client to its last body byte,
   then the same submits again in this process (the WSGI app through httpx.WSGITransport: no
   network, no gunicorn) with the SQL queries each request makes.
3. Throughput: `--agents` agent processes, each submitting `--per-agent` effects, started
   together, (a) all in one tenant (one ledger log: appends queue on its row lock) and (b) one
   tenant each. Effects/s = all effects / (last agent's end - first agent's start); ledger
   entries/s from the logs' growth; CPU seconds of the agents, the gunicorn workers and the
   PostgreSQL backends of the bench database.

Leases are granted beforehand with services.lease_grant, one per case, so granting is never
timed. The benchmark is also a correctness check: every submit must end COMMITTED, authorized
when fired, premises held; every log must grow by exactly 3 entries per effect; and a sample of
receipts is re-derived from its tenant's whole log with verify_receipt. Anything else aborts
with a non-zero exit.

It works in its own database (--database-url, default interlock_bench_notary; dropped and
recreated at start, a name without "bench" is refused) and drops it at the end unless --keep.
Tables go to stdout, progress to stderr:

    .venv/bin/python -m experiments.benches.notary [--quick] [--workers 2 --threads 8]
"""

from __future__ import annotations

import argparse
import os
import random
import re
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import psycopg

from experiments.kit.bench import bar, parse, parser, print_total, progress
from experiments.kit.database import bench_database, sql_timer
from experiments.kit.machine import environment, print_environment
from experiments.kit.pool import Child, Pool
from experiments.kit.served import (
    CpuColumns,
    LoadRun,
    add_server_arguments,
    cpu_table,
    load_figures,
    print_goals,
    serving,
    timed_run,
    verdict,
)
from experiments.kit.stats import Stats, duration, mean, percentile, span
from experiments.kit.tables import aligned_table
from gate_client.gate import Gate
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import Receipt
from gate_client.targets import Found, Sent, Tier

if TYPE_CHECKING:
    from notary.models import ApiKey, Tenant

TARGET = "noop"
ACTION = "refund"
ENTRIES_PER_EFFECT = 3  # PROPOSED, DISPATCHED, COMMITTED
REQUESTS_PER_EFFECT = 2  # propose-and-dispatch, outcome
GOAL_WHOAMI_MULTIPLE = 3.0  # p50 of one submit against the p50 of GET /v1/whoami, same run
GOAL_EFFECTS_PER_SECOND = 400.0
VERIFY_SAMPLE = 20  # receipts per phase re-derived from their whole log
TICK = 10  # an agent reports progress every TICK effects
CPU_COLUMNS = CpuColumns("tenancy", "agents", "effect", "effects/s", digits=1)
SEED = 2119


@dataclass(frozen=True)
class Sizes:
    effects: int
    per_agent: int
    agents: int
    warmup: int
    profile_effects: int


PROFILES = {
    "quick": Sizes(effects=20, per_agent=5, agents=8, warmup=3, profile_effects=5),
    "default": Sizes(effects=500, per_agent=200, agents=8, warmup=10, profile_effects=100),
}


# --- The agent's side: a no-op target, its premise, its proposals ----------------------------


class NoopTarget:
    """Tier 1 and queryable, acting on nothing: send and lookup answer at once."""

    name = TARGET
    tier = Tier.DEDUPES
    queryable = True
    key_window: timedelta | None = timedelta(hours=24)
    max_inflight = timedelta(seconds=30)
    evidence_window: timedelta | None = None
    attests_before_acting = False
    lookup_needs_key = False
    money = None

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> Sent:
        return Sent(f"noop:{effect_id}")

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> Found:
        return Found(f"noop:{effect_id}")


def _ready() -> PremiseResult:
    return PremiseResult(True, {"status": "ready"})


READY = Premise("noop_ready", _ready)


@dataclass(frozen=True)
class Case:
    case_id: str
    lease_id: str


@dataclass(frozen=True)
class Agent:
    """What one agent needs: its tenant, its agent key, and its leased cases."""

    tenant: str
    token: str
    cases: tuple[Case, ...]


def proposal(tenant: str, case: Case) -> Proposal:
    return Proposal(
        case.case_id,
        TARGET,
        ACTION,
        {"amount_cents": 1299, "currency": "EUR", "order": case.case_id},
        case.lease_id,
        premises=[READY],
        tenant=tenant,
    )


def open_gate(journal: NotaryJournal, target: NoopTarget) -> Gate:
    return Gate(journal, {TARGET: target}, premises_for=lambda proposed: [READY])


def receipt_problem(receipt: Receipt) -> str | None:
    """What is wrong with a receipt of a no-op effect, or None: it must have committed, with
    the lease live when it fired and its premise holding."""
    if (
        receipt.final_state == "COMMITTED"
        and receipt.happened is True
        and receipt.authorized_when_fired is True
        and receipt.assumptions_held is True
    ):
        return None
    return (
        f"{receipt.effect_id}: {receipt.final_state}, happened={receipt.happened}, "
        f"authorized_when_fired={receipt.authorized_when_fired}, "
        f"assumptions_held={receipt.assumptions_held}"
    )


# --- Timing requests on the client's transport ------------------------------------------------

_EFFECT_ID = re.compile(r"/eff_[A-Za-z0-9_-]+")

# What the notary does for each route (the gate may send several, or fewer, per submit).
NOTARY_DOES = {
    "GET /v1/effects/{id} 404": "no such effect yet",
    "GET /v1/effects/{id} 200": "read the effect's entries",
    "POST /v1/effects 201": "PROPOSED (+ lease check and DISPATCHED if asked)",
    "POST /v1/effects/{id}/dispatch 201": "lease check + DISPATCHED",
    "POST /v1/effects/{id}/outcome 201": "COMMITTED",
}


@dataclass(frozen=True)
class Call:
    route: str
    seconds: float
    queries: int | None = None  # SQL statements run, when the app runs in this process
    sql_seconds: float | None = None  # their execution time (commits not included)


class TimedTransport(httpx.BaseTransport):
    """Wraps a transport: times every request to its last body byte, labelled by route and
    status, and counts and times its SQL when the app runs in this process."""

    def __init__(self, inner: httpx.BaseTransport, *, in_process: bool = False) -> None:
        self.inner = inner
        self.in_process = in_process
        self.calls: list[Call] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        route = f"{request.method} {_EFFECT_ID.sub('/{id}', request.url.path)}"
        started = time.perf_counter()
        if self.in_process:
            from django.db import connection

            statements: list[float] = []
            with connection.execute_wrapper(sql_timer(lambda _, s: statements.append(s))):
                response, content = self._send(request)
            seconds = time.perf_counter() - started
            route = f"{route} {response.status_code}"
            call = Call(route, seconds, len(statements), sum(statements))
        else:
            response, content = self._send(request)
            call = Call(f"{route} {response.status_code}", time.perf_counter() - started)
        self.calls.append(call)
        headers = [
            (name, value)
            for name, value in response.headers.raw
            if name.lower() not in (b"content-encoding", b"transfer-encoding")
        ]
        return httpx.Response(
            response.status_code, headers=headers, content=content, extensions=response.extensions
        )

    def _send(self, request: httpx.Request) -> tuple[httpx.Response, bytes]:
        response = self.inner.handle_request(request)
        try:
            return response, response.read()
        finally:
            response.close()

    def close(self) -> None:
        self.inner.close()


# --- Tenants, keys and leases -----------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    latency_tenant: str
    latency_token: str
    warmup: tuple[Case, ...]
    latency: tuple[Case, ...]
    profile: tuple[Case, ...]
    shared: tuple[Agent, ...]  # (a) every agent in one tenant
    separate: tuple[Agent, ...]  # (b) a tenant per agent


class Setup:
    """Tenants with the no-op target declared, approver and agent keys, and one lease per case,
    all through notary.services (testkit.factories), as the notary's own commands make them."""

    def __init__(self, leases: int) -> None:
        self.bar = bar(total=leases, desc="granting leases", unit="lease")
        self.expires = datetime.now(UTC) + timedelta(hours=6)
        self.approvers: dict[str, ApiKey] = {}

    def tenant(self, slug: str, name: str) -> Tenant:
        from testkit import factories

        tenant, self.approvers[slug] = factories.tenant_with_approver(slug, name)
        factories.register(
            tenant,
            TARGET,
            tier=Tier.DEDUPES.value,
            queryable=True,
            max_inflight=NoopTarget.max_inflight,
            key_window=NoopTarget.key_window,
        )
        return tenant

    def agent(self, tenant: Tenant, holder: str, prefix: str, count: int) -> Agent:
        from testkit.factories import token_for

        token = token_for(tenant, "agent", holder)
        return Agent(tenant.slug, token, self.cases(tenant, holder, prefix, count))

    def cases(self, tenant: Tenant, holder: str, prefix: str, count: int) -> tuple[Case, ...]:
        """Leases for `count` cases, requested under `holder`'s agent key: only the requester
        dispatches under a lease."""
        from testkit.factories import leased

        granted = []
        for n in range(count):
            case_id = f"{prefix}-{n:05d}"
            lease = leased(
                tenant,
                case_id,
                ACTION,
                requested_by=holder,
                approver=self.approvers[tenant.slug],
                expires_at=self.expires,
            )
            granted.append(Case(case_id, lease.lease_id))
            self.bar.update()
        return tuple(granted)


def prepare(sizes: Sizes) -> Plan:
    leases = 2 * sizes.warmup + sizes.effects + sizes.profile_effects
    setup = Setup(leases + 2 * sizes.agents * sizes.per_agent)
    try:
        latency = setup.tenant("latency", "latency: one agent")
        one = setup.agent(latency, "bench-agent", "warmup", sizes.warmup)
        latency_cases = setup.cases(latency, "bench-agent", "latency", sizes.effects)
        profile = setup.cases(
            latency, "bench-agent", "profile", sizes.warmup + sizes.profile_effects
        )
        shared_tenant = setup.tenant("shared", "throughput: every agent in one tenant")
        shared = tuple(
            setup.agent(shared_tenant, f"bench-agent-{a}", f"shared-{a}", sizes.per_agent)
            for a in range(sizes.agents)
        )
        separate = tuple(
            setup.agent(
                setup.tenant(f"own-{a}", f"throughput: agent {a} alone"),
                f"bench-agent-{a}",
                "own",
                sizes.per_agent,
            )
            for a in range(sizes.agents)
        )
    finally:
        setup.bar.close()
    return Plan(latency.slug, one.token, one.cases, latency_cases, profile, shared, separate)


def log_sizes(slugs: Sequence[str]) -> dict[str, int]:
    from ledger.selectors import log_head
    from notary.models import Tenant

    return {
        tenant.slug: log_head(log=tenant.log).size
        for tenant in Tenant.objects.select_related("log").filter(slug__in=slugs)
    }


def verify_sample(receipts: Sequence[tuple[str, Receipt]], rng: random.Random) -> int:
    """Re-derive a sample of receipts from their tenant's whole log, hash chain included."""
    from gate_client.receipts import ReceiptError, verify_receipt
    from ledger.selectors import iter_entries
    from notary.models import Tenant

    sample = rng.sample(list(receipts), min(VERIFY_SAMPLE, len(receipts)))
    by_tenant: dict[str, list[Receipt]] = {}
    for slug, receipt in sample:
        by_tenant.setdefault(slug, []).append(receipt)
    for slug, chosen in by_tenant.items():
        log = Tenant.objects.select_related("log").get(slug=slug).log
        entries = list(iter_entries(log=log))
        for receipt in chosen:
            try:
                verify_receipt(receipt, entries, origin=log.origin)
            except ReceiptError as exc:
                raise SystemExit(f"receipt does not follow from the {slug} log: {exc}") from exc
    return len(sample)


def check_growth(
    before: Mapping[str, int], after: Mapping[str, int], effects: Mapping[str, int]
) -> None:
    for slug, count in effects.items():
        grown = after[slug] - before[slug]
        if grown != ENTRIES_PER_EFFECT * count:
            raise SystemExit(
                f"{slug}: {count} effects committed but its log grew by {grown} entries, "
                f"not {ENTRIES_PER_EFFECT * count}"
            )


# --- Latency: one agent, one effect after another ---------------------------------------------


@dataclass(frozen=True)
class Submitted:
    seconds: list[float]
    calls: list[list[Call]]  # the requests of each submit
    receipts: list[Receipt]


def submit_all(
    gate: Gate, transport: TimedTransport, tenant: str, cases: Sequence[Case], desc: str
) -> Submitted:
    seconds, calls, receipts = [], [], []
    for case in bar(cases, desc=desc, unit="effect"):
        first = len(transport.calls)
        started = time.perf_counter()
        receipt = gate.submit(proposal(tenant, case))
        seconds.append(time.perf_counter() - started)
        calls.append(transport.calls[first:])
        problem = receipt_problem(receipt)
        if problem is not None:
            raise SystemExit(f"{desc}: {problem}")
        receipts.append(receipt)
    return Submitted(seconds, calls, receipts)


def time_direct(target: NoopTarget, cases: Sequence[Case], tenant: str) -> list[float]:
    """The baseline: the same target object's send, called directly on the same payloads."""
    proposals = [proposal(tenant, case) for case in cases]
    seconds = []
    for effect_id, payload in ((p.effect_id, p.payload) for p in proposals):
        started = time.perf_counter()
        target.send(effect_id, payload)
        seconds.append(time.perf_counter() - started)
    return seconds


def time_commit(database_url: str, count: int) -> list[float]:
    """A floor: one durable commit, an entry-sized INSERT in autocommit, straight to PostgreSQL
    (every write the notary answers waits for at least one)."""
    body = bytes(300)
    seconds = []
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_commit_floor (id bigserial PRIMARY KEY, body bytea)")
        insert = "INSERT INTO bench_commit_floor (body) VALUES (%s)"
        conn.execute(insert, (body,))
        for _ in bar(range(count), desc="INSERT + COMMIT", unit="commit"):
            started = time.perf_counter()
            conn.execute(insert, (body,))
            seconds.append(time.perf_counter() - started)
        conn.execute("DROP TABLE bench_commit_floor")
    return seconds


def time_get(url: str, path: str, token: str, count: int) -> list[float]:
    """A floor: one GET after another on a kept-alive connection, as the journal's client."""
    seconds = []
    headers = {"Authorization": f"Bearer {token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=10) as client:
        client.get(path).raise_for_status()  # connect before timing
        for _ in bar(range(count), desc=f"GET {path}", unit="request"):
            started = time.perf_counter()
            client.get(path).raise_for_status()
            seconds.append(time.perf_counter() - started)
    return seconds


@dataclass(frozen=True)
class Latency:
    direct: Stats
    submit: Stats
    in_process: Stats
    healthz: Stats
    whoami: Stats
    commit: Stats
    requests_per_effect: list[int]
    http: Submitted
    local: Submitted


def submit_in_process(plan: Plan, target: NoopTarget) -> Submitted:
    """The profile's submits through the WSGI app in this process, SQL counted; warm-ups first."""
    from django.core.wsgi import get_wsgi_application

    transport = TimedTransport(httpx.WSGITransport(app=get_wsgi_application()), in_process=True)
    with NotaryJournal("http://127.0.0.1", plan.latency_token, transport=transport) as journal:
        gate = open_gate(journal, target)
        warm, tenant = len(plan.warmup), plan.latency_tenant
        submit_all(gate, transport, tenant, plan.profile[:warm], "warm-up (in process)")
        return submit_all(gate, transport, tenant, plan.profile[warm:], "submit (in process)")


def bench_latency(url: str, plan: Plan, target: NoopTarget, database_url: str) -> Latency:
    transport = TimedTransport(httpx.HTTPTransport())
    with NotaryJournal(url, plan.latency_token, transport=transport) as journal:
        gate = open_gate(journal, target)
        submit_all(gate, transport, plan.latency_tenant, plan.warmup, "warm-up (HTTP)")
        http = submit_all(gate, transport, plan.latency_tenant, plan.latency, "submit (HTTP)")
    direct = time_direct(target, plan.latency, plan.latency_tenant)
    count = len(plan.latency)
    healthz = time_get(url, "/healthz", plan.latency_token, count)
    whoami = time_get(url, "/v1/whoami", plan.latency_token, count)
    commit = time_commit(database_url, count)
    local = submit_in_process(plan, target)
    return Latency(
        direct=Stats.of(direct),
        submit=Stats.of(http.seconds),
        in_process=Stats.of(local.seconds),
        healthz=Stats.of(healthz),
        whoami=Stats.of(whoami),
        commit=Stats.of(commit),
        requests_per_effect=[len(calls) for calls in http.calls],
        http=http,
        local=local,
    )


def latency_table(lat: Latency) -> str:
    def row(path: str, stats: Stats) -> list[str]:
        figures = (stats.p50, stats.p99, stats.mean)
        return [path, f"{stats.samples:,}", *(duration(s) for s in figures)]

    differences = (
        lat.submit.p50 - lat.direct.p50,
        lat.submit.p99 - lat.direct.p99,
        lat.submit.mean - lat.direct.mean,
    )
    return aligned_table(
        ["path", "samples", "p50", "p99", "mean"],
        [
            row("direct no-op call: target.send (baseline)", lat.direct),
            row("Gate.submit via NotaryJournal, HTTP to gunicorn", lat.submit),
            ["overhead: submit - direct", "", *(duration(s) for s in differences)],
            row("Gate.submit in process (WSGITransport, no network)", lat.in_process),
            row("floor: GET /healthz (HTTP + Django, no DB)", lat.healthz),
            row("floor: GET /v1/whoami (+ DRF, API-key lookup)", lat.whoami),
            row("floor: INSERT + COMMIT, psycopg (one durable commit)", lat.commit),
        ],
    )


def by_route(submitted: Submitted) -> dict[str, list[Call]]:
    routes: dict[str, list[Call]] = {}
    for calls in submitted.calls:
        for call in calls:
            routes.setdefault(call.route, []).append(call)
    return routes


def profile_table(lat: Latency) -> str:
    """Per request type: how often per effect, its time over HTTP and in process, its SQL."""
    local_by = by_route(lat.local)
    effects = len(lat.http.calls)
    rows = []
    accounted = 0.0
    for route, calls in by_route(lat.http).items():
        seconds = [c.seconds for c in calls]
        per_effect = len(seconds) / effects
        share = per_effect * mean(seconds)
        accounted += share
        local = local_by.get(route, [])
        rows.append(
            [
                route,
                NOTARY_DOES.get(route, ""),
                f"{per_effect:g}",
                duration(percentile(seconds, 50)),
                duration(mean(seconds)),
                f"{share / lat.submit.mean:.0%}",
                duration(percentile([c.seconds for c in local], 50)) if local else "",
                span([c.queries or 0 for c in local]),
                duration(mean([c.sql_seconds or 0.0 for c in local])) if local else "",
            ]
        )
    outside = lat.submit.mean - accounted
    outside_share = f"{outside / lat.submit.mean:.0%}"
    client_side = "gate, JSON, entry hash checks, target.send"
    rows.append(["client side, outside the requests", client_side, "", "", duration(outside)])
    rows[-1] += [outside_share, "", "", ""]
    local_calls = [call for calls in lat.local.calls for call in calls]
    local_effects = max(len(lat.local.calls), 1)
    rows.append(
        [
            "one submit",
            "",
            f"{mean(lat.requests_per_effect):g}",
            duration(lat.submit.p50),
            duration(lat.submit.mean),
            "100%",
            duration(lat.in_process.p50),
            f"{sum(c.queries or 0 for c in local_calls) / local_effects:g}",
            duration(sum(c.sql_seconds or 0.0 for c in local_calls) / local_effects),
        ]
    )
    headers = ["request", "the notary", "per effect", "HTTP p50", "HTTP mean", "share of submit"]
    headers += ["in process p50", "SQL statements", "SQL time (mean)"]
    return aligned_table(headers, rows)


# --- Throughput: agent processes started together ---------------------------------------------


@dataclass(frozen=True)
class AgentResult:
    tenant: str
    start: float
    end: float
    cpu: float
    receipts: tuple[Receipt, ...]


def agent_run(child: Child, job: tuple[str, Agent]) -> AgentResult:
    """In an agent process: its own gate and notary journal; submits its cases once told to."""
    url, agent = job
    with NotaryJournal(url, agent.token) as journal:
        gate = open_gate(journal, NoopTarget())
        proposals = [proposal(agent.tenant, case) for case in agent.cases]
        child.ready()
        cpu = time.process_time()
        start = time.time()
        receipts = []
        for n, proposed in enumerate(proposals, 1):
            receipts.append(gate.submit(proposed))
            if n % TICK == 0:
                child.tick(TICK)
        end = time.time()
        child.tick(len(proposals) % TICK)
        cpu = time.process_time() - cpu
    return AgentResult(agent.tenant, start, end, cpu, tuple(receipts))


def floor_run(child: Child, job: tuple[str, Agent]) -> AgentResult:
    """In a floor process: two GET /v1/whoami per case, on one kept-alive connection as the
    journal's, in place of the effect's two requests: what any two-request submit costs at
    least here (Django, DRF, the API-key lookup and the client), with no notary work at all."""
    url, agent = job
    headers = {"Authorization": f"Bearer {agent.token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as client:
        client.get("/v1/whoami").raise_for_status()  # connect before the start
        child.ready()
        cpu = time.process_time()
        start = time.time()
        for n in range(1, len(agent.cases) + 1):
            for _ in range(REQUESTS_PER_EFFECT):
                client.get("/v1/whoami").raise_for_status()
            if n % TICK == 0:
                child.tick(TICK)
        end = time.time()
        child.tick(len(agent.cases) % TICK)
        cpu = time.process_time() - cpu
    return AgentResult(agent.tenant, start, end, cpu, ())


@dataclass(frozen=True)
class Throughput(LoadRun):
    """A throughput run: its count is of effects, its load the agents' processes."""

    agents: int
    entries: int


def run_agents(
    url: str, agents: Sequence[Agent], label: str, database_url: str, rng: random.Random
) -> tuple[Throughput, int]:
    """Start every agent, wait until all are ready, then let them go at once; check each
    receipt, the logs' growth and a verified sample. Returns the figures and the sample size."""
    progress(f"{label}: starting {len(agents)} agent processes")
    slugs = sorted({agent.tenant for agent in agents})
    before = log_sizes(slugs)
    with Pool(len(agents), agent_run, who="agent") as pool:
        total = sum(len(agent.cases) for agent in agents)
        jobs = [(url, agent) for agent in agents]
        run = timed_run(
            pool, jobs, label=label, unit="effect", total=total, database_url=database_url
        )
    finished = run.results
    receipts = [(r.tenant, receipt) for r in finished for receipt in r.receipts]
    problems = [p for _, receipt in receipts if (p := receipt_problem(receipt)) is not None]
    if problems:
        raise SystemExit(
            f"{label}: {len(problems)} submits did not commit:\n" + "\n".join(problems[:10])
        )
    per_tenant: dict[str, int] = {}
    for slug, _ in receipts:
        per_tenant[slug] = per_tenant.get(slug, 0) + 1
    after = log_sizes(slugs)
    check_growth(before, after, per_tenant)
    figures = Throughput(
        label=label,
        count=len(receipts),
        agents=len(agents),
        entries=sum(after[slug] - before[slug] for slug in slugs),
        **load_figures(run),
    )
    return figures, verify_sample(receipts, rng)


def run_floor(url: str, agents: Sequence[Agent], database_url: str) -> Throughput:
    """The throughput ceiling of any two-request submit on this machine: as many processes as
    agents, each making two whoami requests per case it would have submitted."""
    label = f"floor: {REQUESTS_PER_EFFECT} x GET /v1/whoami per effect"
    progress(f"{label}: starting {len(agents)} processes")
    with Pool(len(agents), floor_run, who="floor") as pool:
        total = sum(len(agent.cases) for agent in agents)
        run = timed_run(
            pool,
            [(url, agent) for agent in agents],
            label=label,
            unit="effect",
            total=total,
            database_url=database_url,
        )
    return Throughput(label=label, count=total, agents=len(agents), entries=0, **load_figures(run))


def throughput_table(runs: Sequence[Throughput], lat: Latency, requests: float) -> str:
    one_agent = 1 / lat.submit.mean  # effects/s of one agent submitting one after another
    rows = [
        [
            run.label,
            str(run.agents),
            f"{run.count:,}",
            f"{run.seconds:.2f}",
            f"{run.per_second:,.0f}",
            f"{run.entries / run.seconds:,.0f}",
            f"{run.per_second * requests:,.0f}",
            f"{run.per_second / one_agent:.2f}",
        ]
        for run in runs
    ]
    headers = ["tenancy", "agents", "effects", "seconds", "effects/s", "ledger entries/s"]
    return aligned_table([*headers, "HTTP requests/s", "x one agent"], rows)


def goal_rows(lat: Latency, runs: Sequence[Throughput]) -> list[list[str]]:
    multiple = lat.submit.p50 / lat.whoami.p50
    rows = [
        [
            f"p50 of Gate.submit via the notary <= {GOAL_WHOAMI_MULTIPLE:g}x p50 of GET /v1/whoami",
            f"{multiple:.1f}x ({lat.submit.p50 * 1e3:.2f} against {lat.whoami.p50 * 1e3:.2f} ms)",
            verdict(multiple <= GOAL_WHOAMI_MULTIPLE),
        ]
    ]
    for run in runs:
        rows.append(
            [
                f">= {GOAL_EFFECTS_PER_SECOND:g} effects/s with {run.agents} agents, {run.label}",
                f"{run.per_second:,.0f} effects/s",
                verdict(run.per_second >= GOAL_EFFECTS_PER_SECOND),
            ]
        )
    return rows


# --- Entry point ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Sizes]:
    options = parser(__doc__)
    options.add_argument("--quick", action="store_true", help="a smoke run: a few effects")
    options.add_argument("--effects", type=int, help="sequential submits timed (default 500)")
    options.add_argument("--per-agent", type=int, help="effects per agent process (default 200)")
    options.add_argument("--agents", type=int, help="concurrent agent processes (default 8)")
    options.add_argument(
        "--profile-effects", type=int, help="submits timed in process (default 100)"
    )
    add_server_arguments(options, "interlock_bench_notary")
    return parse(options, argv, PROFILES)


@dataclass(frozen=True)
class Results:
    lat: Latency
    runs: list[Throughput]
    floor: Throughput
    verified: int
    environment: list[list[str]]


def measure(args: argparse.Namespace, sizes: Sizes, rng: random.Random) -> Results:
    plan = prepare(sizes)
    target = NoopTarget()
    with (
        tempfile.TemporaryDirectory(prefix="bench_notary_") as tmp,
        serving(args.database_url, Path(tmp), workers=args.workers, threads=args.threads) as url,
    ):
        tenant = plan.latency_tenant
        before = log_sizes([tenant])
        lat = bench_latency(url, plan, target, args.database_url)
        submits = len(plan.warmup) + len(plan.latency) + len(plan.profile)
        check_growth(before, log_sizes([tenant]), {tenant: submits})
        receipts = [(tenant, r) for r in lat.http.receipts + lat.local.receipts]
        verified = verify_sample(receipts, rng)
        runs = []
        for label, agents in (
            ("(a) one tenant", plan.shared),
            (f"(b) {sizes.agents} tenants", plan.separate),
        ):
            run, sample = run_agents(url, agents, label, args.database_url, rng)
            runs.append(run)
            verified += sample
        floor = run_floor(url, plan.shared, args.database_url)
    return Results(lat, runs, floor, verified, environment(args.database_url))


def main(argv: Sequence[str] | None = None) -> None:
    args, sizes = parse_args(argv)
    # The in-process profile keeps the cache and Celery in this process, as the served notary
    # does (running_notary drops REDIS_URL too).
    os.environ.pop("REDIS_URL", None)
    with bench_database(args.database_url, keep=args.keep):
        results = measure(args, sizes, random.Random(SEED))
    print_results(args, sizes, results)


def print_results(args: argparse.Namespace, sizes: Sizes, results: Results) -> None:
    lat, runs = results.lat, results.runs
    requests = mean(lat.requests_per_effect)
    submits = 2 * sizes.warmup + len(lat.http.receipts) + len(lat.local.receipts)
    submits += sum(run.count for run in runs)
    print_environment(
        [
            *results.environment,
            ["gunicorn", f"{args.workers} workers x {args.threads} threads (gthread)"],
            ["target", "tier 1, no-op (send returns Sent at once), one premise that holds"],
        ]
    )
    print(f"\n## Latency: one agent, {sizes.effects:,} effects one after another\n")
    print(latency_table(lat))
    print(
        f"\nHTTP requests per effect: {span(lat.requests_per_effect)} "
        f"(counted on the journal's transport; {sizes.warmup} warm-up effects not timed). "
        "Overhead = submit - direct at the same percentile."
    )
    print("\n## Where one submit's time goes (client side)\n")
    print(profile_table(lat))
    print(
        "\nHTTP p50/mean: the request from the journal's client to its last body byte over "
        f"loopback; in process: the same request through httpx.WSGITransport "
        f"({sizes.profile_effects} submits), with the SQL statements it ran and their execution "
        "time (commits not included). share = per effect x HTTP mean / submit mean."
    )
    print(
        f"\n## Throughput: {sizes.agents} agent processes x {sizes.per_agent} effects, "
        "started together\n"
    )
    print(throughput_table([*runs, results.floor], lat, requests))
    print(
        "\neffects/s = effects / (last agent's end - first agent's start); x one agent = "
        "effects/s over one agent's sequential rate (1 / mean submit above); HTTP requests/s "
        f"= effects/s x {requests:g}.\n"
    )
    print(cpu_table([*runs, results.floor], CPU_COLUMNS))
    print(
        "\nCPU during each run (from /proc): the agent processes, the gunicorn master and "
        "workers, and the PostgreSQL backends connected to the bench database (n/a if not "
        "readable; PostgreSQL's own background writers are not counted). Ceiling = cores / total "
        "CPU per effect."
    )
    print_goals(goal_rows(lat, runs))
    print(
        f"\nThe floor row: the same {sizes.agents} processes making {REQUESTS_PER_EFFECT} GET "
        f"/v1/whoami per effect instead of submitting it reach {results.floor.per_second:,.0f} "
        "effects/s: no submit of two requests can go faster on this machine, whatever the "
        "notary does inside them."
    )
    print(
        f"\nCorrectness: all {submits:,} submits (warm-ups included) ended COMMITTED, "
        "authorized when fired, premises held; every log grew by exactly "
        f"{ENTRIES_PER_EFFECT} entries per effect; {results.verified} receipts re-derived from "
        "their whole log with verify_receipt."
    )
    print_total()


if __name__ == "__main__":
    main()
