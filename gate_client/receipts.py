"""Receipts: the four facts and a final state, derived only from journal entries.

`derive_receipt` is the one derivation; `verify_receipt` runs it again over the entries and the
hash chain and fails on any field that differs, so a receipt is only as good as its journal."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from copy import deepcopy
from dataclasses import asdict, dataclass, fields, is_dataclass
from typing import Any

from gate_client.authorization import DispatchRequest, Fire, authorize
from gate_client.budgets import BudgetStatement, Spent, statement_of
from gate_client.holds import current_hold
from gate_client.leases import lease_states
from gate_client.protocol import (
    COMMITTED_STATES,
    Happened,
    Standing,
    State,
    declaration_in_words,
    evidence_hold,
    is_payload_change,
    payload_change_for,
    proposed_declaration,
    standing,
)
from ledger.core.entries import Entry, EntryKind, genesis_hash
from ledger.core.merkle import leaf_hash


class ReceiptError(ValueError):
    """A receipt does not follow from its journal, or the journal does not hold together."""


@dataclass(frozen=True)
class Receipt:
    effect_id: str
    final_state: str
    proposed: Mapping[str, Any]  # case, target, action, lease, payload hash of this receipt
    authorized_when_fired: bool | None
    assumptions_held: bool | None
    happened: Happened
    recorded: bool  # the journal alone proves the outcome
    recheck_at_recovery: Mapping[str, Any] | None
    entry_seqs: tuple[int, ...]
    # Evidence at odds with the final state (protocol.Contradiction.to_dict): the outcome is
    # not proved, and a person must look.
    contradicted: bool
    contradictions: tuple[Mapping[str, Any], ...]
    # Under a budgeted lease: the budgets as they stood at the effect's first dispatch, as its
    # DISPATCHED entry states them (gate_client.budgets.BudgetStatement).
    budget: Mapping[str, Any] | None = None
    # HELD: the effect whose wait for a person holds this one (gate_client.holds).
    held_by: str | None = None
    # The AP2 mandate the lease was granted from (gate_client.mandates: the token as received
    # and the keys that verified it), as its LEASE_GRANTED records it; None: no mandate.
    mandate: Mapping[str, Any] | None = None
    # What could be known: the target's declaration the effect was decided under, as its
    # PROPOSED records it (tier, lookup, windows, evidence, money), and that in a sentence
    # (protocol.declaration_in_words). None: proposed before declarations were recorded.
    declaration: Mapping[str, Any] | None = None
    knowable: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """As JSON has it: sequences are lists; `budget`, `held_by` and `mandate` only when
        set; `declaration` and `knowable` always, null when the ledger records none."""
        data = {name: _copied(getattr(self, name)) for name in _RECEIPT_FIELDS}
        for optional in ("budget", "held_by", "mandate"):
            if data[optional] is None:
                del data[optional]
        return {
            **data,
            "entry_seqs": list(self.entry_seqs),
            "contradictions": list(data["contradictions"]),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Receipt:
        """The receipt `to_dict` gave, back from JSON (which turned its tuples into lists)."""
        return cls(
            **{
                **data,
                "entry_seqs": tuple(data["entry_seqs"]),
                "contradictions": tuple(data["contradictions"]),
            }
        )


def derive_receipt(
    journal: Sequence[Entry], effect_id: str, *, payload_hash: str | None = None
) -> Receipt:
    """The receipt of `effect_id` for `payload_hash` (default: the first, standing payload).

    `journal` is every entry up to now, lease entries included: whether the lease was live
    when the effect fired is read from the order of entries, not from anyone's say-so.
    Entries that do not hold together (a field missing, of another type) raise ReceiptError,
    never anything else: a journal someone else wrote is input like any other."""
    try:
        return _derive(journal, effect_id, payload_hash)
    except ReceiptError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ReceiptError(f"{effect_id}: entries that do not hold together: {exc!r}") from exc


def _derive(given: Sequence[Entry], effect_id: str, payload_hash: str | None) -> Receipt:
    # Each body is read several times (the state, the lease, the budget): parsed once.
    journal = [e.read_once() for e in given]
    history = [e for e in journal if e.effect_id == effect_id]
    proposed_entry = next((e for e in history if e.kind == EntryKind.PROPOSED), None)
    if proposed_entry is None:
        raise ReceiptError(f"{effect_id}: no PROPOSED entry")
    proposed = proposed_entry.body_value()
    summary = {
        key: proposed[key] for key in ("case_id", "target", "action", "lease_id", "payload_hash")
    }
    mandate = _lease_mandate(journal, proposed["lease_id"])
    declared = proposed_declaration(proposed)
    knowable = {
        "declaration": proposed.get("declaration"),
        "knowable": declaration_in_words(declared) if declared is not None else None,
    }
    if payload_hash is not None and payload_hash != proposed["payload_hash"]:
        refusal = payload_change_for(history, payload_hash)
        if refusal is None:
            raise ReceiptError(f"{effect_id}: payload {payload_hash} was never submitted")
        return Receipt(
            effect_id=effect_id,
            final_state="REFUSED:payload_changed",
            proposed={**summary, "payload_hash": payload_hash},
            authorized_when_fired=None,
            assumptions_held=None,
            happened=False,
            recorded=True,
            recheck_at_recovery=None,
            entry_seqs=(proposed_entry.seq, refusal.seq),
            contradicted=False,
            contradictions=(),
            mandate=mandate,
            **knowable,
        )

    relevant = [e for e in history if not is_payload_change(e)]
    dispatches = {e.body_value()["attempt"]: e for e in relevant if e.kind == EntryKind.DISPATCHED}
    try:
        stands = standing(relevant)
    except (ValueError, KeyError, TypeError) as exc:
        raise ReceiptError(f"{effect_id}: a verdict that settles nothing known: {exc!r}") from exc
    held = current_hold(relevant) if stands.state is None else None  # a verdict ends a hold
    # Evidence at odds with the record holds the effect itself (dispatched or not): unknown.
    held_on_evidence = evidence_hold(relevant) is not None
    state, happened, fired_attempt = _state(
        stands, dispatches, effect_id, held is not None or held_on_evidence
    )
    if held_on_evidence:
        happened = "unknown"
    fired = dispatches.get(fired_attempt) if fired_attempt is not None else None
    statement = statement_of(relevant)
    verdict = stands.verdict
    if happened is False or (not dispatches and (held_on_evidence or _resolved(verdict))):
        # Nothing fired through the gate: a person may still find it done outside it.
        authorized, assumptions = None, None
    elif fired is None:
        raise ReceiptError(f"{effect_id}: {state} names no recorded dispatch")
    else:
        authorized = _lease_was_live(journal, fired, proposed, statement)
        assumptions = all(p["holds"] for p in fired.body_value()["premises"])
    recheck = verdict.body_value().get("recheck") if verdict is not None else None
    contradictions = tuple(c.to_dict() for c in stands.contradictions)
    return Receipt(
        effect_id=effect_id,
        final_state=state,
        proposed=summary,
        authorized_when_fired=authorized,
        assumptions_held=assumptions,
        happened=happened,
        recorded=happened != "unknown" and not contradictions,
        recheck_at_recovery=recheck,
        entry_seqs=tuple(e.seq for e in relevant),
        contradicted=bool(contradictions),
        contradictions=contradictions,
        budget=statement.body() if statement is not None else None,
        held_by=effect_id if held_on_evidence else _holder(held),
        mandate=mandate,
        **knowable,
    )


def _state(
    stands: Standing, dispatches: Mapping[int, Entry], effect_id: str, held: bool
) -> tuple[str, Happened, int | None]:
    """(final state, happened, the attempt that fired or may have fired)."""
    last = max(dispatches, default=None)
    if stands.state is None or stands.verdict is None:
        if last is not None:
            return "DISPATCHED", "unknown", last
        return str(State.HELD if held else State.PROPOSED), False, None
    state = stands.state
    if state.state in COMMITTED_STATES:
        attempt = stands.verdict.body_value()["attempt"]
        if attempt not in dispatches:
            raise ReceiptError(f"{effect_id}: {state} of attempt {attempt} has no dispatch")
        if state.state == State.COMMITTED_BY_RETRY and attempt < 2:
            raise ReceiptError(f"{effect_id}: COMMITTED_BY_RETRY on the first attempt")
        return str(state), True, attempt
    happened = state.happened
    return str(state), happened, None if happened is False else last


def _holder(held: Entry | None) -> str | None:
    return str(held.body_value()["held_by"]) if held is not None else None


def _resolved(verdict: Entry | None) -> bool:
    return verdict is not None and verdict.kind == EntryKind.RESOLVED


def _lease_mandate(journal: Sequence[Entry], lease_id: str) -> Mapping[str, Any] | None:
    """The mandate the lease's LEASE_GRANTED carries as its evidence, if it does."""
    for entry in journal:
        if entry.kind == EntryKind.LEASE_GRANTED:
            body = entry.body_value()
            if body["lease_id"] == lease_id:
                mandate: Mapping[str, Any] | None = body.get("mandate")
                return mandate
    return None


