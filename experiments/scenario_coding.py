"""Parallel coding agents: the same gate, a different world. How much do premises see?

Two agents edit one small Python repository (a shop: prices, a cart, an inventory, their tests),
each its own process, each submitting "apply this patch" through the gate with one kind of
premise: none, the hash of every file it read, or the signatures of the symbols it relies on.
Agent A adds ``cart.total()`` and its test; agent B does something else first, per case, and
the gate re-checks A's premises at dispatch, after B's edit landed. The ground truth is the
repository itself afterwards: its tests, run in a fresh process, its top-level definitions,
and the commits carrying each effect id.

    .venv/bin/python experiments/scenario_coding.py [--quick] [--results-dir DIR]

writes experiments/results/coding.md and coding.json; progress on stderr."""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from testkit.processes import armed_env

# Run as a file, the script needs the repository root on the path.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from experiments import coding_agent
from experiments.harness import (
    RESULTS_DIR,
    Answer,
    Cell,
    Scenario,
    markdown_table,
    run_cells,
    write_results,
)
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.receipts import Receipt, ReceiptError, verify_receipt
from ledger.core.entries import EntryKind

REPO_ROOT = Path(__file__).resolve().parent.parent
JOURNAL_ORIGIN = "gate.local/journal"  # LocalJournal's default
AGENTS = ("a", "b")
A_EDIT = "add_total"

SYSTEMS = ("no_premise", "file_hash", "symbols")
ORDERED = (
    "no_conflict",
    "benign_edit_elsewhere",
    "rename",
    "duplicated_work",
    "same_signature_meaning_change",
    "crash_after_commit",
    "crash_before_apply_then_rename",
)
RACES = ("race_benign_edit_elsewhere", "race_rename", "race_same_signature_meaning_change")
CRASHES = {
    "crash_after_commit": CrashPoint.AFTER_TARGET_ACTED,
    "crash_before_apply_then_rename": CrashPoint.AFTER_DISPATCHED,
}
B_EDIT = {
    "no_conflict": "add_low_stock",
    "benign_edit_elsewhere": "skip_empty_lines",
    "rename": "rename_tax_rate",
    "duplicated_work": "add_total_first",
    "same_signature_meaning_change": "tax_rate_as_percent",
    "crash_after_commit": "add_low_stock",
    "crash_before_apply_then_rename": "rename_tax_rate",
    "race_benign_edit_elsewhere": "skip_empty_lines",
    "race_rename": "rename_tax_rate",
    "race_same_signature_meaning_change": "tax_rate_as_percent",
}
# Cases where A's edit is still right after B's: both should land. Elsewhere A's is wrong.
BOTH_RIGHT = {"no_conflict", "benign_edit_elsewhere", "crash_after_commit"}
REPETITIONS = 5
RACE_REPETITIONS = 10

# The repository every cell starts from: a shop with prices, a cart and an inventory, and their
# tests. The agents' edits (coding_agent.EDITS) are written against it.
REPO_FILES: dict[str, str] = {
    "shop/__init__.py": "",
    "shop/pricing.py": '''"""Prices and taxes."""

PRICES = {"apple": 0.5, "pear": 0.75, "melon": 3.0}
TAX_RATES = {"EU": 0.2, "US": 0.07}


def unit_price(sku: str) -> float:
    """The price of one unit of `sku`, in dollars."""
    return PRICES[sku]


def tax_rate(region: str) -> float:
    """The sales tax in `region`, as a fraction of the price."""
    return TAX_RATES[region]
''',
    "shop/cart.py": '''"""A cart maps skus to quantities."""

from shop import pricing


def describe(items: dict[str, int]) -> str:
    """One line per sku, sorted."""
    lines = [f"{quantity} x {sku}" for sku, quantity in sorted(items.items())]
    return "\\n".join(lines)


def subtotal(items: dict[str, int]) -> float:
    """The cart's price before tax, in dollars."""
    return sum(pricing.unit_price(sku) * quantity for sku, quantity in items.items())
''',
    "shop/inventory.py": '''"""What is on the shelf."""

STOCK = {"apple": 10, "pear": 0, "melon": 2}


def in_stock(sku: str) -> bool:
    """Whether at least one unit of `sku` is on the shelf."""
    return STOCK.get(sku, 0) > 0
''',
    "tests/test_pricing.py": """from shop import pricing


def test_unit_price() -> None:
    assert pricing.unit_price("apple") == 0.5


def test_tax_rate() -> None:
    assert pricing.tax_rate("EU") == 0.2
""",
    "tests/test_cart.py": """from shop import cart


def test_describe() -> None:
    assert cart.describe({"pear": 2, "apple": 1}) == "1 x apple\\n2 x pear"


def test_subtotal() -> None:
    assert cart.subtotal({"apple": 2, "pear": 4}) == 4.0
""",
    "tests/test_inventory.py": """from shop import inventory


def test_in_stock() -> None:
    assert inventory.in_stock("apple")
    assert not inventory.in_stock("pear")
""",
}

