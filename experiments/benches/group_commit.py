"""Measure group commit through a per-log sequencer fed by Redis, beside the locked append path.

`append_entry` holds its log's row lock until its transaction commits, so one log pays one commit
per entry. Here callers never touch the database: each builds, encodes and validates its entry
outside any lock, pushes it onto the log's Redis list and waits on its own reply key. One
sequencer process pops everything queued, appends it with ONE `append_entries` call (one
transaction, one commit), and only then replies to each caller with its seq. With 16 callers, 16
(INSERT + COMMIT)s can become one transaction of 16 entries.

What this design gives up compared with the locked append path:

- Atomicity with the caller's own writes. `append_entry` runs in the caller's transaction, so a
  state change and its entry commit together or not at all, and the row lock orders them in the
  log. Here the entry commits in the sequencer's transaction: a caller can commit its state
  change and crash before its entry is appended, or see the append fail after its change
  committed. They are atomic again only if the sequencer applies the state change itself, in
  the transaction that appends the entry.
- Liveness and a clear outcome. If the sequencer dies or stalls, requests stay queued in Redis
  and a caller sees only a timeout on its reply key. It cannot tell "never appended" from
  "appended, reply lost" or "appended later, when a sequencer comes back" without looking its
  request id up in the log; a blind retry can append the entry twice.
- Shared fate. One transaction carries many callers' entries, so one failure fails them all.
- Durability of the reply is kept: it is sent only after the commit returns, so a seq a caller
  holds is in the log. Until then the request lives only in Redis memory; losing it there
  (restart, failover) also shows up as a timeout.

The run uses its own database (BENCH_DATABASE_URL, default interlock_bench_gc, dropped and
recreated; a name without "bench" is refused) and its own Redis keys (BENCH_REDIS_URL, default db
14, a random key prefix, deleted at the end). In the same run it measures the plain INSERT+COMMIT
baseline and `append_entry`, 16 processes each, and the sequencer's database work alone (one
process, 16 entries per `append_entries` call, no callers, no Redis): the most any transport
could let one sequencer reach. Afterwards the log is checked with `verify_log`, and every
acknowledged request id must appear exactly once, at the seq its caller was told, or the
benchmark aborts. Tables go to stdout, progress to stderr:

    .venv/bin/python -m experiments.benches.group_commit [--quick] [--profile-sequencer]
"""

from __future__ import annotations

import cProfile
import json
import os
import pstats
import secrets
import sys
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from itertools import pairwise
from typing import TYPE_CHECKING, Any, Literal

import psycopg
import redis

from experiments.kit.bench import parser, print_total, progress
from experiments.kit.database import bench_database, create_baseline_table, setup_django
from experiments.kit.machine import CORES, environment, machine_busy_seconds, print_environment
from experiments.kit.pool import Child, Pool
from experiments.kit.stats import mean, percentile
from experiments.kit.tables import aligned_table
from ledger.core.canonical import canonical_json
from ledger.core.entries import EntryKind, check_entry_fields, leaf_bytes
from ledger.core.verify import LogVerificationError, verify_log

if TYPE_CHECKING:
    from ledger.models import Log

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/interlock_bench_gc"
DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/14"
LOCKED_ORIGIN = "bench.interlock.example/append-entry"
ALONE_ORIGIN = "bench.interlock.example/batches-alone"
GROUPED_ORIGIN = "bench.interlock.example/group-commit"
ORIGINS = (LOCKED_ORIGIN, ALONE_ORIGIN, GROUPED_ORIGIN)
WRITERS = 16
KIND = EntryKind.OBSERVED.value
# Above WRITERS: each caller has one request in flight, so every queued request fits the next batch.
MAX_BATCH = 256
REPLY_TIMEOUT = 30  # seconds a caller waits for its seq before counting a timeout
REPLY_TTL = 60  # seconds an unread reply (its caller timed out) stays in Redis
IDLE_POLL = 0.05  # seconds the sequencer blocks on an empty queue before checking for stop
PHASES = (
    "BLPOP first request (incl. waiting)",
    "LPOP the rest of the batch",
    "decode requests",
    "append_entries (one transaction)",
    "reply pipeline (RPUSH + EXPIRE)",
)

Mode = Literal["baseline", "append_entry", "batches_alone", "caller", "sequencer"]


