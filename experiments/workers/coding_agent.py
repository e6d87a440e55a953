"""A coding agent that edits a small Python repository through the gate, one process per agent.

The agent reads what its edit depends on, prepares the edit as a unified diff, and submits "apply
this patch" as one effect; the repository is the target. What the agent assumed about the code
rides along as premises, in one of three kinds, and the gate re-checks them at dispatch, after
another agent's edit may have landed:

- ``no_premise``: none; the gate lands whatever applies.
- ``file_hash``: every file the agent read or touches still has the SHA-256 it read.
- ``symbols``: the functions it calls still have the signatures it read (from ``ast``), the
  names it adds are not defined yet, and, for an edit that changes a function's contract (a
  rename, a change of meaning), that function's callers are still the ones it read.

Each premise is an absolute predicate ("``tax_rate`` is ``def tax_rate(region: str) -> float``"),
its expected value written into the proposal, so a recovering process rebuilds it from the
journal. The target applies the patch with ``git apply --index`` and commits it with the effect
id in the message (``Effect-Id: eff_...``): that commit is its lookup, so the repository is a
tier 2 target and a crash after the commit is settled without applying the patch twice.
Submissions hold the repository's merge lock from the re-check through the commit, so the
re-check and the apply are one step for every agent.

    python -m experiments.workers.coding_agent submit --repo R --journal J --agent a \\
        --edit add_total --premises symbols [--after EFFECT_ID] [--wait-go]
    python -m experiments.workers.coding_agent recover --repo R --journal J --agent a

Both print JSON lines: ``{"event": "read", ...}`` once the agent has read the code, then
``{"event": "receipt", ...}`` per effect it settled. ``--wait-go`` waits for a line on stdin
after reading; ``--after`` waits for another effect to reach a verdict in the journal."""

from __future__ import annotations

import argparse
import ast
import difflib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from gate_client.faults import CrashPoint, crash_point
from gate_client.gate import Gate
from gate_client.ids import effect_id_for
from gate_client.journal import LocalJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.protocol import standing
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
)

TARGET = "repo"
ACTION = "apply_patch"
PREMISE_KINDS = ("no_premise", "file_hash", "symbols")
MERGE_LOCK = ".git/interlock-merge.lock"
WAIT_SECONDS = 60.0


class EditError(Exception):
    """The code is not as the edit expects: the agent cannot prepare its edit."""


@dataclass(frozen=True)
class Edit:
    """One agent's change, and what it read and relied on to make it."""

    message: str
    changes: Mapping[str, str]  # path -> the file's new text
    reads: Sequence[str]  # every file read to make it (the changed files are added)
    uses: Sequence[str] = ()  # "path::name" of the functions it calls
    defines: Sequence[str] = ()  # "path::name" of the functions it adds
    contracts: Sequence[str] = ()  # names of the functions whose contract it changes


def _read(root: Path, path: str) -> str:
    return (root / path).read_text()


def _replace_once(text: str, old: str, new: str) -> str:
    if text.count(old) != 1:
        raise EditError(f"expected one {old!r}, found {text.count(old)}")
    return text.replace(old, new)


def python_files(root: Path) -> list[str]:
    """Every Python file of the working tree, relative to the repository."""
    return sorted(
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if ".git" not in path.relative_to(root).parts
    )


# --- the edits ------------------------------------------------------------------------------------

TOTAL = '''

def total(items: dict[str, int], region: str) -> float:
    """The cart's price with tax, in dollars, rounded to cents."""
    return round(subtotal(items) * (1 + pricing.tax_rate(region)), 2)
'''

TEST_TOTAL = """

def test_total() -> None:
    assert cart.total({"apple": 2, "melon": 1}, "EU") == 4.8
"""


