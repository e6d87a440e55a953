"""Benchmark the ledger on PostgreSQL, each figure beside a baseline measured in the same run.

1. Appends/s through `append_entry` with 1, 4 and 16 writer processes on one log, against plain
   single-row INSERT + COMMIT into a bare table; and `append_entries` batches at 16 writers.
2. Verification: `verify_log` over entries already in memory, the whole `verify_ledger` command
   (DB reads included), and raw SHA-256 over the same leaf bytes.
3. Inclusion and consistency proofs on a large log: latency, SQL queries per proof, and every
   proof checked against `root_at` (a wrong proof aborts the run).

It works in its own database (BENCH_DATABASE_URL, default interlock_bench), dropped and recreated
at start, so it never touches real data. Tables go to stdout, progress to stderr:

    .venv/bin/python experiments/bench_ledger.py [--quick]
"""

from __future__ import annotations

import argparse
import hashlib
import io
import multiprocessing
import os
import platform
import queue
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import psycopg
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

# The script lives in experiments/; the spawned writers import it too, so this runs in each.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from ledger.core.canonical import canonical_json
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import Entry, EntryKind, leaf_bytes
from ledger.core.merkle import (
    NodeId,
    ProofError,
    leaf_hash,
    verify_consistency,
    verify_inclusion,
)
from ledger.core.note import Signer
from ledger.core.verify import LogHead, SignedCheckpoint, verify_log

if TYPE_CHECKING:
    from multiprocessing.queues import Queue
    from multiprocessing.synchronize import Event

    from ledger.models import Log

DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/interlock_bench"
WRITERS_ORIGIN = "bench.interlock.example/writers"
VERIFY_ORIGIN = "bench.interlock.example/verify"
PROOFS_ORIGIN = "bench.interlock.example/proofs"
SIGNER_NAME = "bench.interlock.example"
WRITER_COUNTS = (1, 4, 16)
FILL_BATCH = 1000
VERIFY_CHECKPOINT_EVERY = 1000
REPEATS = 3
SEED = 6962
# Spawning 16 Django processes on 2 cores takes seconds; a writer that never arrives must not
# hang the run forever.
START_TIMEOUT = 300.0

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
class WriterJob:
    mode: WriterMode
    worker: int
    seconds: float
    batch: int


@dataclass(frozen=True)
class Ready:
    """A writer is set up and connected: after starting, and before each job's start signal."""

    writer: str


@dataclass(frozen=True)
class WriterResult:
    start: float
    last_commit: float
    rows: int


# What a writer sends back: ready, done, or an error message.
Report = Ready | WriterResult | str


@dataclass(frozen=True)
class Throughput:
    rows: int
    seconds: float

    @property
    def per_second(self) -> float:
        return self.rows / self.seconds


@dataclass(frozen=True)
class ProofStats:
    samples: int
    median_ms: float
    p95_ms: float
    min_queries: int
    max_queries: int


_STARTED = time.perf_counter()


def progress(message: str) -> None:
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


# --- Database and Django ----------------------------------------------------------------------


def recreate_database(database_url: str) -> None:
    """Drop and create the bench database; refuse a name without "bench" so a typo in
    BENCH_DATABASE_URL cannot drop a real database."""
    name = str(conninfo_to_dict(database_url).get("dbname", ""))
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    maintenance = make_conninfo(database_url, dbname="postgres")
    with psycopg.connect(maintenance, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))


def setup_django(database_url: str) -> None:
    """Load the real settings against the bench database (the parent and every writer)."""
    os.environ["DATABASE_URL"] = database_url
    os.environ["DJANGO_SETTINGS_MODULE"] = "notary.settings"
    # DEBUG keeps every query in memory, which production does not pay; off, it needs a key.
    os.environ["DEBUG"] = "false"
    os.environ["SECRET_KEY"] = "bench-only-secret-key-not-for-production"
    import django

    django.setup()


def prepare_schema(database_url: str) -> None:
    from django.core.management import call_command

    call_command("migrate", verbosity=0)
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute("CREATE TABLE bench_baseline (id bigserial PRIMARY KEY, body bytea NOT NULL)")


def environment(database_url: str, load_at_start: float) -> list[list[str]]:
    """What the figures depend on: the server, its durability settings, and this machine (other
    work on it shows in the load average)."""
    with psycopg.connect(database_url) as conn:
        row = conn.execute(
            "SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
            "current_setting('fsync')"
        ).fetchone()
    version, sync_commit, fsync = row or ("?", "?", "?")
    return [
        ["PostgreSQL", version],
        ["synchronous_commit / fsync", f"{sync_commit} / {fsync}"],
        ["CPUs", str(os.cpu_count())],
        ["Python", platform.python_version()],
        ["load average (1 min), start / end", f"{load_at_start:.2f} / {os.getloadavg()[0]:.2f}"],
    ]


