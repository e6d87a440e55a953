"""Measure how fast the notary takes in providers' signed webhooks, and how fast one Celery worker
turns them into ledger evidence, on gunicorn, PostgreSQL and Redis.

1. Accepting: `--clients` client processes post `--events` distinct signed events to
   POST /webhooks/<endpoint id>/, each client one request after another on a kept-alive
   connection (a closed loop). Half are Stripe refund events naming their effect in
   metadata.interlock_effect_id, half Resend email events naming it in their tags; every effect
   is a real one, dispatched beforehand. Each request is signed beforehand by the provider's own
   library (stripe, svix): signing is the provider's work, never timed. The notary runs with
   REDIS_URL on a Redis database of its own and CELERY_TASK_ALWAYS_EAGER=false, so the web
   process verifies, stores and queues (the event's id onto webhooks.queue, and an
   ingest_pending task when none is due); no worker runs meanwhile. Baselines under the same
   concurrency, in the same run: GET /healthz (HTTP and Django, no database) and requests signed
   with the wrong secret (checked, stored unverified, answered 400); and the accepted path again
   with one client. Latency is client side, from sending to the last byte of the answer.
2. Where an accepted request's time goes: more of the same requests through the WSGI app in this
   process (no network, no gunicorn), each SQL statement, the ORM building it, the commit, the
   connection health check, the signature check and the enqueue timed; GET /healthz the same way
   as the floor.
3. Ingestion: a real Celery worker (`celery --app notary worker --pool solo`) started on the
   backlog the first two parts queued; events/s from its first Ingestion row to its last, and the
   PostgreSQL sessions it opened. Baselines on further events stored without queueing (the same
   work without Celery and Redis): services.events_ingest called in this process on batches of
   WEBHOOK_INGEST_BATCH, as the worker's ingest_pending does, and services.event_ingest one
   event after another, on one connection and, as Celery's Django fixup has the worker do
   without CELERY_DB_REUSE_MAX, closing the connection after each event.

Effects are proposed and dispatched beforehand through notary.services (a lease each, granted
by one approver key), so setup is never timed. The benchmark is also a correctness check: every
valid event must be answered 200 with its id and every forged one 400; every stored event must
sit in the ingestion queue once and be ingested exactly once (one Ingestion row, and one
OBSERVED and one COMMITTED entry per effect, nothing else in the log); every effect must end
COMMITTED_ON_EVIDENCE (the projection for all, the receipt re-derived from its whole log with
verify_receipt for a sample). Anything else aborts with a non-zero exit.

It works in its own database (--database-url, default interlock_bench_webhooks; dropped and
recreated at start, a name without "bench" is refused; dropped at the end unless --keep) and its
own Redis database (--redis-url, default db 9; only that database is flushed, at start and end;
db 0 is refused). Tables go to stdout, progress to stderr:

    .venv/bin/python -m experiments.benches.webhooks [--quick] [--events 3000 --clients 8]
        [--workers 2 --threads 8] [--database-url ...] [--redis-url ...] [--keep]
"""

from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import random
import re
import secrets
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock
from urllib.parse import urlsplit

import httpx
import psycopg
import redis

from experiments.kit.bench import bar, parse, parser, print_total, progress
from experiments.kit.database import bench_database, sql_timer
from experiments.kit.machine import environment, print_environment, process_cpu
from experiments.kit.pool import Child, Pool
from experiments.kit.served import (
    CpuColumns,
    LoadRun,
    add_server_arguments,
    cpu_table,
    load_figures,
    print_goals,
    print_server_log,
    serving,
    timed_run,
    verdict,
)
from experiments.kit.stats import Stats, duration, mean, percentile, span
from experiments.kit.tables import aligned_table
from gate_client.proposal import Proposal
from testkit.paths import REPO_ROOT
from testkit.processes import armed_env
from testkit.webhook_signing import (
    as_headers,
    body_of,
    new_secret,
    resend_event,
    signed_headers,
    stripe_refund_event,
)

if TYPE_CHECKING:
    from notary.models import ApiKey, Tenant

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/9"
CELERY_QUEUE = "celery"  # the default queue, where ingest_pending.delay sends
TENANT = "acme"
PROVIDERS = ("stripe", "resend")
TARGET_OF = {"stripe": "refunds", "resend": "mail"}
ACTION_OF = {"stripe": "refund", "resend": "email"}
GOAL_ACCEPTED_PER_SECOND = 1000.0
GOAL_P99_SECONDS = 0.050
GOAL_INGESTED_PER_SECOND = 500.0
SETTLED = "COMMITTED_ON_EVIDENCE"
WARMUP_PER_CLIENT = 10  # valid events each client posts, untimed, before the timed runs
PROFILE_WARMUP = 4
VERIFY_SAMPLE = 20  # receipts re-derived from the whole log
TICK = 50  # a client reports progress every TICK requests
CPU_COLUMNS = CpuColumns("request", "clients", "req", "req/s", digits=2)
STALL_TIMEOUT = 60.0  # the worker ingesting nothing this long aborts the run
SEED = 8222


@dataclass(frozen=True)
class Sizes:
    events: int
    clients: int
    one_client: int
    profile: int
    direct: int


PROFILES = {
    "quick": Sizes(events=40, clients=4, one_client=10, profile=10, direct=10),
    "default": Sizes(events=3000, clients=8, one_client=300, profile=200, direct=200),
}


# --- Requests, signed beforehand ----------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    """One HTTP request as sent, with what its answer must be."""

    label: str  # "GET /healthz", "stripe", "resend", "forged stripe", "forged resend"
    method: str
    path: str
    body: bytes
    headers: tuple[tuple[str, str], ...]
    status: int
    event_id: str = ""  # the id a valid event's answer must name


