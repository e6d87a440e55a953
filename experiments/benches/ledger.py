"""Benchmark the ledger on PostgreSQL, each figure beside a baseline measured in the same run.

1. Appends/s through `append_entry` with 1, 4 and 16 writer processes on one log, against plain
   single-row INSERT + COMMIT into a bare table; and `append_entries` batches at 16 writers.
2. Verification: `verify_log` over entries already in memory, the whole `verify_ledger` command
   (DB reads included), and raw SHA-256 over the same leaf bytes.
3. Inclusion and consistency proofs on a large log: latency, SQL queries per proof, and every
   proof checked against `root_at` (a wrong proof aborts the run).

It works in its own database (BENCH_DATABASE_URL, default interlock_bench), dropped and recreated
at start, so it never touches real data. Tables go to stdout, progress to stderr:

    .venv/bin/python -m experiments.benches.ledger [--quick]
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any, Literal, cast

import psycopg

from experiments.kit.bench import parse, parser, print_total, progress
from experiments.kit.database import bench_database, create_baseline_table, setup_django
from experiments.kit.machine import environment, print_environment
from experiments.kit.pool import Child, Pool
from experiments.kit.served import print_goals, verdict
from experiments.kit.stats import best_of, percentile, span
from experiments.kit.tables import aligned_table
from ledger.core.canonical import canonical_json
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import Entry, EntryKind, leaf_bytes
from ledger.core.merkle import NodeId, ProofError, leaf_hash, verify_consistency, verify_inclusion
from ledger.core.note import Signer
from ledger.core.verify import LogHead, SignedCheckpoint, verify_log

if TYPE_CHECKING:
    from ledger.models import Log

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/interlock_bench"
WRITERS_ORIGIN = "bench.interlock.example/writers"
VERIFY_ORIGIN = "bench.interlock.example/verify"
PROOFS_ORIGIN = "bench.interlock.example/proofs"
SIGNER_NAME = "bench.interlock.example"
FILL_BATCH = 1000
VERIFY_CHECKPOINT_EVERY = 1000
REPEATS = 3
SEED = 6962

WriterMode = Literal["baseline", "append_entry", "append_entries"]


@dataclass(frozen=True)
class Profile:
    seconds: float
    verify_entries: int
    proof_entries: int
    proofs: int


PROFILES = {
    "quick": Profile(seconds=1.5, verify_entries=2_000, proof_entries=10_000, proofs=100),
    "default": Profile(seconds=5.0, verify_entries=20_000, proof_entries=100_000, proofs=200),
}


@dataclass(frozen=True)
class Throughput:
    rows: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.rows / self.seconds


# --- Concurrent writers -----------------------------------------------------------------------


@dataclass(frozen=True)
class WriterJob:
    mode: WriterMode
    worker: int
    threads: int
    seconds: float
    batch: int


@dataclass(frozen=True)
class WriterResult:
    """Wall times from time.time(), so the processes' clocks agree."""

    start: float
    last_commit: float
    rows: int


@dataclass(frozen=True)
class Shape:
    """How 16 (or n) concurrent writers are spread: processes, each with threads of its own."""

    processes: int
    threads: int

    @property
    def writers(self) -> int:
        return self.processes * self.threads

    def __str__(self) -> str:
        return f"{self.processes} x {self.threads}"


# One writer; 4 and 16 as processes of one thread (no two writers share a process, so group
# commit has nobody to combine with); 16 as the notary's gunicorn runs them (2 workers x 8
# threads) and as one process of 16 threads.
SHAPES = (Shape(1, 1), Shape(4, 1), Shape(16, 1), Shape(2, 8), Shape(1, 16))
GOAL_SHAPE = Shape(2, 8)
GOAL_RATIO = 2.0


def entry_body(worker: int, n: int) -> dict[str, Any]:
    """A small receipt-like body: about 150 bytes of canonical JSON."""
    return {
        "agent": f"bench-agent-{worker}",
        "amount_minor": 1299,
        "currency": "EUR",
        "n": n,
        "request": "req-0123456789abcdef0123456789abcdef",
        "tool": "payments.charge",
    }