def add_total(root: Path) -> Edit:
    """Agent A's task: a cart total with tax, and its test, appended to cart.py and its tests."""
    cart, tests = _read(root, "shop/cart.py"), _read(root, "tests/test_cart.py")
    return Edit(
        message="cart: total() with tax, rounded to cents",
        changes={"shop/cart.py": cart + TOTAL, "tests/test_cart.py": tests + TEST_TOTAL},
        reads=("shop/cart.py", "tests/test_cart.py", "shop/pricing.py"),
        uses=("shop/cart.py::subtotal", "shop/pricing.py::tax_rate"),
        defines=("shop/cart.py::total", "tests/test_cart.py::test_total"),
    )


def skip_empty_lines(root: Path) -> Edit:
    """Benign, elsewhere in A's file: describe() leaves out skus with no units."""
    cart, tests = _read(root, "shop/cart.py"), _read(root, "tests/test_cart.py")
    cart = _replace_once(cart, '"""One line per sku, sorted."""', '"""One line per sku held."""')
    cart = _replace_once(cart, "in sorted(items.items())]", "in sorted(items.items()) if quantity]")
    tests = _replace_once(
        tests,
        '== "1 x apple\\n2 x pear"\n',
        '== "1 x apple\\n2 x pear"\n\n\ndef test_describe_skips_empty() -> None:\n'
        '    assert cart.describe({"apple": 0, "pear": 1}) == "1 x pear"\n',
    )
    return Edit(
        message="cart: describe() leaves out skus with no units",
        changes={"shop/cart.py": cart, "tests/test_cart.py": tests},
        reads=("shop/cart.py", "tests/test_cart.py"),
        uses=("shop/cart.py::describe",),
        defines=("tests/test_cart.py::test_describe_skips_empty",),
    )


def rename_tax_rate(root: Path) -> Edit:
    """tax_rate -> sales_tax_rate, every caller found updated (it greps the whole repository)."""
    changes = {}
    for path in python_files(root):
        text = _read(root, path)
        renamed = text.replace("def tax_rate(", "def sales_tax_rate(").replace(
            "pricing.tax_rate(", "pricing.sales_tax_rate("
        )
        if renamed != text:
            changes[path] = renamed
    if "shop/pricing.py" not in changes:
        raise EditError("no tax_rate to rename")
    return Edit(
        message="pricing: rename tax_rate to sales_tax_rate",
        changes=changes,
        reads=tuple(python_files(root)),
        uses=("shop/pricing.py::tax_rate",),
        defines=("shop/pricing.py::sales_tax_rate",),
        contracts=("tax_rate",),
    )


def add_total_first(root: Path) -> Edit:
    """The same feature as A's, written first by another agent, placed above subtotal()."""
    cart, tests = _read(root, "shop/cart.py"), _read(root, "tests/test_cart.py")
    mine = (
        "def total(items: dict[str, int], region: str) -> float:\n"
        '    """The cart\'s price including tax, in dollars."""\n'
        "    return round(subtotal(items) * (1 + pricing.tax_rate(region)), 2)\n\n\n"
    )
    cart = _replace_once(cart, "def subtotal(", mine + "def subtotal(")
    tests = _replace_once(
        tests,
        '== "1 x apple\\n2 x pear"\n',
        '== "1 x apple\\n2 x pear"\n\n\ndef test_total_with_tax() -> None:\n'
        '    assert cart.total({"pear": 4}, "US") == 3.21\n',
    )
    return Edit(
        message="cart: total() including tax",
        changes={"shop/cart.py": cart, "tests/test_cart.py": tests},
        reads=("shop/cart.py", "tests/test_cart.py", "shop/pricing.py"),
        uses=("shop/cart.py::subtotal", "shop/pricing.py::tax_rate"),
        defines=("shop/cart.py::total", "tests/test_cart.py::test_total_with_tax"),
    )


