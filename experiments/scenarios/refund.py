"""Scenario refund: the seed's refund agent, regenerated offline with real crashes.

A customer paid $100; support approved one $20 refund (a lease: the case, action "refund", at
most 2000 cents). In every cell an agent process (experiments/workers/refund_worker.py) sets out
to refund it and SIGKILLs itself at one of the five crash points; while it is down the world
changes (or not); a new process is started at once and does what its system does on a restart;
the result is read from the payment service's own record (refund_world.py runs a cell).

    python experiments/run_experiments.py --only refund [--quick] [--results-dir DIR]

The notary rows (gate_tier3_notary, interlock_attested) need a live notary: a fresh PostgreSQL
database named by EXPERIMENTS_DATABASE_URL (see experiments/kit/live_notary.py)."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from experiments.kit.cells import Cell, Declared, Row, RunInfo, Scenario
from experiments.kit.prose import Prose, dollars
from experiments.kit.tables import markdown_table
from experiments.scenarios.refund_world import (
    APPROVED_CENTS,
    ATTESTED_MAX_INFLIGHT,
    EVIDENCE_WINDOW,
    REDECIDED_CENTS,
    WEBHOOK_DELAY_SECONDS,
    Observed,
    Setup,
    Truth,
    refund_world,
)
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.protocol import standing as standing_verdict
from gate_client.receipts import Receipt, ReceiptError, derive_receipt, verify_receipt
from ledger.core.entries import Entry, EntryKind

TEXT = Prose("refund")
LOCAL_ORIGIN = "gate.local/journal"
PARALLEL_CELLS = 4  # a cell mostly waits on processes; two cores keep up with four


@dataclass(frozen=True)
class System:
    """A row: which refund_worker system runs, against which service, told what."""

    worker: str  # the refund_worker system
    service: str  # "reference" or "stripe"
    dedupe: bool = False  # what the reference service really does
    lookup: bool = False
    tier: int | None = None  # what the gate is told
    notary: bool = False
    attested: bool = False  # the service attests each request to the notary before acting

    @property
    def gated(self) -> bool:
        return self.worker == "gate"


SYSTEMS = {
    "plain_retry": System("plain_retry", "reference", dedupe=True),
    "idempotency_keys": System("idempotency_keys", "reference", dedupe=True),
    "durable_execution": System("durable_execution", "reference", dedupe=True),
    "gate_tier1": System("gate", "reference", dedupe=True, tier=1),
    "gate_tier2": System("gate", "reference", lookup=True, tier=2),
    "gate_tier3": System("gate", "reference", tier=3),
    "gate_tier3_notary": System("gate", "reference", tier=3, notary=True),
    "interlock_attested": System("gate", "reference", tier=3, notary=True, attested=True),
    "idempotency_keys_stripe": System("idempotency_keys", "stripe"),
    "gate_tier2_stripe": System("gate", "stripe", tier=2),
}
GATE_ROWS = tuple(name for name, system in SYSTEMS.items() if system.gated)
# A fault is a crash point and a world change during the outage.
CHANGES = ("none", "lease_revoked", "refunded_by_hand", "redecided_30")
CRASHES = tuple(point.value for point in CrashPoint)
FAULTS = tuple(f"{crash}+{change}" for change in CHANGES for crash in CRASHES)
QUICK_FAULTS = (
    "after_target_acted+none",
    "after_dispatched+lease_revoked",
    "after_dispatched+refunded_by_hand",
    "after_target_acted+redecided_30",
)


def frame(quick: bool) -> Scenario:
    notes = TEXT.table("systems")
    notes["gate_tier3_notary"] = notes["gate_tier3_notary"].format(
        evidence=int(EVIDENCE_WINDOW.total_seconds())
    )
    notes["interlock_attested"] = notes["interlock_attested"].format(
        inflight=f"{ATTESTED_MAX_INFLIGHT.total_seconds():.0f}"
    )
    return Scenario(
        "refund", TEXT["title"], TEXT["intro"], list(SYSTEMS), list(FAULTS),
        TEXT.table("faults"), notes,
    )  # fmt: skip


def plan(quick: bool) -> list[tuple[list[str], list[str]]]:
    return [(list(SYSTEMS), list(QUICK_FAULTS if quick else FAULTS))]


# --- the judge ---------------------------------------------------------------------------------


def judge(seen: Observed) -> Cell:
    """Score the cell: the system's answer against the service's own record, and the world."""
    crash_name, change = seen.fault.split("+")
    first = seen.processes[0]
    cell = Cell(
        system=seen.system_name,
        fault=seen.fault,
        answer="",
        outcome=outcome_text(seen.truth),
        wanted="",
        held=False,
        answer_vs_truth="contradicts",
        record_proves_it=False,
        crash_to_settled_seconds=None,
        exit_codes=[p.returncode for p in seen.processes],
        ids={"case": seen.case_id, **seen.setup.ids},
        truth={
            "agent_refunds": seen.truth.agent,
            "refunds_by_hand": seen.truth.by_hand,
            "agent_refunds_before_change": seen.before,
        },
        detail={
            "crash_point": crash_name,
            "world_change": change,
            "crashed_at": seen.crashed_at,
            "world_changed_at": seen.changed_at,
            "restarted_amount_cents": seen.amount,
            "printed": [[_brief(line) for line in _lines(p.stdout)] for p in seen.processes],
        },
    )
    if first.returncode == 0:
        cell.detail["no_crash"] = f"{crash_name} does not exist on this path"
    if seen.webhooks is not None:
        cell.detail["webhooks"] = seen.webhooks
    if seen.attested is not None:
        cell.detail["attested"] = seen.attested
    if seen.system.gated:
        judge_gate(cell, seen.setup, seen.processes, seen.crashed_at)
    else:
        judge_baseline(cell, seen.directory / "app.log", seen.crashed_at)
    judge_world(cell, change, seen.truth, seen.before)
    if first.returncode == 0:
        cell.answer += " (no crash: the worker ran to the end)"
    return cell


def outcome_text(truth: Truth) -> str:
    amounts = [r["amount_cents"] for r in truth.agent]
    text = f"{len(amounts)} agent refund{'s' if len(amounts) != 1 else ''}"
    if amounts:
        text += f" ({' + '.join(dollars(a) for a in amounts)})"
    if truth.by_hand:
        text += f" + {len(truth.by_hand)} by hand"
    return text


def judge_world(cell: Cell, change: str, truth: Truth, before: int) -> None:
    """The rules of the faults' notes, from the service's own record."""
    agent = truth.agent
    amounts = [r["amount_cents"] for r in agent]
    if change in ("lease_revoked", "refunded_by_hand"):
        what = "revocation" if change == "lease_revoked" else "refund by hand"
        if before == 0:
            cell.wanted = "0 agent refunds"
        else:
            cell.wanted = f"only the agent refund made before the {what}"
        cell.held = len(agent) == min(before, 1)
    elif change == "redecided_30":
        cell.wanted = "at most one $20 agent refund, no $30"
        cell.held = len(agent) <= 1 and all(a == APPROVED_CENTS for a in amounts)
    else:
        cell.wanted = "1 agent refund of $20, or 0 said unknown"
        paid_once = amounts == [APPROVED_CENTS]
        cell.held = paid_once or (not agent and cell.answer_vs_truth == "cannot know (said so)")


def judge_baseline(cell: Cell, log: Path, crashed_at: float) -> None:
    """A baseline's answer is its app log; it names no lease or premise check, so by the seed's
    definition its record cannot prove the outcome, whatever it says."""
    lines = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    claims = [line for line in lines if "result_ref" in line]
    last = claims[-1] if claims else None
    cell.answer = f"{last['event']} {dollars(last['amount_cents'])}" if last else "nothing logged"
    claimed = {c["result_ref"]: c["amount_cents"] for c in claims}
    actual = {r["result_ref"]: r["amount_cents"] for r in cell.truth["agent_refunds"]}
    cell.answer_vs_truth = "matches" if claimed == actual else "contradicts"
    cell.record_proves_it = False
    cell.crash_to_settled_seconds = (
        round(lines[-1]["at"] - crashed_at, 3) if lines and cell.exit_codes[0] == -9 else 0.0
    )
    cell.detail["log"] = lines
    cell.detail["record"] = (
        "app log: names the refund it believes it made; no lease or premise check"
    )


def standing_receipt(setup: Setup, entries: list[Entry], printed: list[dict[str, Any]]) -> Receipt:
    """The receipt that stands: the notary's, or the one the journal derives (as the process
    printed it, when it did: what it said is checked against the journal)."""
    if setup.tenant is not None:
        served = setup.tenant.receipt(setup.effect_id)
        if served is None:
            raise RuntimeError("the notary never heard of the effect")
        return Receipt.from_dict(served)
    standing = derive_receipt(entries, setup.effect_id)
    mine = [
        r for r in printed if r["proposed"]["payload_hash"] == standing.proposed["payload_hash"]
    ]
    return Receipt.from_dict(mine[-1]) if mine else standing


def receipt_problems(receipts: Sequence[Receipt], entries: list[Entry], origin: str) -> list[str]:
    problems = []
    for receipt in receipts:
        try:
            verify_receipt(receipt, entries, origin=origin)
        except ReceiptError as error:
            problems.append(str(error))
    return problems


def judge_gate(cell: Cell, setup: Setup, processes: Sequence[Any], crashed_at: float) -> None:
    """A gate's answer is its receipt; its record proves the outcome when the receipt verifies
    against the whole journal and its happened is the truth."""
    entries, origin = journal_entries(setup)
    history = [e for e in entries if e.effect_id == setup.effect_id]
    printed = [line["receipt"] for p in processes for line in _lines(p.stdout) if "receipt" in line]
    standing = standing_receipt(setup, entries, printed)
    others = [
        r for r in printed if r["proposed"]["payload_hash"] != standing.proposed["payload_hash"]
    ]
    problems = receipt_problems(
        [standing, *(Receipt.from_dict(o) for o in others)], entries, origin
    )
    happened_truth = any(r["effect_id"] == setup.effect_id for r in cell.truth["agent_refunds"])
    answer = standing.final_state
    said = [r["final_state"] for r in printed if r["proposed"] == standing.proposed]
    if said and said[-1] != answer:
        answer += f" (the restarted process said {said[-1]})"
    if others:
        answer += f"; $30 re-decision: {others[-1]['final_state']}"
    cell.answer = answer
    if standing.happened == "unknown":
        cell.answer_vs_truth = "cannot know (said so)"
    else:
        cell.answer_vs_truth = "matches" if standing.happened == happened_truth else "contradicts"
    cell.record_proves_it = not problems and standing.happened == happened_truth
    stands = standing_verdict(history).verdict
    if stands is not None and stands.kind != EntryKind.AMBIGUOUS:
        settled = stands.created_at.timestamp() - crashed_at
        cell.crash_to_settled_seconds = round(max(settled, 0.0), 3)
    cell.detail["receipt"] = standing.to_dict()
    cell.detail["receipt_problems"] = problems
    cell.detail["entries"] = [
        {"seq": e.seq, "kind": str(e.kind), "at": e.created_at.timestamp()} for e in history
    ]


def journal_entries(setup: Setup) -> tuple[list[Entry], str]:
    if setup.tenant is not None:
        from ledger.selectors import iter_entries

        log = setup.tenant.tenant.log
        return list(iter_entries(log=log)), log.origin
    assert setup.journal is not None
    opened = LocalJournal(setup.journal)
    try:
        return opened.entries(), LOCAL_ORIGIN
    finally:
        opened.close()


def _lines(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _brief(line: dict[str, Any]) -> dict[str, Any]:
    """A printed line for the JSON: the step, its time, and what it said (not the receipt)."""
    if "receipt" not in line:
        return line
    receipt = line["receipt"]
    said = {"final_state": receipt["final_state"], "happened": receipt["happened"]}
    return {"step": line["step"], "t": line["t"], **said}


# --- reading the numbers -------------------------------------------------------------------------


class Refunds(Row):
    """One system's cells, counted in refunds."""

    @property
    def doubles(self) -> int:
        return self.count(lambda c: len(c.truth["agent_refunds"]) > 1)

    @property
    def thirty(self) -> int:
        return self.count(
            lambda c: any(r["amount_cents"] == REDECIDED_CENTS for r in c.truth["agent_refunds"])
        )

    def after_change(self, change: str) -> int:
        return self.count(
            lambda c: (
                c.fault.endswith(change)
                and len(c.truth["agent_refunds"]) > c.truth["agent_refunds_before_change"]
            )
        )

    @property
    def unpaid(self) -> int:
        """Cells where nothing stood in the refund's way and no refund was made."""
        return self.count(lambda c: c.fault.endswith("+none") and not c.truth["agent_refunds"])

    def starts(self, state: str) -> int:
        return self.count(lambda c: c.answer.startswith(state))