@dataclass(frozen=True)
class Setup:
    """What every worker process needs to find the database, Redis and its keys."""

    database_url: str
    redis_url: str
    prefix: str
    profile_sequencer: bool

    def requests_key(self, origin: str) -> str:
        return f"{self.prefix}:requests:{origin}"

    def reply_key(self, request_id: str) -> str:
        return f"{self.prefix}:reply:{request_id}"


@dataclass(frozen=True)
class Job:
    mode: Mode
    worker: int
    seconds: float


@dataclass(frozen=True)
class WriterResult:
    """One writer's or caller's run: wall times from time.time(), so the processes agree."""

    start: float
    end: float
    entries: int
    latencies: list[float]  # one per call or request
    cpu: float
    acked: list[tuple[str, int]] = field(default_factory=list)
    timeouts: int = 0


@dataclass(frozen=True)
class SequencerResult:
    batches: list[int]
    phases: dict[str, float]
    busy: float  # seconds from the start signal to the last reply sent
    cpu: float


@dataclass(frozen=True)
class Worker:
    """A worker process's connections, made once and shared by the jobs it runs."""

    setup: Setup
    logs: dict[str, Log]
    client: redis.Redis


@dataclass(frozen=True)
class Measurement:
    """One configuration: its workers' reports and the CPU the machine and Redis spent."""

    path: str
    processes: int
    writers: list[WriterResult]
    sequencer: SequencerResult | None
    machine_cpu: float | None
    redis_cpu: float

    @property
    def entries(self) -> int:
        return sum(w.entries for w in self.writers)

    @property
    def seconds(self) -> float:
        return max(w.end for w in self.writers) - min(w.start for w in self.writers)

    @property
    def per_second(self) -> float:
        return self.entries / self.seconds

    @property
    def latencies_ms(self) -> list[float]:
        return sorted(1000 * latency for w in self.writers for latency in w.latencies)


# --- Worker processes -------------------------------------------------------------------------


def worker_setup(setup: Setup) -> Worker:
    """Django, the logs (ensure_log also opens the database connection) and Redis."""
    setup_django(setup.database_url)
    from ledger.services import ensure_log

    logs = {origin: ensure_log(origin=origin) for origin in ORIGINS}
    client = redis.Redis.from_url(setup.redis_url)
    client.ping()
    return Worker(setup, logs, client)


def worker_run(child: Child, job: Job) -> WriterResult | SequencerResult:
    return RUNNERS[job.mode](child, child.state, job)


def entry_body(worker: int, n: int, request_id: str) -> dict[str, Any]:
    """The request id rides in the body, so the log itself shows which requests it holds."""
    return {"n": n, "request": request_id, "writer": worker}


def timed_loop(child: Child, job: Job, step: Callable[[int], int]) -> WriterResult:
    """Call `step(entries so far)` (it returns the entries it added) until job.seconds pass,
    timing each call; the start waits for the signal."""
    latencies: list[float] = []
    entries = 0
    child.ready()
    cpu = time.process_time()
    start = end = time.time()
    while end < start + job.seconds:
        began = time.perf_counter()
        entries += step(entries)
        latencies.append(time.perf_counter() - began)
        end = time.time()
    return WriterResult(start, end, entries, latencies, time.process_time() - cpu)


def run_baseline(child: Child, worker: Worker, job: Job) -> WriterResult:
    """Single-row INSERT + COMMIT of an entry's leaf bytes: the cost of one commit per row."""
    body = leaf_bytes(
        seq=0,
        kind=KIND,
        effect_id=f"w{job.worker}-0",
        body=canonical_json(entry_body(job.worker, 0, uuid.uuid4().hex)),
        created_at=datetime.now(UTC),
        prev_hash=bytes(32),
    )
    with psycopg.connect(worker.setup.database_url, autocommit=True) as conn:

        def insert(_: int) -> int:
            conn.execute("INSERT INTO bench_baseline (body) VALUES (%s)", (body,))
            return 1

        return timed_loop(child, job, insert)


def run_append_entry(child: Child, worker: Worker, job: Job) -> WriterResult:
    """The locked path: each call takes the log's row lock and commits its own transaction."""
    from ledger.services import append_entry

    log = worker.logs[LOCKED_ORIGIN]

    def append(n: int) -> int:
        body = entry_body(job.worker, n, uuid.uuid4().hex)
        append_entry(log=log, kind=KIND, body=body, effect_id=f"w{job.worker}-{n}")
        return 1

    return timed_loop(child, job, append)


