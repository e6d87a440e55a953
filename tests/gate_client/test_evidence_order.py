"""Evidence counts in order (DESIGN §3): evidence answers an attempt only if it came after that
attempt's DISPATCHED; a write-ahead service's word counts only after an intent the notary
acknowledged; positive evidence before the first dispatch holds the effect for a person; a
contradiction is cleared only by a person. Tables written from the design, then properties over
drawn histories of one effect."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate_client.holds import Hold, HoldScope, hold_for
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.protocol import (
    Dispatch,
    Facts,
    HeldOnEvidence,
    Intent,
    Negative,
    Recheck,
    Record,
    TargetDeclaration,
    agent_outcome_refusal,
    attestation_refusal,
    counted_evidence,
    decide,
    evidence_answer,
    premise_failure,
    settle_on_evidence,
    standing,
)
from gate_client.receipts import derive_receipt
from gate_client.targets import Found, NotFound, Tier
from ledger.core.canonical import canonical_json
from ledger.core.entries import Entry, EntryKind, seal_entry

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
S = timedelta(seconds=1)
INFLIGHT = 30 * S
WINDOW = timedelta(hours=1)

WEBHOOKS = TargetDeclaration(Tier.NEITHER, False, INFLIGHT, evidence_window=WINDOW)
ATTESTED = TargetDeclaration(Tier.NEITHER, False, INFLIGHT, attests_before_acting=True)
KEYED = TargetDeclaration(Tier.DEDUPES, False, INFLIGHT, key_window=timedelta(hours=24))

PREMISES = [{"name": "refundable", "holds": True, "observed": {"status": "paid"}}]
PROPOSAL = Proposal("case-1", "mail", "email", {"to": "a@example.com"}, "lease_1", tenant="acme")
EFFECT = PROPOSAL.effect_id
HOLDS = Recheck(None, PREMISES)

Item = tuple[str, Mapping[str, Any]]


def history(*items: Item) -> list[Entry]:
    """The effect's entries: PROPOSED, then each (kind, body), one second apart."""
    made: list[Entry] = []
    for seq, (kind, body) in enumerate([("PROPOSED", PROPOSAL.proposed_body(PREMISES)), *items]):
        made.append(
            seal_entry(
                seq=seq,
                kind=kind,
                effect_id=EFFECT,
                body=canonical_json(dict(body)),
                created_at=T0 + seq * S,
                prev_hash=made[-1].entry_hash if made else b"\0" * 32,
            )
        )
    return made


def dispatched(attempt: int = 1) -> Item:
    body = {"attempt": attempt, "lease_id": "lease_1", "premises": PREMISES}
    return ("DISPATCHED", {**body, "recovery": attempt > 1})


def observed(outcome: str, ref: str = "em_1", **more: Any) -> Item:
    return (
        "OBSERVED",
        {"source": "webhook", "outcome": outcome, "type": "t", "result_ref": ref, **more},
    )


def refused_performed(ref: str = "em_1") -> Item:
    """A write-ahead service's 'performed' the notary refused: no intent was acknowledged."""
    return observed("performed", ref, source="attestation", refused="no intent acknowledged")


INTENT = observed("intent", "")


def resolved(happened: bool) -> Item:
    return ("RESOLVED", {"happened": happened, "reason": "asked the customer", "by": "fin"})


# --- what evidence answers ----------------------------------------------------------------------

ANSWERS = [
    ("nothing dispatched: nothing answers", [observed("performed")], NotFound()),
    (
        "performed before the dispatch answers no attempt",
        [observed("performed"), dispatched()],
        NotFound(),
    ),
    ("performed after the dispatch", [dispatched(), observed("performed")], Found("em_1", 2)),
    ("a bounce before the dispatch", [observed("not_performed"), dispatched()], NotFound()),
    ("a bounce after it", [dispatched(), observed("not_performed")], Negative("evidence:t", 2)),
    (
        "a refused 'performed' answers nothing",
        [dispatched(), INTENT, refused_performed()],
        Intent(),
    ),
    (
        "the first that counts, not the first seen",
        [observed("performed", "em_0"), dispatched(), observed("performed", "em_1")],
        Found("em_1", 3),
    ),
]


@pytest.mark.parametrize(("items", "answer"), [r[1:] for r in ANSWERS], ids=[r[0] for r in ANSWERS])
def test_evidence_answers_only_what_came_after_a_dispatch(
    items: Sequence[Item], answer: object
) -> None:
    assert evidence_answer(history(*items)) == answer