def _lease_was_live(
    journal: Sequence[Entry],
    fired: Entry,
    proposed: Mapping[str, Any],
    statement: BudgetStatement | None,
) -> bool:
    """Ask the protocol's one authorization function again, on the lease entries that precede
    the dispatch, at its instant: it was authorized exactly when the answer is the body that
    was recorded, the budget statement included (the spends it states before it are taken as
    stated; whether the ledger held them then is re-derived from the whole log, by the
    auditor's verifier). A hold is a person's to lift, not a term of the lease: not replayed."""
    body = fired.body_value()
    request = DispatchRequest.of_proposal(
        fired.effect_id, proposed, body["attempt"], body["premises"], body["recovery"]
    )
    stated = {s.budget: s.spent_before for s in statement.standings} if statement else {}
    decision = authorize(
        request=request,
        lease=lease_states(e for e in journal if e.seq < fired.seq).get(body["lease_id"]),
        now=fired.created_at,
        spender=statement.spender if statement is not None else "",
        spent_for=lambda budget: stated.get(budget, Spent()),
        hold=lambda: None,
    )
    return isinstance(decision, Fire) and decision.body == body


def check_chain(journal: Iterable[Entry], *, origin: str) -> list[Entry]:
    """The entries, in order, if every seq follows and every link and hash holds."""
    entries = list(journal)
    previous = genesis_hash(origin)
    for position, entry in enumerate(entries):
        if entry.seq != position:
            raise ReceiptError(f"journal entry {position} is missing (found seq {entry.seq})")
        if entry.prev_hash != previous:
            raise ReceiptError(f"journal entry {position} does not link to the one before")
        if leaf_hash(entry.leaf_bytes()) != entry.entry_hash:
            raise ReceiptError(f"journal entry {position} does not match its hash")
        previous = entry.entry_hash
    return entries


