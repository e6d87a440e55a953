"""Holds on ambiguity in the local journal, with the reference service acting every time it is
asked (no dedupe): while an effect of a case waits for a person, a new effect of the case is
HELD, naming the holder, and the service is never called for it; once a person resolves the
holder, submitting the same proposal again sends it, once. A hold is never a verdict."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from gate_client.authorization import DispatchRequest
from gate_client.gate import Gate
from gate_client.holds import Hold, HoldScope, hold_for, recorded
from gate_client.http_target import HttpTarget
from gate_client.journal import EffectHeld, LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.receipts import Receipt, verify_receipt
from gate_client.targets import Tier
from ledger.core.entries import EntryKind
from testkit.peers.reference_service import RunningServer, running_server
from testkit.world import NoOpTarget

TENANT = "shop"


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(tmp_path / "acts.jsonl", dedupe=False, lookup=False) as running:
        yield running


def journal_at(tmp_path: Path, scope: HoldScope = HoldScope.CASE_TARGET) -> LocalJournal:
    journal = LocalJournal(tmp_path / "journal.jsonl", hold_scope=scope)
    far = datetime.now(UTC) + timedelta(hours=1)
    for case in ("case_1", "case_2"):
        for action in ("refund", "credit"):
            lease = Lease(f"lease_{case}_{action}", case, action, far, "alice")
            journal.grant_lease(lease)
    return journal


def svc(service: RunningServer, name: str = "svc") -> HttpTarget:
    """Tier 3: no key, no lookup, so an answer lost on the wire leaves the effect AMBIGUOUS."""
    return HttpTarget(name, service.url, Tier.NEITHER, False, None, timedelta(seconds=5))


def proposal(
    target: str, action: str, *, case: str = "case_1", tenant: str = TENANT, cents: int = 500
) -> Proposal:
    payload = {"amount_cents": cents, "currency": "USD"}
    return Proposal(case, target, action, payload, f"lease_{case}_{action}", tenant=tenant)


def ambiguous(gate: Gate, service: RunningServer, offered: Proposal) -> Receipt:
    """The service acts on `offered` and hangs up before answering: AMBIGUOUS (tier 3)."""
    service.drop_next_response(offered.effect_id)
    receipt = gate.submit(offered)
    assert receipt.final_state == "AMBIGUOUS"
    return receipt


def kinds(journal: LocalJournal, effect_id: str) -> list[str]:
    return [e.kind for e in journal.history(effect_id)]


def test_an_ambiguous_effect_holds_its_cases_new_effect_until_a_person_resolves_it(
    tmp_path: Path, service: RunningServer
) -> None:
    journal = journal_at(tmp_path)
    gate = Gate(journal, {"svc": svc(service)})
    holder = ambiguous(gate, service, proposal("svc", "refund"))
    held = proposal("svc", "credit")

    first = gate.submit(held)
    again = gate.submit(held)  # an agent submitting in a loop

    assert first == again
    assert first.final_state == "HELD"
    assert first.held_by == holder.effect_id
    assert first.to_dict()["held_by"] == holder.effect_id
    assert first.happened is False and first.authorized_when_fired is None
    assert service.acts(held.effect_id) == []  # never called
    assert kinds(journal, held.effect_id) == ["PROPOSED", "HELD"]  # the hold written once
    [hold] = [e for e in journal.history(held.effect_id) if e.kind == EntryKind.HELD]
    assert hold.body_value() == {
        "held_by": holder.effect_id,
        "since_seq": holder.entry_seqs[-1],
        "scope": "case_target",
        "holder": "AMBIGUOUS",
    }
    assert held.effect_id in journal.unsettled()  # no verdict: the proposal stands

    body = {"happened": True, "reason": "the refund is in the dashboard", "by": "fiona"}
    journal.record(kind=EntryKind.RESOLVED, effect_id=holder.effect_id, body=body)
    released = gate.submit(held)

    assert released.final_state == "COMMITTED"
    assert released.held_by is None and "held_by" not in released.to_dict()
    assert len(service.acts(held.effect_id)) == 1
    assert kinds(journal, held.effect_id) == ["PROPOSED", "HELD", "DISPATCHED", "COMMITTED"]
    verify_receipt(released, journal.entries(), origin=journal.origin)
    verify_receipt(first, journal.entries()[: first.entry_seqs[-1] + 1], origin=journal.origin)
    assert len(service.acts(holder.effect_id)) == 1


def test_a_contradicted_effect_holds_and_a_new_wait_is_a_new_hold(
    tmp_path: Path, service: RunningServer
) -> None:
    """The target declined, then the agent learned it was done after all: contradicted, and
    waiting for a person, so it holds."""
    journal = journal_at(tmp_path)
    gate = Gate(journal, {"svc": svc(service)})
    failed = proposal("svc", "refund")
    journal.propose(effect_id=failed.effect_id, body=failed.proposed_body([]))
    journal.dispatch(DispatchRequest.of_proposal(failed.effect_id, _body(failed), 1, [], False))
    journal.record(kind=EntryKind.FAILED, effect_id=failed.effect_id, body=_failed())
    late = {"state": "COMMITTED", "attempt": 1, "result_ref": "re_1", "recheck": None}
    journal.record(kind=EntryKind.COMMITTED, effect_id=failed.effect_id, body=late)

    receipt = gate.submit(proposal("svc", "credit"))

    assert receipt.final_state == "HELD"
    assert receipt.held_by == failed.effect_id
    [hold] = [e for e in journal.history(receipt.effect_id) if e.kind == EntryKind.HELD]
    assert hold.body_value()["holder"] == "contradicted"
    assert service.acts(receipt.effect_id) == []


def _body(offered: Proposal) -> dict[str, object]:
    return offered.proposed_body([])


def _failed() -> dict[str, object]:
    return {"attempt": 1, "code": "card_declined"}


@pytest.mark.parametrize(
    ("scope", "other_target_held", "same_target_held"),
    [
        (HoldScope.CASE_TARGET, False, True),
        (HoldScope.CASE, True, True),
        (HoldScope.OFF, False, False),
    ],
)
def test_the_scope_says_which_of_the_cases_new_effects_are_held(
    tmp_path: Path,
    service: RunningServer,
    scope: HoldScope,
    other_target_held: bool,
    same_target_held: bool,
) -> None:
    journal = journal_at(tmp_path, scope)
    gate = Gate(journal, {"svc": svc(service), "mail": svc(service, "mail")})
    holder = ambiguous(gate, service, proposal("svc", "refund"))

    elsewhere = gate.submit(proposal("mail", "refund"))  # same case, another target
    same = gate.submit(proposal("svc", "credit"))  # same case and target
    other_case = gate.submit(proposal("svc", "credit", case="case_2"))

    def state(held: bool) -> str:
        return "HELD" if held else "COMMITTED"

    assert elsewhere.final_state == state(other_target_held)
    assert same.final_state == state(same_target_held)
    assert other_case.final_state == "COMMITTED"  # another case is never held
    for receipt in (elsewhere, same):
        assert receipt.held_by == (holder.effect_id if receipt.final_state == "HELD" else None)
        sent = len(service.acts(receipt.effect_id))
        assert sent == (0 if receipt.final_state == "HELD" else 1)


def test_a_resend_in_recovery_is_never_held(tmp_path: Path, service: RunningServer) -> None:
    """Dispatched before the case's other effect became AMBIGUOUS, then the agent crashed:
    recovery's resend (attempt 2, under the key) finishes what was started."""
    journal = journal_at(tmp_path, HoldScope.CASE)
    noop = NoOpTarget()
    gate = Gate(journal, {"svc": svc(service), "noop": noop})
    started = proposal("noop", "credit")
    journal.propose(effect_id=started.effect_id, body=_body(started))
    journal.dispatch(DispatchRequest.of_proposal(started.effect_id, _body(started), 1, [], False))
    ambiguous(gate, service, proposal("svc", "refund"))

    [recovered] = [r for r in gate.recover() if r.effect_id == started.effect_id]

    assert recovered.final_state == "COMMITTED_BY_RETRY"
    assert noop.sent == [started.effect_id]
    assert EntryKind.HELD not in kinds(journal, started.effect_id)


