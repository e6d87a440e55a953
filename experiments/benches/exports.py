"""Measure the auditor's receipts export and its offline verification at 100,000 receipts, on
PostgreSQL, each beside a baseline measured in the same run.

1. Setup (timed, not part of the figures): two tenants, one of `--receipts` effects and one of a
   quarter as many, each with one approver key, `--per-case` targets and a lease per case
   granted through services.lease_grant. A lease covers one action on one case, and an effect is
   (case, target, action), so the effects sharing a lease differ in target: with the default 100
   effects per case, 1,000 leases and 100 targets for 100,000 receipts. The effects' entries are
   written in bulk with ledger.services.append_entries, with the bodies the gate and the services
   write (Proposal.proposed_body, DispatchRequest.entry_body, the gate's verdict bodies), ending
   in a fixed mix: COMMITTED, COMMITTED_BY_RETRY (a second, recovery dispatch), AMBIGUOUS and
   FAILED. The Effect projection is rebuilt from the ledger with services.effects_rebuild, one
   checkpoint is signed per log (one notary key for both), and the database is VACUUM ANALYZEd,
   as autovacuum would have done after such a load.
2. Export: `manage.py export_receipts --tenant T --out FILE` in a subprocess: wall time,
   receipts/minute, bytes written, and the process's peak RSS (ru_maxrss, read by wait4 in a
   small launcher process, as a child's ru_maxrss starts from its parent's).
3. Verification: `python -m gate_client.verify FILE --vkey VKEY` in a subprocess without Django:
   wall time, receipts/minute, peak RSS.
4. Baselines, each a subprocess measured the same way: reading every entry of the log from the
   database (ledger.selectors.iter_entries), reading the export's lines, and reading them with
   json.loads on each. Both sizes are run, so peak RSS can be set beside the file's growth.
5. The goals (issue 20), at the larger size, each measured against its target, met or not:
   at least EXPORT_GOAL receipts a minute exported and VERIFY_GOAL verified, at most BYTES_GOAL
   bytes of export per receipt, and peak RSS bounded as below; then the machine's load.
6. With --breakdown, where the time goes: the larger export and its verification once more, in
   this process, with a timer around each step the exporter and the verifier call.

The benchmark is also a correctness check: the rebuilt projection must hold every effect in its
planned state; the export must end in a footer counting one receipt per effect and one entry
line per lease; the verifier must exit 0 with every receipt re-derived and the planned outcomes;
a copy of the export's first receipt with its final state altered must be refused; and peak RSS
must not grow with the export (at most MEMORY_GROWTH_LIMIT times the smaller size's while the
file grows fourfold). Anything else exits non-zero.

It works in its own database (--database-url, default interlock_bench_exports; dropped and
recreated at start, a name without "bench" is refused) and drops it at the end unless --keep; the
export files go to a temporary directory removed at the end. Tables go to stdout, progress to
stderr:

    .venv/bin/python -m experiments.benches.exports [--quick] [--receipts 100000] [--per-case 100]
        [--breakdown] [--database-url ...] [--keep]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

from experiments.kit.bench import bar, parser, print_total, progress
from experiments.kit.database import add_database_argument, bench_database
from experiments.kit.machine import CORES, LOAD_AT_START, environment, print_environment
from experiments.kit.served import print_goals, verdict
from experiments.kit.tables import aligned_table
from gate_client.authorization import DispatchRequest
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Proposal
from gate_client.protocol import TargetDeclaration
from gate_client.targets import Tier
from ledger.core.entries import EntryKind
from testkit.paths import REPO_ROOT
from testkit.processes import armed_env

if TYPE_CHECKING:
    from ledger.core.note import Signer
    from ledger.services import NewEntry
    from notary.models import Tenant

ACTION = "refund"
APPROVER = "finance"
REQUESTER = "support-agent"
AMOUNT_LIMIT = 50_000
EFFECTS_PER_APPEND = 1_000  # effects whose entries go into one append_entries call
MEMORY_GROWTH_LIMIT = 1.5  # peak RSS at N over peak RSS at N/4
# The goals of the exports and their verification (issue 20), at the larger size.
EXPORT_GOAL = 250_000  # receipts per minute exported
VERIFY_GOAL = 400_000  # receipts per minute verified
BYTES_GOAL = 2_500  # bytes of export per receipt
PROGRESS_EVERY = 10.0  # seconds between progress lines while a subprocess runs
SEED = 4127

# The planned final states, by share of effects (the rest COMMITTED).
MIX = (
    ("COMMITTED_BY_RETRY", 0.02),
    ("AMBIGUOUS", 0.05),
    ("FAILED:card_declined", 0.05),
)
STATES = ("COMMITTED", *(state for state, _ in MIX))


@dataclass(frozen=True)
class Sizes:
    receipts: int
    per_case: int

    @property
    def smaller(self) -> int:
        return max(1, self.receipts // 4)


PROFILES = {"quick": 2_000, "default": 100_000}


# --- Setup: tenants, targets, leases, and the effects' entries in bulk -------------------------


@dataclass(frozen=True)
class Built:
    slug: str
    effects: int
    leases: int
    targets: int
    entries: int
    planned: Counter[str]
    vkey: str
    seconds: dict[str, float]


def planned_state(rng: random.Random) -> str:
    draw = rng.random()
    for state, share in MIX:
        if draw < share:
            return state
        draw -= share
    return "COMMITTED"


# What every bench target declares, as its gate writes it into each PROPOSED.
DECLARATION = TargetDeclaration(
    Tier.DEDUPES,
    True,
    timedelta(seconds=30),
    timedelta(hours=24),
    money=MoneyDeclaration(amount_field="amount_cents", currency_field="currency"),
)
PREMISES = [
    {"name": "order_refundable", "holds": True, "observed": {"status": "paid", "refunded": 0}}
]


def effect_entries(proposal: Proposal, state: str, n: int) -> tuple[list[NewEntry], ...]:
    """The effect's entries as the gate and the services write them, in three groups appended
    in turn (every PROPOSED of a batch, then the dispatches, then the verdicts)."""
    from ledger.services import NewEntry

    effect_id = proposal.effect_id
    proposed = proposal.proposed_body(PREMISES, DECLARATION)
    first = DispatchRequest.of_proposal(effect_id, proposed, 1, PREMISES, False)
    dispatches = [NewEntry(EntryKind.DISPATCHED, first.entry_body(), effect_id)]
    result_ref = f"re_{n:08d}"
    if state == "COMMITTED":
        kind = EntryKind.COMMITTED
        body: dict[str, Any] = {
            "state": "COMMITTED",
            "attempt": 1,
            "result_ref": result_ref,
            "recheck": None,
        }
    elif state == "COMMITTED_BY_RETRY":
        retry = DispatchRequest.of_proposal(effect_id, proposed, 2, PREMISES, True)
        dispatches.append(NewEntry(EntryKind.DISPATCHED, retry.entry_body(), effect_id))
        kind = EntryKind.COMMITTED
        body = {
            "state": "COMMITTED_BY_RETRY",
            "attempt": 2,
            "result_ref": result_ref,
            "recheck": {"premises": PREMISES},
        }
    elif state == "AMBIGUOUS":
        kind = EntryKind.AMBIGUOUS
        body = {"recheck": {"reason": "lease_expired", "detail": "timed out", "lookup": "unknown"}}
    else:
        kind, body = EntryKind.FAILED, {"attempt": 1, "code": state.split(":", 1)[1]}
    return (
        [NewEntry(EntryKind.PROPOSED, proposed, effect_id)],
        dispatches,
        [NewEntry(kind, body, effect_id)],
    )


def leased_tenant(
    slug: str, effects: int, per_case: int
) -> tuple[Tenant, list[str], list[tuple[str, str]]]:
    """A tenant with `per_case` tier-1 targets and one lease (by one approver key) per case:
    the tenant, the targets' names and the (case id, lease id) pairs."""
    from testkit import factories

    tenant, approver = factories.tenant_with_approver(
        slug, f"bench: {effects:,} receipts", holder=APPROVER
    )
    targets = [f"psp-{t:03d}" for t in range(per_case)]
    for name in targets:
        factories.register(
            tenant,
            name,
            tier=1,
            queryable=True,
            max_inflight=timedelta(seconds=30),
            key_window=timedelta(hours=24),
            money=DECLARATION.money.body() if DECLARATION.money is not None else None,
        )
    expires = datetime.now(UTC) + timedelta(days=1)
    leases = []
    for case in bar(range(math.ceil(effects / per_case)), desc=f"{slug}: leases", unit="lease"):
        case_id = f"order-{case:06d}"
        lease = factories.leased(
            tenant,
            case_id,
            ACTION,
            requested_by=REQUESTER,
            approver=approver,
            expires_at=expires,
            limits={"amount_cents": AMOUNT_LIMIT},
        )
        leases.append((case_id, lease.lease_id))
    return tenant, targets, leases