CONTRADICTIONS = [
    (
        "performed before the dispatch stays a contradiction after it",
        [observed("performed"), dispatched()],
        None,
        ["happened_never_dispatched"],
    ),
    (
        "and after evidence on the attempt",
        [observed("performed"), dispatched(), observed("performed")],
        None,
        ["happened_never_dispatched"],
    ),
    (
        "a refused 'performed' after the dispatch",
        [dispatched(), refused_performed()],
        None,
        ["performed_unacknowledged"],
    ),
    ("a person settles it", [observed("performed"), resolved(False)], "RESOLVED_NOT_HAPPENED", []),
    (
        "a person settles the refused one too",
        [dispatched(), refused_performed(), resolved(True)],
        "RESOLVED_HAPPENED",
        [],
    ),
    (
        "a second webhook of what a person found happened agrees with the person",
        [observed("performed"), resolved(True), observed("performed")],
        "RESOLVED_HAPPENED",
        [],
    ),
    (
        "so does a service repeating its refused word",
        [dispatched(), refused_performed(), resolved(True), refused_performed()],
        "RESOLVED_HAPPENED",
        [],
    ),
    (
        "a different result after the person's word is a second performance",
        [observed("performed"), resolved(True), observed("performed", "em_2")],
        "RESOLVED_HAPPENED",
        ["duplicate_at_target"],
    ),
    (
        "a 'performed' after a person found it did not happen contradicts the person",
        [observed("performed"), resolved(False), observed("performed")],
        "RESOLVED_NOT_HAPPENED",
        ["happened_never_dispatched"],
    ),
]


@pytest.mark.parametrize(
    ("items", "state", "kinds"),
    [r[1:] for r in CONTRADICTIONS],
    ids=[r[0] for r in CONTRADICTIONS],
)
def test_a_contradiction_is_cleared_only_by_a_person(
    items: Sequence[Item], state: str | None, kinds: list[str]
) -> None:
    stood = standing(history(*items))
    assert (str(stood.state) if stood.state else None) == state
    assert [c.kind for c in stood.contradictions] == kinds


def test_evidence_between_two_dispatches_answers_the_first() -> None:
    """Recovery of attempt 2 asks the notary; the 'performed' it finds came after attempt 1's
    dispatch and before attempt 2's: the commit is attempt 1's."""
    entries = history(dispatched(1), observed("performed"), dispatched(2))
    facts = Facts(entries, WEBHOOKS, T0 + 10 * S, answer=Found("em_1", 2))
    step = decide(facts)
    assert isinstance(step, Record) and step.body["attempt"] == 1
    commit = {**step.body, "recheck": {"evidence": "found", "evidence_seq": 2}}
    assert agent_outcome_refusal(entries, "COMMITTED", {**commit, "attempt": 1}) is None
    assert "dispatched after" in str(
        agent_outcome_refusal(entries, "COMMITTED", {**commit, "attempt": 2})
    )


def test_no_verdict_cites_evidence_from_before_the_dispatch() -> None:
    entries = history(observed("performed"), dispatched())
    body = {
        "state": "COMMITTED_ON_EVIDENCE",
        "attempt": 1,
        "result_ref": "em_1",
        "recheck": {"evidence": "found", "evidence_seq": 1},
    }
    assert "after the attempt's dispatch" in str(agent_outcome_refusal(entries, "COMMITTED", body))
    failed = {"attempt": 1, "code": "evidence:t", "evidence_seq": 1}
    bounced = history(observed("not_performed"), dispatched())
    assert "after the attempt's dispatch" in str(agent_outcome_refusal(bounced, "FAILED", failed))


# --- holding ------------------------------------------------------------------------------------

HOLDS_TABLE = [
    ("performed, never dispatched", KEYED, [observed("performed")], "held on 1"),
    (
        "a refused 'performed' after the dispatch",
        ATTESTED,
        [dispatched(), refused_performed()],
        "held on 2",
    ),
    (
        "settled by a person: never dispatched",
        KEYED,
        [observed("performed"), resolved(False)],
        "settled",
    ),
    (
        "a bounce before the dispatch holds nothing",
        KEYED,
        [observed("not_performed")],
        "dispatch 1",
    ),
]