def rows(scenario: Scenario) -> dict[str, Refunds]:
    return {name: Refunds(name, row.cells) for name, row in scenario.rows().items()}


COUNTS: dict[str, Callable[[Refunds], str]] = {
    "world as wanted": lambda r: f"{r.n - r.violations}/{r.n}",
    "two refunds": lambda r: str(r.doubles),
    "a $30 refund": lambda r: str(r.thirty),
    "refund after revocation": lambda r: str(r.after_change("lease_revoked")),
    "refund after the hand refund": lambda r: str(r.after_change("refunded_by_hand")),
    "answer contradicts the service": lambda r: str(r.contradicts),
    "record proves it": lambda r: f"{r.proves}/{r.n}",
    "left to a person": lambda r: str(r.to_a_person),
    "approved refund unpaid (fault none)": lambda r: str(r.unpaid),
    "crash to settled, median": lambda r: r.seconds(),
}


def tables(scenario: Scenario) -> list[str]:
    """The counts per system, then one table per world change: crash point by system."""
    body = [
        [row.name, *(count(row) for count in COUNTS.values())] for row in rows(scenario).values()
    ]
    out = ["### Counts per system\n\n" + markdown_table(["system", *COUNTS], body)]
    crashes = [c for c in CRASHES if any(cell.fault.startswith(c + "+") for cell in scenario.cells)]
    for change in CHANGES:
        cells = {(c.system, c.fault): c for c in scenario.cells if c.fault.endswith("+" + change)}
        if not cells:
            continue
        lines = [
            [name, *(short(cells.get((name, f"{crash}+{change}"))) for crash in crashes)]
            for name in rows(scenario)
        ]
        out.append(f"### World change: {change}\n\n" + markdown_table(["system", *crashes], lines))
    return out