def baseline_body(worker: int) -> bytes:
    """The leaf bytes of a typical entry: what an append commits to, as one bytea value."""
    return leaf_bytes(
        seq=0,
        kind=EntryKind.OBSERVED.value,
        effect_id=f"w{worker}-0",
        body=canonical_json(entry_body(worker, 0)),
        created_at=datetime.now(UTC),
        prev_hash=bytes(32),
    )


def writer_setup(database_url: str) -> str:
    """In each writer process: Django on the bench database."""
    setup_django(database_url)
    return database_url


def writer_run(child: Child, job: WriterJob) -> WriterResult:
    """`job.threads` writers in this process, each with its own connection, started together."""
    database_url: str = child.state
    connected = threading.Barrier(job.threads + 1)
    go = threading.Event()
    results: list[WriterResult | BaseException] = []

    def writer(index: int) -> None:
        worker = job.worker * job.threads + index
        try:
            loop = connect_writer(job, worker, database_url)
            connected.wait()
            go.wait()
            results.append(loop())
        except BaseException as exc:  # handed to the parent below
            connected.abort()
            results.append(exc)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(job.threads)]
    for thread in threads:
        thread.start()
    try:
        connected.wait()
    except threading.BrokenBarrierError:
        pass
    else:
        child.ready()
    go.set()
    for thread in threads:
        thread.join()
    for result in results:
        if isinstance(result, BaseException):
            raise result
    finished = cast(list[WriterResult], results)
    return WriterResult(
        min(r.start for r in finished),
        max(r.last_commit for r in finished),
        sum(r.rows for r in finished),
    )


def connect_writer(job: WriterJob, worker: int, database_url: str) -> Callable[[], WriterResult]:
    """Open this writer's connection; return its timed loop."""
    if job.mode == "baseline":
        conn = psycopg.connect(database_url, autocommit=True)
        return partial(run_baseline, job, worker, conn)
    from django.db import connection

    from ledger.services import ensure_log

    log = ensure_log(origin=WRITERS_ORIGIN)  # opens this thread's connection

    def appends() -> WriterResult:
        try:
            return run_appends(job, worker, log)
        finally:
            connection.close()

    return appends


def run_baseline(job: WriterJob, worker: int, conn: psycopg.Connection[Any]) -> WriterResult:
    body = baseline_body(worker)
    with conn:
        start = now = time.time()
        rows = 0
        while now < start + job.seconds:
            conn.execute("INSERT INTO bench_baseline (body) VALUES (%s)", (body,))
            rows += 1
            now = time.time()
    return WriterResult(start, now, rows)


def run_appends(job: WriterJob, worker: int, log: Log) -> WriterResult:
    from ledger.services import NewEntry, append_entries, append_entry

    kind = EntryKind.OBSERVED.value
    rows = 0
    start = now = time.time()
    while now < start + job.seconds:
        if job.mode == "append_entry":
            body = entry_body(worker, rows)
            append_entry(log=log, kind=kind, body=body, effect_id=f"w{worker}-{rows}")
        else:
            items = [
                NewEntry(kind=kind, body=entry_body(worker, n), effect_id=f"w{worker}-{n}")
                for n in range(rows, rows + job.batch)
            ]
            append_entries(log=log, items=items)
        rows += job.batch
        now = time.time()
    return WriterResult(start, now, rows)


def run_writers(
    pool: Pool[WriterJob, WriterResult], mode: WriterMode, shape: Shape, seconds: float, batch: int
) -> Throughput:
    """The shape's writers started together once all are connected; wall time runs from the
    first start to the last commit. Appends are checked: the log grew by exactly what they
    counted (bench_writers verifies the whole log once all shapes have run)."""
    from ledger.selectors import log_head
    from ledger.services import ensure_log

    log = ensure_log(origin=WRITERS_ORIGIN)
    before = log_head(log=log).size
    jobs = [
        WriterJob(mode, worker, shape.threads, seconds, batch) for worker in range(shape.processes)
    ]
    finished = pool.run(jobs)
    result = Throughput(
        rows=sum(r.rows for r in finished),
        seconds=max(r.last_commit for r in finished) - min(r.start for r in finished),
    )
    grown = log_head(log=log).size - before
    if mode != "baseline" and grown != result.rows:
        raise SystemExit(f"writers counted {result.rows} appends but the log grew by {grown}")
    return result