@pytest.mark.parametrize(
    ("declared", "items", "expected"),
    [r[1:] for r in HOLDS_TABLE],
    ids=[r[0] for r in HOLDS_TABLE],
)
def test_positive_evidence_at_odds_with_the_record_holds_the_effect(
    declared: TargetDeclaration, items: Sequence[Item], expected: str
) -> None:
    step = decide(Facts(history(*items), declared, T0 + 100 * S, recheck=HOLDS))
    described = (
        f"held on {step.evidence_seq}"
        if isinstance(step, HeldOnEvidence)
        else f"dispatch {step.attempt}"
        if isinstance(step, Dispatch)
        else type(step).__name__.lower()
    )
    assert described == expected


@pytest.mark.parametrize("attempt", [1, 2])
@pytest.mark.parametrize("scope", list(HoldScope))
def test_the_dispatch_rule_holds_it_at_any_scope_and_attempt(
    attempt: int, scope: HoldScope
) -> None:
    entries = (
        history(observed("performed"))
        if attempt == 1
        else history(dispatched(), refused_performed())
    )
    hold = hold_for(
        scope,
        effect_id=EFFECT,
        proposed=entries[0].body_value(),
        attempt=attempt,
        history=entries,
        candidates=[],
    )
    assert hold is not None and hold.held_by == EFFECT and hold.on_evidence
    assert hold.body()["holder"] == "evidence" and hold.since_seq == len(entries) - 1
    assert "performed" in hold.detail


def test_a_held_receipt_says_held_unknown_and_contradicted_until_a_person_decides() -> None:
    entries = history(observed("performed"))
    receipt = derive_receipt(entries, EFFECT)
    assert (receipt.final_state, receipt.held_by, receipt.happened) == ("HELD", EFFECT, "unknown")
    assert receipt.contradicted and not receipt.recorded
    assert [c["kind"] for c in receipt.contradictions] == ["happened_never_dispatched"]
    assert receipt.authorized_when_fired is None
    decided = derive_receipt(history(observed("performed"), resolved(True)), EFFECT)
    assert (decided.final_state, decided.happened, decided.held_by) == (
        "RESOLVED_HAPPENED",
        True,
        None,
    )
    assert (decided.authorized_when_fired, decided.assumptions_held) == (None, None)
    assert not decided.contradicted and decided.recorded


def test_a_dispatched_effect_held_by_its_own_evidence_names_itself_before_any_resend() -> None:
    """The receipt of an effect dispatched and then held by a 'performed' the notary refused
    says who holds it whether or not a resend was tried since (the HELD entry it recorded):
    the same standing, one receipt."""
    hold = Hold(EFFECT, 2, HoldScope.CASE_TARGET, contradicted=True, on_evidence=True)
    for items in (
        [dispatched(), refused_performed()],
        [dispatched(), refused_performed(), ("HELD", hold.body())],
    ):
        receipt = derive_receipt(history(*items), EFFECT)
        assert (receipt.final_state, receipt.happened) == ("DISPATCHED", "unknown")
        assert receipt.held_by == EFFECT and receipt.contradicted


# --- a write-ahead service's word -----------------------------------------------------------------

ATTESTATIONS = [
    ("write-ahead, nothing dispatched", ATTESTED, [], "no intent"),
    ("write-ahead, dispatched, no intent", ATTESTED, [dispatched()], "no intent"),
    ("write-ahead, after an acknowledged intent", ATTESTED, [dispatched(), INTENT], None),
    ("not write-ahead: evidence like a webhook", WEBHOOKS, [dispatched()], None),
]


@pytest.mark.parametrize(
    ("declared", "items", "refused"),
    [r[1:] for r in ATTESTATIONS],
    ids=[r[0] for r in ATTESTATIONS],
)
def test_a_write_ahead_services_word_counts_only_after_an_acknowledged_intent(
    declared: TargetDeclaration, items: Sequence[Item], refused: str | None
) -> None:
    reason = attestation_refusal(history(*items), declared)
    assert (reason is None) if refused is None else (reason is not None and refused in reason)


# --- premises that could not be read --------------------------------------------------------------


def premise(name: str, holds: bool | None) -> dict[str, Any]:
    """Evaluated as the gate evaluates it: None is a check that raised."""

    def check() -> PremiseResult:
        if holds is None:
            raise PermissionError("403 Forbidden: this key may not read refunds")
        return PremiseResult(holds, {"status": "paid" if holds else "refunded"})

    return Premise(name, check).evaluate()