def build_tenant(
    slug: str, effects: int, per_case: int, rng: random.Random, signer: Signer
) -> Built:
    from django.db.models import Count

    from ledger.core.checkpoint import log_verifier
    from ledger.selectors import log_head
    from ledger.services import append_entries, sign_checkpoint
    from notary import services
    from notary.models import Effect

    seconds: dict[str, float] = {}
    started = time.perf_counter()
    tenant, targets, leases = leased_tenant(slug, effects, per_case)
    cases = len(leases)
    seconds["tenant, targets and leases (services)"] = time.perf_counter() - started

    started = time.perf_counter()
    planned: Counter[str] = Counter()
    batch: list[tuple[list[NewEntry], ...]] = []

    def flush() -> None:
        items = [item for group in range(3) for entries in batch for item in entries[group]]
        append_entries(log=tenant.log, items=items)
        batch.clear()

    with bar(total=effects, desc=f"{slug}: effects", unit="effect") as effects_bar:
        for n in range(effects):
            case_id, lease_id = leases[n // per_case]
            payload = {"amount_cents": 500 + (n * 37) % 20_000, "currency": "EUR", "order": case_id}
            proposal = Proposal(
                case_id, targets[n % per_case], ACTION, payload, lease_id, tenant=slug
            )
            state = planned_state(rng)
            planned[state] += 1
            batch.append(effect_entries(proposal, state, n))
            if len(batch) == EFFECTS_PER_APPEND:
                flush()
                effects_bar.update(EFFECTS_PER_APPEND)
        if batch:
            effects_bar.update(len(batch))
            flush()
    seconds["effects' entries (append_entries)"] = time.perf_counter() - started

    progress(f"{slug}: rebuilding the Effect projection")
    started = time.perf_counter()
    rebuilt = services.effects_rebuild(tenant=tenant)
    seconds["Effect projection (effects_rebuild)"] = time.perf_counter() - started
    if rebuilt != effects:
        raise SystemExit(f"{slug}: effects_rebuild made {rebuilt} effects, not {effects}")
    grouped = Effect.objects.filter(tenant=tenant).values("state").annotate(n=Count("id"))
    states = Counter({row["state"]: row["n"] for row in grouped})
    if states != planned:
        raise SystemExit(f"{slug}: projection states {dict(states)}, planned {dict(planned)}")

    started = time.perf_counter()
    sign_checkpoint(log=tenant.log, signer=signer)
    seconds["checkpoint (sign_checkpoint)"] = time.perf_counter() - started
    size = log_head(log=tenant.log).size
    if size != cases + sum(entries_per(state) for state in planned.elements()):
        raise SystemExit(f"{slug}: the log holds {size} entries, not what was appended")
    vkey = log_verifier(tenant.log.origin, signer).vkey  # the log's key, named after its origin
    return Built(slug, effects, cases, len(targets), size, planned, vkey, seconds)


def entries_per(state: str) -> int:
    return 4 if state == "COMMITTED_BY_RETRY" else 3


# --- Subprocesses, timed, with their peak RSS ----------------------------------------------------


@dataclass(frozen=True)
class Run:
    label: str
    seconds: float
    peak_rss: int  # bytes: the process's ru_maxrss
    returncode: int
    stdout: str
    stderr: str


# A process's peak RSS (ru_maxrss) starts from that of the process it was forked from, so the
# commands are forked by this small launcher, not by the benchmark (some hundred MB by then).
LAUNCHER = """import os, sys, time
started = time.perf_counter()
pid = os.fork()
if pid == 0:
    os.execvp(sys.argv[2], sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
seconds = time.perf_counter() - started
code = os.waitstatus_to_exitcode(status)
with open(sys.argv[1], "w") as out:
    out.write(f"{seconds!r} {usage.ru_maxrss} {code}")
"""


def run_measured(
    label: str,
    argv: Sequence[str],
    *,
    django: bool,
    watch: Path | None = None,
    expect: int = 0,
) -> Run:
    """Run `argv` to its end (with Django's settings or without them and the database); its wall
    time and peak RSS, from fork to exit, as the launcher saw them. An exit code other than
    `expect` aborts the run. While it runs, `watch`'s size goes to stderr every PROGRESS_EVERY
    seconds."""
    done = threading.Event()

    def report() -> None:
        while not done.wait(PROGRESS_EVERY):
            size = watch.stat().st_size if watch is not None and watch.exists() else 0
            suffix = f": {size / 1e6:,.0f} MB written" if watch is not None else ""
            progress(f"  {label} still running{suffix}")

    hidden = () if django else ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "SECRET_KEY")
    with (
        tempfile.TemporaryFile() as out,
        tempfile.TemporaryFile() as err,
        tempfile.NamedTemporaryFile("r", suffix=".rusage") as rusage,
    ):
        progress(label)
        reporter = threading.Thread(target=report, daemon=True)
        reporter.start()
        try:
            launched = subprocess.run(
                [sys.executable, "-c", LAUNCHER, rusage.name, *argv],
                stdout=out,
                stderr=err,
                env=armed_env(None, drop=hidden),
                cwd=REPO_ROOT,
                check=False,
            )
        finally:
            done.set()
        reporter.join()
        measured = rusage.read().split()
        if len(measured) != 3:
            raise SystemExit(f"{label}: the launcher failed (exit {launched.returncode})")
        out.seek(0)
        err.seek(0)
        run = Run(
            label,
            float(measured[0]),
            int(measured[1]) * 1024,
            int(measured[2]),
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
        )
    if run.returncode != expect:
        raise SystemExit(
            f"{run.label}: exit {run.returncode}, expected {expect}\n"
            f"stdout:\n{run.stdout[-3000:]}\nstderr:\n{run.stderr[-3000:]}"
        )
    return run


