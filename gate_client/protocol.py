"""The protocol's rules, decided in one place (DESIGN §2 and §3).

Final states as a value type; which verdict stands when several are offered; what contradicts a
standing verdict; who may write which verdict; what a target declares; and the recovery
decision, one pure function from what is known of an effect to the next step. The gate, both
journals, the notary's outcome endpoint, evidence ingestion and the recovery sweep all call these
functions, so they cannot disagree. Plain Python: no Django, no I/O, no clock of its own.

The recovery decision is asked repeatedly: a step may be "ask the target", "ask the notary" or
"re-check lease and premises", and the caller asks again with the answer, so lookups and premise
checks run only when the rules need them."""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any, Literal, get_args

from gate_client.money import MoneyDeclaration
from gate_client.targets import Found, NotFound, Target, Tier, Unknown
from ledger.core.entries import Entry, EntryKind

Happened = bool | Literal["unknown"]


class State(enum.StrEnum):
    PROPOSED = "PROPOSED"
    HELD = "HELD"  # proposed, not dispatched: another effect of its case waits for a person
    DISPATCHED = "DISPATCHED"
    COMMITTED = "COMMITTED"
    COMMITTED_BY_RETRY = "COMMITTED_BY_RETRY"
    COMMITTED_ON_QUERY = "COMMITTED_ON_QUERY"
    COMMITTED_ON_EVIDENCE = "COMMITTED_ON_EVIDENCE"
    FAILED = "FAILED"
    REFUSED = "REFUSED"
    AMBIGUOUS = "AMBIGUOUS"
    RESOLVED_HAPPENED = "RESOLVED_HAPPENED"
    RESOLVED_NOT_HAPPENED = "RESOLVED_NOT_HAPPENED"


COMMITTED_STATES = frozenset(
    {
        State.COMMITTED,
        State.COMMITTED_BY_RETRY,
        State.COMMITTED_ON_QUERY,
        State.COMMITTED_ON_EVIDENCE,
    }
)
REFUSAL_REASONS = frozenset(
    {
        "payload_changed",
        "lease_expired",
        "lease_revoked",
        "lease_scope",
        "lease_budget",
        "stale_premise",
        "premise_unreadable",
    }
)
AT_RECOVERY = "_at_recovery"


@dataclass(frozen=True)
class FinalState:
    """A state with its reason: `REFUSED:stale_premise_at_recovery` is (REFUSED,
    "stale_premise", at_recovery=True); `FAILED:card_declined` is (FAILED, "card_declined")."""

    state: State
    reason: str = ""
    at_recovery: bool = False

    def __str__(self) -> str:
        if self.state == State.REFUSED:
            return f"REFUSED:{self.reason}{AT_RECOVERY if self.at_recovery else ''}"
        if self.state == State.FAILED:
            return f"FAILED:{self.reason}"
        return str(self.state)

    @classmethod
    def parse(cls, text: str) -> FinalState:
        name, _, reason = text.partition(":")
        state = State(name)
        if state == State.REFUSED:
            base = reason.removesuffix(AT_RECOVERY)
            return cls(state, base, base != reason)
        return cls(state, reason)

    @property
    def final(self) -> bool:
        """A final verdict stands for good; AMBIGUOUS waits for evidence, the agent or a person.
        HELD is never a verdict: the held proposal is dispatched once the hold is released."""
        return self.state not in (State.PROPOSED, State.HELD, State.DISPATCHED, State.AMBIGUOUS)

    @property
    def happened(self) -> Happened:
        if self.state in COMMITTED_STATES or self.state == State.RESOLVED_HAPPENED:
            return True
        if self.state in (State.DISPATCHED, State.AMBIGUOUS):
            return "unknown"
        return False


def verdict_state(kind: str, body: Mapping[str, Any]) -> FinalState | None:
    """The state an entry of `kind` with `body` settles the effect in; None for entries that
    settle nothing (a refused re-decided payload leaves the first proposal standing)."""
    if kind == EntryKind.COMMITTED:
        state = State(body["state"])
        if state not in COMMITTED_STATES:
            raise ValueError(f"COMMITTED with state {state}")
        return FinalState(state)
    if kind == EntryKind.FAILED:
        return FinalState(State.FAILED, str(body["code"]))
    if kind == EntryKind.REFUSED:
        if body["reason"] == "payload_changed":
            return None
        return FinalState.parse(f"REFUSED:{body['reason']}")
    if kind == EntryKind.AMBIGUOUS:
        return FinalState(State.AMBIGUOUS)
    if kind == EntryKind.RESOLVED:
        return FinalState(
            State.RESOLVED_HAPPENED if body["happened"] else State.RESOLVED_NOT_HAPPENED
        )
    return None


def entry_state(entry: Entry) -> FinalState | None:
    return verdict_state(entry.kind, entry.body_value())


def last_attempt(history: Sequence[Entry]) -> int:
    return max(
        (e.body_value()["attempt"] for e in history if e.kind == EntryKind.DISPATCHED), default=0
    )


def is_payload_change(entry: Entry) -> bool:
    return entry.kind == EntryKind.REFUSED and entry.body_value().get("reason") == "payload_changed"


def payload_change_for(history: Sequence[Entry], payload_hash: object) -> Entry | None:
    """The refusal of the re-decided payload `payload_hash` recorded among `history`, if any."""
    return next(
        (
            e
            for e in history
            if is_payload_change(e) and e.body_value().get("payload_hash") == payload_hash
        ),
        None,
    )


# --- precedence and contradictions --------------------------------------------------------------


ContradictionKind = Literal[
    "happened_never_dispatched",
    "performed_unacknowledged",
    "happened_after_not_happened",
    "duplicate_at_target",
]
_CONTRADICTION_ORDER: tuple[ContradictionKind, ...] = get_args(ContradictionKind)


@dataclass(frozen=True)
class Contradiction:
    """Evidence at odds with what stands: shown on the receipt, sent back to a person."""

    kind: ContradictionKind
    detail: str
    verdict_seq: int | None  # the verdict contradicted, if any
    seqs: tuple[int, ...]  # the entries that contradict it

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "detail": self.detail,
            "verdict_seq": self.verdict_seq,
            "seqs": list(self.seqs),
        }


