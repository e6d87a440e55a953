"""How a coding cell runs: a fresh git repository of the shop (text/coding.toml), a journal
with both agents' leases, the agents' processes in the case's order (ordered, crashed and
recovered, or racing), and the ground truth read from the repository alone afterwards: its tests
in a fresh interpreter, its top-level definitions, and the commits carrying each effect id."""

from __future__ import annotations

import ast
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from experiments.kit.prose import Prose
from experiments.workers import coding_agent
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.receipts import Receipt, ReceiptError, verify_receipt
from ledger.core.entries import EntryKind
from testkit.paths import REPO_ROOT
from testkit.processes import armed_env

JOURNAL_ORIGIN = "gate.local/journal"  # LocalJournal's default
AGENTS = ("a", "b")
A_EDIT = "add_total"


class CellError(RuntimeError):
    """The experiment's own machinery failed (not the system under test)."""


@dataclass
class AgentRun:
    role: str  # "A", "B", "A recovering"
    events: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None
    stderr: str = ""

    def receipts(self) -> list[dict[str, Any]]:
        return [e for e in self.events if e["event"] == "receipt"]


@dataclass(frozen=True)
class SuiteRun:
    passed: bool
    summary: str
    failed: list[str]


@dataclass
class Observed:
    """One cell as it ran, and the repository afterwards: what the judge scores."""

    system: str
    fault: str
    repetition: int
    edits: dict[str, str]
    effects: dict[str, str]
    runs: list[AgentRun]
    seconds: float | None
    receipts: dict[str, dict[str, Any]]
    commits: dict[str, list[str]]
    tests: SuiteRun
    duplicates: list[str]
    facts: dict[str, Any]
    proves: bool

    @property
    def landed(self) -> dict[str, bool]:
        return {agent: bool(self.commits[agent]) for agent in AGENTS}


# --- processes ------------------------------------------------------------------------------------


def child_env(crash: CrashPoint | None = None) -> dict[str, str]:
    """The agents' and the tests' environment: no settings of the suite that started us."""
    return armed_env(
        crash,
        drop=("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTEST_ADDOPTS"),
        PYTHONDONTWRITEBYTECODE="1",
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )


def spawn(args: Sequence[str], crash: CrashPoint | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "experiments.workers.coding_agent", *args],
        cwd=REPO_ROOT,
        env=child_env(crash),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def read_event(process: subprocess.Popen[str], run: AgentRun) -> dict[str, Any]:
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        _, stderr = process.communicate(timeout=60)
        raise CellError(f"{run.role} printed nothing (exit {process.returncode}): {stderr}")
    event: dict[str, Any] = json.loads(line)
    run.events.append(event)
    return event


def go(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.write("go\n")
    process.stdin.flush()


def finish(process: subprocess.Popen[str], run: AgentRun, *, expect: int = 0) -> AgentRun:
    stdout, run.stderr = process.communicate(timeout=120)
    run.events += [json.loads(line) for line in stdout.splitlines() if line.strip()]
    run.exit_code = process.returncode
    if run.exit_code != expect:
        raise CellError(f"{run.role} exited {run.exit_code}, want {expect}: {run.stderr}")
    return run


def started(a_args: list[str], b_args: list[str], crash: CrashPoint | None = None) -> Any:
    """Both agents started and past their reads."""
    a_run, b_run = AgentRun("A"), AgentRun("B")
    a, b = spawn(a_args, crash=crash), spawn(b_args)
    read_event(a, a_run)
    read_event(b, b_run)
    return a, b, a_run, b_run


def run_agents(
    fault: str, b_edit: str, common: list[str], repetition: int, crash: CrashPoint | None
) -> tuple[list[AgentRun], float | None]:
    """Run the cell's processes in its order; return them and the settling time of A."""
    a_args = ["submit", *common, "--agent", "a", "--edit", A_EDIT]
    b_args = ["submit", *common, "--agent", "b", "--edit", b_edit, "--wait-go"]
    if fault.startswith("race_"):
        a, b, a_run, b_run = started([*a_args, "--wait-go"], b_args)
        # Released together, in turns which goes first: the merge lock decides who lands first.
        for process in (a, b) if repetition % 2 == 0 else (b, a):
            go(process)
        finish(a, a_run)
        finish(b, b_run)
        return [a_run, b_run], a_run.receipts()[-1]["seconds"]
    if crash is None:
        # A reads; B lands its edit; only once the journal holds B's verdict does A submit.
        after = ["--after", coding_agent.effect_id("b", b_edit)]
        a, b, a_run, b_run = started([*a_args, *after], b_args)
        go(b)
        finish(b, b_run)
        finish(a, a_run)
        return [a_run, b_run], a_run.receipts()[-1]["seconds"]
    # A reads and submits at once, and is killed at the crash point; B lands during the
    # outage; then a new A process recovers what the journal left in flight.
    a, b, a_run, b_run = started(a_args, b_args, crash)
    finish(a, a_run, expect=-9)
    died = time.perf_counter()
    go(b)
    finish(b, b_run)
    recovering = AgentRun("A recovering")
    finish(spawn(["recover", *common[:4], "--agent", "a"]), recovering)
    return [a_run, b_run, recovering], time.perf_counter() - died


# --- one repository and its ground truth ----------------------------------------------------------


def git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args], cwd=root, capture_output=True, check=False
    )


