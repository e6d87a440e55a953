"""The protocol's rules as tables written from DESIGN §2-§3, one row per case; nothing here is
computed from the code under test. Each row: what is known of one effect, and the step or
verdict the design says comes next."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from gate_client.money import MoneyDeclaration
from gate_client.protocol import (
    Admission,
    Answer,
    Ask,
    CheckAgain,
    Dispatch,
    Facts,
    FinalState,
    HeldOnEvidence,
    Intent,
    Negative,
    Recheck,
    Record,
    Settled,
    State,
    Step,
    TargetDeclaration,
    Wait,
    admit,
    agent_outcome_refusal,
    decide,
    declaration_in_words,
    intent_refusal,
    settle_on_evidence,
    standing,
)
from gate_client.targets import Found, NotFound, Tier, Unknown
from ledger.core.canonical import canonical_json
from ledger.core.entries import Entry, seal_entry

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
INFLIGHT = timedelta(seconds=30)
WINDOW = timedelta(hours=1)
KEY_WINDOW = timedelta(hours=24)

TIER1 = TargetDeclaration(Tier.DEDUPES, False, INFLIGHT, key_window=KEY_WINDOW)
TIER1_LOOKUP = TargetDeclaration(Tier.DEDUPES, True, INFLIGHT, key_window=KEY_WINDOW)
TIER1_WEBHOOKS = TargetDeclaration(
    Tier.DEDUPES, False, INFLIGHT, key_window=KEY_WINDOW, evidence_window=WINDOW
)
TIER2 = TargetDeclaration(Tier.LOOKUP, True, INFLIGHT)
TIER3 = TargetDeclaration(Tier.NEITHER, False, INFLIGHT)
TIER3_WEBHOOKS = TargetDeclaration(Tier.NEITHER, False, INFLIGHT, evidence_window=WINDOW)
TIER3_ATTESTED = TargetDeclaration(Tier.NEITHER, False, INFLIGHT, attests_before_acting=True)

PREMISE = {"name": "refundable", "holds": True, "observed": {"status": "succeeded"}}
HOLDS = Recheck(None, [PREMISE])
STALE = Recheck({"reason": "stale_premise", "failed": ["refundable"]})
REVOKED = Recheck({"reason": "lease_revoked", "detail": "revoked by finance"})


def entries(*items: tuple[str, Mapping[str, Any], timedelta]) -> list[Entry]:
    """An effect's history: PROPOSED at T0, then (kind, body, time after T0) each."""
    made: list[Entry] = []
    for seq, (kind, body, after) in enumerate([("PROPOSED", {"p": 1}, timedelta(0)), *items]):
        made.append(
            seal_entry(
                seq=seq,
                kind=kind,
                effect_id="eff_1",
                body=canonical_json(dict(body)),
                created_at=T0 + after,
                prev_hash=made[-1].entry_hash if made else b"\0" * 32,
            )
        )
    return made


def dispatched(
    attempt: int = 1, at: timedelta = timedelta(0)
) -> tuple[str, dict[str, Any], timedelta]:
    return (
        "DISPATCHED",
        {"attempt": attempt, "lease_id": "l", "premises": [], "recovery": False},
        at,
    )


def committed(
    state: str = "COMMITTED", ref: str = "ref_a", attempt: int = 1
) -> tuple[str, dict[str, Any], timedelta]:
    body = {"state": state, "attempt": attempt, "result_ref": ref, "recheck": None}
    return ("COMMITTED", body, timedelta(seconds=1))


def observed(
    outcome: str, ref: str = "ref_a", at: int = 2
) -> tuple[str, dict[str, Any], timedelta]:
    body = {"source": "webhook", "outcome": outcome, "type": "t", "result_ref": ref}
    return ("OBSERVED", body, timedelta(seconds=at))


AMBIGUOUS = ("AMBIGUOUS", {"recheck": {"reason": "r"}}, timedelta(seconds=1))
REFUSED_AT_RECOVERY = (
    "REFUSED",
    {"reason": "stale_premise_at_recovery", "recheck": None},
    timedelta(seconds=40),
)
FAILED = ("FAILED", {"attempt": 1, "code": "card_declined"}, timedelta(seconds=1))