def bench_writers(
    database_url: str, seconds: float, batches: Sequence[int]
) -> tuple[str, list[list[str]]]:
    top = max(shape.processes for shape in SHAPES)
    progress(f"writers: spawning {top} writer processes")
    rows: list[list[str]] = []
    goal: list[list[str]] = []
    with Pool(top, writer_run, setup=partial(writer_setup, database_url), who="writer") as pool:
        for shape in SHAPES:
            progress(f"writers: {shape} x INSERT+COMMIT baseline")
            baseline = run_writers(pool, "baseline", shape, seconds, 1)
            progress(f"writers: {shape} x append_entry")
            appended = run_writers(pool, "append_entry", shape, seconds, 1)
            rows.append(throughput_row("append_entry", shape, appended, baseline))
            if shape == GOAL_SHAPE:
                ratio = appended.per_second / baseline.per_second
                goal.append(
                    [
                        f"append_entry >= {GOAL_RATIO:g}x INSERT+COMMIT, {shape.writers} writers "
                        f"({shape} processes x threads)",
                        f"{ratio:.2f}x ({appended.per_second:,.0f} against "
                        f"{baseline.per_second:,.0f} rows/s)",
                        verdict(ratio >= GOAL_RATIO),
                    ]
                )
                for batch in batches:
                    progress(f"writers: {shape} x append_entries, {batch} entries per call")
                    appended = run_writers(pool, "append_entries", shape, seconds, batch)
                    path = f"append_entries ({batch}/call)"
                    rows.append(throughput_row(path, shape, appended, baseline))
        progress("writers: stopping the writer processes")
    progress("writers: verifying the writers' log")
    from ledger.selectors import verify_stored
    from ledger.services import ensure_log

    entries = verify_stored(log=ensure_log(origin=WRITERS_ORIGIN)).entries
    table = aligned_table(
        [
            "path",
            "processes x threads",
            "entries",
            "seconds",
            "entries/s",
            "INSERT+COMMIT rows/s",
            "ratio",
        ],
        rows,
    )
    return f"{table}\n\nThe writers' log verified whole afterwards: {entries:,} entries.", goal


def throughput_row(
    path: str, shape: Shape, measured: Throughput, baseline: Throughput
) -> list[str]:
    return [
        path,
        str(shape),
        f"{measured.rows:,}",
        f"{measured.seconds:.2f}",
        f"{measured.per_second:,.0f}",
        f"{baseline.per_second:,.0f}",
        f"{measured.per_second / baseline.per_second:.2f}",
    ]


# --- Building logs ----------------------------------------------------------------------------


def fill_log(log: Log, count: int, *, signer: Signer, checkpoint_every: int) -> Throughput:
    """Append `count` entries in batches of FILL_BATCH, signing a checkpoint every
    `checkpoint_every` entries and at the end."""
    from ledger.services import NewEntry, append_entries, sign_checkpoint

    kind = EntryKind.OBSERVED.value
    started = time.perf_counter()
    for first in range(0, count, FILL_BATCH):
        items = [
            NewEntry(kind=kind, body=entry_body(0, n), effect_id=f"fill-{n}")
            for n in range(first, min(first + FILL_BATCH, count))
        ]
        append_entries(log=log, items=items)
        if log.size % checkpoint_every == 0 or log.size == count:
            sign_checkpoint(log=log, signer=signer)
        if first and first % (10 * FILL_BATCH) == 0:
            progress(f"  {first:,} / {count:,} entries")
    return Throughput(rows=count, seconds=time.perf_counter() - started)


# --- Verification -----------------------------------------------------------------------------

LogRead = tuple[list[Entry], list[tuple[NodeId, bytes]], list[SignedCheckpoint], LogHead]