def verify_receipt(receipt: Receipt, journal: Iterable[Entry], *, origin: str) -> None:
    """Re-derive every field of `receipt` from the journal; raise ReceiptError on any difference."""
    entries = check_chain(journal, origin=origin)
    derived = derive_receipt(
        entries, receipt.effect_id, payload_hash=receipt.proposed["payload_hash"]
    )
    claimed, held = receipt.to_dict(), derived.to_dict()
    for name in sorted(held.keys() | claimed.keys()):
        if claimed.get(name) != held.get(name):
            raise ReceiptError(
                f"{receipt.effect_id}: {name} says {claimed.get(name)!r}, "
                f"the journal {held.get(name)!r}"
            )


_RECEIPT_FIELDS = tuple(field.name for field in fields(Receipt))


def _copied(value: Any) -> Any:
    """A deep copy of a receipt field, as dataclasses.asdict makes one (so the dict given out
    shares nothing mutable with the frozen receipt), without asdict's deepcopy of every string
    and number: JSON's values are copied by hand, anything else as asdict would."""
    if type(value) is dict:
        return {key: _copied(item) for key, item in value.items()}
    if type(value) is list:
        return [_copied(item) for item in value]
    if type(value) is tuple:
        return tuple(_copied(item) for item in value)
    if value is None or type(value) in (str, int, float, bool):
        return value
    return asdict(value) if is_dataclass(value) and not isinstance(value, type) else deepcopy(value)