def resolved(happened: bool, at: int = 3) -> tuple[str, dict[str, Any], timedelta]:
    body = {"happened": happened, "reason": "checked the mailbox", "by": "fin"}
    return ("RESOLVED", body, timedelta(seconds=at))


@dataclass(frozen=True)
class Row:
    case: str
    declared: TargetDeclaration
    history: Sequence[tuple[str, Mapping[str, Any], timedelta]]
    after: timedelta  # now, after T0
    expected: str  # the step, as `describe` writes it
    answer: Answer | None = None
    recheck: Recheck | None = None
    here: bool = False
    recovering: bool = True


def describe(step: Step) -> str:
    if isinstance(step, Ask):
        return f"ask {step.source}"
    if isinstance(step, CheckAgain):
        return "re-check"
    if isinstance(step, Dispatch):
        return f"dispatch {step.attempt}" + (f" assuming {step.assumed}" if step.assumed else "")
    if isinstance(step, Wait):
        return f"wait until +{int((step.until - T0).total_seconds())} s"
    if isinstance(step, Settled):
        return f"settled {step.standing.state}"
    if isinstance(step, HeldOnEvidence):
        return f"held on evidence {step.evidence_seq}"
    body = step.body
    if step.kind == "COMMITTED":
        return str(body["state"])
    if step.kind == "FAILED":
        return f"FAILED:{body['code']}"
    if step.kind == "REFUSED":
        return f"REFUSED:{body['reason']}"
    return str(step.kind)


S = timedelta(seconds=1)
LATER = 40 * S  # past max in-flight
DAY_LATER = 25 * timedelta(hours=1)  # past the key window