FAULT_NOTES = {
    "no_conflict": "B adds inventory.low_stock() in other files. Want: both land, tests pass.",
    "benign_edit_elsewhere": (
        "B changes describe() in A's file (and adds its test in A's test file); A's total() is "
        "still right. Want: both land, tests pass."
    ),
    "rename": (
        "B renames pricing.tax_rate to sales_tax_rate and updates every caller it finds; A's "
        "total() calls tax_rate. Want: B lands, A refused, tests pass."
    ),
    "duplicated_work": (
        "B writes the same total() first, above subtotal(); A's patch still applies, after "
        "B's. Want: B lands, A refused, one total()."
    ),
    "same_signature_meaning_change": (
        "B makes tax_rate() return a percentage (20.0) instead of a fraction (0.2), keeping "
        "`def tax_rate(region: str) -> float`, and updates its test; A's total() adds it to 1. "
        "Want: B lands, A refused, tests pass."
    ),
    "crash_after_commit": (
        "A is SIGKILLed after its commit landed and before the gate recorded it; B lands "
        "low_stock() meanwhile; a new A process recovers (tier 2: the lookup is a commit "
        "carrying the effect id). Want: both land, A's commit exactly once."
    ),
    "crash_before_apply_then_rename": (
        "A is SIGKILLed after DISPATCHED, before its patch was applied; B renames tax_rate "
        "during the outage; a new A process recovers: the lookup finds no commit, so the "
        "premises are re-checked before any resend. Want: B lands, A refused, tests pass."
    ),
    "race_benign_edit_elsewhere": (
        "As benign_edit_elsewhere, but both agents read the same commit and are released at "
        "once; the merge lock picks the order. Want: both land."
    ),
    "race_rename": (
        "As rename, released at once. Want: whichever is dispatched first lands, the other is "
        "refused (a rename after A's new caller breaks it as surely as the other order)."
    ),
    "race_same_signature_meaning_change": (
        "As same_signature_meaning_change, released at once. Want: whichever is dispatched "
        "first lands, the other is refused."
    ),
}
SYSTEM_NOTES = {
    "no_premise": "the gate with no premise: journal, lease, effect id, tier-2 recovery; "
    "it lands every patch that applies.",
    "file_hash": "premise: every file the agent read or touches still has the SHA-256 it read "
    "(A: cart.py, test_cart.py, pricing.py; a renamer or a meaning changer reads every file, "
    "looking for callers).",
    "symbols": "premise, from `ast`: each function the agent calls still has the signature it "
    "read, each name it adds is not defined yet, and for an edit that changes a function's "
    "contract (rename, new meaning) that function's callers are still the ones it read.",
}


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
        [sys.executable, "-m", "experiments.coding_agent", *args],
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


# --- one repository and its ground truth ----------------------------------------------------------


def git(root: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args], cwd=root, capture_output=True, check=False
    )


def make_repository(root: Path) -> None:
    for path, text in REPO_FILES.items():
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


def commits_carrying(root: Path, effect: str) -> list[str]:
    """Every commit whose message names the effect id: the repository's own record."""
    found = git(root, "log", "--all", "--format=%H", "-F", f"--grep=Effect-Id: {effect}")
    return found.stdout.decode().split()


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


@dataclass(frozen=True)
class SuiteRun:
    passed: bool
    summary: str
    failed: list[str]


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


# --- one cell -------------------------------------------------------------------------------------


