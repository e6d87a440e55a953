"""Scenario email: the seed's email experiment (seeds/001), regenerated offline with real
crashes, and a notary row.

Each cell is one support case: a $20 refund is created in the refund world, and a worker process
(experiments/workers/email_worker.py) emails "your refund is on the way" for it through the
Resend SDK to the local Resend, the way its system does, and SIGKILLs itself at the fault's crash
point; the harness waits out the outage (the refund fails during it, in the refused faults),
starts a new worker for the same case, and reads what happened from the local Resend's own store
(email_world.py runs a cell). The judge scores what the system answered against that store, and
whether its own record proves it.

    python experiments/run_experiments.py --only email [--quick] [--results-dir DIR]"""

from __future__ import annotations

import base64
from contextlib import closing
from dataclasses import dataclass, field
from typing import Any

import httpx

from experiments.kit.cells import Answer, Cell, Declared, RunInfo, Scenario
from experiments.kit.prose import Prose
from experiments.kit.tables import markdown_table
from experiments.scenarios.email_world import (
    EVIDENCE_WINDOW,
    FAULTS,
    REFUND_FAILS_AFTER,
    WEBHOOK_DELAY_SECONDS,
    WITHHELD,
    Attempt,
    Truth,
    email_world,
)
from experiments.workers import email_worker
from gate_client.journal import LocalJournal
from gate_client.protocol import standing as standing_verdict
from gate_client.receipts import Receipt, ReceiptError, verify_receipt
from ledger.core.entries import Entry, EntryKind, entry_from_leaf

TEXT = Prose("email")
SYSTEMS = email_worker.SYSTEMS
GATES = email_worker.GATE_SYSTEMS
# The CI-sized subset: both gates that answer every fault on all three, and the one cell each
# where the plain retry and the idiomatic hand check go wrong.
QUICK_CELLS: dict[str, tuple[str, ...]] = {
    "interlock": ("crash_after_send", "refused_before_send", "refused_after_send"),
    "interlock_notary": ("crash_after_send", "refused_before_send", "refused_after_send"),
    "no_check": ("refused_before_send",),
    "hand_check_noprobe": ("refused_after_send",),
}


def frame(quick: bool) -> Scenario:
    notes = TEXT.table("systems")
    notes["interlock_notary"] = notes["interlock_notary"].format(
        evidence=EVIDENCE_WINDOW.total_seconds()
    )
    return Scenario(
        "email", TEXT["title"], TEXT["intro"], SYSTEMS, tuple(FAULTS), TEXT.table("faults"), notes
    )


def plan(quick: bool) -> list[tuple[list[str], tuple[str, ...]]]:
    """The seed's table, then the notary row with its webhooks withheld; or QUICK_CELLS as
    (systems, faults) products."""
    if not quick:
        return [(list(SYSTEMS), tuple(FAULTS)), ([WITHHELD], tuple(FAULTS))]
    groups: dict[tuple[str, ...], list[str]] = {}
    for system, faults in QUICK_CELLS.items():
        groups.setdefault(faults, []).append(system)
    return [(systems, faults) for faults, systems in groups.items()]


# --- the judge ---------------------------------------------------------------------------------


@dataclass
class Record:
    """The system's answer and what its own record proves."""

    answer: str
    claims: Any  # True, False or "unknown"
    email_id: str | None
    proves: bool
    verdict_at: float | None  # when the record reached its final word
    detail: dict[str, Any] = field(default_factory=dict)


def judge(attempt: Attempt) -> Cell:
    """Score the attempt that reached its crash point, against the local Resend's store."""
    assert attempt.first is not None and attempt.restarted is not None
    spec, truth = FAULTS[attempt.fault], attempt.truth
    printed = attempt.restarted.result()
    if attempt.restarted.returncode != 0 or printed is None:
        raise RuntimeError(
            f"the restarted worker exited {attempt.restarted.returncode}: "
            f"{attempt.restarted.stderr[-2000:]}"
        )
    record = (gate_record if attempt.gated else hand_record)(attempt, printed, truth)
    settled = record.verdict_at is not None and record.claims != "unknown"
    answered = (
        None if record.verdict_at is None else round(record.verdict_at - attempt.first.ended_at, 3)
    )
    return Cell(
        system=attempt.system,
        fault=attempt.fault,
        answer=record.answer,
        outcome=truth.outcome(),
        wanted=f"{spec.wanted} email" + ("" if spec.wanted == 1 else "s"),
        held=len(truth.emails) == spec.wanted,
        answer_vs_truth=answer_vs_truth(record.claims, record.email_id, truth),
        record_proves_it=record.proves,
        crash_to_settled_seconds=answered if settled else None,
        exit_codes=[attempt.first.returncode, attempt.restarted.returncode],
        ids=cell_ids(attempt, truth),
        truth={
            **truth.as_dict(),
            "refund": attempt.refund,
            "refund_status_at_scoring": email_worker.refund_status(attempt.world),
        },
        discarded_attempts=attempt.discarded,
        detail=cell_detail(attempt, record, printed, answered),
    )