@dataclass(frozen=True)
class Standing:
    """What an effect's entries settle: the verdict that stands (None: none yet) and the
    contradictions no person has settled since they were recorded."""

    verdict: Entry | None
    state: FinalState | None
    contradictions: tuple[Contradiction, ...]

    @property
    def final(self) -> bool:
        return self.state is not None and self.state.final


def standing(history: Sequence[Entry]) -> Standing:
    """The first final verdict stands everywhere; before one, the first AMBIGUOUS. Later offers
    change nothing, except a person's RESOLVED recorded while the effect was contradicted: a
    person settles what evidence left at odds. A contradiction, once found, stays open whatever
    is recorded after it (a dispatch, a verdict, more evidence) until a person's RESOLVED stands."""
    verdict: Entry | None = None
    state: FinalState | None = None
    open_contradictions: tuple[Contradiction, ...] = ()
    for position, entry in enumerate(history):
        offered = entry_state(entry)
        if offered is None:
            if entry.kind == EntryKind.OBSERVED:
                found = _contradictions(history[: position + 1], verdict, state)
                open_contradictions = _still_open(open_contradictions, found)
            continue
        if state is None or not state.final:
            if state is None or offered.final:
                verdict, state = entry, offered
        elif entry.kind == EntryKind.RESOLVED and open_contradictions:
            verdict, state = entry, offered  # the person's word on the contradiction stands
        found = _contradictions(history[: position + 1], verdict, state)
        if verdict is entry and entry.kind == EntryKind.RESOLVED:
            open_contradictions = found  # the person has seen and settled what came before
        else:
            open_contradictions = _still_open(open_contradictions, found)
    return Standing(verdict, state, open_contradictions)


def _still_open(
    before: tuple[Contradiction, ...], found: tuple[Contradiction, ...]
) -> tuple[Contradiction, ...]:
    """The contradictions open after an entry: each kind as found now, and any kind found
    before that the entry would otherwise have cleared (only a person clears one)."""
    by_kind = {c.kind: c for c in before} | {c.kind: c for c in found}
    return tuple(by_kind[kind] for kind in _CONTRADICTION_ORDER if kind in by_kind)


def _contradictions(
    history: Sequence[Entry], verdict: Entry | None, state: FinalState | None
) -> tuple[Contradiction, ...]:
    """What contradicts `verdict` among `history`, counting only what came after the last
    RESOLVED that stands (a person has seen and settled what came before). A 'performed' seen
    before the first dispatch, or one the notary refused, answers no attempt (counted_evidence)
    and is a contradiction of its own, unless a person decided that it happened: then it agrees
    (a second webhook of the same charge, a service repeating its word), and only a different
    result reference contradicts (duplicate_at_target)."""
    since = verdict.seq if verdict is not None and verdict.kind == EntryKind.RESOLVED else -1
    agreed = since >= 0 and state is not None and state.happened is True
    performed = [
        e
        for e in history
        if e.kind == EntryKind.OBSERVED and e.body_value().get("outcome") == "performed"
    ]
    first = _first_dispatch_seq(history)
    counted = {e.seq for e in counted_evidence(history)}
    found: list[Contradiction] = []
    verdict_seq = verdict.seq if verdict is not None else None
    uncounted = [e.seq for e in performed if e.seq > since and e.seq not in counted]
    early = () if agreed else tuple(n for n in uncounted if first is None or n < first)
    refused = () if agreed else tuple(n for n in uncounted if first is not None and n > first)
    late = tuple(e.seq for e in performed if e.seq > since and e.seq in counted)
    if early:
        found.append(
            Contradiction(
                "happened_never_dispatched",
                "evidence says it was performed before it was dispatched: it is held, never "
                "dispatched automatically, until a person decides",
                verdict_seq,
                early,
            )
        )
    if refused:
        found.append(
            Contradiction(
                "performed_unacknowledged",
                "the service says it performed it, but no request of it was acknowledged: a "
                "write-ahead service acts only after one",
                verdict_seq,
                refused,
            )
        )
    if late and state is not None and state.happened is False:
        found.append(
            Contradiction(
                "happened_after_not_happened",
                f"evidence says it was performed, but the verdict is {state}",
                verdict_seq,
                late,
            )
        )
    refs: dict[str, int] = {}
    carriers = [e for e in history if e.kind == EntryKind.COMMITTED]
    for entry in sorted([*carriers, *performed], key=lambda e: e.seq):
        ref = str(entry.body_value().get("result_ref") or "")
        if ref:
            refs.setdefault(ref, entry.seq)
    if len(refs) > 1 and max(refs.values()) > since:
        first_ref, *others = sorted(refs, key=refs.__getitem__)
        found.append(
            Contradiction(
                "duplicate_at_target",
                f"the target reports {len(refs)} different results ({first_ref}, "
                f"{', '.join(others)}): it acted more than once",
                verdict_seq,
                tuple(sorted(refs[r] for r in others)),
            )
        )
    return tuple(found)


def queued_by(stood: Standing) -> int | None:
    """The seq of the entry the effect waits for a person since: its first open
    contradiction's, else its AMBIGUOUS verdict's; None when it waits for nobody. The review
    queue lists these effects, and while one waits its case's new effects are held
    (gate_client.holds)."""
    contradicting = [seq for c in stood.contradictions for seq in c.seqs]
    if contradicting:
        return min(contradicting)
    if stood.verdict is not None and stood.verdict.kind == EntryKind.AMBIGUOUS:
        return stood.verdict.seq
    return None


@dataclass(frozen=True)
class Admission:
    """What a journal does with an offered verdict: record it, record the offer as evidence
    (it contradicts the verdict that stands, which must be seen), or leave the standing one."""

    action: Literal["record", "record_as_evidence", "stands"]
    standing: Entry | None = None
    evidence: Mapping[str, Any] | None = None