def test_a_premise_that_could_not_be_read_is_not_a_stale_one() -> None:
    assert premise_failure([premise("a", True)]) is None
    unreadable = premise_failure([premise("a", None), premise("b", True)])
    assert unreadable is not None and unreadable["reason"] == "premise_unreadable"
    assert unreadable["failed"] == ["a"] and "403" in unreadable["unreadable"]["a"]
    stale = premise_failure([premise("a", None), premise("b", False)])
    assert stale is not None and stale["reason"] == "stale_premise"  # one is known false
    assert stale["failed"] == ["a", "b"]
    looks_like = {"name": "c", "holds": True, "observed": {"error": "none"}}
    assert premise_failure([looks_like]) is None


# --- properties over drawn histories ------------------------------------------------------------

DRAWN: list[str] = ["D", "P", "P2", "N", "I", "X", "A", "R+", "R-"]


def drawn_items(codes: Sequence[str]) -> list[Item]:
    items: list[Item] = []
    attempt = 0
    for code in codes:
        if code == "D":
            attempt += 1
            items.append(dispatched(attempt))
        elif code == "P":
            items.append(observed("performed"))
        elif code == "P2":
            items.append(observed("performed", "em_2"))
        elif code == "N":
            items.append(observed("not_performed"))
        elif code == "I":
            items.append(INTENT)
        elif code == "X":
            items.append(refused_performed())
        elif code == "A":
            items.append(("AMBIGUOUS", {"recheck": {"reason": "r"}}))
        else:
            items.append(resolved(code == "R+"))
    return items


histories = st.lists(st.sampled_from(DRAWN), max_size=9).map(lambda c: history(*drawn_items(c)))


def first_dispatch(entries: Sequence[Entry]) -> int | None:
    return next((e.seq for e in entries if e.kind == EntryKind.DISPATCHED), None)


@settings(max_examples=300, deadline=None)
@given(histories)
def test_what_evidence_answers_and_settles_came_after_its_attempt(entries: list[Entry]) -> None:
    first = first_dispatch(entries)
    answer = evidence_answer(entries)
    if isinstance(answer, Found | Negative):
        assert first is not None and answer.evidence_seq is not None
        assert answer.evidence_seq > first
        cited = entries[answer.evidence_seq].body_value()
        assert "refused" not in cited
    for seq in (e.seq for e in counted_evidence(entries)):
        assert first is not None and seq > first
    verdict = settle_on_evidence(entries)
    if verdict is not None:
        recheck = verdict.body.get("recheck") or {}
        cited_seq = recheck.get("evidence_seq", verdict.body.get("evidence_seq"))
        [attempt_entry] = [
            e
            for e in entries
            if e.kind == EntryKind.DISPATCHED
            and e.body_value()["attempt"] == verdict.body["attempt"]
        ]
        assert cited_seq is not None and attempt_entry.seq < cited_seq


@settings(max_examples=300, deadline=None)
@given(histories)
def test_a_contradiction_stays_open_until_a_persons_resolution_stands(entries: list[Entry]) -> None:
    before: set[str] = set()
    for end in range(1, len(entries) + 1):
        stood = standing(entries[:end])
        now: set[str] = {c.kind for c in stood.contradictions}
        decided = stood.verdict is entries[end - 1] and entries[end - 1].kind == EntryKind.RESOLVED
        if not decided:
            assert before <= now, f"cleared by entry {end - 1}: {before - now}"
        before = now


@settings(max_examples=300, deadline=None)
@given(histories, st.sampled_from([WEBHOOKS, ATTESTED, KEYED]))
def test_positive_evidence_before_any_dispatch_is_never_dispatched_by_recovery(
    entries: list[Entry], declared: TargetDeclaration
) -> None:
    first = first_dispatch(entries)
    early = [
        e
        for e in entries
        if e.kind == EntryKind.OBSERVED
        and e.body_value()["outcome"] == "performed"
        and (first is None or e.seq < first)
    ]
    persons = [e for e in entries if e.kind == EntryKind.RESOLVED]
    if not early or persons or standing(entries).state is not None:
        return
    for answer in (None, NotFound(), Found("em_9", None)):
        step = decide(Facts(entries, declared, T0 + WINDOW * 2, answer=answer, recheck=HOLDS))
        assert isinstance(step, HeldOnEvidence), step
    receipt = derive_receipt(entries, EFFECT)
    assert receipt.happened is not True and receipt.contradicted
