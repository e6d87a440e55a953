"""Crash-to-settled time by target tier: the gate's recover() beside a plain retry.

The seed waited a fixed 35 s claim TTL before recovering any crash; DESIGN §3 asks for a tier-1
crash settled in under a second with no loss of safety. Here an agent process is SIGKILLed at
after_target_acted (the service acted, nothing recorded it) against each of the crash matrix's
targets, real HTTP services on 127.0.0.1: T1 dedupes on the key, T1L dedupes and can be looked
up, T2 can only be looked up, T3 neither. The clock starts when the harness's wait() on the
dead worker returns and stops when the restarted process prints a receipt with a final state.
The plain retry (no key, no lease, no premise; testkit/agents/agent_process.py `plain`) is
timed the same way, to the response of its resend. Both include starting a Python process,
shown on its own in the last row (sampled between the crashes, under the same load). Every run
is checked against the service's own record and the expected final state, and the benchmark
aborts on any other outcome. Tables go to stdout, progress to stderr:

    .venv/bin/python -m experiments.benches.gate_recovery [--quick] [--crashes N]
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from experiments.kit.bench import parser, print_total, progress
from experiments.kit.machine import environment, print_environment
from experiments.kit.stats import percentile
from experiments.kit.tables import markdown_table
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.targets import Tier
from testkit.agents.agent_process import ACTION, LEASE_ID, effect_id
from testkit.paths import REPO_ROOT
from testkit.peers.reference_service import RunningServer, running_server
from testkit.processes import armed_env

CRASH = CrashPoint.AFTER_TARGET_ACTED
IN_FLIGHT = {"PROPOSED", "DISPATCHED"}
CRASHES = {"quick": 2, "default": 20}


@dataclass(frozen=True)
class Target:
    name: str
    tier: Tier
    queryable: bool
    dedupe: bool
    lookup: bool
    settles_as: str  # the one final state DESIGN §3 allows after this crash

    def declared(self) -> list[str]:
        flags = ["--tier", str(self.tier.value), "--max-inflight", "2.0"]
        return flags + (["--queryable"] if self.queryable else [])


TARGETS = [
    Target("T1", Tier.DEDUPES, False, dedupe=True, lookup=False, settles_as="COMMITTED_BY_RETRY"),
    Target("T1L", Tier.DEDUPES, True, dedupe=True, lookup=True, settles_as="COMMITTED_BY_RETRY"),
    Target("T2", Tier.LOOKUP, True, dedupe=False, lookup=True, settles_as="COMMITTED_ON_QUERY"),
    Target("T3", Tier.NEITHER, False, dedupe=False, lookup=False, settles_as="AMBIGUOUS"),
]


@dataclass(frozen=True)
class Settled:
    seconds: float
    state: str
    acts: int


def agent(args: list[str], *, crash: CrashPoint | None = None) -> subprocess.Popen[str]:
    """testkit's agent process, armed to SIGKILL itself at `crash` (or not armed)."""
    return subprocess.Popen(
        [sys.executable, "-m", "testkit.agents.agent_process", *args],
        cwd=REPO_ROOT,
        env=armed_env(crash),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def crash_then_settle(worker_args: list[str], restart_args: list[str]) -> tuple[float, str]:
    """Kill a worker at CRASH, restart, and time death -> the first settled line printed."""
    worker = agent(worker_args, crash=CRASH)
    _, stderr = worker.communicate(timeout=60)
    if worker.returncode != -9:
        raise SystemExit(f"worker exited {worker.returncode}, not SIGKILL: {stderr}")
    died = time.perf_counter()
    restarted = agent(restart_args)
    assert restarted.stdout is not None
    settled, state = math.nan, "nothing"
    for line in restarted.stdout:
        printed = json.loads(line)
        state = printed["receipt"]["final_state"] if "receipt" in printed else "SENT"
        if state not in IN_FLIGHT:
            settled = time.perf_counter() - died
            break
    _, stderr = restarted.communicate(timeout=60)
    if restarted.returncode != 0 or math.isnan(settled):
        raise SystemExit(f"the restarted process settled {state}: {stderr}")
    return settled, state


def gate_crash(target: Target, server: RunningServer, directory: Path, case_id: str) -> Settled:
    journal = directory / f"{case_id}.journal"
    world = directory / f"{case_id}.world.json"
    world.write_text(json.dumps({"refund_status": "succeeded"}))
    with closing(LocalJournal(journal)) as opened:
        expires = datetime.now(UTC) + timedelta(hours=48)
        opened.grant_lease(Lease(LEASE_ID, case_id, ACTION, expires, "support"))
    common = [str(journal), str(world), *target.declared(), "--url", server.url, "--case", case_id]
    seconds, state = crash_then_settle(
        ["submit", *common, "--text", "Your refund is on the way"], ["recover", *common]
    )
    return Settled(seconds, state, len(server.acts(effect_id(case_id))))


def plain_crash(server: RunningServer, case_id: str) -> Settled:
    args = ["plain", "--url", server.url, "--case", case_id, "--text", "Your refund is on the way"]
    seconds, state = crash_then_settle(args, args)
    return Settled(seconds, state, len(server.acts(effect_id(case_id))))


def process_start() -> float:
    """A restarted agent that does nothing: Python start-up and the gate's imports, timed to its
    first line on stdout, as the settled runs are."""
    started = time.perf_counter()
    ready = subprocess.Popen(
        [sys.executable, "-c", "import testkit.agents.agent_process; print('ready')"],
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert ready.stdout is not None
    ready.stdout.readline()
    seconds = time.perf_counter() - started
    ready.communicate(timeout=60)
    return seconds


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def timing_cells(runs: Sequence[Settled]) -> list[str]:
    """Median, p95 and how many times the service acted (each count seen)."""
    seconds = [run.seconds for run in runs]
    acts = " or ".join(str(count) for count in sorted({run.acts for run in runs}))
    return [ms(percentile(seconds, 50)), ms(percentile(seconds, 95)), acts]


def bench_target(
    target: Target, server: RunningServer, directory: Path, crashes: int, start: list[float]
) -> list[str]:
    """`crashes` gate and plain-retry crashes against one target; a process start-up sample
    after each pair goes to `start`."""
    token = os.urandom(4).hex()
    gate, plain = [], []
    for n in range(crashes):
        progress(f"{target.name}: crash {n + 1}/{crashes}")
        gate.append(gate_crash(target, server, directory, f"gate-{token}-{target.name}-{n}"))
        plain.append(plain_crash(server, f"plain-{token}-{target.name}-{n}"))
        start.append(process_start())
    wrong = [run for run in gate if (run.state, run.acts) != (target.settles_as, 1)]
    if wrong:
        raise SystemExit(f"{target.name}: want {target.settles_as} acting once, got {wrong}")
    name = f"{target.name} (tier {target.tier.value}{', lookup' * target.queryable})"
    return [name, target.settles_as, *timing_cells(gate), *timing_cells(plain)]


def main(argv: Sequence[str] | None = None) -> None:
    options = parser(__doc__)
    options.add_argument(
        "--quick", action="store_true", help=f"a smoke run: {CRASHES['quick']} crashes per cell"
    )
    options.add_argument(
        "--crashes", type=int, help=f"SIGKILLs per target and system (default {CRASHES['default']})"
    )
    args = options.parse_args(argv)
    crashes = args.crashes or CRASHES["quick" if args.quick else "default"]
    rows = []
    start: list[float] = []  # sampled between crashes, so it sees the same machine load
    with tempfile.TemporaryDirectory(prefix="bench_gate_recovery_") as tmp, ExitStack() as stack:
        directory = Path(tmp)
        for target in TARGETS:
            store = directory / f"{target.name}.store"
            server = stack.enter_context(
                running_server(store, dedupe=target.dedupe, lookup=target.lookup)
            )
            rows.append(bench_target(target, server, directory, crashes, start))
    startup = ms(percentile(start, 50)), ms(percentile(start, 95))
    rows.append(["process start-up and imports alone", "", *startup, "", "", "", ""])
    print_environment(environment(None))
    print(f"\n## Crash at {CRASH} to settled ({crashes} SIGKILLs per cell)\n")
    header = ["target", "gate settles as", "gate median", "gate p95", "service acted (gate)"]
    header += ["plain retry median", "plain retry p95", "service acted (plain)"]
    print(markdown_table(header, rows))
    print(
        "\nservice acted = times the service's own store shows it acted for the effect (1 is "
        "right); the plain retry sends no key, so no service can tell its resend from a new one."
    )
    print_total()


if __name__ == "__main__":
    main()