@dataclass(frozen=True)
class Planned:
    """A dispatched effect, and the provider whose event will settle it."""

    provider: str
    effect_id: str


@dataclass(frozen=True)
class Endpoints:
    path: dict[str, str]  # provider -> /webhooks/<endpoint id>/
    secret: dict[str, str]  # provider -> its signing secret


def healthz() -> Request:
    return Request("GET /healthz", "GET", "/healthz", b"", (), 200)


def signed(planned: Planned, endpoints: Endpoints, *, forged: bool = False) -> Request:
    """The provider's event about `planned`, signed by the provider's library with the
    endpoint's secret (or, forged, with another secret of the same form)."""
    provider = planned.provider
    if provider == "stripe":
        event = stripe_refund_event(planned.effect_id)
        event_id = str(event["id"])
    else:
        event = resend_event("email.delivered", effect_id=planned.effect_id)
        event_id = f"msg_{secrets.token_hex(12)}"
    body = body_of(event)
    secret = new_secret(provider) if forged else endpoints.secret[provider]
    headers = as_headers(signed_headers(provider, body, secret, event_id=event_id))
    return Request(
        f"forged {provider}" if forged else provider,
        "POST",
        endpoints.path[provider],
        body,
        (("content-type", "application/json"), *headers.items()),
        400 if forged else 200,
        "" if forged else event_id,
    )


def sign_all(planned: Sequence[Planned], endpoints: Endpoints, desc: str) -> list[Request]:
    progress(f"signing {len(planned):,} events ({desc})")
    return [signed(p, endpoints) for p in planned]


def forged_requests(count: int, endpoints: Endpoints) -> list[Request]:
    return [
        signed(Planned(PROVIDERS[n % 2], f"eff_forged_{n}"), endpoints, forged=True)
        for n in range(count)
    ]


def answer_problem(request: Request, status: int, data: bytes) -> str | None:
    """What is wrong with the answer to `request`, or None."""
    if status != request.status:
        return f"{request.label} {request.path}: {status} {data[:300]!r}"
    if request.method == "GET":
        return None
    try:
        answer = json.loads(data)
    except ValueError:
        return f"{request.label}: not JSON: {data[:300]!r}"
    if request.status == 200 and answer != {"received": request.event_id, "duplicate": False}:
        return f"{request.label} {request.event_id}: {answer}"
    if request.status == 400 and answer.get("error") != "signature":
        return f"{request.label}: {answer}"
    return None


# --- Client processes ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientResult:
    start: float
    end: float
    cpu: float
    timings: tuple[tuple[str, float], ...]  # (label, seconds) per request
    problems: tuple[str, ...]


def client_run(child: Child, job: tuple[str, list[Request]]) -> ClientResult:
    """In a client process: a fresh kept-alive connection (opened untimed), then the requests
    one after another once told to go. http.client, to spend as little of the machine's CPU as
    a client can."""
    url, requests = job
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=60)
    conn.request("GET", "/healthz")
    conn.getresponse().read()
    child.ready()
    timings, problems = [], []
    cpu = time.process_time()
    start = time.time()
    for n, request in enumerate(requests, 1):
        began = time.perf_counter()
        body = request.body or None
        conn.request(request.method, request.path, body=body, headers=dict(request.headers))
        response = conn.getresponse()
        data = response.read()
        timings.append((request.label, time.perf_counter() - began))
        problem = answer_problem(request, response.status, data)
        if problem is not None:
            problems.append(problem)
        if n % TICK == 0:
            child.tick(TICK)
    end = time.time()
    cpu = time.process_time() - cpu
    conn.close()
    child.tick(len(requests) % TICK)
    return ClientResult(start, end, cpu, tuple(timings), tuple(problems))


@dataclass(frozen=True)
class Run(LoadRun):
    """One timed run: every client's requests, started together; its count is of requests, its
    load the clients' processes."""

    clients: int
    timings: dict[str, list[float]]  # request label -> seconds

    def stats(self, *labels: str) -> Stats:
        chosen = labels or tuple(self.timings)
        return Stats.of([s for label in chosen for s in self.timings.get(label, [])])


def run_clients(
    pool: Pool[tuple[str, list[Request]], ClientResult],
    url: str,
    label: str,
    jobs: Sequence[list[Request]],
    database_url: str,
) -> Run:
    """Give client n jobs[n] (an empty job: that client sits this run out), start them
    together, and collect their timings; any wrong answer aborts the run."""
    total = sum(len(job) for job in jobs)
    run = timed_run(
        pool,
        [(url, job) if job else None for job in jobs],
        label=label,
        unit="request",
        total=total,
        database_url=database_url,
    )
    finished = run.results
    problems = [p for result in finished for p in result.problems]
    if problems:
        raise SystemExit(
            f"{label}: {len(problems)} of {total} requests answered wrongly:\n"
            + "\n".join(problems[:10])
        )
    timings: dict[str, list[float]] = {}
    for result in finished:
        for request_label, seconds in result.timings:
            timings.setdefault(request_label, []).append(seconds)
    return Run(
        label=label, count=total, clients=len(finished), timings=timings, **load_figures(run)
    )


def spread(requests: Sequence[Request], clients: int) -> list[list[Request]]:
    """Deal the requests out to the clients in turn."""
    return [list(requests[n::clients]) for n in range(clients)]


# --- Setup: tenant, targets, endpoints, dispatched effects --------------------------------------