def tax_rate_as_percent(root: Path) -> Edit:
    """Same signature, new meaning: tax_rate() returns a percentage (20.0), not a fraction."""
    pricing, tests = _read(root, "shop/pricing.py"), _read(root, "tests/test_pricing.py")
    pricing = _replace_once(
        pricing, 'TAX_RATES = {"EU": 0.2, "US": 0.07}', 'TAX_RATES = {"EU": 20.0, "US": 7.0}'
    )
    pricing = _replace_once(pricing, "as a fraction of the price", "as a percentage")
    tests = _replace_once(tests, 'tax_rate("EU") == 0.2', 'tax_rate("EU") == 20.0')
    return Edit(
        message="pricing: tax rates as percentages",
        changes={"shop/pricing.py": pricing, "tests/test_pricing.py": tests},
        reads=tuple(python_files(root)),  # it looked for every caller, and found the test
        uses=("shop/pricing.py::tax_rate",),
        contracts=("tax_rate",),
    )


def add_low_stock(root: Path) -> Edit:
    """Another file altogether: inventory.low_stock() and its test."""
    inventory = _read(root, "shop/inventory.py")
    tests = _read(root, "tests/test_inventory.py")
    inventory += (
        "\n\ndef low_stock(threshold: int = 3) -> list[str]:\n"
        '    """The skus with fewer than `threshold` units left, sorted."""\n'
        "    return sorted(sku for sku, units in STOCK.items() if units < threshold)\n"
    )
    tests += (
        '\n\ndef test_low_stock() -> None:\n    assert inventory.low_stock() == ["melon", "pear"]\n'
    )
    return Edit(
        message="inventory: low_stock()",
        changes={"shop/inventory.py": inventory, "tests/test_inventory.py": tests},
        reads=("shop/inventory.py", "tests/test_inventory.py"),
        defines=("shop/inventory.py::low_stock", "tests/test_inventory.py::test_low_stock"),
    )


EDITS: dict[str, Callable[[Path], Edit]] = {
    "add_total": add_total,
    "skip_empty_lines": skip_empty_lines,
    "rename_tax_rate": rename_tax_rate,
    "add_total_first": add_total_first,
    "tax_rate_as_percent": tax_rate_as_percent,
    "add_low_stock": add_low_stock,
}


# --- identities -----------------------------------------------------------------------------------


def case_id(agent: str, edit: str) -> str:
    return f"repo:shop:{agent}:{edit}"


def lease_id(agent: str) -> str:
    return f"lease-agent-{agent}"


def effect_id(agent: str, edit: str) -> str:
    return effect_id_for(case_id(agent, edit), TARGET, ACTION)


# --- what the code says, from ast -----------------------------------------------------------------


def _definitions(root: Path, path: str) -> dict[str, list[ast.stmt]]:
    """The module's top-level definitions by name (functions, classes, assigned names)."""
    found: dict[str, list[ast.stmt]] = {}
    file = root / path
    if not file.exists():
        return found
    for node in ast.parse(file.read_text(), filename=path).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found.setdefault(target.id, []).append(node)
    return found


def signature(root: Path, symbol: str) -> str | None:
    """``def name(args) -> returns`` of a top-level function (or a class's bases); None if the
    module does not define it."""
    path, name = symbol.split("::")
    nodes = _definitions(root, path).get(name, [])
    if not nodes:
        return None
    node = nodes[-1]  # the one that stands at import time
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        returns = ast.unparse(node.returns) if node.returns else "?"
        return f"def {name}({ast.unparse(node.args)}) -> {returns}"
    if isinstance(node, ast.ClassDef):
        return f"class {name}({', '.join(ast.unparse(b) for b in node.bases)})"
    return f"{name} = ..."


def references(root: Path, name: str) -> list[str]:
    """Where `name` is used ("path::enclosing top-level definition"), sorted, over every file."""
    sites = set()
    for path in python_files(root):
        for node in ast.parse((root / path).read_text(), filename=path).body:
            where = getattr(node, "name", "<module>")
            for inner in ast.walk(node):
                if (isinstance(inner, ast.Name) and inner.id == name) or (
                    isinstance(inner, ast.Attribute) and inner.attr == name
                ):
                    sites.add(f"{path}::{where}")
    return sorted(sites)


def sha256_of(root: Path, path: str) -> str | None:
    file = root / path
    return hashlib.sha256(file.read_bytes()).hexdigest() if file.exists() else None