def admit(history: Sequence[Entry], kind: str, body: Mapping[str, Any]) -> Admission:
    """The one precedence rule both journals and the notary apply to every verdict offered.
    A re-decided payload is refused once: its refusal, once recorded, stands for it."""
    if kind == EntryKind.REFUSED and body.get("reason") == "payload_changed":
        earlier = payload_change_for(history, body.get("payload_hash"))
        return Admission("record") if earlier is None else Admission("stands", earlier)
    offered = verdict_state(kind, body)
    now = standing(history)
    if offered is None or now.state is None:
        return Admission("record")
    if not now.state.final:
        return Admission("record") if offered.final else Admission("stands", now.verdict)
    if offered.happened is True and (
        now.state.happened is False or _new_result_ref(history, now.verdict, body)
    ):
        evidence = {
            "source": "agent",
            "outcome": "performed",
            "type": f"late {offered}",
            "result_ref": str(body.get("result_ref") or ""),
            "attempt": body.get("attempt"),
        }
        return Admission("record_as_evidence", now.verdict, evidence)
    return Admission("stands", now.verdict)


def _new_result_ref(
    history: Sequence[Entry], verdict: Entry | None, body: Mapping[str, Any]
) -> bool:
    ref = str(body.get("result_ref") or "")
    if not ref or verdict is None:
        return False
    known = {
        str(e.body_value().get("result_ref") or "")
        for e in [verdict, *history]
        if e.kind in (EntryKind.COMMITTED, EntryKind.OBSERVED)
    }
    return ref not in known and any(known - {""})


# --- who may write what ------------------------------------------------------------------------

AGENT_VERDICT_KINDS = frozenset(
    {EntryKind.COMMITTED, EntryKind.FAILED, EntryKind.AMBIGUOUS, EntryKind.REFUSED}
)


def agent_outcome_refusal(
    history: Sequence[Entry], kind: str, body: Mapping[str, Any]
) -> str | None:
    """Why an agent may not record this outcome (None: it may). Only the notary speaks for its
    own lookups and its evidence, and only a real attempt can have an outcome."""
    if kind not in AGENT_VERDICT_KINDS:
        return f"kind {kind!r}: an agent records one of {', '.join(sorted(AGENT_VERDICT_KINDS))}"
    authorship = _authorship_refusal(body)
    if authorship is not None:
        return authorship
    attempts = {e.body_value()["attempt"] for e in history if e.kind == EntryKind.DISPATCHED}
    return _OUTCOME_RULES[kind](history, body, attempts)


def _authorship_refusal(body: Mapping[str, Any]) -> str | None:
    """What no agent's outcome may carry, whatever its kind: the notary's `by`, or a recheck
    that is not an object."""
    recheck = body.get("recheck")
    if "by" in body or (isinstance(recheck, Mapping) and "by" in recheck):
        return "only the notary writes 'by': an agent's outcome is its own"
    if recheck is not None and not isinstance(recheck, Mapping):
        return "recheck must be an object or null"
    return None


def _unmade_attempt(kind: str, body: Mapping[str, Any], attempts: set[Any]) -> str | None:
    """A commit or a failure is the outcome of an attempt, so it names one that was made."""
    attempt = body.get("attempt")
    if attempt not in attempts:
        return f"{kind} names attempt {attempt!r}, which was never made"
    return None


def _committed_refusal(
    history: Sequence[Entry], body: Mapping[str, Any], attempts: set[Any]
) -> str | None:
    """A commit's state says how it is known, and the body must bear that out: a resend's
    attempt number, the evidence cited, the lookup's answer."""
    unmade = _unmade_attempt(EntryKind.COMMITTED, body, attempts)
    if unmade is not None:
        return unmade
    state, attempt, recheck = body["state"], body.get("attempt"), body.get("recheck")
    if state == State.COMMITTED_BY_RETRY and isinstance(attempt, int) and attempt < 2:
        return "COMMITTED_BY_RETRY is a resend: its attempt is 2 or more"
    if state == State.COMMITTED_ON_EVIDENCE:
        return _evidence_citation_refusal(history, body)
    if state == State.COMMITTED_ON_QUERY and not (
        isinstance(recheck, Mapping) and recheck.get("lookup") == "found"
    ):
        return "COMMITTED_ON_QUERY says what the lookup found: recheck.lookup = 'found'"
    return None


def _failed_refusal(
    history: Sequence[Entry], body: Mapping[str, Any], attempts: set[Any]
) -> str | None:
    """A failure is the target's answer to an attempt that was made, or the notary's reading of
    evidence it holds: then it cites this effect's 'not performed' evidence that counts
    (counted_evidence), as the outcome of an attempt dispatched before it."""
    unmade = _unmade_attempt(EntryKind.FAILED, body, attempts)
    if unmade is not None:
        return unmade
    if not str(body["code"]).startswith("evidence:"):
        return None  # the target's own answer to the attempt
    cited = next((e for e in counted_evidence(history) if e.seq == body.get("evidence_seq")), None)
    if cited is None or _reading(cited) != Negative(body["code"], cited.seq):
        return (
            "FAILED on evidence cites evidence_seq: this effect's 'not performed' evidence, "
            "recorded after the attempt's dispatch"
        )
    if answered_attempt(history, cited.seq) < body["attempt"]:
        return "FAILED on evidence names an attempt dispatched after the evidence it cites"
    return None


def _refused_refusal(
    history: Sequence[Entry], body: Mapping[str, Any], attempts: set[Any]
) -> str | None:
    """A refusal gives one of the protocol's reasons, and once anything was dispatched it can
    only be a refusal at recovery. A re-decided payload (payload_changed) is allowed whenever
    it is what it says it is (_payload_change_refusal)."""
    if body["reason"] == "payload_changed":
        return _payload_change_refusal(history, body)
    reason = str(body["reason"])
    if reason.removesuffix(AT_RECOVERY) not in REFUSAL_REASONS:
        return f"reason {reason!r}: one of {', '.join(sorted(REFUSAL_REASONS))}"
    if attempts and not reason.endswith(AT_RECOVERY):
        return "an effect already dispatched is refused only at recovery (reason_at_recovery)"
    return None


MAX_PAYLOAD_CHANGES = 32  # re-decided payloads one effect records refusals of
_SHA256_HEX = re.compile(r"[0-9a-f]{64}")