def prepare(batches: dict[str, int]) -> tuple[Endpoints, dict[str, list[Planned]]]:
    """One tenant with a tier-3 target per provider and an endpoint on each, and one dispatched
    effect (its own case and lease) per event to come, providers alternating in each batch."""
    from django.utils import timezone

    from testkit import factories
    from webhooks import services as webhook_services

    tenant, approver = factories.tenant_with_approver(TENANT, "Acme Refunds")
    endpoints = Endpoints({}, {})
    for provider in PROVIDERS:
        target = factories.register(
            tenant,
            TARGET_OF[provider],
            tier=3,
            max_inflight=timedelta(minutes=5),
            evidence_window=timedelta(hours=1),
        )
        secret = new_secret(provider)
        endpoint = webhook_services.endpoint_create(
            tenant=tenant, target=target, provider=provider, secrets=[secret]
        )
        endpoints.path[provider] = f"/webhooks/{endpoint.public_id}/"
        endpoints.secret[provider] = secret
    expires = timezone.now() + timedelta(hours=6)
    planned: dict[str, list[Planned]] = {}
    with bar(total=sum(batches.values()), desc="dispatching effects", unit="effect") as done:
        for batch, count in batches.items():
            planned[batch] = []
            for n in range(count):
                provider = PROVIDERS[n % 2]
                effect_id = dispatch(tenant, approver, provider, f"{batch}-{n:05d}", expires)
                planned[batch].append(Planned(provider, effect_id))
                done.update()
    return endpoints, planned


def dispatch(
    tenant: Tenant, approver: ApiKey, provider: str, case_id: str, expires: datetime
) -> str:
    """A refund or an email proposed and dispatched under its own lease, as the gate leaves an
    effect on a tier-3 target before the provider's webhook says how it went."""
    from notary import services
    from testkit.factories import leased

    action = ACTION_OF[provider]
    lease = leased(
        tenant, case_id, action, requested_by="support-bot", approver=approver, expires_at=expires
    )
    proposal = Proposal(
        case_id=case_id,
        target=TARGET_OF[provider],
        action=action,
        payload={"amount_cents": 2000, "currency": "EUR", "to": "customer@example.com"},
        lease_id=lease.lease_id,
        tenant=tenant.slug,
    )
    proposed = services.effect_propose(
        tenant=tenant,
        effect_id=proposal.effect_id,
        proposal=proposal.proposed_body([]),
        dispatch_premises=[],
    )
    if proposed.dispatched is None:
        raise SystemExit(f"{case_id}: not dispatched ({proposed.refusal})")
    return proposal.effect_id


def log_size() -> int:
    from ledger.selectors import log_head
    from notary.models import Tenant

    return log_head(log=Tenant.objects.select_related("log").get(slug=TENANT).log).size


# --- Redis --------------------------------------------------------------------------------------


def own_redis(redis_url: str) -> redis.Redis:
    """The bench's Redis database, flushed; db 0 (where a notary's own queue usually is) and a
    URL naming no database are refused."""
    path = urlsplit(redis_url).path.strip("/")
    if not path.isdigit() or int(path) == 0:
        raise SystemExit(f"refusing {redis_url}: name a Redis database of its own, not 0")
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    return client


def queued(client: redis.Redis) -> tuple[int, int, int]:
    """Event ids in the ingestion queue, how many of them distinct, and the Celery tasks
    queued to drain it."""
    from webhooks import queue

    ids = [int(raw_event_id) for raw_event_id in client.lrange(queue.PENDING, 0, -1)]
    return len(ids), len(set(ids)), int(client.llen(CELERY_QUEUE))


# --- In process: where an accepted request's time goes ------------------------------------------

_TABLE = re.compile(r'(?:FROM|INTO|UPDATE)\s+"(\w+)"')

# What each SQL statement of the accept path is for.
SQL_DOES = {
    "SELECT webhooks_endpoint": "the endpoint, with its active secrets",
    "SELECT webhooks_endpointsecret": "its active secrets",
    "SELECT webhooks_rawevent": "a verified event with this id stored before?",
    "INSERT webhooks_rawevent": "store the event unless its id is (its own commit)",
}


def sql_label(statement: str) -> str:
    verb = statement.split(None, 1)[0].upper() if statement.strip() else "?"
    found = _TABLE.search(statement)
    return f"SQL {verb} {found.group(1)}" if found else f"SQL {verb}"


@dataclass
class Profile:
    """Per request: the whole request in process, and the timed parts of it."""

    totals: list[float] = field(default_factory=list)
    parts: dict[str, list[float]] = field(default_factory=dict)  # label -> [calls, seconds]

    def add(self, seconds: float, parts: dict[str, list[float]]) -> None:
        self.totals.append(seconds)
        for label, (calls, spent) in parts.items():
            part = self.parts.setdefault(label, [0, 0.0])
            part[0] += calls
            part[1] += spent