RECOVERY = [
    # A decision made durable and never dispatched: dispatch it, checked anew.
    Row("never dispatched: re-check first", TIER3, [], S, "re-check"),
    Row("never dispatched, all holds", TIER3, [], S, "dispatch 1", recheck=HOLDS),
    Row(
        "never dispatched, stale at recovery",
        TIER3,
        [],
        S,
        "REFUSED:stale_premise_at_recovery",
        recheck=STALE,
    ),
    Row(
        "never dispatched, stale on submit",
        TIER3,
        [],
        S,
        "REFUSED:stale_premise",
        recheck=STALE,
        recovering=False,
    ),
    # Tier 1 inside the key window: re-check, then resend at once under the same key.
    Row("tier 1: re-check before any resend", TIER1, [dispatched()], S, "re-check"),
    Row(
        "tier 1: resend at once, even while another's attempt may be live",
        TIER1,
        [dispatched()],
        S,
        "dispatch 2",
        recheck=HOLDS,
    ),
    Row(
        "tier 1: re-check fails, nothing to ask, another's attempt live",
        TIER1,
        [dispatched()],
        S,
        "wait until +30 s",
        recheck=STALE,
    ),
    Row(
        "tier 1: re-check fails, nothing to ask",
        TIER1,
        [dispatched()],
        LATER,
        "AMBIGUOUS",
        recheck=STALE,
    ),
    Row(
        "tier 1 + lookup: re-check fails, ask",
        TIER1_LOOKUP,
        [dispatched()],
        LATER,
        "ask target",
        recheck=STALE,
    ),
    Row(
        "tier 1 + lookup: found",
        TIER1_LOOKUP,
        [dispatched()],
        LATER,
        "COMMITTED_ON_QUERY",
        answer=Found("re_1"),
        recheck=STALE,
    ),
    Row(
        "tier 1 + lookup: not found, last request may be in flight",
        TIER1_LOOKUP,
        [dispatched()],
        5 * S,
        "wait until +30 s",
        answer=NotFound(),
        recheck=STALE,
        here=True,
    ),
    Row(
        "tier 1 + lookup: not found after max in-flight",
        TIER1_LOOKUP,
        [dispatched()],
        LATER,
        "REFUSED:stale_premise_at_recovery",
        answer=NotFound(),
        recheck=STALE,
    ),
    Row(
        "tier 1 + lookup: lookup unknown",
        TIER1_LOOKUP,
        [dispatched()],
        LATER,
        "AMBIGUOUS",
        answer=Unknown("503"),
        recheck=STALE,
    ),
    # Past the key window: tier 2 if it can be looked up, else by evidence, else tier 3.
    Row(
        "past the key window, queryable: ask the target",
        TIER1_LOOKUP,
        [dispatched()],
        DAY_LATER,
        "ask target",
    ),
    Row(
        "past the key window, queryable: found",
        TIER1_LOOKUP,
        [dispatched()],
        DAY_LATER,
        "COMMITTED_ON_QUERY",
        answer=Found("re_1"),
    ),
    Row(
        "past the key window, queryable: not found, holds",
        TIER1_LOOKUP,
        [dispatched()],
        DAY_LATER,
        "dispatch 2 assuming {'lookup': 'not_found'}",
        answer=NotFound(),
        recheck=HOLDS,
    ),
    Row("past the key window, nothing to ask", TIER1, [dispatched()], DAY_LATER, "AMBIGUOUS"),
    Row(
        "past the key window, webhooks: silence",
        TIER1_WEBHOOKS,
        [dispatched()],
        DAY_LATER,
        "AMBIGUOUS",
        answer=NotFound(),
    ),
    # Tier 2: look up; found counts at once, not found only after max in-flight.
    Row("tier 2: ask", TIER2, [dispatched()], S, "ask target"),
    Row(
        "tier 2: found counts at once",
        TIER2,
        [dispatched()],
        S,
        "COMMITTED_ON_QUERY",
        answer=Found("re_1"),
    ),
    Row(
        "tier 2: not found while in flight",
        TIER2,
        [dispatched()],
        S,
        "wait until +30 s",
        answer=NotFound(),
    ),
    Row("tier 2: not found, re-check", TIER2, [dispatched()], LATER, "re-check", answer=NotFound()),
    Row(
        "tier 2: not found, holds",
        TIER2,
        [dispatched()],
        LATER,
        "dispatch 2 assuming {'lookup': 'not_found'}",
        answer=NotFound(),
        recheck=HOLDS,
    ),
    Row(
        "tier 2: not found, lease revoked",
        TIER2,
        [dispatched()],
        LATER,
        "REFUSED:lease_revoked_at_recovery",
        answer=NotFound(),
        recheck=REVOKED,
    ),
    Row("tier 2: unknown", TIER2, [dispatched()], LATER, "AMBIGUOUS", answer=Unknown("timeout")),
    Row(
        "tier 2: unknown until a time",
        TIER2,
        [dispatched()],
        LATER,
        "wait until +60 s",
        answer=Unknown("busy", T0 + 60 * S),
    ),
    # Tier 3 with nothing to ask: never resend. A live attempt is not a crashed one.
    Row("tier 3: another process's attempt is live", TIER3, [dispatched()], S, "wait until +30 s"),
    Row(
        "tier 3: this process's own attempt in doubt",
        TIER3,
        [dispatched()],
        S,
        "AMBIGUOUS",
        here=True,
    ),
    Row("tier 3: past max in-flight", TIER3, [dispatched()], LATER, "AMBIGUOUS"),
    Row(
        "tier 3: the second attempt's time counts",
        TIER3,
        [dispatched(), dispatched(2, 20 * S)],
        LATER,
        "wait until +50 s",
    ),
    # Tier 3 with webhook evidence: positive-only.
    Row("webhooks: ask the notary", TIER3_WEBHOOKS, [dispatched()], LATER, "ask notary"),
    Row(
        "webhooks: performed",
        TIER3_WEBHOOKS,
        [dispatched()],
        S,
        "COMMITTED_ON_EVIDENCE",
        answer=Found("em_1", 3),
    ),
    Row(
        "webhooks: bounced",
        TIER3_WEBHOOKS,
        [dispatched()],
        S,
        "FAILED:evidence:email.bounced",
        answer=Negative("evidence:email.bounced", 3),
    ),
    Row(
        "webhooks: nothing seen, window open",
        TIER3_WEBHOOKS,
        [dispatched()],
        LATER,
        "wait until +3600 s",
        answer=NotFound(),
    ),
    Row(
        "webhooks: nothing seen by the window's end is AMBIGUOUS, never a resend",
        TIER3_WEBHOOKS,
        [dispatched()],
        2 * WINDOW,
        "AMBIGUOUS",
        answer=NotFound(),
        recheck=HOLDS,
    ),
    Row(
        "webhooks: ... and never a refusal",
        TIER3_WEBHOOKS,
        [dispatched()],
        2 * WINDOW,
        "AMBIGUOUS",
        answer=NotFound(),
        recheck=STALE,
    ),
    # Tier 3 with write-ahead attestation: silence after max in-flight is conclusive.
    Row(
        "attested: nothing yet, in flight",
        TIER3_ATTESTED,
        [dispatched()],
        S,
        "wait until +30 s",
        answer=NotFound(),
    ),
    Row(
        "attested: nothing by max in-flight, re-check",
        TIER3_ATTESTED,
        [dispatched()],
        LATER,
        "re-check",
        answer=NotFound(),
    ),
    Row(
        "attested: nothing by max in-flight, holds",
        TIER3_ATTESTED,
        [dispatched()],
        LATER,
        "dispatch 2 assuming {'lookup': 'not_attested'}",
        answer=NotFound(),
        recheck=HOLDS,
    ),
    Row(
        "attested: nothing by max in-flight, stale",
        TIER3_ATTESTED,
        [dispatched()],
        LATER,
        "REFUSED:stale_premise_at_recovery",
        answer=NotFound(),
        recheck=STALE,
    ),
    Row(
        "attested: about to act, no outcome, in flight",
        TIER3_ATTESTED,
        [dispatched()],
        S,
        "wait until +30 s",
        answer=Intent(),
    ),
    Row(
        "attested: about to act, no outcome, past max in-flight",
        TIER3_ATTESTED,
        [dispatched()],
        LATER,
        "AMBIGUOUS",
        answer=Intent(),
    ),
    Row(
        "attested: performed",
        TIER3_ATTESTED,
        [dispatched()],
        S,
        "COMMITTED_ON_EVIDENCE",
        answer=Found("res_1", 3),
    ),
    # Settled effects: nothing to do; AMBIGUOUS waits for evidence, the agent or a person.
    Row("committed", TIER2, [dispatched(), committed()], LATER, "settled COMMITTED"),
    Row(
        "ambiguous is not recovered again",
        TIER3,
        [dispatched(), AMBIGUOUS],
        LATER,
        "settled AMBIGUOUS",
    ),
]


