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

    .venv/bin/python experiments/bench_gate_recovery.py [--crashes N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from contextlib import ExitStack, closing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

# The script lives in experiments/; the agent and the service live in testkit/.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.targets import Tier
from testkit.agents.agent_process import ACTION, LEASE_ID, effect_id
from testkit.peers.reference_service import RunningServer, running_server
from testkit.processes import armed_env

REPO_ROOT = Path(__file__).resolve().parent.parent
CRASH = CrashPoint.AFTER_TARGET_ACTED
IN_FLIGHT = {"PROPOSED", "DISPATCHED"}


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
    Target(
        "T1",
        Tier.DEDUPES,
        queryable=False,
        dedupe=True,
        lookup=False,
        settles_as="COMMITTED_BY_RETRY",
    ),
    Target(
        "T1L",
        Tier.DEDUPES,
        queryable=True,
        dedupe=True,
        lookup=True,
        settles_as="COMMITTED_BY_RETRY",
    ),
    Target(
        "T2",
        Tier.LOOKUP,
        queryable=True,
        dedupe=False,
        lookup=True,
        settles_as="COMMITTED_ON_QUERY",
    ),
    Target("T3", Tier.NEITHER, queryable=False, dedupe=False, lookup=False, settles_as="AMBIGUOUS"),
]


@dataclass(frozen=True)
class Settled:
    seconds: float
    state: str
    acts: int


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def agent(args: list[str], *, crash: CrashPoint | None = None) -> subprocess.Popen[str]:
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
    for line in restarted.stdout:
        printed = json.loads(line)
        state = printed["receipt"]["final_state"] if "receipt" in printed else "SENT"
        if state not in IN_FLIGHT:
            settled = time.perf_counter() - died
            break
    else:
        settled, state = math.nan, "nothing"
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


def p95(samples: Sequence[float]) -> float:
    """Nearest rank: with 20 samples, the 19th smallest."""
    ordered = sorted(samples)
    return ordered[math.ceil(0.95 * len(ordered)) - 1]


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def acts_column(runs: Sequence[Settled]) -> str:
    counts = sorted({run.acts for run in runs})
    return " or ".join(str(count) for count in counts)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--crashes", type=int, default=20, help="SIGKILLs per target and system")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    crashes = parse_args(argv).crashes
    rows = []
    start: list[float] = []  # sampled between crashes, so it sees the same machine load
    with tempfile.TemporaryDirectory(prefix="bench_gate_recovery_") as tmp, ExitStack() as stack:
        directory = Path(tmp)
        token = os.urandom(4).hex()
        for target in TARGETS:
            server = stack.enter_context(
                running_server(
                    directory / f"{target.name}.store", dedupe=target.dedupe, lookup=target.lookup
                )
            )
            gate, plain = [], []
            for n in range(crashes):
                progress(f"{target.name}: crash {n + 1}/{crashes}")
                gate.append(
                    gate_crash(target, server, directory, f"gate-{token}-{target.name}-{n}")
                )
                plain.append(plain_crash(server, f"plain-{token}-{target.name}-{n}"))
                start.append(process_start())
            wrong = [run for run in gate if (run.state, run.acts) != (target.settles_as, 1)]
            if wrong:
                raise SystemExit(
                    f"{target.name}: want {target.settles_as} acting once, got {wrong}"
                )
            gate_s = [run.seconds for run in gate]
            plain_s = [run.seconds for run in plain]
            rows.append(
                f"| {target.name} (tier {target.tier.value}{', lookup' * target.queryable}) "
                f"| {target.settles_as} | {ms(statistics.median(gate_s))} | {ms(p95(gate_s))} "
                f"| {acts_column(gate)} | {ms(statistics.median(plain_s))} | {ms(p95(plain_s))} "
                f"| {acts_column(plain)} |"
            )
    print(f"## Crash at {CRASH} to settled ({crashes} SIGKILLs per cell)\n")
    print(
        "| target | gate settles as | gate median | gate p95 | service acted (gate) "
        "| plain retry median | plain retry p95 | service acted (plain) |"
    )
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(
        f"| process start-up and imports alone | | {ms(statistics.median(start))} "
        f"| {ms(p95(start))} | | | | |"
    )
    print(
        "\nservice acted = times the service's own store shows it acted for the effect (1 is "
        "right); the plain retry sends no key, so no service can tell its resend from a new one."
    )


if __name__ == "__main__":
    main()