class Parts:
    """The calls of and time in named parts of the request under way; a part called inside
    itself is not counted twice."""

    def __init__(self) -> None:
        self.current: dict[str, list[float]] = {}
        self.inside: set[str] = set()

    def add(self, label: str, seconds: float) -> None:
        part = self.current.setdefault(label, [0, 0.0])
        part[0] += 1
        part[1] += seconds

    def take(self) -> dict[str, list[float]]:
        """What was counted since the last take, and start again."""
        taken, self.current = self.current, {}
        return taken

    def wrap(self, label: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            if label in self.inside:
                return function(*args, **kwargs)
            self.inside.add(label)
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                self.inside.discard(label)
                self.add(label, time.perf_counter() - began)

        return wrapper


def instrument(stack: ExitStack, parts: Parts) -> None:
    """Time each SQL statement, the ORM building it, the COMMIT, Django's connection health
    check, the provider's signature check and the enqueue, by wrapping them until `stack`
    closes."""
    from django.db import connections
    from django.db.models.sql.compiler import SQLCompiler, SQLInsertCompiler

    from webhooks import providers, services

    db = connections["default"]
    stack.enter_context(db.execute_wrapper(sql_timer(lambda s, t: parts.add(sql_label(s), t))))
    for target, name, label in (
        (providers.WebhookProvider, "verify", "signature check (provider library)"),
        (services, "_enqueue", ENQUEUE_LABEL),
        (db, "_commit", "COMMIT"),
        (db, "is_usable", "connection health check (SELECT 1)"),
        (SQLCompiler, "as_sql", ORM_LABEL),
        (SQLInsertCompiler, "as_sql", ORM_LABEL),
    ):
        stack.enter_context(
            mock.patch.object(target, name, parts.wrap(label, getattr(target, name)))
        )


def profile_in_process(
    requests: Sequence[Request], warmup: Sequence[Request]
) -> tuple[dict[str, Profile], list[float]]:
    """The requests through the WSGI app in this process (httpx.WSGITransport), their parts
    timed (`instrument`; the enqueue is a publish to Redis). Also the floor through the same
    client: GET /healthz, as many times."""
    from django.core.wsgi import get_wsgi_application

    parts = Parts()
    profiles = {provider: Profile() for provider in PROVIDERS}
    transport = httpx.WSGITransport(app=get_wsgi_application())
    with ExitStack() as stack:
        client = stack.enter_context(httpx.Client(transport=transport, base_url="http://127.0.0.1"))
        instrument(stack, parts)
        for n, request in enumerate(bar([*warmup, *requests], desc="in process", unit="request")):
            parts.take()
            began = time.perf_counter()
            response = client.request(
                request.method, request.path, content=request.body, headers=dict(request.headers)
            )
            seconds = time.perf_counter() - began
            problem = answer_problem(request, response.status_code, response.content)
            if problem is not None:
                raise SystemExit(f"in process: {problem}")
            if n >= len(warmup):
                profiles[request.label].add(seconds, parts.take())
        floor = []
        for _ in range(len(warmup) + len(requests)):
            began = time.perf_counter()
            client.get("/healthz").raise_for_status()
            floor.append(time.perf_counter() - began)
    return profiles, floor[len(warmup) :]


# --- Ingestion: one Celery worker, and the direct baseline --------------------------------------


@contextmanager
def running_worker(redis_url: str, var_dir: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`celery --app notary worker --pool solo` on the bench database and Redis database; its
    output goes to celery.log in `var_dir`."""
    env = armed_env(
        None,
        DJANGO_SETTINGS_MODULE="notary.settings",
        REDIS_URL=redis_url,
        CELERY_TASK_ALWAYS_EAGER="false",
        NOTARY_VAR_DIR=str(var_dir),
    )
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--app", "notary", "worker", "--pool", "solo",
         "--loglevel", "warning", "--without-heartbeat", "--without-gossip", "--without-mingle"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL,
        stderr=(var_dir / "celery.log").open("ab"),
    )  # fmt: skip
    try:
        yield worker
    finally:
        worker.terminate()
        try:
            worker.wait(timeout=10)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.wait(timeout=10)


@dataclass(frozen=True)
class Drain:
    events: int
    startup: float  # worker spawned -> first Ingestion row
    seconds: float  # first Ingestion row -> last
    # per event, after the worker's first ingestions were seen (its startup not counted)
    worker_cpu: float
    sessions: float  # PostgreSQL sessions opened

    @property
    def per_second(self) -> float:
        return (self.events - 1) / self.seconds if self.seconds > 0 else float("nan")


def drain(redis_url: str, var_dir: Path, expected: int, database_url: str) -> Drain:
    """Start one worker on the backlog and wait until every queued event has its Ingestion."""
    from webhooks.models import Ingestion

    progress(f"starting a Celery worker (solo pool) on {expected:,} queued events")
    spawned = time.time()
    with (
        running_worker(redis_url, var_dir) as worker,
        bar(total=expected, desc="ingesting", unit="event") as ingesting,
    ):
        done, moved = 0, time.monotonic()
        first: tuple[int, float, int] | None = None  # done, worker CPU, PostgreSQL sessions
        while done < expected:
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited ({worker.returncode}):\n{tail(var_dir)}")
            if time.monotonic() - moved > STALL_TIMEOUT:
                raise SystemExit(f"no ingestion for {STALL_TIMEOUT:g} s:\n{tail(var_dir)}")
            time.sleep(0.25)
            now = Ingestion.objects.count()
            if now != done:
                ingesting.update(now - done)
                done, moved = now, time.monotonic()
                if first is None:
                    first = (done, cpu_of(worker), pg_sessions(database_url))
        worker_cpu = cpu_of(worker)
        sessions = pg_sessions(database_url, settle=True)
    assert first is not None
    counted = max(expected - first[0], 1)
    times = sorted(Ingestion.objects.values_list("ingested_at", flat=True))
    return Drain(
        events=len(times),
        startup=times[0].timestamp() - spawned,
        seconds=(times[-1] - times[0]).total_seconds(),
        worker_cpu=(worker_cpu - first[1]) / counted,
        sessions=(sessions - first[2]) / counted,
    )


def cpu_of(worker: subprocess.Popen[bytes]) -> float:
    """The worker's CPU seconds so far (user + system), from /proc."""
    cpu = process_cpu(worker.pid)
    if cpu is None:
        raise SystemExit(f"the worker ({worker.pid}) is gone")
    return cpu


def tail(var_dir: Path) -> str:
    log = var_dir / "celery.log"
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:]) if log.exists() else ""


@dataclass(frozen=True)
class Direct:
    seconds: list[float]  # per event_ingest call
    queries: list[float]
    sql_seconds: list[float]
    sessions: int  # PostgreSQL sessions opened meanwhile

    @property
    def per_second(self) -> float:
        return len(self.seconds) / sum(self.seconds)