@pytest.mark.parametrize("row", RECOVERY, ids=[r.case for r in RECOVERY])
def test_recovery_decides_as_the_design_says(row: Row) -> None:
    facts = Facts(
        history=entries(*row.history),
        declared=row.declared,
        now=T0 + row.after,
        answer=row.answer,
        recheck=row.recheck,
        dispatched_here=row.here,
        recovering=row.recovering,
    )
    assert describe(decide(facts)) == row.expected


PRECEDENCE = [
    # (case, history, the state that stands, contradiction kinds)
    (
        "the first final verdict stands",
        [dispatched(), committed(), committed("COMMITTED_ON_QUERY", "ref_b")],
        "COMMITTED",
        ["duplicate_at_target"],
    ),
    (
        "the agent's late answer settles AMBIGUOUS",
        [dispatched(), AMBIGUOUS, committed()],
        "COMMITTED",
        [],
    ),
    (
        "a person settles AMBIGUOUS",
        [dispatched(), AMBIGUOUS, resolved(False)],
        "RESOLVED_NOT_HAPPENED",
        [],
    ),
    ("a second AMBIGUOUS adds nothing", [dispatched(), AMBIGUOUS, AMBIGUOUS], "AMBIGUOUS", []),
    (
        "performed after a refusal at recovery",
        [dispatched(), REFUSED_AT_RECOVERY, observed("performed", at=50)],
        "REFUSED:stale_premise_at_recovery",
        ["happened_after_not_happened"],
    ),
    (
        "performed after FAILED",
        [dispatched(), FAILED, observed("performed")],
        "FAILED:card_declined",
        ["happened_after_not_happened"],
    ),
    (
        "performed after a person said it did not happen",
        [dispatched(), AMBIGUOUS, resolved(False), observed("performed", at=4)],
        "RESOLVED_NOT_HAPPENED",
        ["happened_after_not_happened"],
    ),
    (
        "a person settles the contradiction",
        [
            dispatched(),
            AMBIGUOUS,
            resolved(False),
            observed("performed", at=4),
            resolved(True, at=5),
        ],
        "RESOLVED_HAPPENED",
        [],
    ),
    (
        "a second result reference: a duplicate at the target",
        [dispatched(), committed(), observed("performed", "ref_b")],
        "COMMITTED",
        ["duplicate_at_target"],
    ),
    (
        "the same result reference again is no contradiction",
        [dispatched(), committed(), observed("performed", "ref_a")],
        "COMMITTED",
        [],
    ),
    (
        "a bounce after the send contradicts nothing",
        [dispatched(), committed(), observed("not_performed")],
        "COMMITTED",
        [],
    ),
    ("performed, never dispatched", [observed("performed")], None, ["happened_never_dispatched"]),
]