READ_LINES = """import sys
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        n += 1
print(n)
"""

READ_JSON = """import json, sys
n = 0
with open(sys.argv[1], "rb") as f:
    for line in f:
        json.loads(line)
        n += 1
print(n)
"""

READ_LOG = """from ledger.selectors import iter_entries
from notary.models import Tenant
log = Tenant.objects.get(slug={slug!r}).log
print(sum(1 for _ in iter_entries(log=log)))
"""


@dataclass(frozen=True)
class Measured:
    built: Built
    path: Path
    bytes: int
    lines: int
    export: Run
    verify: Run
    read_log: Run
    read_lines: Run
    read_json: Run


def measure(built: Built, directory: Path) -> Measured:
    """Export the tenant's receipts, verify them, and run the baselines; check every answer."""
    python, slug = sys.executable, built.slug
    path = directory / f"{slug}.jsonl"
    command = ["manage.py", "export_receipts", "--no-progress", "--tenant", slug, "--out"]
    export = run_measured(
        f"{slug}: manage.py export_receipts",
        [python, *command, str(path)],
        django=True,
        watch=path,
    )
    size = path.stat().st_size
    check_footer(path, built)
    verify = run_measured(
        f"{slug}: python -m gate_client.verify",
        [python, "-m", "gate_client.verify", str(path), "--vkey", built.vkey, "--no-witnesses"],
        django=False,
    )
    check_verdicts(verify, built)
    read_log = run_measured(
        f"{slug}: baseline, every entry of the log from the database",
        [python, "manage.py", "shell", "-c", READ_LOG.format(slug=slug)],
        django=True,
    )
    if int(read_log.stdout.split()[-1]) != built.entries:
        raise SystemExit(f"{slug}: iter_entries read {read_log.stdout!r} entries")
    read_lines = run_measured(
        f"{slug}: baseline, read the lines", [python, "-c", READ_LINES, str(path)], django=False
    )
    lines = int(read_lines.stdout.split()[-1])
    if lines != built.effects + built.leases + 2:
        raise SystemExit(
            f"{slug}: {lines} lines, not a header, {built.effects} receipts, "
            f"{built.leases} lease entries and a footer"
        )
    read_json = run_measured(
        f"{slug}: baseline, json.loads each line",
        [python, "-c", READ_JSON, str(path)],
        django=False,
    )
    return Measured(built, path, size, lines, export, verify, read_log, read_lines, read_json)