def ingest_directly(
    requests: Sequence[Request], database_url: str, *, reconnect: bool = False, batch: bool = False
) -> Direct:
    """The baselines for the worker: the same events stored by services.event_receive without
    queueing, then ingested here, SQL counted: services.event_ingest one event after another,
    or with `batch` services.events_ingest on WEBHOOK_INGEST_BATCH at a time (each event's
    figures its batch's share); with `reconnect`, the database connection closed after each
    call, as Celery's Django fixup does around every task (its close_database, without
    CELERY_DB_REUSE_MAX)."""
    from django.conf import settings
    from django.db import connection

    from webhooks import selectors, services
    from webhooks.models import Endpoint

    endpoints = {
        endpoint.provider: selectors.endpoint_for_url(public_id=str(endpoint.public_id))
        for endpoint in Endpoint.objects.all()
    }
    with mock.patch.object(services, "_enqueue", lambda raw_event_id: None):
        stored = []
        for request in requests:
            found = endpoints[request.label]
            assert found is not None
            event, new = services.event_receive(
                endpoint=found[0],
                secrets=found[1],
                body=request.body,
                headers=dict(request.headers),
            )
            if not (event.verified and new):
                raise SystemExit(f"direct: {request.event_id} not stored as a new verified event")
            stored.append(event.pk)
    size = settings.WEBHOOK_INGEST_BATCH if batch else 1
    seconds: list[float] = []
    queries: list[float] = []
    sql_seconds: list[float] = []
    statements: list[float] = []
    timed_sql = sql_timer(lambda _statement, seconds: statements.append(seconds))
    desc = (
        "events_ingest" if batch else "event_ingest, reconnecting" if reconnect else "event_ingest"
    )
    sessions = pg_sessions(database_url)
    with (
        connection.execute_wrapper(timed_sql),
        bar(total=len(stored), desc=desc, unit="event") as done,
    ):
        for start in range(0, len(stored), size):
            ids = stored[start : start + size]
            statements.clear()
            began = time.perf_counter()
            if batch:
                services.events_ingest(raw_event_ids=ids)
            else:
                services.event_ingest(raw_event_id=ids[0])
            if reconnect:
                connection.close()
            spent = time.perf_counter() - began
            seconds += [spent / len(ids)] * len(ids)
            queries += [len(statements) / len(ids)] * len(ids)
            sql_seconds += [sum(statements) / len(ids)] * len(ids)
            done.update(len(ids))
    connection.ensure_connection()
    return Direct(seconds, queries, sql_seconds, pg_sessions(database_url, settle=True) - sessions)


def pg_sessions(database_url: str, *, settle: bool = False) -> int:
    """Sessions opened so far on the bench database (pg_stat_database, PostgreSQL 14+). Backends
    report to the statistics at most once a second, so `settle` waits that out first."""
    if settle:
        time.sleep(1.5)
    with psycopg.connect(database_url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT sessions FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) - 1 if row else 0  # not counting this one


# --- Correctness --------------------------------------------------------------------------------


def log_problems(expected: dict[str, str], tenant: Tenant, size_before: int) -> list[str]:
    """Every valid event stored once, and the log grown by exactly one OBSERVED and one
    COMMITTED entry per event; also each Ingestion row against its OBSERVED entry's seq."""
    from ledger.models import Entry
    from webhooks.models import Ingestion, RawEvent

    problems: list[str] = []
    stored = Counter(
        RawEvent.objects.filter(verified=True).values_list("provider_event_id", flat=True)
    )
    if set(stored) != set(expected) or any(count != 1 for count in stored.values()):
        problems.append(f"{len(stored)} verified events stored, {len(expected)} sent")
    new = list(
        Entry.objects.filter(log=tenant.log, seq__gte=size_before).values_list(
            "kind", "effect_id", "seq"
        )
    )
    observed = {effect_id: seq for kind, effect_id, seq in new if kind == "OBSERVED"}
    kinds = Counter((kind, effect_id) for kind, effect_id, _ in new)
    if len(new) != 2 * len(expected):
        problems.append(f"the log grew by {len(new)} entries, not {2 * len(expected)}")
    wrong_kinds = {kind for kind, _ in kinds} - {"OBSERVED", "COMMITTED"}
    if wrong_kinds or any(count != 1 for count in kinds.values()):
        problems.append(f"entries other than one OBSERVED and one COMMITTED per effect: {kinds}")
    ingestions = list(
        Ingestion.objects.values_list(
            "raw_event__provider_event_id", "effect_id", "observed_seq", "outcome"
        )
    )
    if len(ingestions) != len(expected):
        problems.append(f"{len(ingestions)} Ingestion rows for {len(expected)} events")
    for event_id, effect_id, seq, outcome in ingestions:
        if expected.get(event_id) != effect_id or outcome != "committed_on_evidence":
            problems.append(f"{event_id}: ingested onto {effect_id!r} as {outcome}")
        elif observed.get(effect_id) != seq:
            problems.append(
                f"{event_id}: observed_seq {seq}, OBSERVED at {observed.get(effect_id)}"
            )
    return problems


def check_ingestion(expected: dict[str, str], size_before: int, rng: random.Random) -> int:
    """Every valid event ingested exactly once, onto its own effect, which ended settled on the
    evidence (`log_problems`). Returns how many receipts were re-derived from the whole log."""
    from gate_client.receipts import ReceiptError, derive_receipt, verify_receipt
    from ledger.selectors import iter_entries
    from notary.models import Effect, Tenant

    tenant = Tenant.objects.select_related("log").get(slug=TENANT)
    problems = log_problems(expected, tenant, size_before)
    states = Counter(
        Effect.objects.filter(tenant=tenant, effect_id__in=expected.values()).values_list(
            "state", flat=True
        )
    )
    if states != Counter({SETTLED: len(expected)}):
        problems.append(f"effect states {dict(states)}, not all {SETTLED}")
    if problems:
        raise SystemExit("ingestion miscount:\n" + "\n".join(problems[:10]))
    entries = list(iter_entries(log=tenant.log))
    sample = rng.sample(sorted(expected.values()), min(VERIFY_SAMPLE, len(expected)))
    for effect_id in sample:
        receipt = derive_receipt(entries, effect_id)
        if receipt.final_state != SETTLED:
            raise SystemExit(f"{effect_id}: receipt says {receipt.final_state}")
        try:
            verify_receipt(receipt, entries, origin=tenant.log.origin)
        except ReceiptError as exc:
            raise SystemExit(f"{effect_id}: receipt does not follow from the log: {exc}") from exc
    return len(sample)