def _payload_change_refusal(history: Sequence[Entry], body: Mapping[str, Any]) -> str | None:
    """A re-decided payload names its hash (the receipt of that payload is found by it), which
    is not the standing payload's; `standing_payload_hash`, if given, is the standing one's.
    Each payload is refused once (admit returns the first refusal to a retry, before or after
    the effect settled), and an effect records at most MAX_PAYLOAD_CHANGES of them."""
    changed = body.get("payload_hash")
    if not isinstance(changed, str) or not _SHA256_HEX.fullmatch(changed):
        return "payload_changed names the refused payload: payload_hash, 64 lowercase hex digits"
    proposed = next((e for e in history if e.kind == EntryKind.PROPOSED), None)
    standing_hash = proposed.body_value().get("payload_hash") if proposed is not None else None
    if changed == standing_hash:
        return "payload_changed names the standing payload: nothing was re-decided"
    if "standing_payload_hash" in body and body["standing_payload_hash"] != standing_hash:
        return "standing_payload_hash is not the hash of the standing (first) proposal"
    if payload_change_for(history, changed) is not None:
        return None  # a retry: admit() returns the refusal recorded first
    if sum(1 for e in history if is_payload_change(e)) >= MAX_PAYLOAD_CHANGES:
        return f"an effect records at most {MAX_PAYLOAD_CHANGES} re-decided payloads"
    return None


def _ambiguous_refusal(
    history: Sequence[Entry], body: Mapping[str, Any], attempts: set[Any]
) -> str | None:
    """An agent may always say it does not know."""
    return None


_OutcomeRule = Callable[[Sequence[Entry], Mapping[str, Any], set[Any]], str | None]
_OUTCOME_RULES: Mapping[str, _OutcomeRule] = {
    EntryKind.COMMITTED: _committed_refusal,
    EntryKind.FAILED: _failed_refusal,
    EntryKind.REFUSED: _refused_refusal,
    EntryKind.AMBIGUOUS: _ambiguous_refusal,
}


def silence_broken(history: Sequence[Entry], kind: str, body: Mapping[str, Any]) -> str | None:
    """Why a refusal resting on the notary's silence ("not attested") no longer holds: an
    attestation recorded since the agent read the evidence (it raced the read) means the
    service may have acted, so the effect is not known unsent. That includes a 'performed' the
    notary refused for want of an acknowledged intent: it answers no request, but it is no
    silence. None: the silence stands."""
    recheck = body.get("recheck")
    if kind != EntryKind.REFUSED or not isinstance(recheck, Mapping):
        return None
    first = _first_dispatch_seq(history)
    if recheck.get("lookup") != "not_attested" or first is None:
        return None
    if not any(
        e.kind == EntryKind.OBSERVED and e.seq > first and _reading(e) is not None for e in history
    ):
        return None
    return "the service attested this effect after the evidence was read: ask again"


def _evidence_citation_refusal(history: Sequence[Entry], body: Mapping[str, Any]) -> str | None:
    recheck = body.get("recheck")
    seq = recheck.get("evidence_seq") if isinstance(recheck, Mapping) else None
    cited = next((e for e in counted_evidence(history) if e.seq == seq), None)
    if cited is None or cited.body_value().get("outcome") != "performed":
        return (
            "COMMITTED_ON_EVIDENCE cites recheck.evidence_seq: this effect's 'performed' "
            "evidence, recorded after the attempt's dispatch"
        )
    if str(cited.body_value().get("result_ref") or "") != body.get("result_ref"):
        return "COMMITTED_ON_EVIDENCE carries the result_ref of the evidence it cites"
    if answered_attempt(history, cited.seq) < body["attempt"]:
        return "COMMITTED_ON_EVIDENCE names an attempt dispatched after the evidence it cites"
    return None


# --- what a target declares ----------------------------------------------------------------------


@dataclass(frozen=True)
class TargetDeclaration:
    """What a target allows, as declared once (the notary's target record is the source of
    truth). The windows decide when silence may count: a lookup's "not found" after
    max_inflight; webhook evidence never (positive-only), it only ends the wait at
    evidence_window; a write-ahead attesting service's silence after max_inflight."""

    tier: Tier
    queryable: bool
    max_inflight: timedelta
    key_window: timedelta | None = None
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False
    # Where its payloads hold the money they move (gate_client.money); None: they move none.
    money: MoneyDeclaration | None = None

    @classmethod
    def of(cls, target: Target) -> TargetDeclaration:
        return cls(
            tier=target.tier,
            queryable=target.queryable,
            max_inflight=target.max_inflight,
            key_window=target.key_window,
            evidence_window=target.evidence_window,
            attests_before_acting=target.attests_before_acting,
            lookup_needs_key=target.lookup_needs_key,
            money=target.money,
        )

    def body(self) -> dict[str, Any]:
        """As a PROPOSED body carries it, so a reader of the ledger alone (the verifier) reads
        the effect's money as the gate and the notary did. Windows in whole microseconds."""
        return {
            "tier": int(self.tier),
            "queryable": self.queryable,
            "max_inflight_us": _microseconds(self.max_inflight),
            "key_window_us": _microseconds(self.key_window),
            "evidence_window_us": _microseconds(self.evidence_window),
            "attests_before_acting": self.attests_before_acting,
            "lookup_needs_key": self.lookup_needs_key,
            "money": self.money.body() if self.money is not None else None,
        }

    @classmethod
    def from_body(cls, body: object) -> TargetDeclaration:
        """ValueError for anything but a declaration's body."""
        if not isinstance(body, Mapping) or set(body) != _DECLARATION_KEYS:
            raise ValueError(
                f"a declaration is an object with exactly {', '.join(sorted(_DECLARATION_KEYS))}"
            )
        flags = ("queryable", "attests_before_acting", "lookup_needs_key")
        if body["tier"] not in (1, 2, 3) or any(not isinstance(body[f], bool) for f in flags):
            raise ValueError("a declaration's tier is 1, 2 or 3 and its flags are booleans")
        max_inflight = _duration(body["max_inflight_us"])
        if max_inflight is None:
            raise ValueError("a declaration's max_inflight_us is a positive whole number")
        return cls(
            tier=Tier(body["tier"]),
            queryable=body["queryable"],
            max_inflight=max_inflight,
            key_window=_duration(body["key_window_us"]),
            evidence_window=_duration(body["evidence_window_us"]),
            attests_before_acting=body["attests_before_acting"],
            lookup_needs_key=body["lookup_needs_key"],
            money=MoneyDeclaration.from_body(body["money"]) if body["money"] is not None else None,
        )

    def differences(self, other: TargetDeclaration) -> list[str]:
        """`name: ours != theirs` for each field that differs."""
        return [
            f"{name}: {getattr(self, name)!r} != {getattr(other, name)!r}"
            for name in self.__dataclass_fields__
            if getattr(self, name) != getattr(other, name)
        ]