def run_batches_alone(child: Child, worker: Worker, job: Job) -> WriterResult:
    """The sequencer's database work with no callers and no Redis: one process appending
    WRITERS entries per append_entries call, the most one batch holds here. No transport can
    make the sequencer faster than this."""
    from ledger.services import NewEntry, append_entries

    log = worker.logs[ALONE_ORIGIN]

    def append(entries: int) -> int:
        items = []
        for n in range(entries, entries + WRITERS):
            body = canonical_json(entry_body(job.worker, n, uuid.uuid4().hex))
            items.append(NewEntry(kind=KIND, body=body, effect_id=f"w{job.worker}-{n}"))
        append_entries(log=log, items=items)
        return len(items)

    return timed_loop(child, job, append)


def run_caller(child: Child, worker: Worker, job: Job) -> WriterResult:
    """Validate and encode outside any lock, push, then wait for the seq; an entry counts only
    once its reply carries the seq. Latency runs from the push to the reply."""
    client = worker.client
    requests = worker.setup.requests_key(GROUPED_ORIGIN)
    latencies: list[float] = []
    acked: list[tuple[str, int]] = []
    timeouts = 0
    child.ready()
    cpu = time.process_time()
    start = end = time.time()
    n = 0
    while end < start + job.seconds:
        request_id = uuid.uuid4().hex
        body = canonical_json(entry_body(job.worker, n, request_id))
        effect_id = f"w{job.worker}-{n}"
        check_entry_fields(kind=KIND, effect_id=effect_id, body=body)
        message = json.dumps(
            {"body": body.decode(), "effect_id": effect_id, "id": request_id, "kind": KIND}
        )
        sent = time.perf_counter()
        client.rpush(requests, message)
        reply = client.blpop([worker.setup.reply_key(request_id)], timeout=REPLY_TIMEOUT)
        if reply is None:
            timeouts += 1
        else:
            latencies.append(time.perf_counter() - sent)
            acked.append((request_id, int(reply[1])))
        n += 1
        end = time.time()
    cpu = time.process_time() - cpu
    return WriterResult(start, end, len(acked), latencies, cpu, acked, timeouts)


def run_sequencer(child: Child, worker: Worker, job: Job) -> SequencerResult:
    """Pop whatever is queued, append it all in one transaction, then reply to each caller; stop
    once told to and the queue stays empty for IDLE_POLL."""
    client = worker.client
    requests = worker.setup.requests_key(GROUPED_ORIGIN)
    phases = dict.fromkeys(PHASES, 0.0)
    batches: list[int] = []
    # CPU time, not wall time: on a crowded machine wall time charges a function for the time
    # the sequencer sat runnable, waiting for a core.
    profiler = cProfile.Profile(time.process_time) if worker.setup.profile_sequencer else None
    child.ready()
    cpu = time.process_time()
    started = last_reply = time.perf_counter()
    if profiler is not None:
        profiler.enable()
    while True:
        t0 = time.perf_counter()
        first = client.blpop([requests], timeout=IDLE_POLL)
        if first is None:
            if child.stop.is_set():
                break
            continue
        marks = [t0, time.perf_counter()]
        batches.append(sequence_batch(worker, first[1], marks))
        last_reply = marks[-1]
        for phase, (begin, end) in zip(PHASES, pairwise(marks), strict=True):
            phases[phase] += end - begin
    if profiler is not None:
        profiler.disable()
        print("\n--- sequencer profile (cProfile, own CPU time) ---", file=sys.stderr)
        pstats.Stats(profiler, stream=sys.stderr).sort_stats("tottime").print_stats(30)
    return SequencerResult(batches, phases, last_reply - started, time.process_time() - cpu)