# --- premises -------------------------------------------------------------------------------------


def assumptions(root: Path, edit: Edit, kind: str) -> dict[str, Any]:
    """What the agent read, as the expected values of its premises (JSON, in the proposal)."""
    if kind == "no_premise":
        return {"kind": kind}
    if kind == "file_hash":
        paths = sorted(set(edit.reads) | set(edit.changes))
        return {"kind": kind, "sha256": {path: sha256_of(root, path) for path in paths}}
    if kind == "symbols":
        return {
            "kind": kind,
            "signatures": {symbol: signature(root, symbol) for symbol in edit.uses},
            "absent": list(edit.defines),
            "references": {name: references(root, name) for name in edit.contracts},
        }
    raise ValueError(f"no premise kind {kind!r}; known: {', '.join(PREMISE_KINDS)}")


def premises(root: Path, assumed: Mapping[str, Any]) -> list[Premise]:
    """The premises that say the code is still as `assumed` says, checked against `root` now."""
    kind = assumed["kind"]
    if kind == "no_premise":
        return []
    if kind == "file_hash":
        return [_hash_premise(root, path, sha) for path, sha in assumed["sha256"].items()]
    checks = [_signature_premise(root, s, sig) for s, sig in assumed["signatures"].items()]
    checks += [_absent_premise(root, symbol) for symbol in assumed["absent"]]
    checks += [_callers_premise(root, n, sites) for n, sites in assumed["references"].items()]
    return checks


def _hash_premise(root: Path, path: str, expected: str | None) -> Premise:
    def check() -> PremiseResult:
        now = sha256_of(root, path)
        return PremiseResult(now == expected, {"path": path, "sha256": now})

    return Premise(f"sha256 of {path} is {str(expected)[:12]}", check)


def _signature_premise(root: Path, symbol: str, expected: str | None) -> Premise:
    def check() -> PremiseResult:
        now = signature(root, symbol)
        return PremiseResult(now == expected, {"symbol": symbol, "signature": now})

    return Premise(f"{symbol} is {expected}", check)


def _absent_premise(root: Path, symbol: str) -> Premise:
    def check() -> PremiseResult:
        now = signature(root, symbol)
        return PremiseResult(now is None, {"symbol": symbol, "signature": now})

    return Premise(f"{symbol} is not defined", check)


def _callers_premise(root: Path, name: str, expected: Sequence[str]) -> Premise:
    def check() -> PremiseResult:
        now = references(root, name)
        return PremiseResult(now == list(expected), {"name": name, "used_in": now})

    return Premise(f"{name} is used only in {', '.join(expected) or 'nothing'}", check)


# --- the repository as a target -------------------------------------------------------------------


def git(root: Path, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        ["git", "-c", "commit.gpgsign=false", *args],
        cwd=root,
        input=stdin,
        capture_output=True,
        check=False,
    )


def commits_carrying(root: Path, effect: str) -> list[str]:
    """The commits whose message names the effect, newest first."""
    found = git(root, "log", "--all", "--format=%H", "-F", f"--grep=Effect-Id: {effect}")
    return found.stdout.decode().split()


@dataclass
class GitRepository:
    """Tier 2: it can be asked whether it acted (a commit carries the effect id)."""

    root: Path
    author: str
    name: str = TARGET
    tier: Tier = Tier.LOOKUP
    queryable: bool = True
    key_window: timedelta | None = None
    max_inflight: timedelta = timedelta(seconds=1)
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False
    money: None = None  # a patch moves no money

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        patch = payload["patch"].encode()
        if git(self.root, "apply", "--check", stdin=patch).returncode != 0:
            return FailedDefinitively("patch_does_not_apply")
        identity = ["-c", f"user.name={self.author}", "-c", f"user.email={self.author}@shop.test"]
        message = f"{payload['message']}\n\nEffect-Id: {effect_id}\n"
        for step in (
            git(self.root, "apply", "--index", stdin=patch),
            git(self.root, *identity, "commit", "-q", "-F", "-", stdin=message.encode()),
        ):
            if step.returncode != 0:
                raise InDoubt(step.stderr.decode().strip())
        crash_point(CrashPoint.AFTER_TARGET_ACTED)
        return Sent(git(self.root, "rev-parse", "HEAD").stdout.decode().strip())

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        commits = commits_carrying(self.root, effect_id)
        return Found(commits[0]) if commits else NotFound()