def run_agents(
    fault: str, system: str, repetition: int, root: Path, journal: Path
) -> tuple[list[AgentRun], float | None]:
    """Run the cell's processes in its order; return them and the settling time of A."""
    b_edit = B_EDIT[fault]
    common = ["--repo", str(root), "--journal", str(journal), "--premises", system]
    a_args = ["submit", *common, "--agent", "a", "--edit", A_EDIT]
    b_args = ["submit", *common, "--agent", "b", "--edit", b_edit, "--wait-go"]
    a_run, b_run = AgentRun("A"), AgentRun("B")
    if fault.startswith("race_"):
        a = spawn([*a_args, "--wait-go"])
        b = spawn(b_args)
        read_event(a, a_run)
        read_event(b, b_run)
        # Released together, in turns which goes first: the merge lock decides who lands first.
        for process in (a, b) if repetition % 2 == 0 else (b, a):
            go(process)
        finish(a, a_run)
        finish(b, b_run)
        return [a_run, b_run], a_run.receipts()[-1]["seconds"]
    crash = CRASHES.get(fault)
    if crash is None:
        # A reads; B lands its edit; only once the journal holds B's verdict does A submit.
        a = spawn([*a_args, "--after", coding_agent.effect_id("b", b_edit)])
        b = spawn(b_args)
        read_event(a, a_run)
        read_event(b, b_run)
        go(b)
        finish(b, b_run)
        finish(a, a_run)
        return [a_run, b_run], a_run.receipts()[-1]["seconds"]
    # A reads and submits at once, and is killed at the crash point; B lands during the
    # outage; then a new A process recovers what the journal left in flight.
    a = spawn(a_args, crash=crash)
    b = spawn(b_args)
    read_event(a, a_run)
    read_event(b, b_run)
    finish(a, a_run, expect=-9)
    died = time.perf_counter()
    go(b)
    finish(b, b_run)
    recovering = AgentRun("A recovering")
    recover = ["recover", "--repo", str(root), "--journal", str(journal), "--agent", "a"]
    finish(spawn(recover), recovering)
    return [a_run, b_run, recovering], time.perf_counter() - died


def final_receipts(runs: Sequence[AgentRun]) -> dict[str, dict[str, Any]]:
    """The last receipt each agent's processes printed, by agent."""
    receipts: dict[str, dict[str, Any]] = {}
    for run in runs:
        for event in run.receipts():
            receipts[event["agent"]] = event["receipt"]
    return receipts


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


def wanted_landings(fault: str, dispatch_order: Sequence[str]) -> dict[str, bool]:
    if fault in BOTH_RIGHT or fault == "race_benign_edit_elsewhere":
        return {"a": True, "b": True}
    if fault.startswith("race_"):
        first = dispatch_order[0] if dispatch_order else "b"
        return {agent: agent == first for agent in AGENTS}
    return {"a": False, "b": True}


def wanted_text(fault: str, wanted: Mapping[str, bool]) -> str:
    if fault.startswith("race_") and fault != "race_benign_edit_elsewhere":
        first = next(agent for agent, lands in wanted.items() if lands).upper()
        return f"the first dispatched ({first}) lands, the other refused; tests pass"
    if all(wanted.values()):
        return "A and B land once each; tests pass"
    return "B lands, A refused; tests pass"


def run_cell(system: str, fault: str, repetition: int) -> Cell:
    edits = {"a": A_EDIT, "b": B_EDIT[fault]}
    effects = {agent: coding_agent.effect_id(agent, edit) for agent, edit in edits.items()}
    with tempfile.TemporaryDirectory(prefix="interlock-coding-") as tmp:
        root, journal = Path(tmp) / "shop", Path(tmp) / "journal"
        make_repository(root)
        grant_leases(journal, edits)
        runs, seconds = run_agents(fault, system, repetition, root, journal)
        receipts = final_receipts(runs)
        commits = {agent: commits_carrying(root, effect) for agent, effect in effects.items()}
        tests = run_tests(root)
        duplicates = duplicate_definitions(root)
        facts = journal_facts(journal, effects)
        landed = {agent: bool(commits[agent]) for agent in AGENTS}
        proves = all(record_proves(receipts[agent], journal, landed[agent]) for agent in AGENTS)
    wanted = wanted_landings(fault, facts["dispatch_order"])
    healthy = tests.passed and not duplicates
    once = all(len(found) <= 1 for found in commits.values())
    states = {agent: receipts[agent]["final_state"] for agent in AGENTS}
    happened = {agent: receipts[agent]["happened"] for agent in AGENTS}
    answer: Answer = "matches"
    if any(h == "unknown" for h in happened.values()):
        answer = "cannot know (said so)"
    if any(
        happened[agent] is not landed[agent] for agent in AGENTS if happened[agent] != "unknown"
    ):
        answer = "contradicts"
    return Cell(
        system=system,
        fault=fault,
        answer=f"A {states['a']}, B {states['b']}",
        outcome=outcome_text(landed, commits, tests, duplicates),
        wanted=wanted_text(fault, wanted),
        held=landed == wanted and healthy and once,
        answer_vs_truth=answer,
        record_proves_it=proves,
        crash_to_settled_seconds=seconds,
        exit_codes=[run.exit_code for run in runs if run.exit_code is not None],
        ids={
            **{f"effect_{agent}": effects[agent] for agent in AGENTS},
            **{f"lease_{agent}": coding_agent.lease_id(agent) for agent in AGENTS},
            **{f"commit_{agent}": ",".join(commits[agent]) for agent in AGENTS},
        },
        truth={
            "landed": landed,
            "commits": {agent: len(commits[agent]) for agent in AGENTS},
            "tests_passed": tests.passed,
            "tests_summary": tests.summary,
            "tests_failed": tests.failed,
            "duplicate_definitions": duplicates,
            "broken_code_landed": not healthy,
        },
        detail={
            "repetition": repetition,
            "edits": edits,
            "final_states": states,
            "wanted_landed": wanted,
            **facts,
            "processes": [run.role for run in runs],
        },
    )