_DECLARATION_KEYS = frozenset(
    {
        "tier",
        "queryable",
        "max_inflight_us",
        "key_window_us",
        "evidence_window_us",
        "attests_before_acting",
        "lookup_needs_key",
        "money",
    }
)


def _microseconds(window: timedelta | None) -> int | None:
    return None if window is None else window // timedelta(microseconds=1)


def _duration(microseconds: object) -> timedelta | None:
    if microseconds is None:
        return None
    if isinstance(microseconds, bool) or not isinstance(microseconds, int) or microseconds < 1:
        raise ValueError("a declaration's windows are positive whole numbers of microseconds")
    return timedelta(microseconds=microseconds)


def proposed_declaration(proposed: Mapping[str, Any]) -> TargetDeclaration | None:
    """The declaration a PROPOSED body carries; None for one proposed before declarations were
    carried, whose money is then unknown (never guessed from field names)."""
    body = proposed.get("declaration")
    return TargetDeclaration.from_body(body) if body is not None else None


def declaration_in_words(declared: TargetDeclaration) -> str:
    """What could be known of an effect sent to a target declared so, in a sentence: how a lost
    answer is recovered (so a reader sees why an answer is exact or AMBIGUOUS), and how its
    money reads. The receipt states it; the verifier derives it again from the ledger."""
    inflight = _span(declared.max_inflight)
    if declared.tier == Tier.DEDUPES:
        window = _span(declared.key_window) if declared.key_window is not None else "ever"
        first = f"tier 1: it dedupes on the effect's key for {window}, so a lost answer is resent"
        later = {
            Mode.LOOKUP: "past that it is looked up",
            Mode.ATTESTED: "past that its service's attestations answer",
            Mode.EVIDENCE: "past that only its webhooks can settle it",
            Mode.NOTHING_TO_ASK: "past that nothing can be asked and a lost answer is AMBIGUOUS",
        }
        past = asking_mode(
            replace(declared, queryable=declared.queryable and not declared.lookup_needs_key)
        )
        how = f"{first} under it; {later[past]}" if declared.key_window is not None else first
    else:
        asked = {
            Mode.LOOKUP: (
                f"tier {int(declared.tier)}: it can be looked up: found settles it, and not found"
                f" {inflight} after the last dispatch is known unsent"
            ),
            Mode.ATTESTED: (
                "tier 3 with write-ahead attestation: its service attests before acting, so no"
                f" attestation {inflight} after the last dispatch is known unsent"
            ),
            Mode.EVIDENCE: (
                "tier 3 with webhook evidence: what its webhooks say within"
                f" {_span(declared.evidence_window)} settles it; silence proves nothing, so"
                " unseen is AMBIGUOUS"
            ),
            Mode.NOTHING_TO_ASK: (
                "tier 3: nothing can be asked, so a lost answer is AMBIGUOUS for a person"
            ),
        }
        how = asked[asking_mode(declared)]
    return f"{how}; a request may be in flight for {inflight}; {_money_in_words(declared)}"


def _money_in_words(declared: TargetDeclaration) -> str:
    money = declared.money
    if money is None:
        return "it moves no money"
    if money.currency_field is not None:
        currency = f"the currency in {money.currency_field}"
    else:
        currency = money.currency or "no currency"
    return f"its money is {money.amount_field}, in minor units of {currency}"


