"""Holds on ambiguity: while an effect waits for a person (AMBIGUOUS, or its evidence
contradicts its verdict: protocol.queued_by), new effects of its case on its target are not
dispatched; by the tenant's choice, new effects of its case on any target, or none.

A hold is not a verdict. The effect id is tenant/case/target/action and the first final verdict
stands, so a REFUSED would refuse the effect for good, and the agent could never resubmit it
once a person has resolved the holder. So the held effect keeps its PROPOSED, nothing is
dispatched, and a HELD entry (no verdict) names the holder and the scope it was held by: once
per holder and wait, so an agent submitting in a loop does not grow the ledger. Its receipt
says HELD until a submission after the resolution dispatches it. Only a new effect is held
(attempt 1): a resend in recovery of an effect already dispatched finishes what was started.

An effect also holds itself, at any attempt, when evidence says it was performed at odds with
its record (protocol.evidence_hold: before it was ever dispatched, or by a write-ahead service
with no acknowledged request): sending it could do it twice. Only a person's RESOLVED, which
settles the effect, releases that hold.

The one rule both the notary (under the log lock, in the transaction that would write
DISPATCHED) and the local journal apply. Plain Python: no Django, no I/O."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from gate_client.protocol import evidence_hold, queued_by, standing
from ledger.core.entries import Entry, EntryKind


class HoldScope(enum.StrEnum):
    CASE_TARGET = "case_target"  # the default: new effects of the case on the same target
    CASE = "case"  # new effects of the case on any target
    OFF = "off"  # nothing is held

    @property
    def label(self) -> str:
        return _LABELS[self]


_LABELS = {
    HoldScope.CASE_TARGET: "hold the case's new effects on the same target",
    HoldScope.CASE: "hold the case's new effects on any target",
    HoldScope.OFF: "hold nothing",
}
DEFAULT_HOLD_SCOPE = HoldScope.CASE_TARGET


def scope_fields(scope: HoldScope, proposed: Mapping[str, Any]) -> dict[str, str] | None:
    """The PROPOSED fields an effect shares with one whose proposal is `proposed` when it
    holds it under `scope` (within one tenant); None: under `scope` nothing holds it. The
    notary selects its candidate holders by these fields. A proposal naming no case (not one
    the gate writes) shares none."""
    case_id, target = proposed.get("case_id"), proposed.get("target")
    if scope is HoldScope.OFF or not isinstance(case_id, str):
        return None
    if scope is HoldScope.CASE:
        return {"case_id": case_id}
    return {"case_id": case_id, "target": str(target)}


@dataclass(frozen=True)
class Hold:
    """`held_by` waits for a person since its entry `since_seq` (its AMBIGUOUS verdict, or the
    first evidence contradicting its verdict), and holds a new effect by `scope`; or, with
    `on_evidence`, `held_by` is the effect itself, held by its own evidence at `since_seq`."""

    held_by: str
    since_seq: int
    scope: HoldScope
    contradicted: bool
    on_evidence: bool = False

    def body(self) -> dict[str, Any]:
        """The HELD entry's body."""
        holder = "contradicted" if self.contradicted else "AMBIGUOUS"
        return {
            "held_by": self.held_by,
            "since_seq": self.since_seq,
            "scope": str(self.scope),
            "holder": "evidence" if self.on_evidence else holder,
        }

    @property
    def detail(self) -> str:
        if self.on_evidence:
            return (
                f"held: evidence (ledger entry {self.since_seq}) says {self.held_by} was "
                "performed, at odds with its record (before it was dispatched, or with no request "
                "acknowledged); sending it could do it twice, so nothing is dispatched until a "
                "person decides whether it happened"
            )
        where = "on the same target" if self.scope is HoldScope.CASE_TARGET else "on any target"
        waits = "is contradicted" if self.contradicted else "is AMBIGUOUS"
        return (
            f"held: {self.held_by}, an effect of the same case {where}, {waits} and waits for a "
            f"person (since ledger entry {self.since_seq}); nothing new of the case is "
            "dispatched until a person resolves it, then submit this proposal again"
        )


def hold_for(
    scope: HoldScope,
    *,
    effect_id: str,
    proposed: Mapping[str, Any],
    attempt: int,
    history: Sequence[Entry],
    candidates: Iterable[Sequence[Entry]],
) -> Hold | None:
    """The hold on attempt `attempt` of `effect_id`, proposed as `proposed`, with entries
    `history`: by its own evidence at odds with its record (protocol.evidence_hold: any attempt,
    under any scope), else by the first of `candidates` (other effects' entries, of the same
    tenant, oldest first) that shares `scope_fields` with it and waits for a person; None: it
    may be dispatched. Only a new effect is held by another: a re-dispatch of one dispatched
    before is recovery, which finishes what was started."""
    evidence = evidence_hold(history)
    if evidence is not None:
        return Hold(effect_id, evidence.seq, scope, contradicted=True, on_evidence=True)
    wanted = scope_fields(scope, proposed)
    if wanted is None or attempt != 1:
        return None
    for history in candidates:
        holder = next((e for e in history if e.kind == EntryKind.PROPOSED), None)
        if holder is None or holder.effect_id == effect_id:
            continue
        body = holder.body_value()
        if body.get("tenant") != proposed.get("tenant"):
            continue
        if any(body.get(name) != value for name, value in wanted.items()):
            continue
        stood = standing(history)
        since = queued_by(stood)
        if since is not None:
            return Hold(holder.effect_id, since, scope, bool(stood.contradictions))
    return None


def recorded(history: Sequence[Entry], hold: Hold) -> bool:
    """Whether the held effect's entries `history` record this hold already: its last HELD
    names the same holder and the same wait, so it is not written again."""
    last = current_hold(history)
    if last is None:
        return False
    body = last.body_value()
    return bool(body.get("held_by") == hold.held_by and body.get("since_seq") == hold.since_seq)


def current_hold(history: Sequence[Entry]) -> Entry | None:
    """The HELD entry the effect stands held by: its last, when nothing was dispatched after
    it. The receipt says HELD and names its holder until a dispatch goes."""
    for entry in reversed(history):
        if entry.kind == EntryKind.DISPATCHED:
            return None
        if entry.kind == EntryKind.HELD:
            return entry
    return None


def histories(entries: Iterable[Entry]) -> Iterator[list[Entry]]:
    """Each effect's entries among a journal's, in the order of their first entry."""
    by_effect: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.effect_id:
            by_effect.setdefault(entry.effect_id, []).append(entry)
    yield from by_effect.values()