def make_repository(root: Path) -> None:
    for path, text in Prose("coding").raw("repository").items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    (root / ".gitignore").write_text("__pycache__/\n")
    for args in (
        ("init", "-q", "-b", "main"),
        ("add", "-A"),
        ("-c", "user.name=maintainer", "-c", "user.email=maintainer@shop.test", "commit", "-qm",
         "shop: prices, a cart, an inventory"),
    ):  # fmt: skip
        step = git(root, *args)
        if step.returncode != 0:
            raise CellError(f"git {args[0]}: {step.stderr.decode()}")


def grant_leases(journal_path: Path, edits: Mapping[str, str]) -> None:
    expires = datetime.now(UTC) + timedelta(hours=1)
    with closing(LocalJournal(journal_path)) as journal:
        for agent, edit in edits.items():
            lease = Lease(
                coding_agent.lease_id(agent),
                coding_agent.case_id(agent, edit),
                coding_agent.ACTION,
                expires,
                "maintainer",
            )
            journal.grant_lease(lease)


def duplicate_definitions(root: Path) -> list[str]:
    """ "path::name" of each top-level function or class a module defines more than once."""
    duplicates = []
    for file in sorted(root.rglob("*.py")):
        if ".git" in file.relative_to(root).parts:
            continue
        try:
            body = ast.parse(file.read_text()).body
        except SyntaxError:
            continue  # the tests report it
        names = Counter(
            node.name
            for node in body
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
        )
        path = file.relative_to(root)
        duplicates += [f"{path}::{name}" for name, count in names.items() if count > 1]
    return duplicates


def run_tests(root: Path) -> SuiteRun:
    """The repository's own tests, in a fresh interpreter, as its CI would run them."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "tests"],
        cwd=root,
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    failed = [line.split()[1] for line in lines if line.startswith(("FAILED ", "ERROR "))]
    return SuiteRun(done.returncode == 0, lines[-1] if lines else done.stderr[-200:], failed)


def final_receipts(runs: Sequence[AgentRun]) -> dict[str, dict[str, Any]]:
    """The last receipt each agent's processes printed, by agent."""
    return {e["agent"]: e["receipt"] for run in runs for e in run.receipts()}


def record_proves(receipt: Mapping[str, Any], journal_path: Path, landed: bool) -> bool:
    """The receipt re-derives from the journal (chain included) and names what happened."""
    with closing(LocalJournal(journal_path)) as journal:
        entries = journal.entries()
    claimed = Receipt.from_dict(receipt)
    try:
        verify_receipt(claimed, entries, origin=JOURNAL_ORIGIN)
    except ReceiptError:
        return False
    return claimed.happened is landed


def journal_facts(journal_path: Path, effects: Mapping[str, str]) -> dict[str, Any]:
    """Which premises each refusal named, and the order of the dispatches."""
    with closing(LocalJournal(journal_path)) as journal:
        entries = journal.entries()
    facts: dict[str, Any] = {"failed_premises": {}, "dispatch_order": []}
    by_effect = {effect: agent for agent, effect in effects.items()}
    for entry in entries:
        agent = by_effect.get(entry.effect_id)
        if agent is None:
            continue
        if entry.kind == EntryKind.REFUSED:
            facts["failed_premises"][agent] = entry.body_value().get("failed", [])
        if entry.kind == EntryKind.DISPATCHED and agent not in facts["dispatch_order"]:
            facts["dispatch_order"].append(agent)
    return facts


class CodingWorld:
    """Cells one after another, each in a repository and journal of its own; `b_edits` and
    `crashes` say what each case has agent B do and where A is killed."""

    def __init__(
        self, work: Path, b_edits: Mapping[str, str], crashes: Mapping[str, CrashPoint]
    ) -> None:
        self.work = work
        self.b_edits = b_edits
        self.crashes = crashes
        self.counters: dict[tuple[str, str], itertools.count[int]] = {}

    def observe(self, system: str, fault: str) -> Observed:
        repetition = next(self.counters.setdefault((system, fault), itertools.count()))
        edits = {"a": A_EDIT, "b": self.b_edits[fault]}
        effects = {agent: coding_agent.effect_id(agent, edit) for agent, edit in edits.items()}
        with tempfile.TemporaryDirectory(prefix="interlock-coding-", dir=self.work) as tmp:
            root, journal = Path(tmp) / "shop", Path(tmp) / "journal"
            make_repository(root)
            grant_leases(journal, edits)
            common = ["--repo", str(root), "--journal", str(journal), "--premises", system]
            runs, seconds = run_agents(
                fault, edits["b"], common, repetition, self.crashes.get(fault)
            )
            receipts = final_receipts(runs)
            commits = {a: coding_agent.commits_carrying(root, e) for a, e in effects.items()}
            tests, duplicates = run_tests(root), duplicate_definitions(root)
            facts = journal_facts(journal, effects)
            proves = all(
                record_proves(receipts[agent], journal, bool(commits[agent])) for agent in AGENTS
            )
        return Observed(
            system, fault, repetition, edits, effects, runs, seconds, receipts,
            commits, tests, duplicates, facts, proves,
        )  # fmt: skip


@contextmanager
def coding_world(
    work: Path, b_edits: Mapping[str, str], crashes: Mapping[str, CrashPoint]
) -> Iterator[CodingWorld]:
    yield CodingWorld(work, b_edits, crashes)