def outcome_text(
    landed: Mapping[str, bool],
    commits: Mapping[str, Sequence[str]],
    tests: SuiteRun,
    duplicates: Sequence[str],
) -> str:
    names = [agent.upper() for agent in AGENTS if landed[agent]]
    parts = [("+".join(names) or "nothing") + " landed"]
    parts += [f"{a.upper()} committed {len(c)}x" for a, c in commits.items() if len(c) > 1]
    if tests.passed:
        parts.append("tests pass")
    else:
        parts.append(f"tests FAIL ({', '.join(t.split('::')[-1] for t in tests.failed)})")
    parts += [f"{d.split('::')[-1]} defined twice" for d in duplicates]
    return "; ".join(parts)


# --- tables and findings --------------------------------------------------------------------------


@dataclass
class Tally:
    cells: int = 0
    held: int = 0
    broken: int = 0
    right_edits_refused: int = 0  # an edit that should have landed was refused
    right_edits: int = 0
    correct_refusals: int = 0
    wrong_edits: int = 0  # an edit that should have been refused
    wrong_edits_landed: int = 0


def tally(cells: Sequence[Cell]) -> Tally:
    """The cells' outcomes, and the edits that could have been refused: A's in the ordered
    cases (B always lands first there, with nothing to re-check), either agent's in a race."""
    t = Tally()
    for cell in cells:
        t.cells += 1
        t.held += cell.held
        t.broken += cell.truth["broken_code_landed"]
        for agent, wanted in cell.detail["wanted_landed"].items():
            if agent != "a" and not cell.fault.startswith("race_"):
                continue
            landed = cell.truth["landed"][agent]
            if wanted:
                t.right_edits += 1
                t.right_edits_refused += not landed
            else:
                t.wrong_edits += 1
                t.correct_refusals += not landed
                t.wrong_edits_landed += landed
    return t


def verdicts(cells: Sequence[Cell]) -> Counter[tuple[str, str, bool]]:
    return Counter(
        (cell.detail["final_states"]["a"], cell.detail["final_states"]["b"], cell.held)
        for cell in cells
    )


def pick(scenario: Scenario, system: str, faults: Sequence[str]) -> list[Cell]:
    return [c for c in scenario.cells if c.system == system and c.fault in faults]


def dial_table(scenario: Scenario, repetitions: int) -> str:
    rows = []
    for system in SYSTEMS:
        t = tally(pick(scenario, system, ORDERED))
        varied = [fault for fault in ORDERED if len(verdicts(pick(scenario, system, [fault]))) > 1]
        repeats = "no: " + ", ".join(varied) if varied else "yes"
        rows.append(
            [
                system,
                f"{t.broken}/{t.cells}",
                f"{t.right_edits_refused}/{t.right_edits}",
                f"{t.correct_refusals}/{t.wrong_edits}",
                f"{t.wrong_edits_landed}/{t.wrong_edits}",
                f"{t.held}/{t.cells}",
                "n/a (one repetition)" if repetitions == 1 else repeats,
            ]
        )
    header = [
        "premise kind",
        "broken code landed (cells)",
        "benign edits refused",
        "correct refusals",
        "wrong edits landed",
        "repository as wanted",
        "same verdicts every repetition",
    ]
    return (
        f"### The dial: every ordered case, {repetitions} repetition(s) each\n\n"
        + markdown_table(header, rows)
        + "\n\nEdits counted are A's (B always lands first in these cases, with nothing to "
        "re-check). Benign edits refused: A's edits that were still right after B's, refused. "
        "Correct refusals and wrong edits landed: A's edits that B's change made wrong (a "
        "duplicate, a call to a renamed or re-meant function), refused or landed. Broken code: "
        "the repository's tests fail or a module defines a function twice."
    )