def test_a_new_effect_proposed_before_the_crash_is_held_at_recovery(
    tmp_path: Path, service: RunningServer
) -> None:
    """Proposed, never dispatched: recovery's first dispatch is a new effect's, so it is held."""
    journal = journal_at(tmp_path)
    gate = Gate(journal, {"svc": svc(service)})
    holder = ambiguous(gate, service, proposal("svc", "refund"))
    proposed = proposal("svc", "credit")
    journal.propose(effect_id=proposed.effect_id, body=_body(proposed))

    [recovered] = [r for r in gate.recover() if r.effect_id == proposed.effect_id]

    assert (recovered.final_state, recovered.held_by) == ("HELD", holder.effect_id)
    assert service.acts(proposed.effect_id) == []


def test_another_tenants_ambiguity_never_holds(tmp_path: Path, service: RunningServer) -> None:
    journal = journal_at(tmp_path)
    gate = Gate(journal, {"svc": svc(service)})
    ambiguous(gate, service, proposal("svc", "refund", tenant="globex"))

    receipt = gate.submit(proposal("svc", "credit"))

    assert receipt.final_state == "COMMITTED"
    assert len(service.acts(receipt.effect_id)) == 1


def test_the_journal_refuses_a_held_dispatch_with_the_holder_named(
    tmp_path: Path, service: RunningServer
) -> None:
    journal = journal_at(tmp_path)
    gate = Gate(journal, {"svc": svc(service)})
    holder = ambiguous(gate, service, proposal("svc", "refund"))
    held = proposal("svc", "credit")
    journal.propose(effect_id=held.effect_id, body=_body(held))
    request = DispatchRequest.of_proposal(held.effect_id, _body(held), 1, [], False)

    for _ in range(3):
        with pytest.raises(EffectHeld) as refused:
            journal.dispatch(request)
        assert refused.value.held_by == holder.effect_id
        assert "waits for a person" in refused.value.detail
    assert kinds(journal, held.effect_id) == ["PROPOSED", "HELD"]


def test_the_rule_holds_only_a_first_attempt_by_a_waiting_effect_of_the_same_case(
    tmp_path: Path, service: RunningServer
) -> None:
    journal = journal_at(tmp_path)
    gate = Gate(journal, {"svc": svc(service)})
    holder = ambiguous(gate, service, proposal("svc", "refund"))
    new = proposal("svc", "credit")
    candidates = [journal.history(holder.effect_id)]

    def hold(attempt: int, scope: HoldScope = HoldScope.CASE_TARGET) -> Hold | None:
        return hold_for(
            scope, effect_id=new.effect_id, proposed=_body(new), attempt=attempt,
            history=[], candidates=candidates,
        )  # fmt: skip

    first = hold(1)
    assert first is not None and first.held_by == holder.effect_id
    assert hold(2) is None
    assert hold(1, HoldScope.OFF) is None
    assert not recorded([], first)
