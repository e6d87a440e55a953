"""One plain sentence saying what an effect's final state means, for finance staff who are not
engineers: what happened, how the notary knows, and what, if anything, a person must do."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from gate_client.protocol import standing
from gate_client.receipts import Receipt
from ledger.core.entries import Entry

_REFUSALS = {
    "lease_revoked": "the approval was withdrawn before it could be sent",
    "lease_expired": "the approval had expired",
    "lease_scope": "the approval did not cover it",
    "stale_premise": "what it relied on was no longer true",
    "payload_changed": "it was decided again differently, and only the first decision counts",
}


def explain(
    receipt: Receipt,
    history: Sequence[Entry],
    *,
    target: str,
    evidence_window: timedelta | None = None,
) -> str:
    state = receipt.final_state
    verdict = standing(history).verdict
    body = verdict.body_value() if verdict is not None else {}
    reference = body.get("result_ref") or "no reference given"
    if state == "COMMITTED":
        return f"Sent once: {target} confirmed it ({reference})."
    if state == "COMMITTED_BY_RETRY":
        return (
            f"Sent once: after an interruption the request was repeated with the same "
            f"idempotency key, and {target} acted on it once ({reference})."
        )
    if state == "COMMITTED_ON_QUERY":
        return (
            f"Sent once: after an interruption {target} was asked and confirmed it ({reference})."
        )
    if state == "COMMITTED_ON_EVIDENCE":
        event = _cited(history, body)
        return f"Sent once: {target} confirmed it with {event}."
    if state == "AMBIGUOUS":
        waited = (
            f" within {_duration(evidence_window)}" if evidence_window is not None else " to say"
        )
        return (
            f"Cannot know: the request may have reached {target}, and no evidence arrived"
            f"{waited} whether it did. A person must decide."
        )
    if state == "RESOLVED_HAPPENED":
        return f"Decided by {body['by']}: it happened. Their reason: {body['reason']}"
    if state == "RESOLVED_NOT_HAPPENED":
        return f"Decided by {body['by']}: it did not happen. Their reason: {body['reason']}"
    if state.startswith("FAILED:"):
        return f"Not done: {target} refused it ({state.removeprefix('FAILED:')})."
    if state.startswith("REFUSED:"):
        reason = state.removeprefix("REFUSED:")
        base = reason.removesuffix("_at_recovery")
        words = _REFUSALS.get(base, base.replace("_", " "))
        when = " when it was checked again after an interruption" if base != reason else ""
        return f"Not sent: {words}{when}."
    if state == "DISPATCHED":
        return f"In progress: sent to {target}, and the answer has not been recorded yet."
    return "Not sent yet: decided, and waiting to be sent."


def _cited(history: Sequence[Entry], body: dict[str, Any]) -> str:
    recheck = body.get("recheck")
    seq = recheck.get("evidence_seq") if isinstance(recheck, dict) else None
    observed = next((e for e in history if e.seq == seq), None)
    if observed is None:
        return "evidence in the ledger"
    evidence = observed.body_value()
    if evidence.get("source") == "attestation":
        return f"a statement from {evidence.get('by')} (ledger entry {seq})"
    return f"{evidence.get('provider')} event {evidence.get('event_id')} (ledger entry {seq})"


def _duration(window: timedelta) -> str:
    hours = window.total_seconds() / 3600
    if hours >= 1 and hours == int(hours):
        return f"{int(hours)} h"
    minutes = window.total_seconds() / 60
    if minutes >= 1 and minutes == int(minutes):
        return f"{int(minutes)} min"
    return f"{window.total_seconds():g} s"