def check_footer(path: Path, built: Built) -> None:
    with path.open("rb") as export:
        export.seek(max(0, path.stat().st_size - 4096))
        footer = json.loads(export.read().splitlines()[-1])
    expected = {"type": "footer", "receipts": built.effects, "entries": built.leases}
    if footer != expected:
        raise SystemExit(f"{built.slug}: the export's footer is {footer}, expected {expected}")


_RECEIPTS = re.compile(r"^integrity: OK\s+([\d,]+) receipts re-derived", re.MULTILINE)
_OUTCOME = re.compile(r"^\s+(\S+)\s+([\d,]+)$", re.MULTILINE)


def check_verdicts(run: Run, built: Built) -> None:
    found = _RECEIPTS.search(run.stdout)
    receipts = int(found.group(1).replace(",", "")) if found else None
    if receipts != built.effects or "completeness: OK" not in run.stdout:
        raise SystemExit(f"{built.slug}: the verifier did not pass every receipt:\n{run.stdout}")
    outcomes = Counter(
        {state: int(count.replace(",", "")) for state, count in _OUTCOME.findall(run.stdout)}
    )
    if outcomes != built.planned:
        raise SystemExit(
            f"{built.slug}: the verifier's outcomes {dict(outcomes)}, planned {dict(built.planned)}"
        )