def cell_ids(attempt: Attempt, truth: Truth) -> dict[str, str]:
    ids = {"case": attempt.case_id, "refund": str(attempt.refund["refund_id"])}
    if attempt.gated:
        ids["effect_id"] = attempt.effect_id
        ids["lease_id"] = attempt.lease_id
        if attempt.on_notary:
            ids["notary_tenant"] = attempt.shop.slug
    else:
        ids["idempotency_key"] = email_worker.idempotency_key(attempt.case_id)
    ids["emails"] = ", ".join(truth.ids) or "none"
    return ids


def cell_detail(
    attempt: Attempt, record: Record, printed: dict[str, Any], answered: float | None
) -> dict[str, Any]:
    assert attempt.first is not None and attempt.restarted is not None
    restart_to_answer = (
        None
        if record.verdict_at is None
        else round(record.verdict_at - attempt.restarted.started_at, 3)
    )
    return {
        "system_said": {
            "answer": record.answer,
            "happened": record.claims,
            "email_id": record.email_id,
        },
        "crash_to_answer_seconds": answered,
        "restarted_seconds_after_kill": round(attempt.restarted_after, 3),
        "first_worker_seconds": round(attempt.first.ended_at - attempt.first.started_at, 3),
        "restarted_worker_seconds": round(
            attempt.restarted.ended_at - attempt.restarted.started_at, 3
        ),
        "restart_to_answer_seconds": restart_to_answer,
        "refund_reads": email_worker.refund_reads(attempt.world),
        "last_read_before_send": margin(attempt),
        "restarted_worker_printed": {
            k: v for k, v in printed.items() if k not in ("receipt", "recovered")
        },
        **record.detail,
    }


def margin(attempt: Attempt) -> dict[str, float] | None:
    """The first worker's last refund read before the send, against the refund's failure."""
    assert attempt.first is not None
    refund = attempt.refund
    reads = [
        r["at"] for r in email_worker.refund_reads(attempt.world) if r["pid"] == attempt.first.pid
    ]
    if not reads or refund["fails_at"] is None:
        return None
    last = max(reads)
    return {
        "read_after_creation_seconds": round(last - refund["created_at"], 3),
        "failed_after_creation_seconds": round(refund["fails_at"] - refund["created_at"], 3),
        "failed_after_read_seconds": round(refund["fails_at"] - last, 3),
    }


def hand_record(attempt: Attempt, printed: dict[str, Any], truth: Truth) -> Record:
    """The app log names the check and the email or the skip, and that claim is true."""
    log = email_worker.read_app_log(attempt.app_log)
    starts = [i for i, line in enumerate(log) if line["step"] == "start"]
    last_run = log[starts[-1] :] if starts else []
    final = next((line for line in reversed(last_run) if line["step"] == "verdict"), None)
    checks = [line for line in last_run if line["step"] == "check"]
    claims, email_id = printed["claims"], printed["email_id"]
    claim_true = claims == truth.sent and (not claims or email_id in truth.ids)
    logged = final is not None and final["verdict"] == printed["answer"]
    return Record(
        answer=printed["answer"],
        claims=claims,
        email_id=email_id,
        proves=bool(checks) and logged and claim_true,
        verdict_at=final["at"] if final is not None else None,
        detail={
            "app_log": log,
            "record": "app log: "
            + ("names its checks" if checks else "no check entry")
            + ("" if logged else "; no verdict line")
            + ("; its claim agrees with Resend" if claim_true else "; its claim is false"),
        },
    )


def notary_receipt(attempt: Attempt) -> tuple[dict[str, Any], list[Entry], list[Entry], str, str]:
    """The receipt the notary serves, the entries it served with it, and the tenant's log."""
    from ledger.selectors import iter_entries

    shop = attempt.shop
    reply = httpx.get(
        f"{shop.url}/v1/effects/{attempt.effect_id}/receipt",
        headers={"Authorization": f"Bearer {shop.agent_token}"},
        timeout=10,
    )
    reply.raise_for_status()
    shown = reply.json()
    served = [entry_from_leaf(base64.b64decode(e["leaf"])) for e in shown["entries"]]
    log = shop.tenant.log
    entries = list(iter_entries(log=log))
    source = f"the notary's receipt and the tenant log {log.origin!r} ({len(entries)} entries)"
    return shown["receipt"], served, entries, log.origin, source