# --- Tables -------------------------------------------------------------------------------------


def accept_table(runs: Sequence[Run]) -> str:
    floor = runs[0]  # GET /healthz
    rows = []
    for run in runs:
        stats = run.stats()
        rows.append(
            [
                run.label,
                str(run.clients),
                f"{run.count:,}",
                f"{run.seconds:.2f}",
                f"{run.per_second:,.0f}",
                f"{run.per_second / floor.per_second:.2f}",
                duration(stats.p50),
                duration(stats.p99),
                duration(stats.mean),
            ]
        )
    headers = ["request", "clients", "requests", "seconds", "requests/s", "x /healthz rate"]
    return aligned_table([*headers, "p50", "p99", "mean"], rows)


def provider_table(runs: Sequence[Run]) -> str:
    rows = []
    for run in runs:
        for label in sorted(run.timings):
            if label == "GET /healthz":
                continue
            stats = run.stats(label)
            rows.append(
                [run.label, label, f"{stats.samples:,}", duration(stats.p50), duration(stats.p99)]
            )
    return aligned_table(["run", "provider", "requests", "p50", "p99"], rows)


ORM_LABEL = "ORM: building the SQL (as_sql)"
ENQUEUE_LABEL = "enqueue: the id onto the ingestion queue (Redis)"
PART_ORDER = (
    ORM_LABEL,
    "connection health check (SELECT 1)",
    "SQL SELECT webhooks_endpoint",
    "SQL SELECT webhooks_endpointsecret",
    "signature check (provider library)",
    "SQL SELECT webhooks_rawevent",
    "SQL INSERT webhooks_rawevent",
    "COMMIT",
    ENQUEUE_LABEL,
)


def profile_table(profiles: dict[str, Profile], floor: Sequence[float]) -> str:
    """Per part: calls and mean time per request for each provider, and its share of the
    whole in-process request (both providers)."""
    labels = [label for label in PART_ORDER if any(label in p.parts for p in profiles.values())]
    labels += sorted({label for p in profiles.values() for label in p.parts} - set(labels))
    whole = {provider: mean(p.totals) for provider, p in profiles.items()}
    both = mean([t for p in profiles.values() for t in p.totals])

    def per_request(provider: str, label: str) -> float:
        profile = profiles[provider]
        return profile.parts.get(label, [0, 0.0])[1] / max(len(profile.totals), 1)

    rows = []
    accounted = dict.fromkeys(PROVIDERS, 0.0)
    for label in labels:
        calls = {
            p: profiles[p].parts.get(label, [0, 0.0])[0] / max(len(profiles[p].totals), 1)
            for p in PROVIDERS
        }
        for provider in PROVIDERS:
            accounted[provider] += per_request(provider, label)
        share = mean([per_request(p, label) for p in PROVIDERS]) / both
        rows.append(
            [
                label,
                SQL_DOES.get(label.removeprefix("SQL "), ""),
                "/".join(f"{calls[p]:g}" for p in PROVIDERS),
                *(duration(per_request(p, label)) for p in PROVIDERS),
                f"{share:.0%}",
            ]
        )
    rest = {p: whole[p] - accounted[p] for p in PROVIDERS}
    rows.append(
        [
            "the rest, not timed apart",
            "WSGI, Django, view, headers, model objects, JSON",
            "",
            *(duration(rest[p]) for p in PROVIDERS),
            f"{mean(list(rest.values())) / both:.0%}",
        ]
    )
    p50 = {p: percentile(profiles[p].totals, 50) for p in PROVIDERS}
    rows.append(["whole request, in process (mean)", "", "", *map(duration, whole.values())])
    rows[-1].append("100%")
    rows.append(["whole request, in process (p50)", "", "", *map(duration, p50.values()), ""])
    rows.append(
        [
            "floor: GET /healthz in process (mean)",
            "WSGI, Django, no database",
            "",
            duration(mean(floor)),
            duration(mean(floor)),
            f"{mean(floor) / both:.0%}",
        ]
    )
    return aligned_table(
        ["part", "what for", "calls/req (stripe/resend)", "stripe", "resend", "share"], rows
    )