def check_tampering(measured: Measured, directory: Path) -> str:
    """The header and the first receipt with its final state altered: the verifier must refuse
    it at line 2, on integrity."""
    with measured.path.open("rb") as export:
        header, first = export.readline(), json.loads(export.readline())
    first["receipt"]["final_state"] = (
        "AMBIGUOUS" if first["receipt"]["final_state"] != "AMBIGUOUS" else "COMMITTED"
    )
    tampered = directory / "tampered.jsonl"
    tampered.write_bytes(header + json.dumps(first, separators=(",", ":")).encode() + b"\n")
    run = run_measured(
        "tampered copy: python -m gate_client.verify",
        [
            *(sys.executable, "-m", "gate_client.verify", str(tampered)),
            *("--vkey", measured.built.vkey, "--no-witnesses"),
        ],
        django=False,
        expect=1,
    )
    verdict = next((line for line in run.stdout.splitlines() if "FAIL" in line), "")
    if not verdict.startswith("integrity: FAIL at line 2"):
        raise SystemExit(f"the tampered receipt was not refused at line 2:\n{run.stdout}")
    return verdict


# --- Tables -------------------------------------------------------------------------------------


def mb(count: float) -> str:
    return f"{count / 1e6:,.1f}"


def per_minute(count: int, seconds: float) -> str:
    return f"{count / seconds * 60:,.0f}"


def setup_table(builds: Sequence[Built]) -> str:
    steps = list(builds[0].seconds)
    rows = [[step, *(f"{b.seconds[step]:.1f}" for b in builds)] for step in steps]
    rows.append(["total", *(f"{sum(b.seconds.values()):.1f}" for b in builds)])
    return aligned_table(
        ["step (seconds)", *(f"{b.slug}: {b.effects:,} effects" for b in builds)], rows
    )


def shape_table(builds: Sequence[Built]) -> str:
    rows = [
        [
            b.slug,
            f"{b.effects:,}",
            f"{b.leases:,}",
            f"{b.targets:,}",
            f"{b.entries:,}",
            ", ".join(f"{state} {b.planned[state]:,}" for state in STATES),
        ]
        for b in builds
    ]
    return aligned_table(
        ["tenant", "effects", "leases", "targets", "log entries", "planned states"], rows
    )