# --- Concurrent writers -----------------------------------------------------------------------


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


def writer_main(
    database_url: str, inbox: Queue[WriterJob | None], go: Event, results: Queue[Report]
) -> None:
    """A writer process: its own Django setup and connection, then jobs until told to stop. An
    error goes to the parent instead of leaving it waiting."""
    try:
        setup_django(database_url)
        from ledger.services import ensure_log

        log = ensure_log(origin=WRITERS_ORIGIN)  # also opens this process's connection
        results.put(Ready(multiprocessing.current_process().name))
        while (job := inbox.get()) is not None:
            if job.mode == "baseline":
                results.put(run_baseline(job, database_url, go, results))
            else:
                results.put(run_appends(job, log, go, results))
    except Exception as exc:
        results.put(f"{multiprocessing.current_process().name}: {exc!r}")


def wait_for_go(go: Event, results: Queue[Report]) -> None:
    results.put(Ready(multiprocessing.current_process().name))
    if not go.wait(START_TIMEOUT):
        raise TimeoutError("no start signal")


def run_baseline(
    job: WriterJob, database_url: str, go: Event, results: Queue[Report]
) -> WriterResult:
    body = baseline_body(job.worker)
    with psycopg.connect(database_url, autocommit=True) as conn:
        wait_for_go(go, results)
        start = now = time.time()
        rows = 0
        while now < start + job.seconds:
            conn.execute("INSERT INTO bench_baseline (body) VALUES (%s)", (body,))
            rows += 1
            now = time.time()
    return WriterResult(start, now, rows)


def run_appends(job: WriterJob, log: Log, go: Event, results: Queue[Report]) -> WriterResult:
    from ledger.services import NewEntry, append_entries, append_entry

    kind = EntryKind.OBSERVED.value
    rows = 0
    wait_for_go(go, results)
    start = now = time.time()
    while now < start + job.seconds:
        if job.mode == "append_entry":
            append_entry(
                log=log,
                kind=kind,
                body=entry_body(job.worker, rows),
                effect_id=f"w{job.worker}-{rows}",
            )
        else:
            append_entries(
                log=log,
                items=[
                    NewEntry(
                        kind=kind, body=entry_body(job.worker, n), effect_id=f"w{job.worker}-{n}"
                    )
                    for n in range(rows, rows + job.batch)
                ],
            )
        rows += job.batch
        now = time.time()
    return WriterResult(start, now, rows)