def ingest_table(
    drained: Drain, batched: Direct, reconnecting: Direct, direct: Direct, accepted: Run
) -> str:
    rows = [
        [
            "one Celery worker, solo pool (queue drained)",
            f"{drained.events:,}",
            f"{drained.seconds:.2f}",
            f"{drained.per_second:,.0f}",
            f"{drained.per_second / direct.per_second:.2f}",
            duration(drained.seconds / max(drained.events - 1, 1)),
            f"{drained.sessions:.2f}",
            f"{drained.worker_cpu * 1e3:.2f}",
        ]
    ]
    for label, run in (
        (f"events_ingest in process, batches of {ingest_batch()}, one connection", batched),
        ("event_ingest in process, connection closed after each", reconnecting),
        ("baseline: event_ingest in process, one connection", direct),
    ):
        rows.append(
            [
                label,
                f"{len(run.seconds):,}",
                f"{sum(run.seconds):.2f}",
                f"{run.per_second:,.0f}",
                f"{run.per_second / direct.per_second:.2f}",
                duration(mean(run.seconds)),
                f"{run.sessions / len(run.seconds):.2f}",
                "",
            ]
        )
    headers = ["ingestion", "events", "seconds", "events/s", "x baseline", "per event"]
    headers += ["PostgreSQL sessions opened/event", "worker CPU ms/event"]
    return aligned_table(headers, rows) + (
        "\n\nWorker: events/s = (events - 1) / (last Ingestion row - first); sessions from "
        "pg_stat_database. Celery's Django fixup closes the database connection before and "
        "after every task (CONN_MAX_AGE notwithstanding, unless CELERY_DB_REUSE_MAX is set); "
        "the middle row does the same in process. "
        f"Worker / accepted rate ({accepted.clients} clients): "
        f"{drained.per_second / accepted.per_second:.2f}: keeping up with that intake takes "
        f"{math.ceil(accepted.per_second / drained.per_second)} such workers, each with a core "
        "to itself. Worker startup (spawned to its first Ingestion row): "
        f"{drained.startup:.1f} s, not counted in the rate nor in the CPU. In process, "
        "event_ingest ran "
        f"{span([round(q) for q in direct.queries])} SQL statements per event, "
        f"{duration(mean(direct.sql_seconds))} of SQL execution (commit not included) of "
        f"{duration(mean(direct.seconds))}; events_ingest {mean(batched.queries):.1f} per event, "
        f"{duration(mean(batched.sql_seconds))} of {duration(mean(batched.seconds))}."
    )


def ingest_batch() -> int:
    from django.conf import settings

    return int(settings.WEBHOOK_INGEST_BATCH)


def goal_rows(accepted: Run, drained: Drain) -> list[list[str]]:
    p99 = accepted.stats().p99
    return [
        [
            f">= {GOAL_ACCEPTED_PER_SECOND:,.0f} verified webhooks accepted/s, "
            f"{accepted.clients} clients",
            f"{accepted.per_second:,.0f}/s",
            verdict(accepted.per_second >= GOAL_ACCEPTED_PER_SECOND),
        ],
        [
            f"accept p99 < {GOAL_P99_SECONDS * 1e3:g} ms, {accepted.clients} clients",
            duration(p99),
            verdict(p99 < GOAL_P99_SECONDS),
        ],
        [
            f">= {GOAL_INGESTED_PER_SECOND:,.0f} events ingested/s by one worker",
            f"{drained.per_second:,.0f}/s",
            verdict(drained.per_second >= GOAL_INGESTED_PER_SECOND),
        ],
    ]


# --- Entry point --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Sizes]:
    options = parser(__doc__)
    options.add_argument("--quick", action="store_true", help="a smoke run: a few events")
    options.add_argument(
        "--events", type=int, help="valid events posted concurrently (default 3000)"
    )
    options.add_argument("--clients", type=int, help="concurrent client processes (default 8)")
    add_server_arguments(options, "interlock_bench_webhooks")
    options.add_argument(
        "--redis-url",
        default=DEFAULT_REDIS_URL,
        help=f"a Redis database of the bench's own, flushed (default {DEFAULT_REDIS_URL})",
    )
    args, sizes = parse(options, argv, PROFILES)
    if sizes.events < sizes.clients or sizes.clients < 1:
        options.error("--events must be at least --clients, and --clients at least 1")
    return args, sizes


@dataclass(frozen=True)
class Results:
    runs: list[Run]
    profiles: dict[str, Profile]
    floor: list[float]
    drained: Drain
    batched: Direct
    reconnecting: Direct
    direct: Direct
    valid_events: int
    verified: int
    environment: list[list[str]]


class Events:
    """The signed valid events of each batch, and every one's effect, for the final check."""

    def __init__(self, endpoints: Endpoints, planned: dict[str, list[Planned]]) -> None:
        self.endpoints = endpoints
        self.planned = planned
        self.expected: dict[str, str] = {}  # event id -> effect id, every valid event

    def valid(self, batch: str) -> list[Request]:
        requests = sign_all(self.planned[batch], self.endpoints, batch)
        pairs = zip(requests, self.planned[batch], strict=True)
        self.expected.update((r.event_id, p.effect_id) for r, p in pairs)
        return requests


def measure(args: argparse.Namespace, sizes: Sizes, broker: redis.Redis) -> Results:
    """Everything on the bench database: setup, the served runs, the in-process profile, the
    worker draining the backlog, the direct baselines, and the correctness checks."""
    batches = {
        "warmup": WARMUP_PER_CLIENT * sizes.clients,
        "accepted": sizes.events,
        "one-client": sizes.one_client,
        "profile-warmup": PROFILE_WARMUP,
        "profile": sizes.profile,
        "direct-batched": sizes.direct,
        "direct-reconnect": sizes.direct,
        "direct": sizes.direct,
    }
    events = Events(*prepare(batches))
    size_before = log_size()
    with tempfile.TemporaryDirectory(prefix="bench_webhooks_") as tmp:
        var_dir = Path(tmp)
        runs = serve_and_post(args, sizes, var_dir, events)
        warmup = events.valid("profile-warmup")
        profiles, floor = profile_in_process(events.valid("profile"), warmup)
        expected = len(events.expected)
        ids, distinct, tasks = queued(broker)
        if ids != expected or distinct != expected or tasks < 1:
            print_server_log(var_dir)  # an id not queued: the web process logged why
            raise SystemExit(
                f"{ids} ids ({distinct} distinct) in the ingestion queue and {tasks} tasks "
                f"to drain it, for {expected} events"
            )
        drained = drain(args.redis_url, var_dir, expected, args.database_url)
        # A drain task may be left queued behind the last batch: it finds nothing to do.
        if (left := queued(broker)[0]) != 0:
            raise SystemExit(f"{left} ids left in the ingestion queue")
        batched = ingest_directly(events.valid("direct-batched"), args.database_url, batch=True)
        reconnecting = ingest_directly(
            events.valid("direct-reconnect"), args.database_url, reconnect=True
        )
        direct = ingest_directly(events.valid("direct"), args.database_url)
    verified = check_ingestion(events.expected, size_before, random.Random(SEED))
    return Results(
        runs,
        profiles,
        floor,
        drained,
        batched,
        reconnecting,
        direct,
        len(events.expected),
        verified,
        environment(args.database_url),
    )