def make_patch(root: Path, changes: Mapping[str, str]) -> str:
    """A unified diff from the files as read to the files as the edit leaves them."""
    parts: list[str] = []
    for path in sorted(changes):
        before = _read(root, path) if (root / path).exists() else ""
        parts += difflib.unified_diff(
            before.splitlines(keepends=True),
            changes[path].splitlines(keepends=True),
            f"a/{path}",
            f"b/{path}",
        )
    return "".join(parts)


@contextmanager
def merge_lock(root: Path) -> Iterator[None]:
    """One submission at a time: the re-check and the commit it guards are one step."""
    fd = os.open(root / MERGE_LOCK, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def gate_for(root: Path, journal: LocalJournal, author: str) -> Gate:
    return Gate(
        journal,
        {TARGET: GitRepository(root, author)},
        premises_for=lambda proposed: premises(root, proposed["payload"]["assumes"]),
    )


# --- the process ----------------------------------------------------------------------------------


def emit(event: Mapping[str, Any]) -> None:
    print(json.dumps(event), flush=True)


def wait_for_verdict(journal: LocalJournal, effect: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while standing(journal.history(effect)).state is None:
        if time.monotonic() > deadline:
            raise SystemExit(f"{effect} reached no verdict in {WAIT_SECONDS:.0f}s")
        time.sleep(0.01)


def submit(args: argparse.Namespace) -> None:
    root = Path(args.repo)
    edit = EDITS[args.edit](root)
    assumed = assumptions(root, edit, args.premises)
    proposal = Proposal(
        case_id=case_id(args.agent, args.edit),
        target=TARGET,
        action=ACTION,
        payload={
            "edit": args.edit,
            "message": edit.message,
            "patch": make_patch(root, edit.changes),
            "assumes": assumed,
        },
        lease_id=lease_id(args.agent),
        premises=tuple(premises(root, assumed)),
    )
    emit({"event": "read", "agent": args.agent, "effect_id": proposal.effect_id})
    if args.wait_go:
        sys.stdin.readline()
    with closing(LocalJournal(args.journal)) as journal:
        for other in args.after:
            wait_for_verdict(journal, other)
        started = time.perf_counter()
        with merge_lock(root):
            receipt = gate_for(root, journal, f"agent-{args.agent}").submit(proposal)
        seconds = time.perf_counter() - started
    emit(
        {"event": "receipt", "agent": args.agent, "receipt": receipt.to_dict(), "seconds": seconds}
    )


def recover(args: argparse.Namespace) -> None:
    root = Path(args.repo)
    with closing(LocalJournal(args.journal)) as journal, merge_lock(root):
        receipts = gate_for(root, journal, f"agent-{args.agent}").recover()
    for receipt in receipts:
        emit({"event": "receipt", "agent": args.agent, "receipt": receipt.to_dict()})


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    for name in ("submit", "recover"):
        command = commands.add_parser(name)
        command.add_argument("--repo", required=True, help="the repository's working tree")
        command.add_argument("--journal", required=True, help="the LocalJournal file")
        command.add_argument("--agent", required=True, help="who commits (a, b, ...)")
        if name == "submit":
            command.add_argument("--edit", required=True, choices=sorted(EDITS))
            command.add_argument("--premises", required=True, choices=PREMISE_KINDS)
            command.add_argument(
                "--after", action="append", default=[], help="an effect to wait for first"
            )
            command.add_argument(
                "--wait-go", action="store_true", help="after reading, wait for a line on stdin"
            )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    if args.command == "submit":
        submit(args)
    else:
        recover(args)


if __name__ == "__main__":
    main()