def case_table(scenario: Scenario, faults: Sequence[str], title: str) -> str:
    rows = []
    for fault in faults:
        row = [fault]
        for system in SYSTEMS:
            cells = pick(scenario, system, [fault])
            if not cells:
                row.append("not run")
                continue
            seen = verdicts(cells)
            parts = [
                f"A {a}, B {b} x{n}" + ("" if held else " (VIOLATED)")
                for (a, b, held), n in seen.most_common()
            ]
            if fault.startswith("race_"):
                firsts = Counter((c.detail["dispatch_order"] or ["-"])[0].upper() for c in cells)
                parts.append(
                    "first dispatched: " + ", ".join(f"{k} x{v}" for k, v in firsts.items())
                )
            broken = sum(c.truth["broken_code_landed"] for c in cells)
            parts.append(f"broken code {broken}/{len(cells)}")
            row.append("; ".join(parts))
        rows.append(row)
    return f"### {title}\n\n" + markdown_table(["case", *SYSTEMS], rows)


def side_by_side(
    by: Mapping[str, Mapping[str, Tally]], faults: Sequence[str]
) -> tuple[str, tuple[list[str], list[str]]]:
    """symbols against file_hash per case: better, equal or worse, counting the cells where
    broken code landed plus the right edits refused; and (the better cases, the worse)."""
    verdict: dict[str, list[str]] = {"better": [], "equal": [], "worse": []}
    for fault in faults:
        sy, fh = by["symbols"][fault], by["file_hash"][fault]
        mine, theirs = sy.broken + sy.right_edits_refused, fh.broken + fh.right_edits_refused
        word = "equal" if mine == theirs else "better" if mine < theirs else "worse"
        verdict[word].append(
            f"{fault} (broken {sy.broken}/{sy.cells} vs {fh.broken}/{fh.cells}, right edits "
            f"refused {sy.right_edits_refused} vs {fh.right_edits_refused})"
        )
    text = "; ".join(f"{word} in {', '.join(cases)}" for word, cases in verdict.items() if cases)
    better = [c.split(" ")[0] for c in verdict["better"]]
    worse = [c.split(" ")[0] for c in verdict["worse"]]
    return text, (better, worse)