def main(argv: Sequence[str] | None = None) -> None:
    args, sizes = parse_args(argv)
    broker = own_redis(args.redis_url)
    # This process stores and queues too (the in-process profile): the same Redis database and
    # the same non-eager Celery as the served notary and the worker.
    os.environ["REDIS_URL"] = args.redis_url
    os.environ["CELERY_TASK_ALWAYS_EAGER"] = "false"
    try:
        with bench_database(args.database_url, keep=args.keep):
            results = measure(args, sizes, broker)
    finally:
        broker.flushdb()
        broker.close()
    print_results(args, sizes, results)


def print_results(args: argparse.Namespace, sizes: Sizes, results: Results) -> None:
    runs = results.runs
    accepted = next(run for run in runs if run.label.startswith("POST accepted"))
    gunicorn = f"{args.workers} workers x {args.threads} threads (gthread), keep-alive 2 s"
    clients = f"{sizes.clients} processes, http.client, one kept-alive connection each"
    print_environment(
        [
            *results.environment,
            ["gunicorn", f"{gunicorn}, DEBUG=false"],
            ["clients", f"{clients}, closed loop"],
            ["Redis", f"{args.redis_url} (server {broker_version(args.redis_url)})"],
            [
                "Celery",
                "CELERY_TASK_ALWAYS_EAGER=false; worker: solo pool, prefetch 1, acks late; "
                f"ingest_pending: {ingest_batch()} events per transaction",
            ],
        ]
    )
    print(f"\n## Accepting: {sizes.clients} concurrent clients, on gunicorn + PostgreSQL\n")
    print(accept_table(runs))
    print(
        "\nLatency: client side, from sending the request to the last byte of its answer "
        "(a 200 naming the event for accepted ones, a 400 for forged ones). requests/s = "
        "requests / (last client's end - first client's start). Accepted events are half "
        "Stripe refund events, half Resend email events, each naming its own dispatched "
        f"effect; {WARMUP_PER_CLIENT} per client were posted untimed first.\n"
    )
    print(provider_table(runs[1:]))
    print()
    print(cpu_table(runs, CPU_COLUMNS))
    print(
        "\nCPU during each run (from /proc): the client processes, the gunicorn master and "
        "workers, and the PostgreSQL backends of the bench database (Redis not counted). "
        "Ceiling = cores / total CPU per request."
    )
    print(f"\n## Where an accepted request's time goes (in process, {sizes.profile} requests)\n")
    print(profile_table(results.profiles, results.floor))
    print(
        "\nThe WSGI app called in this process through httpx.WSGITransport: no network, no "
        "gunicorn, one request at a time. SQL: execution time of each statement as Django runs "
        "it (a round trip each; the INSERT runs outside a transaction, so it includes its own "
        "durable commit); ORM: Django compiling the queries to SQL; COMMIT: a commit of its "
        "own, where there is one. Parts that do not occur are not listed. share = mean of the "
        "two providers over the whole request."
    )
    print("\n## Ingestion: one Celery worker on the queued backlog\n")
    print(
        ingest_table(
            results.drained, results.batched, results.reconnecting, results.direct, accepted
        )
    )
    print_goals(goal_rows(accepted, results.drained))
    total_valid = results.valid_events
    print(
        f"\nCorrectness: every valid event ({total_valid:,}, warm-ups included) was answered "
        "200 with its id and every forged one 400; every stored event was queued once and "
        "ingested exactly once (one Ingestion row, one OBSERVED and one COMMITTED entry per "
        f"effect, nothing else in the log); all {total_valid:,} effects ended {SETTLED}; "
        f"{results.verified} receipts re-derived from the whole log with verify_receipt."
    )
    print_total()


def serve_and_post(
    args: argparse.Namespace, sizes: Sizes, var_dir: Path, events: Events
) -> list[Run]:
    """gunicorn on the bench database and Redis database; the client runs against it."""
    # Forged requests are measured as the refusal they get, not as the rate limit's 429.
    settings = {
        "REDIS_URL": args.redis_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "WEBHOOK_UNVERIFIED_PER_MINUTE": str(10**9),
    }
    with (
        serving(
            args.database_url,
            var_dir,
            workers=args.workers,
            threads=args.threads,
            settings=settings,
        ) as url,
        Pool(sizes.clients, client_run, who="client") as clients,
    ):
        progress(f"started {sizes.clients} client processes")

        def run(label: str, jobs: Sequence[list[Request]]) -> Run:
            return run_clients(clients, url, label, jobs, args.database_url)

        n = sizes.clients
        run("warm-up", [[healthz(), *job] for job in spread(events.valid("warmup"), n)])
        return [
            run("GET /healthz", spread([healthz()] * sizes.events, n)),
            run("POST forged (400)", spread(forged_requests(sizes.events, events.endpoints), n)),
            run("POST accepted (200)", spread(events.valid("accepted"), n)),
            run("POST accepted (200), 1 client", [events.valid("one-client")] + [[]] * (n - 1)),
        ]


def broker_version(redis_url: str) -> str:
    with redis.Redis.from_url(redis_url) as client:
        return str(client.info("server").get("redis_version", "?"))


if __name__ == "__main__":
    main()