def sequence_batch(worker: Worker, first: bytes | str, marks: list[float]) -> int:
    """One batch: the rest of the queue, decoded, appended in one transaction, replied to;
    the time after each phase is added to `marks`. Returns the batch's size."""
    from ledger.services import NewEntry, append_entries

    client = worker.client
    requests = worker.setup.requests_key(GROUPED_ORIGIN)
    messages = [first, *(client.lpop(requests, MAX_BATCH - 1) or [])]
    marks.append(time.perf_counter())
    decoded = [json.loads(message) for message in messages]
    items = [
        NewEntry(kind=r["kind"], body=r["body"].encode(), effect_id=r["effect_id"]) for r in decoded
    ]
    marks.append(time.perf_counter())
    entries = append_entries(log=worker.logs[GROUPED_ORIGIN], items=items)
    marks.append(time.perf_counter())
    pipe = client.pipeline(transaction=False)
    for request, entry in zip(decoded, entries, strict=True):
        key = worker.setup.reply_key(request["id"])
        pipe.rpush(key, entry.seq)
        pipe.expire(key, REPLY_TTL)
    pipe.execute()
    marks.append(time.perf_counter())
    return len(items)


RUNNERS: dict[str, Callable[[Child, Worker, Job], WriterResult | SequencerResult]] = {
    "baseline": run_baseline,
    "append_entry": run_append_entry,
    "batches_alone": run_batches_alone,
    "caller": run_caller,
    "sequencer": run_sequencer,
}


# --- The parent: runs, CPU accounting, verification -------------------------------------------

WorkerPool = Pool[Job, WriterResult | SequencerResult]


