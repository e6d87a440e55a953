"""One plain sentence saying what an effect's final state means, for finance staff who are not
engineers: what happened, how the notary knows, and what, if anything, a person must do. Every
word comes from the effect's own entries (the verdict's body says which rule reached it), never
from today's target record: a sentence must stay true of what actually happened."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gate_client.holds import current_hold
from gate_client.protocol import standing
from gate_client.receipts import Receipt
from ledger.core.entries import Entry, EntryKind

_REFUSALS = {
    "lease_revoked": "the approval was withdrawn before it could be sent",
    "lease_expired": "the approval had expired",
    "lease_scope": "the approval did not cover it",
    "lease_budget": "the approval's budget had no room left for it",
    "stale_premise": "what it relied on was no longer true",
    "premise_unreadable": "what it relied on could not be checked",
    "payload_changed": "it was decided again differently, and only the first decision counts",
}


def explain(receipt: Receipt, history: Sequence[Entry], *, target: str) -> str:
    """The sentence for the receipt's final state, from the verdict that stands: a state of its
    own (COMMITTED, AMBIGUOUS, ...) by the table, a failure or refusal by its reason; and when
    evidence contradicts it, what contradicts what."""
    verdict = standing(history).verdict
    case = _Case(
        target=target,
        body=verdict.body_value() if verdict is not None else {},
        history=history,
        verdict=verdict,
    )
    if receipt.contradicted:
        return _contradicted(case, receipt)
    return _stated(case, receipt.final_state)


def _stated(case: _Case, state: str) -> str:
    target = case.target
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
    """What a sentence may draw on: the target's name, the standing verdict and its body, and
    the effect's entries."""

    target: str
    body: dict[str, Any]
    history: Sequence[Entry]
    verdict: Entry | None

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
    """Why it cannot be known, by the rule the AMBIGUOUS entry says reached it."""
    recheck = case.body.get("recheck")
    said: Mapping[str, Any] = recheck if isinstance(recheck, Mapping) else {}
    target = case.target
    if "evidence" in said:
        waited = _waited(case)
        why = (
            f"no evidence of it arrived in the {_duration(waited)} between sending it and this "
            "verdict, and silence does not prove it was not done"
            if waited is not None
            else "no evidence of it arrived, and silence does not prove it was not done"
        )
    elif said.get("lookup") == "unknown":
        why = f"{target} was asked and could not say whether it acted ({said.get('detail')})"
    elif said:
        why = f"{target} cannot be asked whether it acted, so it was not sent again"
    else:
        why = "nothing recorded says whether it acted"
    stopped = _REFUSALS.get(str(said.get("reason", "")))
    checked = f" When it was checked again, {stopped}." if stopped else ""
    return (
        f"Cannot know: the request may have reached {target}; {why}.{checked} A person must decide."
    )


def _waited(case: _Case) -> timedelta | None:
    """From the last attempt sent before the verdict to the verdict."""
    verdict = case.verdict
    if verdict is None:
        return None
    sent = [e for e in case.history if e.kind == EntryKind.DISPATCHED and e.seq < verdict.seq]
    return verdict.created_at - sent[-1].created_at if sent else None


def _contradicted(case: _Case, receipt: Receipt) -> str:
    """What the record said, what contradicts it, and that a person must decide again."""
    happened = receipt.happened
    body = case.body
    if case.verdict is not None and case.verdict.kind == EntryKind.RESOLVED:
        decided = "it happened" if body.get("happened") else "it did not happen"
        said = f"{body.get('by')} decided {decided} (“{body.get('reason')}”)"
    elif happened is True:
        said = f"the record says it was done once ({receipt.final_state})"
    elif happened is False:
        said = f"the record says it was not done ({receipt.final_state})"
    else:
        said = f"the record says {receipt.final_state}"
    against = "; and ".join(_contradiction(case, c) for c in receipt.contradictions)
    return f"Contradicted: {said}, but {against}. A person must decide again."


def _contradiction(case: _Case, contradiction: Mapping[str, Any]) -> str:
    seqs = list(contradiction.get("seqs") or [])
    cited = ", ".join(_source(case.history, seq) for seq in seqs) or "evidence in the ledger"
    kind = contradiction.get("kind")
    if kind == "duplicate_at_target":
        return f"{cited} reports another result: {case.target} acted more than once"
    if kind == "happened_never_dispatched":
        return f"{cited} says it was performed before it was ever sent, so it is held and not sent"
    if kind == "performed_unacknowledged":
        return f"{cited} says it was performed, though no request for it was acknowledged"
    return f"{cited} says it was performed"


def _resolved_happened(case: _Case) -> str:
    return f"Decided by {case.body['by']}: it happened. Their reason: {case.body['reason']}"


def _resolved_not_happened(case: _Case) -> str:
    return f"Decided by {case.body['by']}: it did not happen. Their reason: {case.body['reason']}"


def _held(case: _Case) -> str:
    """Which effect holds it, by the HELD entry that stands (gate_client.holds)."""
    hold = current_hold(case.history)
    body = hold.body_value() if hold is not None else {}
    where = " on any target" if body.get("scope") == "case" else f" on {case.target}"
    why = (
        "its outcome is contradicted" if body.get("holder") == "contradicted" else "it is AMBIGUOUS"
    )
    return (
        f"Held, not sent: another effect of the same case{where} ({body.get('held_by')}) waits "
        f"for a person, because {why}. It is sent when submitted again after that one is resolved."
    )


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
    "HELD": _held,
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
    return _source(history, seq) if isinstance(seq, int) else "evidence in the ledger"


def _source(history: Sequence[Entry], seq: int) -> str:
    """Who said what entry `seq` records: a service's statement, a provider's event."""
    entry = next((e for e in history if e.seq == seq), None)
    if entry is None or entry.kind != EntryKind.OBSERVED:
        return f"ledger entry {seq}"
    evidence = entry.body_value()
    if evidence.get("source") == "attestation":
        return f"a statement from {evidence.get('by')} (ledger entry {seq})"
    return f"{evidence.get('provider')} event {evidence.get('event_id')} (ledger entry {seq})"


def _duration(window: timedelta) -> str:
    """As a person says it: "4 h 2 min", "3 min 5 s", "0.3 s"."""
    seconds = window.total_seconds()
    if seconds < 60:
        return f"{seconds:.3g} s"
    hours, rest = divmod(int(seconds), 3600)
    minutes, whole = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min {whole} s" if whole else f"{minutes} min"