def short(cell: Cell | None) -> str:
    if cell is None:
        return ""
    refunds = [dollars(r["amount_cents"]) for r in cell.truth["agent_refunds"]]
    verdict = "ok" if cell.held else "VIOLATED"
    answer = cell.answer.split(" (")[0].split(";")[0]
    time_text = (
        "person"
        if cell.crash_to_settled_seconds is None
        else f"{cell.crash_to_settled_seconds:.1f}s"
    )
    crashed = "" if cell.exit_codes[0] == -9 else "no crash, "
    return f"{crashed}{answer}: {'+'.join(refunds) or '0'} {verdict}, {time_text}"


def report(scenario: Scenario, run: RunInfo) -> None:
    from experiments.scenarios import refund_findings

    scenario.extra_tables = tables(scenario)
    scenario.findings = refund_findings.findings(rows(scenario))
    scenario.notes = TEXT.list(
        "notes",
        cells=len(scenario.cells),
        quick=" (the --quick subset)" if run.quick else "",
        seconds=run.seconds,
        parallel=PARALLEL_CELLS,
        cores=os.cpu_count(),
        load=run.load_before,
        delay=WEBHOOK_DELAY_SECONDS,
    )


def close_connection() -> None:
    """A pool thread's own database connection, closed once its cell is scored."""
    from django.db import connection

    connection.close()


SCENARIO = Declared(
    name="refund",
    frame=frame,
    plan=plan,
    world=refund_world,
    judge=judge,
    report=report,
    parallel=PARALLEL_CELLS,
    after_cell=close_connection,
)