def redis_cpu_seconds(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def measure(
    pool: WorkerPool, client: redis.Redis, path: str, mode: Mode, seconds: float
) -> Measurement:
    """Release the writers (and for callers, the sequencer) together once all are connected;
    stop the sequencer only after every caller has its last reply. batches_alone runs in
    the sequencer's process only."""
    jobs: list[Job | None] = [Job(mode, w, seconds) for w in range(WRITERS)] + [None]
    if mode == "batches_alone":
        jobs = [None] * WRITERS + [Job(mode, WRITERS, seconds)]
    grouped = mode == "caller"
    if grouped:
        jobs[WRITERS] = Job("sequencer", WRITERS, seconds)
    busy = pool.dispatch(jobs)
    machine_before, redis_before = machine_busy_seconds(), redis_cpu_seconds(client)
    pool.go.set()
    writers = pool.results(busy - grouped)
    machine_after, redis_after = machine_busy_seconds(), redis_cpu_seconds(client)
    pool.stop.set()
    sequencer = pool.results(1)[0] if grouped else None
    machine_cpu = (
        machine_after - machine_before
        if machine_before is not None and machine_after is not None
        else None
    )
    return Measurement(
        path=path,
        processes=busy,
        writers=[w for w in writers if isinstance(w, WriterResult)],
        sequencer=sequencer if isinstance(sequencer, SequencerResult) else None,
        machine_cpu=machine_cpu,
        redis_cpu=redis_after - redis_before,
    )


def check_log_size(log: Log, measured: Measurement) -> None:
    from ledger.selectors import log_head

    size = log_head(log=log).size
    if size != measured.entries:
        raise SystemExit(f"{measured.path}: {measured.entries} appends counted, the log has {size}")


def verify_grouped_log(log: Log, measured: Measurement, *, queued: int) -> int:
    """Abort unless the queue is empty, the log verifies and every acknowledged request is in it
    exactly once, at the seq its caller was told; return how many entries committed without an
    acknowledgement (their caller timed out first)."""
    from ledger import selectors

    if queued:
        raise SystemExit(f"{queued} requests were left queued after the sequencer stopped")
    entries = list(selectors.iter_entries(log=log))
    try:
        verify_log(
            origin=log.origin,
            entries=entries,
            nodes=selectors.iter_nodes(log=log),
            checkpoints=[],
            verifiers=[],
            head=selectors.log_head(log=log),
        )
    except LogVerificationError as exc:
        raise SystemExit(f"the group-commit log does not verify, aborted: {exc}") from exc
    seq_of: dict[str, int] = {}
    for entry in entries:
        request_id = entry.body_value()["request"]
        if request_id in seq_of:
            raise SystemExit(
                f"request {request_id} is in the log twice: seq {seq_of[request_id]} and "
                f"{entry.seq}; aborted"
            )
        seq_of[request_id] = entry.seq
    acked = [pair for writer in measured.writers for pair in writer.acked]
    told = dict(acked)
    if len(told) != len(acked):
        raise SystemExit("a request id was acknowledged twice; aborted")
    wrong = [(request_id, seq) for request_id, seq in acked if seq_of.get(request_id) != seq]
    if wrong:
        request_id, seq = wrong[0]
        raise SystemExit(
            f"{len(wrong)} acknowledged requests are not in the log at the seq their caller was "
            f"told, e.g. {request_id} told seq {seq}, log has {seq_of.get(request_id)}; aborted"
        )
    return len(seq_of.keys() - told.keys())


# --- Output and entry point -------------------------------------------------------------------


def throughput_row(measured: Measurement, baseline: Measurement) -> list[str]:
    latencies = measured.latencies_ms
    return [
        measured.path,
        str(measured.processes),
        f"{measured.entries:,}",
        f"{measured.seconds:.2f}",
        f"{measured.per_second:,.0f}",
        f"{baseline.per_second:,.0f}",
        f"{measured.per_second / baseline.per_second:.2f}",
        f"{percentile(latencies, 50):.2f}",
        f"{percentile(latencies, 95):.2f}",
    ]


def batch_table(sequencer: SequencerResult, measured: Measurement, unacked: int) -> str:
    batches = sequencer.batches
    return aligned_table(
        [
            "transactions",
            "entries/transaction: median",
            "p95",
            "max",
            "mean",
            "caller timeouts",
            "committed, not acknowledged",
        ],
        [
            [
                f"{len(batches):,}",
                f"{percentile(batches, 50):g}",
                f"{percentile(batches, 95):g}",
                str(max(batches)),
                f"{mean(batches):.1f}",
                str(sum(w.timeouts for w in measured.writers)),
                str(unacked),
            ]
        ],
    )


def sequencer_table(sequencer: SequencerResult) -> str:
    entries = sum(sequencer.batches)
    rows = [
        [phase, f"{1e6 * seconds / entries:.1f}", f"{100 * seconds / sequencer.busy:.1f}"]
        for phase, seconds in sequencer.phases.items()
    ]
    rows.append(
        ["wall time, start to last reply", f"{1e6 * sequencer.busy / entries:.1f}", "100.0"]
    )
    rows.append(
        [
            "CPU time of the sequencer process",
            f"{1e6 * sequencer.cpu / entries:.1f}",
            f"{100 * sequencer.cpu / sequencer.busy:.1f}",
        ]
    )
    return aligned_table(["sequencer phase", "µs per entry", "% of its wall time"], rows)


def cpu_row(measured: Measurement) -> list[str]:
    """CPU-microseconds per entry by where they were spent; the rest of the machine's busy time
    is PostgreSQL (backends, WAL writer), this parent and anything else running."""
    entries = measured.entries
    writers = sum(w.cpu for w in measured.writers)
    sequencer = measured.sequencer.cpu if measured.sequencer else 0.0
    cells = [measured.path, f"{measured.per_second:,.0f}"]
    per_entry = [writers, sequencer, measured.redis_cpu]
    if measured.machine_cpu is None:
        return [*cells, "n/a", *(f"{1e6 * s / entries:.0f}" for s in per_entry), "n/a", "n/a"]
    rest = measured.machine_cpu - sum(per_entry)
    total_us = 1e6 * measured.machine_cpu / entries
    return [
        *cells,
        f"{measured.machine_cpu / measured.seconds:.2f}",
        *(f"{1e6 * s / entries:.0f}" for s in (*per_entry, rest)),
        f"{total_us:.0f}",
        f"{CORES * 1e6 / total_us:,.0f}",
    ]


def run_all(setup: Setup, client: redis.Redis, seconds: float) -> list[Measurement]:
    """The four configurations, in one pool of WRITERS workers and a sequencer (spawning 17
    Django processes costs seconds of CPU on a small machine); the Redis keys deleted after."""
    progress(f"spawning {WRITERS} writer processes and a sequencer")
    configurations: list[tuple[str, Mode]] = [
        ("INSERT+COMMIT baseline", "baseline"),
        ("append_entry (row lock, commit each)", "append_entry"),
        (f"append_entries alone, {WRITERS}/call (sequencer ceiling)", "batches_alone"),
        ("Redis sequencer, append_entries per batch", "caller"),
    ]
    pool: WorkerPool = Pool(WRITERS + 1, worker_run, setup=partial(worker_setup, setup))
    try:
        measured = []
        for path, mode in configurations:
            progress(path)
            measured.append(measure(pool, client, path, mode, seconds))
        return measured
    finally:
        progress("stopping the workers, deleting the Redis keys")
        pool.close()
        for key in client.scan_iter(match=f"{setup.prefix}:*"):
            client.delete(key)


def main(argv: Sequence[str] | None = None) -> None:
    options = parser(__doc__)
    options.add_argument("--quick", action="store_true", help="2 s per configuration, not 5")
    options.add_argument("--seconds", type=float, help="seconds per configuration")
    options.add_argument(
        "--profile-sequencer",
        action="store_true",
        help="cProfile the sequencer and print its top functions to stderr (slows it down)",
    )
    args = options.parse_args(argv)
    seconds = args.seconds or (2.0 if args.quick else 5.0)
    database_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    setup = Setup(
        database_url=database_url,
        redis_url=os.environ.get("BENCH_REDIS_URL", DEFAULT_REDIS_URL),
        prefix=f"bench-gc-{secrets.token_hex(4)}",
        profile_sequencer=args.profile_sequencer,
    )
    client = redis.Redis.from_url(setup.redis_url)
    with bench_database(database_url, keep=True):
        create_baseline_table(database_url)
        from ledger.services import ensure_log

        logs = {origin: ensure_log(origin=origin) for origin in ORIGINS}
        _, locked, alone, grouped = runs = run_all(setup, client, seconds)
        queued = client.llen(setup.requests_key(GROUPED_ORIGIN))
        if grouped.sequencer is None:
            raise SystemExit("the sequencer sent no result")
        check_log_size(logs[LOCKED_ORIGIN], locked)
        check_log_size(logs[ALONE_ORIGIN], alone)
        progress("verifying the group-commit log and every acknowledgement")
        unacked = verify_grouped_log(logs[GROUPED_ORIGIN], grouped, queued=queued)
        environment_rows = environment(database_url)
    print_results(runs, grouped.sequencer, unacked, seconds, environment_rows, client)


def print_results(
    runs: Sequence[Measurement],
    sequencer: SequencerResult,
    unacked: int,
    seconds: float,
    environment_rows: list[list[str]],
    client: redis.Redis,
) -> None:
    baseline, grouped = runs[0], runs[-1]
    print_environment([*environment_rows, ["Redis", str(client.info("server")["redis_version"])]])
    print(f"\n## Appends to one log, {WRITERS} writers, {seconds:g} s per configuration\n")
    headers = ["path", "processes", "entries", "seconds", "entries/s", "INSERT+COMMIT rows/s"]
    headers += ["ratio", "median ms", "p95 ms"]
    print(aligned_table(headers, [throughput_row(m, baseline) for m in runs]))
    print(
        "\nratio = entries/s over the INSERT+COMMIT baseline's rows/s, same run (goal: >= 2). "
        "Latency: one INSERT+COMMIT, one append_entry or append_entries call, or for the "
        "sequencer path from a caller's RPUSH to its reply. The sequencer ceiling is the "
        "sequencer's database work alone: one process, no callers, no Redis. The sequencer path "
        f"runs {WRITERS} callers plus the sequencer."
    )
    print("\n## Group commit: entries per transaction\n")
    print(batch_table(sequencer, grouped, unacked))
    print(
        f"\nThe log verified (verify_log: gapless seqs, chain, Merkle nodes, head) and each of "
        f"the {grouped.entries:,} acknowledged request ids is in it once, at the seq its caller "
        "was told."
    )
    print("\n## Where the sequencer's time goes\n")
    print(sequencer_table(sequencer))
    print("\n## CPU per entry (µs), all processes on this machine\n")
    headers = ["path", "entries/s", "cores busy", "writers/callers", "sequencer", "Redis"]
    headers += ["PostgreSQL + rest", "total", "entries/s if CPU-bound"]
    print(aligned_table(headers, [cpu_row(m) for m in runs]))
    print(
        f"\ncores busy = machine busy CPU-seconds over the run's wall time ({os.cpu_count()} "
        "cores); PostgreSQL + rest = machine busy time less the workers', the sequencer's and "
        "Redis's own (it includes other load on the machine); entries/s if CPU-bound = cores "
        "over total CPU per entry."
    )
    print_total()


if __name__ == "__main__":
    main()