def figures_table(m: Measured) -> str:
    def row(what: str, run: Run, count: str, rate: str) -> list[str]:
        return [
            what,
            count,
            f"{run.seconds:.2f}",
            rate,
            mb(run.peak_rss),
            f"{run.seconds / m.read_json.seconds:.1f}",
            f"{run.seconds / m.read_log.seconds:.1f}",
        ]

    receipts = m.built.effects
    return aligned_table(
        [
            "path",
            "items",
            "seconds",
            "receipts/min",
            "peak RSS MB",
            "x json.loads baseline",
            "x DB read baseline",
        ],
        [
            row(
                "export: manage.py export_receipts",
                m.export,
                f"{receipts:,} receipts",
                per_minute(receipts, m.export.seconds),
            ),
            row(
                "verify: python -m gate_client.verify",
                m.verify,
                f"{receipts:,} receipts",
                per_minute(receipts, m.verify.seconds),
            ),
            row(
                "baseline: every entry from the DB (iter_entries)",
                m.read_log,
                f"{m.built.entries:,} entries",
                "",
            ),
            row("baseline: read the file's lines", m.read_lines, f"{m.lines:,} lines", ""),
            row("baseline: json.loads each line", m.read_json, f"{m.lines:,} lines", ""),
        ],
    )


def goal_rows(small: Measured, large: Measured) -> list[list[str]]:
    """Each goal at the larger size, measured against its target: met or not."""
    receipts = large.built.effects
    exported = receipts / large.export.seconds * 60
    verified = receipts / large.verify.seconds * 60
    per_receipt = large.bytes / receipts
    memory = max(
        getattr(large, field).peak_rss / getattr(small, field).peak_rss
        for field in ("export", "verify")
    )
    return [
        [
            f"export >= {EXPORT_GOAL:,} receipts/min",
            f"{exported:,.0f} receipts/min ({exported / EXPORT_GOAL:.2f}x the target)",
            verdict(exported >= EXPORT_GOAL),
        ],
        [
            f"verification >= {VERIFY_GOAL:,} receipts/min",
            f"{verified:,.0f} receipts/min ({verified / VERIFY_GOAL:.2f}x the target)",
            verdict(verified >= VERIFY_GOAL),
        ],
        [
            f"export <= {BYTES_GOAL:,} bytes per receipt",
            f"{per_receipt:,.0f} bytes per receipt",
            verdict(per_receipt <= BYTES_GOAL),
        ],
        [
            f"bounded memory: peak RSS x{MEMORY_GROWTH_LIMIT:g} at most while the file grows "
            f"x{large.bytes / small.bytes:.1f}",
            f"x{memory:.2f} (the larger of the exporter's and the verifier's)",
            verdict(memory <= MEMORY_GROWTH_LIMIT),
        ],
    ]


def memory_table(small: Measured, large: Measured) -> tuple[str, list[str]]:
    rows, problems = [], []
    grown = large.bytes / small.bytes
    rows.append(["export file, MB", mb(small.bytes), mb(large.bytes), f"{grown:.2f}", "", ""])
    for label, field in (
        ("export_receipts peak RSS, MB", "export"),
        ("gate_client.verify peak RSS, MB", "verify"),
        ("baseline: iter_entries peak RSS, MB", "read_log"),
        ("baseline: json.loads peak RSS, MB", "read_json"),
    ):
        before: int = getattr(small, field).peak_rss
        after: int = getattr(large, field).peak_rss
        ratio = after / before
        bounded = ratio <= MEMORY_GROWTH_LIMIT
        tracked = label.startswith(("export", "gate_client"))
        if tracked and not bounded:
            problems.append(f"{label}: x{ratio:.2f} while the file grew x{grown:.2f}")
        rows.append(
            [
                label,
                mb(before),
                mb(after),
                f"{ratio:.2f}",
                mb(after - before),
                ("bounded" if bounded else "GROWS") if tracked else "",
            ]
        )
    headers = [
        "",
        f"{small.built.effects:,} receipts",
        f"{large.built.effects:,} receipts",
        "ratio",
        "growth MB",
        f"verdict (<= x{MEMORY_GROWTH_LIMIT:g})",
    ]
    return aligned_table(headers, rows), problems