def findings(scenario: Scenario) -> list[str]:
    by = {s: {f: tally(pick(scenario, s, [f])) for f in (*ORDERED, *RACES)} for s in SYSTEMS}
    total = {s: tally(pick(scenario, s, ORDERED)) for s in SYSTEMS}

    def broken(system: str, fault: str) -> str:
        return f"{by[system][fault].broken}/{by[system][fault].cells}"

    def once(system: str) -> str:
        cells = pick(scenario, system, ["crash_after_commit"])
        return f"{sum(c.truth['commits']['a'] == 1 for c in cells)}/{len(cells)} {system}"

    fh, sy, no = total["file_hash"], total["symbols"], total["no_premise"]
    compared, trade = side_by_side(by, ORDERED)
    benign = by["file_hash"]["benign_edit_elsewhere"]
    out = [
        "Premises are a dial with a floor, measured. file_hash landed broken code in "
        f"{fh.broken}/{fh.cells} cells and refused {fh.right_edits_refused}/{fh.right_edits} "
        f"edits that were still right; symbols landed broken code in {sy.broken}/{sy.cells} "
        f"cells and refused {sy.right_edits_refused}/{sy.right_edits}; with no premise the "
        f"gate landed broken code in {no.broken}/{no.cells} cells and refused "
        f"{no.right_edits_refused}/{no.right_edits}.",
        "symbols against file_hash, case by case: "
        + compared
        + "."
        + (
            " Symbols buy the benign edit in a shared file and pay for it with the "
            "same-signature meaning change."
            if trade == (["benign_edit_elsewhere"], ["same_signature_meaning_change"])
            else ""
        ),
        "The floor of symbols: tax_rate() returning 20.0 instead of 0.2 keeps "
        "`def tax_rate(region: str) -> float`, so A's premise held and its total() landed "
        f"broken in {broken('symbols', 'same_signature_meaning_change')} cells; only a test "
        "(or a premise over behaviour rather than shape) sees it. The floor of file_hash is "
        "the other way round: any byte changed in a file A read refuses A, benign or not "
        f"({benign.right_edits_refused}/{benign.right_edits} of A's right edits refused in "
        "benign_edit_elsewhere).",
        "With no premise the gate still gives every edit an id, a lease and a receipt and "
        "lands each patch once, but it lands whatever git applies: the call to a renamed "
        f"function ({broken('no_premise', 'rename')} cells broken), the duplicate "
        f"({broken('no_premise', 'duplicated_work')}), the misread percentage "
        f"({broken('no_premise', 'same_signature_meaning_change')}), and after a crash the "
        f"resend into a renamed world ({broken('no_premise', 'crash_before_apply_then_rename')}"
        ").",
        "Recovery is when the world moves: killed before its patch applied, A's recovery "
        "found no commit carrying its effect id and re-checked before resending; broken "
        f"code landed in {broken('file_hash', 'crash_before_apply_then_rename')} file_hash "
        f"and {broken('symbols', 'crash_before_apply_then_rename')} symbols cells. Killed "
        "after its commit, A's recovery found the commit and settled without applying again "
        f"(A committed exactly once in {once('no_premise')}, {once('file_hash')}, "
        f"{once('symbols')} cells).",
    ]
    varied = [
        f"{s} / {f}" for s in SYSTEMS for f in ORDERED if len(verdicts(pick(scenario, s, [f]))) > 1
    ]
    repetitions = (
        max((c.detail["repetition"] for c in scenario.cells if c.fault in ORDERED), default=0) + 1
    )
    if repetitions == 1:
        out.append("One repetition of each case: whether the verdicts repeat is not measured.")
    elif not varied:
        out.append(
            f"The ordered cases are deterministic: {repetitions} repetitions of each gave the "
            "same final states and the same repository every time."
        )
    else:
        out.append("The ordered cases varied between repetitions in: " + ", ".join(varied) + ".")
    if any(c.fault in RACES for c in scenario.cells):
        race = {s: tally(pick(scenario, s, RACES)) for s in SYSTEMS}
        race_benign = by["file_hash"]["race_benign_edit_elsewhere"]
        hashed = pick(scenario, "file_hash", RACES)
        one_landed = sum(sum(c.truth["landed"].values()) == 1 for c in hashed)
        contract = pick(scenario, "symbols", ["race_rename", "race_same_signature_meaning_change"])
        a_first = [c for c in contract if c.detail["dispatch_order"][:1] == ["a"]]
        callers = [
            c
            for c in a_first
            if any("is used only in" in p for p in c.detail["failed_premises"].get("b", []))
        ]
        meaning = pick(scenario, "symbols", ["race_same_signature_meaning_change"])
        b_first = [c for c in meaning if c.detail["dispatch_order"][:1] == ["b"]]
        out.append(
            "Racing (both read the same commit, released at once, the merge lock picks the "
            "order): broken code landed in "
            + ", ".join(f"{race[s].broken}/{race[s].cells} {s}" for s in SYSTEMS)
            + " races. Under symbols the second to land is the one re-checked: when A's "
            "total() landed first, B's premise on tax_rate's callers (A's total() is a new one) "
            f"refused B's rename or change of meaning in {len(callers)}/{len(a_first)} such "
            "races; when B's change of meaning landed first, A's signature premise held and "
            f"its broken total() landed in {sum(c.truth['broken_code_landed'] for c in b_first)}"
            f"/{len(b_first)} races. file_hash refused the agent that came second in "
            f"{one_landed}/{len(hashed)} races, so in the benign race it refused "
            f"{race_benign.right_edits_refused}/{race_benign.right_edits} right edits. Which "
            "agent won each race was up to the scheduler; the table counts it."
        )
    return out


# --- the scenario ---------------------------------------------------------------------------------