def gate_record(attempt: Attempt, printed: dict[str, Any], truth: Truth) -> Record:
    """verify_receipt on the journal's entries is valid and `happened` equals the truth."""
    served: list[Entry] = []
    if attempt.on_notary:
        data, served, entries, origin, source = notary_receipt(attempt)
    else:
        assert attempt.journal is not None
        data = printed["receipt"]
        with closing(LocalJournal(attempt.journal)) as journal:
            entries, origin = journal.entries(), journal.origin
        source = f"the worker's receipt and its local journal ({len(entries)} entries)"
    receipt = Receipt.from_dict(data)
    problem = ""
    try:
        verify_receipt(receipt, entries, origin=origin)
    except ReceiptError as error:
        problem = str(error)
    by_seq = {e.seq: e for e in entries}
    if any(by_seq.get(e.seq) != e for e in served):
        problem = problem or "the entries the notary served are not its log's"
    history = [e for e in entries if e.effect_id == attempt.effect_id]
    verdict = standing_verdict(history).verdict
    verdict_at = verdict.created_at.timestamp() if verdict is not None else None
    dispatched = [e for e in history if e.kind == EntryKind.DISPATCHED]
    return Record(
        answer=receipt.final_state,
        claims=receipt.happened,
        email_id=None,
        proves=not problem and receipt.happened == truth.sent,
        verdict_at=verdict_at,
        detail={
            "receipt": receipt.to_dict(),
            "receipt_verified": "valid" if not problem else f"INVALID: {problem}",
            "verified_against": source,
            "worker_receipt_differs": printed["receipt"] != receipt.to_dict(),
            "recovered_by_restarted_worker": [
                r["final_state"] for r in printed.get("recovered", [])
            ],
            "first_dispatch_to_verdict_seconds": (
                round(verdict_at - dispatched[0].created_at.timestamp(), 3)
                if dispatched and verdict_at is not None
                else None
            ),
            "verdict_entries": [
                {"seq": e.seq, "kind": str(e.kind), "body": e.body_value()}
                for e in history
                if e.kind not in (EntryKind.PROPOSED, EntryKind.DISPATCHED)
            ],
        },
    )


def answer_vs_truth(claims: Any, email_id: str | None, truth: Truth) -> Answer:
    if claims == "unknown":
        return "cannot know (said so)"
    if claims != truth.sent or (claims and email_id is not None and email_id not in truth.ids):
        return "contradicts"
    return "matches"


# --- the tables --------------------------------------------------------------------------------


def margin_table(scenario: Scenario) -> str:
    rows = [
        [
            c.fault,
            c.system,
            f"{m['read_after_creation_seconds']:.2f}s",
            f"{m['failed_after_creation_seconds']:.2f}s",
            f"{m['failed_after_read_seconds']:.2f}s",
        ]
        for c in scenario.cells
        if c.system in scenario.systems and (m := c.detail.get("last_read_before_send"))
    ]
    header = ["fault", "system", "last refund read before the send", "refund failed"]
    return TEXT["margin_table"] + "\n\n" + markdown_table([*header, "failed after that read"], rows)


def withheld_table(scenario: Scenario) -> str:
    cells = scenario.of(WITHHELD)
    row = [WITHHELD, *(c.summary() for c in cells)]
    return (
        TEXT["withheld_table"]
        + "\n\n"
        + markdown_table(["system", *(c.fault for c in cells)], [row])
    )


def report(scenario: Scenario, run: RunInfo) -> None:
    from experiments.scenarios import email_findings

    scenario.findings = email_findings.findings(scenario) + email_findings.withheld(scenario)
    scenario.extra_tables = [margin_table(scenario)]
    if scenario.of(WITHHELD):
        scenario.extra_tables.append(withheld_table(scenario))
    scenario.notes = TEXT.list(
        "notes",
        delay=WEBHOOK_DELAY_SECONDS,
        fails_low=REFUND_FAILS_AFTER[0],
        fails_high=REFUND_FAILS_AFTER[1],
    )


SCENARIO = Declared(
    name="email", frame=frame, plan=plan, world=email_world, judge=judge, report=report
)