@pytest.mark.parametrize(
    ("history", "state", "contradictions"),
    [row[1:] for row in PRECEDENCE],
    ids=[row[0] for row in PRECEDENCE],
)
def test_the_standing_verdict_and_its_contradictions(
    history: Sequence[tuple[str, Mapping[str, Any], timedelta]],
    state: str | None,
    contradictions: list[str],
) -> None:
    stands = standing(entries(*history))
    assert (str(stands.state) if stands.state else None) == state
    assert [c.kind for c in stands.contradictions] == contradictions


ADMISSION = [
    ("nothing stands: recorded", [dispatched()], committed(), "record"),
    ("the same answer again: the standing one", [dispatched(), committed()], committed(), "stands"),
    ("AMBIGUOUS gives way to the agent's answer", [dispatched(), AMBIGUOUS], committed(), "record"),
    ("AMBIGUOUS gives way to a person", [dispatched(), AMBIGUOUS], resolved(True), "record"),
    ("a second AMBIGUOUS", [dispatched(), AMBIGUOUS], AMBIGUOUS, "stands"),
    ("a second final verdict", [dispatched(), FAILED], REFUSED_AT_RECOVERY, "stands"),
    (
        "committed after a refusal: kept as evidence",
        [dispatched(), REFUSED_AT_RECOVERY],
        committed(),
        "record_as_evidence",
    ),
    (
        "another result reference: kept as evidence",
        [dispatched(), committed()],
        committed(ref="ref_b"),
        "record_as_evidence",
    ),
]


@pytest.mark.parametrize(
    ("history", "offered", "action"),
    [row[1:] for row in ADMISSION],
    ids=[row[0] for row in ADMISSION],
)
def test_both_journals_admit_a_verdict_by_one_precedence(
    history: Sequence[tuple[str, Mapping[str, Any], timedelta]],
    offered: tuple[str, Mapping[str, Any], timedelta],
    action: str,
) -> None:
    admission: Admission = admit(entries(*history), offered[0], offered[1])
    assert admission.action == action