def scenario_frame(quick: bool) -> Scenario:
    faults = ORDERED if quick else (*ORDERED, *RACES)
    return Scenario(
        name="coding",
        title="Parallel coding agents: same gate, different world",
        intro=(
            "Each cell is one premise kind (the system) and one case (the fault): a fresh git "
            "repository of a small shop package and its pytest suite, and two agents, each its "
            "own process, editing it through the gate with a LocalJournal they share. Agent A "
            "reads what it needs and prepares `cart.total()` with its test; agent B lands its "
            "own edit; only then (A waits for B's verdict in the journal) does A submit, and "
            "the gate re-checks A's premises at dispatch. A patch lands as a commit carrying "
            "its effect id. Ground truth afterwards, from the repository alone: its tests in a "
            "fresh interpreter, its top-level definitions (`ast`), and the commits carrying "
            "each effect id. The answer is each agent's final state in the gate. The crash and "
            "race cases change the order, as their notes say."
        ),
        systems=SYSTEMS,
        faults=faults,
        fault_notes={f: FAULT_NOTES[f] for f in faults},
        system_notes=SYSTEM_NOTES,
    )


def run(*, quick: bool = False, results_dir: Path = RESULTS_DIR) -> Scenario:
    """Every cell; with `quick`, one repetition of the ordered cases and no races."""
    started = time.perf_counter()
    scenario = scenario_frame(quick)
    repetitions = 1 if quick else REPETITIONS
    races = 0 if quick else RACE_REPETITIONS
    counters: dict[tuple[str, str], itertools.count[int]] = {}

    def one(system: str, fault: str) -> Cell:
        repetition = next(counters.setdefault((system, fault), itertools.count()))
        return run_cell(system, fault, repetition)

    faults = [*ORDERED * repetitions, *RACES * races]
    run_cells(scenario, one, faults=faults)
    seconds = time.perf_counter() - started
    scenario.extra_tables += [
        dial_table(scenario, repetitions),
        case_table(scenario, ORDERED, f"Verdicts per case ({repetitions} repetition(s))"),
    ]
    if races:
        scenario.extra_tables.append(
            case_table(scenario, RACES, f"Racing agents ({races} races per cell)")
        )
    scenario.findings = findings(scenario)
    scenario.notes = [
        f"{len(scenario.cells)} cells in {seconds:.0f} s. The results table shows the first "
        "repetition of each cell; the tables under it count every repetition, and the JSON "
        "holds every cell.",
        "Real parts: git, one OS process per agent (and per recovery), a SIGKILL at the "
        "gate's crash points, the shared fsync'd LocalJournal, pytest run in a fresh "
        "interpreter. Scripted parts: the agents' edits are fixed text edits, not a model's; "
        "what each agent reads and relies on is declared with its edit.",
        "The timing column: for the crash cases, from the moment the killed A was reaped to "
        "the recovering process's receipt (including that process's start-up); for the "
        "others, A's submit to its final state (the premise re-check, the journal writes, "
        "and git apply and commit when it lands). The 1.0 s of "
        "crash_before_apply_then_rename is the target's declared max in-flight time: a lookup "
        "that finds no commit counts only once the dispatched request can no longer be in "
        "flight.",
        "Every submission holds the repository's merge lock (a flock) from the premise "
        "re-check through the commit, so re-check and apply are one step, as the journal "
        "makes the lease check and DISPATCHED one. Without it, a second agent could land "
        "between another's re-check and its apply; that window is not measured here.",
        "A refused edit is the end of the cell: the agent would re-read and re-plan, which "
        "is not modelled. A patch that git cannot apply would end FAILED:patch_does_not_apply; "
        "every case here applies cleanly, so every refusal is the premises'.",
        "Agent B's premises are of the same kind as A's; in the ordered cases nothing moves "
        "between B's read and its submit, so B always lands. They matter in the races.",
    ]
    command = "python experiments/scenario_coding.py" + (" --quick" if quick else "")
    if results_dir != RESULTS_DIR:
        command += f" --results-dir {results_dir}"
    write_results(scenario, command=command, results_dir=results_dir)
    return scenario


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument(
        "--quick", action="store_true", help="one repetition of each case, no races"
    )
    parser.add_argument("--results-dir", type=Path, default=RESULTS_DIR)
    args = parser.parse_args(argv)
    scenario = run(quick=args.quick, results_dir=args.results_dir)
    print(args.results_dir / f"{scenario.name}.md")


if __name__ == "__main__":
    main()
