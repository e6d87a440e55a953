"""A receipt's derivation parses each entry's body once (Entry.read_once): on journals of every
shape drawn, it derives what reading a new value at every read derives, or refuses them alike."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gate_client.authorization import DispatchRequest
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.receipts import ReceiptError, derive_receipt
from ledger.core import entries
from ledger.core.canonical import canonical_json
from ledger.core.entries import Entry, EntryKind, seal_entry
from testkit.world import CENTS_DECLARATION

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
PREMISES = [{"name": "refundable", "holds": True, "observed": {"status": "paid"}}]
LEASE = "lease_1"
PROPOSAL = Proposal("case-1", "psp", "refund", {"amount_cents": 900}, LEASE, tenant="acme")
EFFECT = PROPOSAL.effect_id
PROPOSED = PROPOSAL.proposed_body(PREMISES, CENTS_DECLARATION)
CHANGED = Proposal("case-1", "psp", "refund", {"amount_cents": 901}, LEASE, tenant="acme")


def lease_body(expires_after: timedelta, limit: int) -> dict[str, Any]:
    lease = Lease(LEASE, "case-1", "refund", T0 + expires_after, "finance", {"amount_cents": limit})
    return lease.body()


def dispatched(attempt: int) -> dict[str, Any]:
    request = DispatchRequest.of_proposal(EFFECT, PROPOSED, attempt, PREMISES, attempt > 1)
    return request.entry_body()


# What an effect's entries may say, each drawn as (kind, effect id, body): every verdict the
# protocol knows, some that name attempts never dispatched, and the lease's own entries.
STEPS: list[tuple[str, str, dict[str, Any]]] = [
    (EntryKind.LEASE_GRANTED, "", lease_body(timedelta(hours=1), 1000)),
    (EntryKind.LEASE_GRANTED, "", lease_body(timedelta(seconds=-1), 1000)),
    (EntryKind.LEASE_GRANTED, "", lease_body(timedelta(hours=1), 500)),
    (EntryKind.LEASE_REVOKED, "", {"lease_id": LEASE, "by": "finance"}),
    (EntryKind.PROPOSED, EFFECT, PROPOSED),
    (EntryKind.DISPATCHED, EFFECT, dispatched(1)),
    (EntryKind.DISPATCHED, EFFECT, dispatched(2)),
    (
        EntryKind.COMMITTED,
        EFFECT,
        {"state": "COMMITTED", "attempt": 1, "result_ref": "re_1", "recheck": None},
    ),
    (
        EntryKind.COMMITTED,
        EFFECT,
        {
            "state": "COMMITTED_BY_RETRY",
            "attempt": 2,
            "result_ref": "re_2",
            "recheck": {"premises": PREMISES},
        },
    ),
    (EntryKind.FAILED, EFFECT, {"attempt": 1, "code": "card_declined"}),
    (EntryKind.AMBIGUOUS, EFFECT, {"recheck": {"reason": "lease_expired", "lookup": "unknown"}}),
    (EntryKind.OBSERVED, EFFECT, {"outcome": "performed", "result_ref": "re_1"}),
    (EntryKind.OBSERVED, EFFECT, {"outcome": "not_found"}),
    (EntryKind.RESOLVED, EFFECT, {"happened": True, "by": "finance", "attempt": 1}),
    (EntryKind.REFUSED, EFFECT, {"reason": "lease_expired", "detail": "expired"}),
    (
        EntryKind.REFUSED,
        EFFECT,
        {"reason": "payload_changed", "payload_hash": CHANGED.payload_hash},
    ),
    (EntryKind.HELD, EFFECT, {"held_by": "eff_other", "since_seq": 0}),
    (EntryKind.NOTED, EFFECT, {"note": "looked at it"}),
    (EntryKind.DISPATCHED, EFFECT, {"attempt": "one"}),
]

step = st.tuples(st.sampled_from(range(len(STEPS))), st.integers(min_value=0, max_value=120))
# A lease granted, the effect proposed, then anything (a journal without a PROPOSED entry is
# refused before any body is read).
journals = st.tuples(st.sampled_from([0, 1, 2]), st.lists(step, max_size=7)).map(
    lambda drawn: [(drawn[0], 0), (4, 1), *drawn[1]]
)


def sealed(steps: Sequence[tuple[int, int]]) -> list[Entry]:
    """The journal of these steps, each `seconds` after the one before."""
    made: list[Entry] = []
    at = T0
    for index, seconds in steps:
        kind, effect_id, body = STEPS[index]
        at += timedelta(seconds=seconds)
        made.append(
            seal_entry(
                seq=len(made),
                kind=kind,
                effect_id=effect_id,
                body=canonical_json(body),
                created_at=at,
                prev_hash=made[-1].entry_hash if made else bytes(32),
            )
        )
    return made


def derived(journal: list[Entry], payload_hash: str | None) -> dict[str, Any] | str:
    try:
        return derive_receipt(journal, EFFECT, payload_hash=payload_hash).to_dict()
    except ReceiptError as exc:
        return f"ReceiptError: {exc}"


@settings(max_examples=400, deadline=None)
@given(
    steps=journals,
    payload_hash=st.sampled_from([None, PROPOSAL.payload_hash, CHANGED.payload_hash]),
)
def test_parsing_each_body_once_derives_what_a_new_value_at_every_read_derives(
    steps: list[tuple[int, int]], payload_hash: str | None
) -> None:
    once = derived(sealed(steps), payload_hash)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Entry, "read_once", lambda entry: entry)  # every read parses anew
        anew = derived(sealed(steps), payload_hash)
    assert once == anew


def test_the_drawn_journals_reach_every_kind_of_answer() -> None:
    """The steps make receipts of each outcome, and refusals, so the comparison above covers
    them: a commit under a live lease, a failure, a payload change, and a refusal."""
    lease, proposed, first, committed, failed, changed = (
        (0, 0),
        (4, 1),
        (5, 1),
        (7, 1),
        (9, 1),
        (15, 1),
    )
    receipt = derived(sealed([lease, proposed, first, committed]), None)
    assert isinstance(receipt, dict)
    assert (receipt["final_state"], receipt["authorized_when_fired"]) == ("COMMITTED", True)
    failed_receipt = derived(sealed([lease, proposed, first, failed]), None)
    assert isinstance(failed_receipt, dict)
    assert failed_receipt["final_state"] == "FAILED:card_declined"
    changed_receipt = derived(sealed([lease, proposed, changed]), CHANGED.payload_hash)
    assert isinstance(changed_receipt, dict)
    assert changed_receipt["final_state"] == "REFUSED:payload_changed"
    assert derived(sealed([lease, first]), None) == f"ReceiptError: {EFFECT}: no PROPOSED entry"


def test_a_derivation_parses_each_body_once(monkeypatch: pytest.MonkeyPatch) -> None:
    journal = sealed([(0, 0), (4, 1), (5, 1), (6, 1), (8, 1)])
    parsed: list[bytes] = []

    def counted(parse: Callable[[bytes], Any]) -> Callable[[bytes], Any]:
        def parsing(data: bytes) -> Any:
            parsed.append(data)
            return parse(data)

        return parsing

    for name in ("parse_canonical", "parse_checked"):
        monkeypatch.setattr(entries, name, counted(getattr(entries, name)))
    receipt = derive_receipt(journal, EFFECT)
    assert receipt.final_state == "COMMITTED_BY_RETRY"
    assert sorted(parsed) == sorted(entry.body for entry in journal)


def test_a_copy_read_once_gives_one_value_and_the_entry_a_new_one_each_read() -> None:
    (entry,) = sealed([(4, 0)])
    copy = entry.read_once()
    assert (copy.seq, copy.body, copy.entry_hash) == (entry.seq, entry.body, entry.entry_hash)
    assert copy.body_value() is copy.body_value()
    assert copy.body_value() == entry.body_value() == PROPOSED
    assert entry.body_value() is not entry.body_value()


def test_a_copy_read_once_refuses_a_body_that_is_not_canonical_at_every_read() -> None:
    (entry,) = sealed([(4, 0)])
    copy = replace(entry, body=b'{"a": 1}').read_once()
    for _ in range(2):
        with pytest.raises(ValueError, match="not in canonical form"):
            copy.body_value()