def read_log(log: Log) -> LogRead:
    from ledger import selectors

    return (
        list(selectors.iter_entries(log=log)),
        list(selectors.iter_nodes(log=log)),
        selectors.signed_checkpoints(log=log),
        selectors.log_head(log=log),
    )


def bench_verify(count: int) -> str:
    from django.core.management import call_command

    from ledger.services import ensure_log

    signer = Signer.generate(SIGNER_NAME)
    log = ensure_log(origin=VERIFY_ORIGIN)
    progress(f"verify: building a log of {count:,} entries")
    fill_log(log, count, signer=signer, checkpoint_every=VERIFY_CHECKPOINT_EVERY)
    verifier = log_verifier(log.origin, signer)
    progress("verify: reading the log into memory")
    entries, nodes, checkpoints, head = read_log(log)
    leaves = [entry.leaf_bytes() for entry in entries]

    def in_memory() -> None:
        report = verify_log(
            origin=log.origin,
            entries=entries,
            nodes=nodes,
            checkpoints=checkpoints,
            verifiers=[verifier],
            head=head,
        )
        if report.entries != count or report.checkpoints != len(checkpoints):
            raise SystemExit(f"verify_log checked {report.entries} entries, expected {count}")

    def command() -> None:
        out = io.StringIO()
        call_command(
            "verify_ledger", log=log.origin, vkey=[verifier.vkey], no_progress=True, stdout=out
        )
        if not out.getvalue().startswith("OK"):
            raise SystemExit(f"verify_ledger did not pass: {out.getvalue()}")

    def sha256_only() -> None:
        for leaf in leaves:
            hashlib.sha256(leaf).digest()

    progress("verify: timing sha256, verify_log and verify_ledger")
    sha_seconds = best_of(REPEATS, sha256_only)
    measured = [
        ("raw hashlib.sha256 over leaf bytes", sha_seconds),
        ("verify_log, entries in memory", best_of(REPEATS, in_memory)),
        ("DB read only (iter_entries, iter_nodes, ...)", best_of(REPEATS, lambda: read_log(log))),
        ("verify_ledger command (DB reads + verify)", best_of(REPEATS, command)),
    ]
    return aligned_table(
        ["path", "entries", "seconds", "entries/s", "vs sha256"],
        [
            [name, f"{count:,}", f"{s:.4f}", f"{count / s:,.0f}", f"{sha_seconds / s:.4f}"]
            for name, s in measured
        ],
    )


# --- Proofs -----------------------------------------------------------------------------------


ProofCase = tuple[Callable[[], list[bytes]], Callable[[list[bytes]], None]]