AGENT_OUTCOMES = [
    ("its own commit", "COMMITTED", {"state": "COMMITTED", "attempt": 1, "result_ref": "r"}, None),
    (
        "its own lookup",
        "COMMITTED",
        {
            "state": "COMMITTED_ON_QUERY",
            "attempt": 1,
            "result_ref": "r",
            "recheck": {"lookup": "found"},
        },
        None,
    ),
    (
        "the notary's words",
        "COMMITTED",
        {
            "state": "COMMITTED_ON_QUERY",
            "attempt": 1,
            "result_ref": "r",
            "recheck": {"by": "notary", "lookup": "found"},
        },
        "only the notary",
    ),
    (
        "evidence it cannot cite",
        "COMMITTED",
        {"state": "COMMITTED_ON_EVIDENCE", "attempt": 1, "result_ref": "r", "recheck": {}},
        "cites recheck.evidence_seq",
    ),
    (
        "an attempt never made",
        "COMMITTED",
        {"state": "COMMITTED_BY_RETRY", "attempt": 3, "result_ref": "r"},
        "never made",
    ),
    (
        "a failure on evidence it does not hold",
        "FAILED",
        {"attempt": 1, "code": "evidence:email.bounced"},
        "cites evidence_seq",
    ),
    (
        "a plain refusal after a dispatch",
        "REFUSED",
        {"reason": "stale_premise"},
        "only at recovery",
    ),
    ("a refusal reason of its own", "REFUSED", {"reason": "felt_like_it_at_recovery"}, "one of"),
    ("a refusal at recovery", "REFUSED", {"reason": "lease_revoked_at_recovery"}, None),
    (
        "a changed payload",
        "REFUSED",
        {"reason": "payload_changed", "payload_hash": "ab" * 32},
        None,
    ),
    (
        "a changed payload it does not name",
        "REFUSED",
        {"reason": "payload_changed"},
        "payload_hash",
    ),
    ("a kind that is not an outcome", "RESOLVED", {"happened": True}, "kind"),
]


@pytest.mark.parametrize(
    ("kind", "body", "refused"),
    [row[1:] for row in AGENT_OUTCOMES],
    ids=[row[0] for row in AGENT_OUTCOMES],
)
def test_an_agent_writes_only_what_it_can_know(
    kind: str, body: Mapping[str, Any], refused: str | None
) -> None:
    reason = agent_outcome_refusal(entries(dispatched()), kind, body)
    if refused is None:
        assert reason is None
    else:
        assert reason is not None and refused in reason


def test_an_agent_may_cite_the_notarys_evidence() -> None:
    history = entries(dispatched(), observed("performed", "em_1"))
    body = {
        "state": "COMMITTED_ON_EVIDENCE",
        "attempt": 1,
        "result_ref": "em_1",
        "recheck": {"evidence": "found", "evidence_seq": 2},
    }
    assert agent_outcome_refusal(history, "COMMITTED", body) is None
    assert "result_ref" in str(
        agent_outcome_refusal(history, "COMMITTED", {**body, "result_ref": "x"})
    )


INTENTS = [
    ("within max in-flight of the dispatch", [dispatched()], 5 * S, None),
    ("never dispatched", [], S, "never dispatched"),
    (
        "past max in-flight: recovery may count it as never sent",
        [dispatched()],
        LATER,
        "max in-flight",
    ),
    (
        "a second request for the same effect",
        [dispatched(), ("OBSERVED", {"outcome": "intent"}, S)],
        5 * S,
        "attested already",
    ),
    ("a verdict stands", [dispatched(), AMBIGUOUS], 5 * S, "AMBIGUOUS"),
    ("the resend's own window", [dispatched(), dispatched(2, 60 * S)], 65 * S, None),
]


@pytest.mark.parametrize(
    ("history", "after", "refused"), [r[1:] for r in INTENTS], ids=[r[0] for r in INTENTS]
)
def test_a_write_ahead_attestation_is_acknowledged_only_while_recovery_waits_for_it(
    history: Sequence[tuple[str, Mapping[str, Any], timedelta]],
    after: timedelta,
    refused: str | None,
) -> None:
    reason = intent_refusal(entries(*history), TIER3_ATTESTED, T0 + after)
    assert (reason is None) if refused is None else (reason is not None and refused in reason)