class WriterPool:
    """Spawned writer processes, reused across configurations: starting 16 Django processes
    costs seconds of CPU on a small machine, which would otherwise dwarf the measurements."""

    def __init__(self, size: int, database_url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self.go = context.Event()
        self.results: Queue[Report] = context.Queue()
        self.inboxes: list[Queue[WriterJob | None]] = [context.Queue() for _ in range(size)]
        self.processes = [
            context.Process(
                target=writer_main,
                args=(database_url, inbox, self.go, self.results),
                name=f"writer-{worker}",
                daemon=True,
            )
            for worker, inbox in enumerate(self.inboxes)
        ]
        for process in self.processes:
            process.start()
        # No measurement may run while the others are still importing Django.
        self.collect(size)

    def run(self, mode: WriterMode, writers: int, *, seconds: float, batch: int = 1) -> Throughput:
        """Start `writers` writers together once all are connected; wall time runs from the
        first start to the last commit (time.time(), so the processes' clocks agree)."""
        self.go.clear()
        for worker in range(writers):
            self.inboxes[worker].put(WriterJob(mode, worker, seconds, batch))
        self.collect(writers)
        self.go.set()
        reports = self.collect(writers, timeout=START_TIMEOUT + seconds)
        finished = [r for r in reports if isinstance(r, WriterResult)]
        return Throughput(
            rows=sum(r.rows for r in finished),
            seconds=max(r.last_commit for r in finished) - min(r.start for r in finished),
        )

    def collect(self, count: int, timeout: float = START_TIMEOUT) -> list[Report]:
        try:
            reports = [self.results.get(timeout=timeout) for _ in range(count)]
        except queue.Empty as exc:
            raise SystemExit("a writer process stopped answering") from exc
        errors = [report for report in reports if isinstance(report, str)]
        if errors:
            raise SystemExit("writers failed:\n" + "\n".join(errors))
        return reports

    def close(self) -> None:
        for inbox in self.inboxes:
            inbox.put(None)
        for process in self.processes:
            process.join()


def run_appenders(
    pool: WriterPool, mode: WriterMode, writers: int, *, log: Log, seconds: float, batch: int = 1
) -> Throughput:
    """Like WriterPool.run, and check the log grew by exactly the appends the writers counted."""
    from ledger.selectors import log_head

    before = log_head(log=log).size
    result = pool.run(mode, writers, seconds=seconds, batch=batch)
    grown = log_head(log=log).size - before
    if grown != result.rows:
        raise SystemExit(f"writers counted {result.rows} appends but the log grew by {grown}")
    return result


def bench_writers(database_url: str, seconds: float, batches: Sequence[int]) -> str:
    from ledger.services import ensure_log

    log = ensure_log(origin=WRITERS_ORIGIN)
    top = WRITER_COUNTS[-1]
    progress(f"writers: spawning {top} writer processes")
    pool = WriterPool(top, database_url)
    rows: list[list[str]] = []
    baselines: dict[int, Throughput] = {}
    try:
        for writers in WRITER_COUNTS:
            progress(f"writers: {writers} x INSERT+COMMIT baseline")
            baselines[writers] = pool.run("baseline", writers, seconds=seconds)
            progress(f"writers: {writers} x append_entry")
            appended = run_appenders(pool, "append_entry", writers, log=log, seconds=seconds)
            rows.append(throughput_row("append_entry", writers, appended, baselines[writers]))
        for batch in batches:
            progress(f"writers: {top} x append_entries, {batch} entries per call")
            appended = run_appenders(
                pool, "append_entries", top, log=log, seconds=seconds, batch=batch
            )
            rows.append(
                throughput_row(f"append_entries ({batch}/call)", top, appended, baselines[top])
            )
    finally:
        progress("writers: stopping the writer processes")
        pool.close()
    return table(
        ["path", "writers", "entries", "seconds", "entries/s", "INSERT+COMMIT rows/s", "ratio"],
        rows,
    )


def throughput_row(
    path: str, writers: int, measured: Throughput, baseline: Throughput
) -> list[str]:
    return [
        path,
        str(writers),
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


def best_of(repeats: int, run: Callable[[], object]) -> float:
    """Seconds of the fastest of `repeats` runs: the least disturbed by the rest of the machine."""
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        run()
        timings.append(time.perf_counter() - started)
    return min(timings)


def bench_verify(count: int) -> str:
    from django.core.management import call_command

    from ledger import selectors
    from ledger.services import ensure_log

    signer = Signer.generate(SIGNER_NAME)
    log = ensure_log(origin=VERIFY_ORIGIN)
    progress(f"verify: building a log of {count:,} entries")
    fill_log(log, count, signer=signer, checkpoint_every=VERIFY_CHECKPOINT_EVERY)
    verifier = log_verifier(log.origin, signer)

    def read() -> tuple[list[Entry], list[tuple[NodeId, bytes]], list[SignedCheckpoint], LogHead]:
        return (
            list(selectors.iter_entries(log=log)),
            list(selectors.iter_nodes(log=log)),
            selectors.signed_checkpoints(log=log),
            selectors.log_head(log=log),
        )

    progress("verify: reading the log into memory")
    entries, nodes, checkpoints, head = read()
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
        ("DB read only (iter_entries, iter_nodes, ...)", best_of(REPEATS, read)),
        ("verify_ledger command (DB reads + verify)", best_of(REPEATS, command)),
    ]
    return table(
        ["path", "entries", "seconds", "entries/s", "vs sha256"],
        [
            [
                name,
                f"{count:,}",
                f"{seconds:.4f}",
                f"{count / seconds:,.0f}",
                f"{sha_seconds / seconds:.4f}",
            ]
            for name, seconds in measured
        ],
    )


# --- Proofs -----------------------------------------------------------------------------------


ProofCase = tuple[Callable[[], list[bytes]], Callable[[list[bytes]], None]]


def measure_proofs(cases: Sequence[ProofCase]) -> ProofStats:
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
    return ProofStats(
        samples=len(timings),
        median_ms=statistics.median(timings),
        p95_ms=statistics.quantiles(timings, n=100, method="inclusive")[94],
        min_queries=min(queries),
        max_queries=max(queries),
    )


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
    leaf_hashes = {
        index: leaf_hash(selectors.get_entry(log=log, seq=index).leaf_bytes()) for index in indexes
    }

    def check_inclusion(proof: list[bytes], index: int) -> None:
        verify_inclusion(
            leaf_hash=leaf_hashes[index], index=index, size=count, proof=proof, root=root
        )

    inclusion = measure_proofs(
        [
            (
                partial(selectors.inclusion_proof, log=log, index=index, size=count),
                partial(check_inclusion, index=index),
            )
            for index in indexes
        ]
    )

    progress(f"proofs: {samples} consistency proofs")
    pairs = []
    for _ in range(samples):
        old = rng.randrange(1, count)
        pairs.append((old, rng.randrange(old + 1, count + 1)))
    roots = {size: selectors.root_at(log=log, size=size) for pair in pairs for size in pair}

    def check_consistency(proof: list[bytes], old: int, new: int) -> None:
        verify_consistency(
            old_size=old, new_size=new, old_root=roots[old], new_root=roots[new], proof=proof
        )

    consistency = measure_proofs(
        [
            (
                partial(selectors.consistency_proof, log=log, old_size=old, new_size=new),
                partial(check_consistency, old=old, new=new),
            )
            for old, new in pairs
        ]
    )
    built_line = (
        f"Log of {count:,} entries built in {built.seconds:.1f} s "
        f"({built.per_second:,.0f} entries/s via append_entries, {FILL_BATCH} per call); "
        f"every proof verified against root_at."
    )
    rows = [
        proof_row("inclusion_proof", count, inclusion),
        proof_row("consistency_proof (random old < new)", count, consistency),
    ]
    return built_line, table(
        ["proof", "tree size", "proofs", "median ms", "p95 ms", "SQL queries/proof"], rows
    )


def proof_row(name: str, size: int, stats: ProofStats) -> list[str]:
    queries = (
        str(stats.min_queries)
        if stats.min_queries == stats.max_queries
        else f"{stats.min_queries}-{stats.max_queries}"
    )
    return [
        name,
        f"{size:,}",
        str(stats.samples),
        f"{stats.median_ms:.2f}",
        f"{stats.p95_ms:.2f}",
        queries,
    ]


# --- Output and entry point -------------------------------------------------------------------


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table with aligned columns, numbers right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(headers, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        return (
            "| "
            + " | ".join(
                cell.ljust(width) if i == 0 else cell.rjust(width)
                for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
            )
            + " |"
        )

    rule = (
        "|"
        + "|".join("-" * (width + 1) + (":" if i else "-") for i, width in enumerate(widths))
        + "|"
    )
    return "\n".join([line(headers), rule, *(line(row) for row in rows)])


def parse_args(argv: Sequence[str] | None) -> tuple[Profile, list[int], str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--quick", action="store_true", help="small sizes, well under a minute in all"
    )
    parser.add_argument("--seconds", type=float, help="seconds per writer configuration")
    parser.add_argument("--verify-entries", type=int, help="entries in the verified log")
    parser.add_argument("--proof-entries", type=int, help="entries in the proved log")
    parser.add_argument("--proofs", type=int, help="proofs of each kind to time")
    parser.add_argument(
        "--batches",
        default="16",
        help="comma-separated entries per append_entries call at 16 writers (default 16)",
    )
    args = parser.parse_args(argv)
    base = PROFILES["quick" if args.quick else "default"]
    profile = Profile(
        seconds=args.seconds or base.seconds,
        verify_entries=args.verify_entries or base.verify_entries,
        proof_entries=args.proof_entries or base.proof_entries,
        proofs=args.proofs or base.proofs,
    )
    batches = [int(batch) for batch in args.batches.split(",")]
    database_url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DATABASE_URL)
    return profile, batches, database_url


def main(argv: Sequence[str] | None = None) -> None:
    profile, batches, database_url = parse_args(argv)
    load_at_start = os.getloadavg()[0]
    progress(f"recreating {conninfo_to_dict(database_url).get('dbname')} and migrating")
    recreate_database(database_url)
    setup_django(database_url)
    prepare_schema(database_url)

    writers = bench_writers(database_url, profile.seconds, batches)
    verify = bench_verify(profile.verify_entries)
    built_line, proofs = bench_proofs(profile.proof_entries, profile.proofs)

    print("## Environment\n")
    print(table(["setting", "value"], environment(database_url, load_at_start)))
    print(f"\n## Appends ({profile.seconds:g} s per configuration, one log)\n")
    print(writers)
    print(
        "\nratio = entries/s over INSERT+COMMIT rows/s with the same number of processes; each "
        f"baseline row is one transaction of {len(baseline_body(0))} bytes (an entry's leaf bytes)."
    )
    print(f"\n## Verification ({profile.verify_entries:,} entries, best of {REPEATS})\n")
    print(verify)
    print("\nvs sha256 = raw sha256 time over this path's time (1.0 would be hashing speed).")
    print(f"\n## Proofs ({profile.proof_entries:,} entries)\n")
    print(proofs)
    print(f"\n{built_line}")
    print(f"\nTotal run time {time.perf_counter() - _STARTED:.0f} s.")


if __name__ == "__main__":
    main()