def _span(window: timedelta | None) -> str:
    """A window as a person reads it: 500 ms, 2 s, 90 s, 24 h."""
    if window is None:
        return "none"
    seconds = window.total_seconds()
    if seconds < 1:
        return f"{round(seconds * 1000)} ms"
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{int(seconds // 3600)} h"
    return f"{seconds:g} s"


class Mode(enum.StrEnum):
    """How an effect of this target recovers now."""

    RESEND_UNDER_KEY = "resend_under_key"  # tier 1 inside its key window
    LOOKUP = "lookup"  # ask the target; not found counts after max_inflight
    ATTESTED = "attested"  # ask the notary; no write-ahead attestation counts after max_inflight
    EVIDENCE = "evidence"  # ask the notary; positive-only, silence is never "not sent"
    NOTHING_TO_ASK = "nothing_to_ask"  # never resend; AMBIGUOUS


def recovery_mode(
    declared: TargetDeclaration, *, first_dispatched_at: datetime, now: datetime
) -> Mode:
    """Tier 1 inside its key window resends under the key; otherwise (past the window too: a
    target that can be looked up is tier 2 then) by what can be asked."""
    if declared.key_window is None or now - first_dispatched_at < declared.key_window:
        return Mode.RESEND_UNDER_KEY if declared.tier == Tier.DEDUPES else asking_mode(declared)
    return asking_mode(
        replace(declared, queryable=declared.queryable and not declared.lookup_needs_key)
    )


# --- the recovery decision ---------------------------------------------------------------------


@dataclass(frozen=True)
class Negative:
    """Evidence that the target did not act (a bounce, a failed refund, a service's word)."""

    code: str
    evidence_seq: int | None = None


@dataclass(frozen=True)
class Intent:
    """A write-ahead attestation with no outcome after it: the service was about to act."""


Answer = Found | NotFound | Unknown | Negative | Intent


@dataclass(frozen=True)
class Recheck:
    """Lease and premises checked just now: `failure` says what stops a dispatch (None: all
    hold), `premises` as observed."""

    failure: Mapping[str, Any] | None
    premises: Sequence[Mapping[str, Any]] = ()


@dataclass(frozen=True)
class Facts:
    history: Sequence[Entry]  # the effect's entries, in order
    declared: TargetDeclaration
    now: datetime
    answer: Answer | None = None  # what the last Ask step was answered, if asked
    recheck: Recheck | None = None
    dispatched_here: bool = False  # this process made the last attempt (no one else will report)
    recovering: bool = True  # False only on a fresh submit's first dispatch


@dataclass(frozen=True)
class Ask:
    source: Literal["target", "notary"]


@dataclass(frozen=True)
class CheckAgain:
    """Re-check lease and premises: the step before any dispatch."""


@dataclass(frozen=True)
class Dispatch:
    attempt: int
    premises: Sequence[Mapping[str, Any]]
    assumed: Mapping[str, Any] | None = None  # what the dispatch takes as known, for the receipt


@dataclass(frozen=True)
class Wait:
    """Nothing may be concluded before `until`: a verdict from someone else may arrive."""

    until: datetime
    reason: str


@dataclass(frozen=True)
class Record:
    kind: EntryKind
    body: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Settled:
    standing: Standing


@dataclass(frozen=True)
class HeldOnEvidence:
    """Evidence (entry `evidence_seq`) says it was performed, at odds with its record: it is not
    dispatched automatically, and waits for a person (evidence_hold)."""

    evidence_seq: int


Step = Ask | CheckAgain | Dispatch | Wait | Record | Settled | HeldOnEvidence


def decide(facts: Facts) -> Step:
    """DESIGN §3's recovery algorithm for one effect, as the next step: a verdict that stands is
    kept; evidence at odds with its record holds it for a person (evidence_hold); an effect
    never dispatched gets its first dispatch; otherwise the last attempt is recovered as the
    target allows now."""
    now_standing = standing(facts.history)
    if now_standing.state is not None:
        return Settled(now_standing)
    held = evidence_hold(facts.history)
    if held is not None:
        return HeldOnEvidence(held.seq)
    dispatches = [e for e in facts.history if e.kind == EntryKind.DISPATCHED]
    if not dispatches:
        return _first_dispatch(facts)
    return _recover(facts, _LastAttempt.of(facts, dispatches))


@dataclass(frozen=True)
class _LastAttempt:
    """What recovery needs of the dispatches made: the last attempt's number and when it went,
    when the first went (the key window counts from it), and until when the last request may
    still be on its way or at work, its sender still able to report (`live` until then)."""

    number: int
    first_at: datetime
    sent_at: datetime
    inflight_until: datetime
    live: bool

    @classmethod
    def of(cls, facts: Facts, dispatches: Sequence[Entry]) -> _LastAttempt:
        last = dispatches[-1]
        inflight_until = last.created_at + facts.declared.max_inflight
        return cls(
            number=int(last.body_value()["attempt"]),
            first_at=dispatches[0].created_at,
            sent_at=last.created_at,
            inflight_until=inflight_until,
            live=facts.now < inflight_until,
        )


def _recover(facts: Facts, last: _LastAttempt) -> Step:
    """Resend under the idempotency key while it covers the effect; otherwise, or when the
    re-check stops the resend, ask what can be asked."""
    declared = facts.declared
    mode = recovery_mode(declared, first_dispatched_at=last.first_at, now=facts.now)
    if mode != Mode.RESEND_UNDER_KEY:
        return _recover_by_asking(facts, last, mode, failure=None)
    # The key makes a concurrent duplicate harmless: a re-checked resend may go at once.
    if facts.recheck is None:
        return CheckAgain()
    if facts.recheck.failure is None:
        return Dispatch(last.number + 1, facts.recheck.premises)
    # No resend: only asking is left, and the failed re-check is part of what is known.
    return _recover_by_asking(facts, last, asking_mode(declared), failure=facts.recheck.failure)


def _recover_by_asking(
    facts: Facts, last: _LastAttempt, mode: Mode, *, failure: Mapping[str, Any] | None
) -> Step:
    """Ask the target (LOOKUP) or the notary (ATTESTED, EVIDENCE), then go by the answer: a
    found commits, a negative fails, and what silence means depends on the mode."""
    if mode == Mode.NOTHING_TO_ASK:
        return _nothing_to_ask(facts, last, failure)
    source: Literal["target", "notary"] = "target" if mode == Mode.LOOKUP else "notary"
    answer = facts.answer
    if answer is None:
        return Ask(source)
    # The notary's evidence answers the attempt dispatched before it; a lookup, the last.
    attempt = (
        answered_attempt(facts.history, answer.evidence_seq)
        if isinstance(answer, Found | Negative) and answer.evidence_seq is not None
        else last.number
    )
    if isinstance(answer, Found):
        return _commit_on_answer(source, attempt, answer, failure)
    if isinstance(answer, Negative):
        return _fail_on_answer(attempt, answer)
    if mode == Mode.EVIDENCE:
        return _evidence_silence(facts, last, failure)
    if isinstance(answer, Intent | Unknown):
        return _in_doubt(facts, last, answer, failure)
    return _not_found(facts, last, source)


def _nothing_to_ask(facts: Facts, last: _LastAttempt, failure: Mapping[str, Any] | None) -> Step:
    """Tier 3, nothing to ask: never resend. AMBIGUOUS, once another process's attempt can no
    longer report its own outcome."""
    if last.live and not facts.dispatched_here:
        return Wait(last.inflight_until, "another process's attempt may still report its outcome")
    said = {**(failure or {}), "lookup": None} if failure else {"reason": _NOTHING_TO_ASK}
    return Record(EntryKind.AMBIGUOUS, {"recheck": said})


def _evidence_silence(facts: Facts, last: _LastAttempt, failure: Mapping[str, Any] | None) -> Step:
    """Webhook evidence is positive-only: nothing seen is never "not sent". It waits out the
    evidence window (and the last request's flight), then the effect is AMBIGUOUS."""
    assert facts.declared.evidence_window is not None
    window_ends = max(last.sent_at + facts.declared.evidence_window, last.inflight_until)
    if facts.now < window_ends:
        return Wait(window_ends, "webhook evidence may still arrive within its window")
    return Record(EntryKind.AMBIGUOUS, {"recheck": {**(failure or {}), "evidence": _SILENCE}})


def _in_doubt(
    facts: Facts,
    last: _LastAttempt,
    answer: Intent | Unknown,
    failure: Mapping[str, Any] | None,
) -> Step:
    """The lookup could not tell, or the service attested it was about to act and said no more:
    wait while the last request or the lookup's own horizon may still settle it, then
    AMBIGUOUS."""
    until = answer.until if isinstance(answer, Unknown) else None
    if last.live or (until is not None and facts.now < until):
        return Wait(max(last.inflight_until, until or last.inflight_until), _reason(answer))
    detail = {"lookup": "unknown", "detail": _reason(answer)}
    return Record(EntryKind.AMBIGUOUS, {"recheck": {**(failure or {}), **detail}})


def _not_found(facts: Facts, last: _LastAttempt, source: Literal["target", "notary"]) -> Step:
    """Not found by the target's lookup, or no write-ahead attestation from the service: both
    conclusive once the last request can no longer be in flight. Then re-check and resend, or
    refuse at recovery if the re-check fails (a re-check that already stopped a resend under the
    key is the one that counts)."""
    if last.live:
        return Wait(
            last.inflight_until, "not found yet, and the last request may still be in flight"
        )
    looked = "not_found" if source == "target" else "not_attested"
    if facts.recheck is None:
        return CheckAgain()
    if facts.recheck.failure is None:
        return Dispatch(last.number + 1, facts.recheck.premises, {"lookup": looked})
    return _refuse_at_recovery(facts.recheck.failure, looked)


def asking_mode(declared: TargetDeclaration) -> Mode:
    """How an effect recovers when it may not be resent under a key: by what can be asked."""
    if declared.tier != Tier.NEITHER and declared.queryable:
        return Mode.LOOKUP
    if declared.attests_before_acting:
        return Mode.ATTESTED
    if declared.evidence_window is not None:
        return Mode.EVIDENCE
    return Mode.NOTHING_TO_ASK


def late_request(declared: TargetDeclaration, dispatched: Entry, now: datetime) -> str | None:
    """Why the gate must not start the request of attempt `dispatched` now (None: it may).

    Recovery counts a lookup's "not found" as "never sent" from the dispatch's max in-flight
    time on (_not_found). A request started after that, its DISPATCHED acknowledged late (a
    notary slow to answer, an agent stalled between the answer and the send), could act after
    another process concluded it never would, and against the verdict that process recorded.
    So it is not started: recovery finds it not found and decides. A target recovery does not
    look up is not affected: silence proves nothing there, and a service that attests first is
    refused a late attestation by the notary (intent_refusal)."""
    if asking_mode(declared) is not Mode.LOOKUP:
        return None
    if now < dispatched.created_at + declared.max_inflight:
        return None
    return (
        f"attempt {dispatched.body_value()['attempt']} was acknowledged after its max in-flight "
        "time: recovery may already count it as never sent"
    )


def _reason(answer: Intent | Unknown) -> str:
    return answer.reason if isinstance(answer, Unknown) else _INTENT_ONLY


_NOTHING_TO_ASK = "tier 3: nothing to ask, never resend"
_SILENCE = "none within the evidence window; silence proves nothing"
_INTENT_ONLY = "the service attested it was about to act and reported no outcome"


def _first_dispatch(facts: Facts) -> Step:
    """Nothing was sent before, so a failed check is a plain refusal."""
    if facts.recheck is None:
        return CheckAgain()
    failure = facts.recheck.failure
    if failure is None:
        return Dispatch(1, facts.recheck.premises)
    return refusal(failure, at_recovery=facts.recovering)


def _commit_on_answer(
    source: Literal["target", "notary"],
    attempt: int,
    answer: Found,
    failure: Mapping[str, Any] | None,
) -> Record:
    if source == "target":
        state, recheck = State.COMMITTED_ON_QUERY, {**(failure or {}), "lookup": "found"}
    else:
        state = State.COMMITTED_ON_EVIDENCE
        recheck = {**(failure or {}), "evidence": "found", "evidence_seq": answer.evidence_seq}
    return Record(EntryKind.COMMITTED, commit_body(state, attempt, answer.result_ref, recheck))


def _fail_on_answer(attempt: int, answer: Negative) -> Record:
    body = {"attempt": attempt, "code": answer.code, "evidence_seq": answer.evidence_seq}
    return Record(EntryKind.FAILED, body)


def _first_dispatch_seq(history: Sequence[Entry]) -> int | None:
    return next((e.seq for e in history if e.kind == EntryKind.DISPATCHED), None)


def counted_evidence(history: Sequence[Entry]) -> list[Entry]:
    """The OBSERVED entries that answer an attempt (DESIGN §3, "evidence counts in order"):
    those recorded after the effect's first DISPATCHED, each answering the last attempt
    dispatched before it (answered_attempt). Evidence from before any dispatch answers no
    request of the gate's, nor does a write-ahead service's word the notary refused for want of
    an acknowledged intent (its body says `refused`): both are contradictions instead."""
    first = _first_dispatch_seq(history)
    if first is None:
        return []
    return [
        e
        for e in history
        if e.kind == EntryKind.OBSERVED and e.seq > first and "refused" not in e.body_value()
    ]


def answered_attempt(history: Sequence[Entry], evidence_seq: int | None) -> int:
    """The attempt the evidence `evidence_seq` answers: the last dispatched before it."""
    return max(
        (
            e.body_value()["attempt"]
            for e in history
            if e.kind == EntryKind.DISPATCHED and (evidence_seq is None or e.seq < evidence_seq)
        ),
        default=0,
    )


def _reading(entry: Entry) -> Found | Negative | Intent | None:
    """What one OBSERVED entry says, whatever its place among the effect's entries."""
    body = entry.body_value()
    outcome = body.get("outcome")
    if outcome == "performed":
        return Found(str(body.get("result_ref") or ""), entry.seq)
    if outcome == "not_performed":
        return Negative(f"evidence:{body.get('type', '')}", entry.seq)
    return Intent() if outcome == "intent" else None


def evidence_answer(history: Sequence[Entry]) -> Answer:
    """What the evidence that counts (counted_evidence) says, as facts: the first 'performed',
    else the first 'not performed', else a write-ahead attestation, else nothing seen. Whether
    nothing seen counts is decide()'s to say, by the target's declaration."""
    readings = [_reading(e) for e in counted_evidence(history)]
    for kind in (Found, Negative, Intent):
        answer = next((r for r in readings if isinstance(r, kind)), None)
        if answer is not None:
            return answer
    return NotFound()


def evidence_hold(history: Sequence[Entry]) -> Entry | None:
    """The evidence that holds an effect from any dispatch: the first entry of a contradiction
    open while no verdict stands, a 'performed' seen before the effect was ever dispatched (a
    person sent it by hand, a service acted on its own) or one a write-ahead service gave with
    no acknowledged intent. Dispatching it could do it twice, so it waits for a person, whose
    RESOLVED settles it. None: nothing holds it so."""
    stood = standing(history)
    seq = queued_by(stood) if stood.state is None and stood.contradictions else None
    return next((e for e in history if e.seq == seq), None)


def intent_refusal(
    history: Sequence[Entry], declared: TargetDeclaration, now: datetime
) -> str | None:
    """Why a write-ahead attestation may not be acknowledged now (None: it may, and the service
    may act). Recovery counts "no attestation by max_inflight after the last dispatch" as never
    acted, so none is acknowledged after that, nor twice for one effect (two requests in flight,
    one acts), nor once the effect has a verdict or evidence at odds with it (a person must look
    first: acting could act twice)."""
    dispatches = [e for e in history if e.kind == EntryKind.DISPATCHED]
    if not dispatches:
        return "never dispatched: nothing may act on it"
    stands = standing(history)
    if stands.state is not None:
        return f"it is {stands.state}: nothing may act on it now"
    if stands.contradictions:
        return "its evidence is contradicted and waits for a person: acting now could act twice"
    if isinstance(evidence_answer(history), Found | Negative | Intent):
        return "a request for it was attested already: acting again could act twice"
    if now >= dispatches[-1].created_at + declared.max_inflight:
        return (
            "its last dispatch is older than the target's max in-flight time: recovery may "
            "already count it as never sent"
        )
    return None


def attestation_refusal(history: Sequence[Entry], declared: TargetDeclaration) -> str | None:
    """Why a service's word that it did, or did not, perform an effect is not taken as
    evidence (None: it is). A write-ahead service acts only on an acknowledged intent, so for
    its target (and only there) such a word counts only after one; without, it answers nothing.
    A 'performed' refused so is still kept, as a contradiction a person must see."""
    if not declared.attests_before_acting:
        return None
    if any(isinstance(_reading(e), Intent) for e in counted_evidence(history)):
        return None
    return (
        "no intent to act on it was acknowledged: a write-ahead service acts only on an "
        "acknowledged request, so this answers none"
    )


def settle_on_evidence(history: Sequence[Entry]) -> Record | None:
    """The verdict the evidence just recorded (the last entry) settles, if any: evidence that
    counts (counted_evidence) settles an effect dispatched and not finally settled (AMBIGUOUS
    included), as the outcome of the attempt it answers; it never moves a final verdict (what
    it contradicts is shown by standing()), and evidence from before the first dispatch
    settles nothing."""
    if not last_attempt(history) or standing(history[:-1]).final:
        return None
    answer = evidence_answer(history)
    if isinstance(answer, Found):
        attempt = answered_attempt(history, answer.evidence_seq)
        recheck = {"evidence": "found", "evidence_seq": answer.evidence_seq}
        return Record(
            EntryKind.COMMITTED,
            commit_body(State.COMMITTED_ON_EVIDENCE, attempt, answer.result_ref, recheck),
        )
    if isinstance(answer, Negative):
        return _fail_on_answer(answered_attempt(history, answer.evidence_seq), answer)
    return None


def commit_body(
    state: State, attempt: int, result_ref: str, recheck: Mapping[str, Any] | None
) -> dict[str, Any]:
    return {"state": str(state), "attempt": attempt, "result_ref": result_ref, "recheck": recheck}


def premise_failure(results: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The failure a dispatch on these premises, as evaluated, is refused with; None if all
    hold. One found false is `stale_premise`: the world is not as the decision assumed. One that
    could not be read at all (its check raised: a 403 from the read key, a timeout) claims
    nothing about the world, so when none is found false the refusal is `premise_unreadable`,
    naming each premise that could not be read and why."""
    failed = [r for r in results if not r["holds"]]
    if not failed:
        return None
    premises = [dict(r) for r in results]
    names = [r["name"] for r in failed]
    unreadable = {r["name"]: why for r in failed if (why := unreadable_premise(r)) is not None}
    if len(unreadable) < len(failed):
        return {"reason": "stale_premise", "failed": names, "premises": premises}
    return {
        "reason": "premise_unreadable",
        "failed": names,
        "unreadable": unreadable,
        "premises": premises,
    }


def unreadable_premise(result: Mapping[str, Any]) -> str | None:
    """Why a premise, as evaluated, could not be read (gate_client.proposal.Premise.evaluate
    records a check that raised as `observed: {"error": why}`); None: it was read."""
    observed = result.get("observed")
    if (
        result.get("holds") is False
        and isinstance(observed, Mapping)
        and set(observed) == {"error"}
    ):
        return str(observed["error"])
    return None


def refusal(failure: Mapping[str, Any], *, at_recovery: bool) -> Record:
    """REFUSED for what stopped the dispatch (`failure["reason"]`), with what was seen."""
    reason = str(failure["reason"]) + (AT_RECOVERY if at_recovery else "")
    details = {k: v for k, v in failure.items() if k != "reason"}
    body = {**details, "reason": reason, "recheck": dict(failure) if at_recovery else None}
    return Record(EntryKind.REFUSED, body)


def _refuse_at_recovery(failure: Mapping[str, Any], looked: str) -> Record:
    """Known not sent (the target or the attesting service says so) and a re-check failed."""
    return refusal({**failure, "lookup": looked}, at_recovery=True)


def sent_body(attempt: int, result_ref: str, recheck: Mapping[str, Any] | None) -> dict[str, Any]:
    """COMMITTED for the target's own answer to attempt `attempt`."""
    state = State.COMMITTED_BY_RETRY if attempt > 1 else State.COMMITTED
    return commit_body(state, attempt, result_ref, recheck)