EVIDENCE_SETTLES = [
    (
        "performed settles a dispatched effect",
        [dispatched(), observed("performed")],
        "COMMITTED_ON_EVIDENCE",
    ),
    (
        "negative evidence settles FAILED",
        [dispatched(), observed("not_performed")],
        "FAILED:evidence:t",
    ),
    (
        "late evidence settles AMBIGUOUS",
        [dispatched(), AMBIGUOUS, observed("performed")],
        "COMMITTED_ON_EVIDENCE",
    ),
    (
        "evidence never moves a final verdict",
        [dispatched(), REFUSED_AT_RECOVERY, observed("performed", at=50)],
        None,
    ),
    ("nor settles what was never dispatched", [observed("performed")], None),
    ("an intent settles nothing", [dispatched(), ("OBSERVED", {"outcome": "intent"}, S)], None),
]


@pytest.mark.parametrize(
    ("history", "settles"), [r[1:] for r in EVIDENCE_SETTLES], ids=[r[0] for r in EVIDENCE_SETTLES]
)
def test_what_evidence_settles(
    history: Sequence[tuple[str, Mapping[str, Any], timedelta]], settles: str | None
) -> None:
    verdict = settle_on_evidence(entries(*history))
    assert (describe(verdict) if isinstance(verdict, Record) else None) == settles


@pytest.mark.parametrize(
    "text",
    [
        "COMMITTED",
        "AMBIGUOUS",
        "FAILED:evidence:email.bounced",
        "REFUSED:stale_premise_at_recovery",
    ],
)
def test_final_states_read_back_as_written(text: str) -> None:
    assert str(FinalState.parse(text)) == text


def test_a_final_state_says_whether_it_happened() -> None:
    assert FinalState.parse("REFUSED:lease_revoked_at_recovery").at_recovery
    assert FinalState(State.COMMITTED_ON_EVIDENCE).happened is True
    assert FinalState(State.AMBIGUOUS).happened == "unknown"
    assert not FinalState(State.AMBIGUOUS).final
    assert FinalState(State.RESOLVED_NOT_HAPPENED).happened is False


@pytest.mark.parametrize(
    ("declared", "words"),
    [
        (
            TargetDeclaration(
                Tier.DEDUPES, True, timedelta(seconds=2), key_window=timedelta(hours=24)
            ),
            "tier 1: it dedupes on the effect's key for 24 h, so a lost answer is resent under "
            "it; past that it is looked up; a request may be in flight for 2 s; it moves no money",
        ),
        (
            TargetDeclaration(
                Tier.DEDUPES,
                True,
                timedelta(seconds=2),
                key_window=timedelta(hours=24),
                lookup_needs_key=True,
                money=MoneyDeclaration("amount", currency_field="currency"),
            ),
            "tier 1: it dedupes on the effect's key for 24 h, so a lost answer is resent under "
            "it; past that nothing can be asked and a lost answer is AMBIGUOUS; a request may be "
            "in flight for 2 s; its money is amount, in minor units of the currency in currency",
        ),
        (
            TargetDeclaration(Tier.LOOKUP, True, timedelta(milliseconds=500)),
            "tier 2: it can be looked up: found settles it, and not found 500 ms after the last "
            "dispatch is known unsent; a request may be in flight for 500 ms; it moves no money",
        ),
        (
            TargetDeclaration(
                Tier.NEITHER,
                False,
                timedelta(seconds=30),
                attests_before_acting=True,
                money=MoneyDeclaration("amount_cents", currency="EUR"),
            ),
            "tier 3 with write-ahead attestation: its service attests before acting, so no "
            "attestation 30 s after the last dispatch is known unsent; a request may be in "
            "flight for 30 s; its money is amount_cents, in minor units of EUR",
        ),
        (
            TargetDeclaration(Tier.NEITHER, False, timedelta(seconds=5)),
            "tier 3: nothing can be asked, so a lost answer is AMBIGUOUS for a person; a request "
            "may be in flight for 5 s; it moves no money",
        ),
    ],
)
def test_a_declaration_says_in_words_what_could_be_known(
    declared: TargetDeclaration, words: str
) -> None:
    assert declaration_in_words(declared) == words
    assert declaration_in_words(TargetDeclaration.from_body(declared.body())) == words
