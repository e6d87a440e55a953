"""One plain sentence saying what an effect's final state means, for finance staff who are not
engineers: what happened, how the notary knows, and what, if anything, a person must do."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    """The sentence for the receipt's final state, from the verdict that stands: a state of its
    own (COMMITTED, AMBIGUOUS, ...) by the table, a failure or refusal by its reason."""
    state = receipt.final_state
    verdict = standing(history).verdict
    case = _Case(
        target=target,
        body=verdict.body_value() if verdict is not None else {},
        history=history,
        evidence_window=evidence_window,
    )
    sentence = _SENTENCES.get(state)
    if sentence is not None:
        return sentence(case)
    if state.startswith("FAILED:"):
        return f"Not done: {target} refused it ({state.removeprefix('FAILED:')})."
    if state.startswith("REFUSED:"):
        return _refused(state.removeprefix("REFUSED:"))
    return "Not sent yet: decided, and waiting to be sent."


@dataclass(frozen=True)
class _Case:
    """What a sentence may draw on: the target's name, the standing verdict's body, the
    effect's entries and the target's evidence window."""

    target: str
    body: dict[str, Any]
    history: Sequence[Entry]
    evidence_window: timedelta | None

    @property
    def reference(self) -> Any:
        return self.body.get("result_ref") or "no reference given"


def _committed(case: _Case) -> str:
    return f"Sent once: {case.target} confirmed it ({case.reference})."


def _committed_by_retry(case: _Case) -> str:
    return (
        f"Sent once: after an interruption the request was repeated with the same "
        f"idempotency key, and {case.target} acted on it once ({case.reference})."
    )


def _committed_on_query(case: _Case) -> str:
    return (
        f"Sent once: after an interruption {case.target} was asked and confirmed it "
        f"({case.reference})."
    )


def _committed_on_evidence(case: _Case) -> str:
    return f"Sent once: {case.target} confirmed it with {_cited(case.history, case.body)}."


def _ambiguous(case: _Case) -> str:
    window = case.evidence_window
    waited = f" within {_duration(window)}" if window is not None else " to say"
    return (
        f"Cannot know: the request may have reached {case.target}, and no evidence arrived"
        f"{waited} whether it did. A person must decide."
    )


def _resolved_happened(case: _Case) -> str:
    return f"Decided by {case.body['by']}: it happened. Their reason: {case.body['reason']}"


def _resolved_not_happened(case: _Case) -> str:
    return f"Decided by {case.body['by']}: it did not happen. Their reason: {case.body['reason']}"


def _dispatched(case: _Case) -> str:
    return f"In progress: sent to {case.target}, and the answer has not been recorded yet."


_SENTENCES: dict[str, Callable[[_Case], str]] = {
    "COMMITTED": _committed,
    "COMMITTED_BY_RETRY": _committed_by_retry,
    "COMMITTED_ON_QUERY": _committed_on_query,
    "COMMITTED_ON_EVIDENCE": _committed_on_evidence,
    "AMBIGUOUS": _ambiguous,
    "RESOLVED_HAPPENED": _resolved_happened,
    "RESOLVED_NOT_HAPPENED": _resolved_not_happened,
    "DISPATCHED": _dispatched,
}


def _refused(reason: str) -> str:
    """A refusal in words, saying when it came at a re-check after an interruption."""
    base = reason.removesuffix("_at_recovery")
    words = _REFUSALS.get(base, base.replace("_", " "))
    when = " when it was checked again after an interruption" if base != reason else ""
    return f"Not sent: {words}{when}."


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