# --- Where the time goes (--breakdown) ----------------------------------------------------------


def where_time_goes(measured: Measured) -> str:
    """Export and verify the larger tenant once more in this process, with a timer around each
    step the exporter and the verifier call by name; a table of the time inside each."""
    from django.db import connections

    from gate_client import verify
    from gate_client.receipts import Receipt
    from ledger.core.note import parse_vkey
    from notary import exports
    from notary.models import Tenant

    spent: dict[str, float] = {}

    def timer(name: str, function: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            began = time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                spent[name] = spent.get(name, 0.0) + time.perf_counter() - began

        return timed

    export_steps = {
        "_Prover.proofs (the chunk's proof hashes)": (exports._Prover, "proofs"),
        "of which fetch_nodes (one SQL query a chunk)": (exports, "fetch_nodes"),
        "derive_receipt": (exports, "derive_receipt"),
        "Receipt.to_dict": (Receipt, "to_dict"),
        "entries_at (the chunk's lease entries)": (exports, "entries_at"),
        "_Prover.item (leaf bytes, check, base64)": (exports._Prover, "item"),
        "_json (json.dumps of receipts)": (exports, "_json"),
    }
    verify_steps = {
        "_record (json.loads of a line)": (verify, "_record"),
        "entry_from_envelope (canonical JSON, entry hash)": (verify, "entry_from_envelope"),
        "verify_in_subtree": (verify, "verify_in_subtree"),
        "derive_receipt": (verify, "derive_receipt"),
    }
    rows: list[list[str]] = []
    runs: list[tuple[str, dict[str, tuple[Any, str]], Callable[[], None]]] = [
        ("export_receipts", export_steps, lambda: _export_in_process(measured, exports, Tenant)),
        ("verify_export", verify_steps, lambda: _verify_in_process(measured, verify, parse_vkey)),
    ]
    for label, steps, run in runs:
        spent.clear()
        with ExitStack() as patches:
            for name, (owner, attribute) in steps.items():
                patches.enter_context(
                    mock.patch.object(owner, attribute, timer(name, getattr(owner, attribute)))
                )
            progress(f"breakdown: {label} in this process")
            began = time.perf_counter()
            run()
            total = time.perf_counter() - began
        inside = sum(seconds for name, seconds in spent.items() if not name.startswith("of which"))
        rows.append([f"**{label}**", f"{total:.1f}", "100%"])
        rows += [
            [name, f"{spent.get(name, 0.0):.1f}", f"{spent.get(name, 0.0) / total:.0%}"]
            for name in steps
        ]
        rows.append(["the rest", f"{total - inside:.1f}", f"{(total - inside) / total:.0%}"])
    connections.close_all()
    return aligned_table(["step", "seconds", "share"], rows)


def _export_in_process(measured: Measured, exports: Any, tenants: Any) -> None:
    tenant = tenants.objects.get(slug=measured.built.slug)
    with open(os.devnull, "w") as sink:
        for line in exports.export_receipts(tenant=tenant):
            sink.write(line)


def _verify_in_process(measured: Measured, verify: Any, parse_vkey: Any) -> None:
    with measured.path.open("rb") as export:
        report = verify.verify_export(
            (line.rstrip(b"\n") for line in export), [parse_vkey(measured.built.vkey)]
        )
    if report.receipts != measured.built.effects:
        raise SystemExit(f"breakdown: the verifier counted {report.receipts} receipts")


# --- Entry point --------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Sizes]:
    options = parser(__doc__)
    options.add_argument(
        "--quick", action="store_true", help=f"a smoke run: {PROFILES['quick']:,} receipts"
    )
    options.add_argument(
        "--receipts",
        type=int,
        help=f"receipts in the larger export (default {PROFILES['default']:,}); the smaller "
        "one has a quarter as many",
    )
    options.add_argument(
        "--per-case",
        type=int,
        default=100,
        help="effects per case, which share its lease and differ in target (default 100)",
    )
    options.add_argument(
        "--breakdown",
        action="store_true",
        help="also time the exporter's and the verifier's steps, in this process, at the larger "
        "size (one more export and verification)",
    )
    add_database_argument(options, "interlock_bench_exports")
    args = options.parse_args(argv)
    receipts = args.receipts or PROFILES["quick" if args.quick else "default"]
    if receipts < 4 or args.per_case < 1:
        options.error("--receipts must be at least 4 and --per-case at least 1")
    return args, Sizes(receipts=receipts, per_case=args.per_case)


def main(argv: Sequence[str] | None = None) -> None:
    args, sizes = parse_args(argv)
    rng = random.Random(SEED)
    os.environ.pop("REDIS_URL", None)  # the export needs no Redis; nothing may reach one
    with bench_database(args.database_url, keep=args.keep):
        from django.conf import settings

        from ledger.core.note import Signer

        # One notary key signs both logs, as in production: a key is the notary's, not a log's.
        signer = Signer.generate(settings.NOTARY_ORIGIN)
        setup_started = time.perf_counter()
        builds = [
            build_tenant("quarter", sizes.smaller, sizes.per_case, rng, signer),
            build_tenant("full", sizes.receipts, sizes.per_case, rng, signer),
        ]
        analyze_started = time.perf_counter()
        progress("VACUUM ANALYZE: the planner statistics autovacuum would have gathered")
        from django.db import connection, connections

        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
        analyze_seconds = time.perf_counter() - analyze_started
        setup_seconds = time.perf_counter() - setup_started

        connections.close_all()  # the subprocesses have the database to themselves
        with tempfile.TemporaryDirectory(prefix="bench_exports_") as tmp:
            directory = Path(tmp)
            small, large = (measure(built, directory) for built in builds)
            tampered = check_tampering(small, directory)
            breakdown = where_time_goes(large) if args.breakdown else None
        environment_rows = environment(args.database_url)

    memory, problems = memory_table(small, large)
    print_environment(environment_rows)
    print("\n## Setup (not part of the figures)\n")
    print(shape_table(builds))
    print()
    print(setup_table(builds))
    print(
        f"\nSetup in all: {setup_seconds:.0f} s, of which VACUUM ANALYZE {analyze_seconds:.1f} s "
        "(migrations not included). The bulk-loaded tables are analyzed before anything is "
        "measured, as autovacuum would have done in a running notary: without statistics the "
        "export's queries get other plans."
    )
    for m in (large, small):
        print(f"\n## Export and verification: {m.built.effects:,} receipts\n")
        print(figures_table(m))
        print(
            f"\nFile: {mb(m.bytes)} MB, {m.lines:,} lines ({m.bytes / m.built.effects:,.0f} "
            "bytes per receipt). Every figure is one subprocess from start to exit, "
            "interpreter and imports included; peak RSS is its ru_maxrss (PostgreSQL's "
            "backend not counted)."
        )
    print("\n## Peak memory against the export's size\n")
    print(memory)
    print(
        "\nWhat may grow with the log: the exporter's byte per log entry (which entries a "
        "receipt line carried) and the verifier's byte per entry and hash per lease copy "
        "awaiting its entry line, against the file's kilobytes per receipt."
    )
    print(
        f"\nCorrectness: both projections rebuilt with every effect in its planned state; both "
        f"exports end in a footer of one receipt per effect and one entry line per lease; the "
        f"verifier passed every receipt with the planned outcomes; the tampered receipt was "
        f"refused ({tampered!r})."
    )
    if breakdown is not None:
        print(f"\n## Where the time goes: {large.built.effects:,} receipts, in this process\n")
        print(breakdown)
        print(
            "\nEach step is the time spent inside the named function (a timer around it), over "
            "one more export (to /dev/null) and one more verification of the same file, in this "
            "process; the rest is the caller's own work (for the export: the ORM reads of effect "
            "ids and entries, and the entry-line pass)."
        )
    print_goals(goal_rows(small, large))
    print(
        f"\nMachine load (1-minute average) {LOAD_AT_START:.2f} at start, "
        f"{os.getloadavg()[0]:.2f} at the end, on {CORES} CPUs: other work on the machine "
        "slows every figure, the baselines measured beside them too."
    )
    print_total()
    if problems:
        raise SystemExit("peak memory grows with the export:\n" + "\n".join(problems))


if __name__ == "__main__":
    main()
