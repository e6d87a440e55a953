"""The Effect and ReconciliationFinding rows as functions of ledger entries: the one derivation
both live writes and `rebuild_effects` use, so the tables can always be recomputed from the
ledger alone."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from gate_client.budgets import spend_of
from gate_client.money import proposed_money
from gate_client.protocol import Standing, entry_state, last_attempt, queued_by, standing
from gate_client.receipts import derive_receipt
from ledger.core.entries import Entry, EntryKind


def effect_fields(history: Sequence[Entry]) -> dict[str, Any]:
    """Projection fields of the effect whose entries are `history`. The final state does not
    depend on the lease's entries (only authorized_when_fired does, which is not projected)."""
    proposed = next(e for e in history if e.kind == EntryKind.PROPOSED)
    body = proposed.body_value()
    receipt = derive_receipt(history, proposed.effect_id)
    dispatches = [e for e in history if e.kind == EntryKind.DISPATCHED]
    first = next((e for e in history if entry_state(e) is not None), None)
    stood = standing(history)
    stands = stood.verdict
    money = proposed_money(body)
    spend = spend_of(history)
    result_ref = (
        stands.body_value().get("result_ref", "")
        if stands is not None and stands.kind == EntryKind.COMMITTED
        else ""
    )
    return {
        "case_id": body["case_id"],
        "target": body["target"],
        "action": body["action"],
        "lease_id": body["lease_id"],
        "payload_hash": body["payload_hash"],
        "state": receipt.final_state,
        "attempts": last_attempt(list(history)),
        "proposed_seq": proposed.seq,
        "last_seq": history[-1].seq,
        "proposed_at": proposed.created_at,
        "dispatched_at": dispatches[-1].created_at if dispatches else None,
        "settled_at": first.created_at if first is not None else None,
        "result_ref": result_ref,
        "contradicted": receipt.contradicted,
        "amount_minor": money.amount_minor if money is not None else None,
        "currency": money.currency if money is not None else "",
        "queued_at": _queued_at(history, stood),
        "spent_at": spend.at if spend is not None else None,
        "spent_amount": spend.amount if spend is not None else None,
        "spent_by": spend.spender if spend is not None else "",
        "held_by": receipt.held_by or "",
    }


def finding_fields(entry: Entry) -> dict[str, Any]:
    """Projection fields of the finding a RECONCILED entry records (its body as
    gate_client.reconciliation.Finding.body writes it). Its subject, what makes it once per
    target and kind, is the provider's object, or for an object not shown the effect."""
    body = entry.body_value()
    window = body["window"]
    return {
        "target": body["target"],
        "kind": body["finding"],
        "subject": body.get("provider_ref", entry.effect_id),
        "effect_id": entry.effect_id,
        "provider_ref": body.get("provider_ref", ""),
        "since": datetime.fromisoformat(window["since"]),
        "until": datetime.fromisoformat(window["until"]),
        "seq": entry.seq,
        "found_at": entry.created_at,
        "body": body,
    }


def _queued_at(history: Sequence[Entry], stood: Standing) -> datetime | None:
    """When the effect began waiting for a person; a review's age counts from here."""
    seq = queued_by(stood)
    return None if seq is None else next(e.created_at for e in history if e.seq == seq)