def proof_row(name: str, size: int, cases: Sequence[ProofCase]) -> list[str]:
    """Time each proof, count its SQL queries in a second, untimed call (capturing adds
    overhead), and check it; a proof that does not verify aborts the benchmark."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    timings: list[float] = []
    queries: list[int] = []
    for make, check in cases:
        started = time.perf_counter()
        proof = make()
        timings.append((time.perf_counter() - started) * 1000)
        with CaptureQueriesContext(connection) as captured:
            make()
        queries.append(len(captured))
        try:
            check(proof)
        except ProofError as exc:
            raise SystemExit(f"wrong proof, benchmark aborted: {exc}") from exc
    return [
        name,
        f"{size:,}",
        str(len(timings)),
        f"{percentile(timings, 50):.2f}",
        f"{percentile(timings, 95):.2f}",
        span(queries),
    ]


def inclusion_cases(log: Log, count: int, indexes: Sequence[int], root: bytes) -> list[ProofCase]:
    from ledger import selectors

    def check(proof: list[bytes], index: int, leaf: bytes) -> None:
        verify_inclusion(leaf_hash=leaf, index=index, size=count, proof=proof, root=root)

    return [
        (
            partial(selectors.inclusion_proof, log=log, index=index, size=count),
            partial(
                check,
                index=index,
                leaf=leaf_hash(selectors.get_entry(log=log, seq=index).leaf_bytes()),
            ),
        )
        for index in indexes
    ]


def consistency_cases(log: Log, pairs: Sequence[tuple[int, int]]) -> list[ProofCase]:
    from ledger import selectors

    roots = {size: selectors.root_at(log=log, size=size) for pair in pairs for size in pair}

    def check(proof: list[bytes], old: int, new: int) -> None:
        verify_consistency(
            old_size=old, new_size=new, old_root=roots[old], new_root=roots[new], proof=proof
        )

    return [
        (
            partial(selectors.consistency_proof, log=log, old_size=old, new_size=new),
            partial(check, old=old, new=new),
        )
        for old, new in pairs
    ]


def bench_proofs(count: int, samples: int) -> tuple[str, str]:
    from ledger import selectors
    from ledger.services import ensure_log

    signer = Signer.generate(SIGNER_NAME)
    log = ensure_log(origin=PROOFS_ORIGIN)
    progress(f"proofs: building a log of {count:,} entries")
    built = fill_log(log, count, signer=signer, checkpoint_every=count)
    checkpoint = selectors.latest_checkpoint(log=log)
    root = selectors.root_at(log=log, size=count)
    if checkpoint is None or bytes(checkpoint.root) != root:
        raise SystemExit("root_at disagrees with the signed checkpoint")
    rng = random.Random(SEED)
    progress(f"proofs: {samples} inclusion proofs")
    indexes = rng.sample(range(count), k=min(samples, count))
    inclusion = proof_row("inclusion_proof", count, inclusion_cases(log, count, indexes, root))
    progress(f"proofs: {samples} consistency proofs")
    pairs = []
    for _ in range(samples):
        old = rng.randrange(1, count)
        pairs.append((old, rng.randrange(old + 1, count + 1)))
    consistency = proof_row(
        "consistency_proof (random old < new)", count, consistency_cases(log, pairs)
    )
    built_line = (
        f"Log of {count:,} entries built in {built.seconds:.1f} s "
        f"({built.per_second:,.0f} entries/s via append_entries, {FILL_BATCH} per call); "
        f"every proof verified against root_at."
    )
    return built_line, aligned_table(
        ["proof", "tree size", "proofs", "median ms", "p95 ms", "SQL queries/proof"],
        [inclusion, consistency],
    )


# --- Entry point ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[Profile, list[int], str]:
    options = parser(__doc__)
    options.add_argument(
        "--quick", action="store_true", help="small sizes, well under a minute in all"
    )
    options.add_argument("--seconds", type=float, help="seconds per writer configuration")
    options.add_argument("--verify-entries", type=int, help="entries in the verified log")
    options.add_argument("--proof-entries", type=int, help="entries in the proved log")
    options.add_argument("--proofs", type=int, help="proofs of each kind to time")
    options.add_argument(
        "--batches",
        default="16",
        help="comma-separated entries per append_entries call at 16 writers (default 16)",
    )
    args, profile = parse(options, argv, PROFILES)
    batches = [int(batch) for batch in args.batches.split(",")]
    return profile, batches, os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)


def main(argv: Sequence[str] | None = None) -> None:
    profile, batches, database_url = parse_args(argv)
    with bench_database(database_url, keep=True):
        create_baseline_table(database_url)
        writers, goal = bench_writers(database_url, profile.seconds, batches)
        verify = bench_verify(profile.verify_entries)
        built_line, proofs = bench_proofs(profile.proof_entries, profile.proofs)
        environment_rows = environment(database_url)

    print_environment(environment_rows)
    print_goals(goal)
    print(f"\n## Appends ({profile.seconds:g} s per configuration, one log)\n")
    print(writers)
    print(
        "\nratio = entries/s over INSERT+COMMIT rows/s of as many writers in the same processes "
        "and threads (measured just before); each "
        f"baseline row is one transaction of {len(baseline_body(0))} bytes (an entry's leaf bytes)."
    )
    print(f"\n## Verification ({profile.verify_entries:,} entries, best of {REPEATS})\n")
    print(verify)
    print("\nvs sha256 = raw sha256 time over this path's time (1.0 would be hashing speed).")
    print(f"\n## Proofs ({profile.proof_entries:,} entries)\n")
    print(proofs)
    print(f"\n{built_line}")
    print_total()


if __name__ == "__main__":
    main()
