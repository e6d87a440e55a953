"""The gate's rules and recovery by tier, in process, over a real LocalJournal file.

A "crash" here is an exception that unwinds the whole gate call; recovery then runs in a fresh
Gate over a freshly opened journal, as a restarted process would. The SIGKILL matrix with a real
target process checks the same rules across real process deaths."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gate_client.authorization import DispatchRequest
from gate_client.gate import Gate
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Premise, PremiseResult, Proposal
from gate_client.receipts import Receipt, ReceiptError, verify_receipt
from gate_client.targets import InDoubt, Tier
from ledger.core.entries import Entry, EntryKind
from testkit.seed_tables import SEED_EMAIL_TABLE
from testkit.world import ServiceTarget, SimulatedCrash

ORIGIN = "gate.local/journal"
START = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


class World:
    """The journal file, the target and the facts premises look at, across "restarts"."""

    def __init__(self, tmp_path: Path, target: ServiceTarget) -> None:
        self.path = tmp_path / f"{target.name}.journal"
        self.target = target
        self.now = START
        self.refund_status = "succeeded"  # what the payment service says about the refund
        self.journal = LocalJournal(self.path, clock=self.clock)
        self.journal.grant_lease(
            Lease("lease_1", "case_1", "email", START + timedelta(hours=48), "support")
        )

    def clock(self) -> datetime:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)

    def premises(self, proposed: Mapping[str, Any] | None = None) -> Sequence[Premise]:
        return [
            Premise(
                "refund_succeeded_or_pending",
                lambda: PremiseResult(
                    self.refund_status in {"succeeded", "pending"}, {"status": self.refund_status}
                ),
            )
        ]

    def gate(self) -> Gate:
        """A gate as a freshly started process has it: journal reopened from the file."""
        self.journal = LocalJournal(self.path, clock=self.clock)
        return Gate(
            self.journal,
            {self.target.name: self.target},
            premises_for=self.premises,
            clock=self.clock,
            sleep=self.sleep,
        )

    def proposal(self, text: str = "Your refund is on the way") -> Proposal:
        return Proposal(
            case_id="case_1",
            target=self.target.name,
            action="email",
            payload={"to": "customer@example.com", "text": text},
            lease_id="lease_1",
            premises=self.premises(),
        )

    def verify(self, receipt: Receipt) -> None:
        verify_receipt(receipt, LocalJournal(self.path).entries(), origin=ORIGIN)


@pytest.fixture
def make_world(tmp_path: Path) -> Callable[..., World]:
    def make(**target: Any) -> World:
        return World(tmp_path, ServiceTarget(**target))

    return make


def test_a_submitted_effect_commits_once_with_all_four_facts(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    receipt = world.gate().submit(world.proposal())
    assert receipt.final_state == "COMMITTED"
    assert (receipt.authorized_when_fired, receipt.assumptions_held) == (True, True)
    assert (receipt.happened, receipt.recorded) == (True, True)
    assert receipt.recheck_at_recovery is None
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)

    again = world.gate().submit(world.proposal())
    assert again == receipt  # already committed: the same receipt, nothing sent
    assert world.target.times_acted(receipt.effect_id) == 1
    assert world.gate().receipt(receipt.effect_id) == receipt  # read, from the entries alone
    with pytest.raises(ReceiptError):
        world.gate().receipt("eff_never_proposed")


def test_a_re_decided_payload_is_refused_and_the_first_stands(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    first = world.gate().submit(world.proposal())
    changed = world.gate().submit(world.proposal("Your refund of $30 is on the way"))
    assert changed.effect_id == first.effect_id
    assert changed.final_state == "REFUSED:payload_changed"
    assert changed.happened is False
    assert changed.authorized_when_fired is None
    assert changed.proposed["payload_hash"] != first.proposed["payload_hash"]
    assert world.target.acted == [(first.effect_id, dict(world.proposal().payload))]
    world.verify(changed)
    world.verify(first)  # the effect's own receipt is untouched


def test_a_broken_premise_or_a_dead_lease_refuses_before_anything_is_sent(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    world.refund_status = "failed"
    refused = world.gate().submit(world.proposal())
    assert refused.final_state == "REFUSED:stale_premise"
    assert (refused.happened, refused.authorized_when_fired) == (False, None)
    world.verify(refused)

    other = make_world(name="other")
    other.journal.revoke_lease("lease_1", by="finance", reason="disputed")
    revoked = other.gate().submit(other.proposal())
    assert revoked.final_state == "REFUSED:lease_revoked"
    assert other.target.acted == [] and world.target.acted == []


def test_a_definitive_failure_is_recorded_as_such(make_world: Callable[..., World]) -> None:
    world = make_world(refuse_with="invalid_recipient")
    receipt = world.gate().submit(world.proposal())
    assert receipt.final_state == "FAILED:invalid_recipient"
    assert receipt.happened is False
    world.verify(receipt)


def test_a_lost_response_at_tier_1_is_resent_under_the_key_and_acts_once(
    make_world: Callable[..., World],
) -> None:
    world = make_world(drop_response=True)
    receipt = world.gate().submit(world.proposal())
    assert receipt.final_state == "COMMITTED_BY_RETRY"
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)


def test_a_target_that_never_answers_leaves_the_effect_in_flight_not_in_a_loop(
    make_world: Callable[..., World],
) -> None:
    world = make_world()

    class Silent(ServiceTarget):
        def send(self, effect_id: str, payload: Mapping[str, Any]) -> Any:
            self.acted.append((effect_id, dict(payload)))
            raise InDoubt("timeout")

    world.target = Silent(name=world.target.name)
    receipt = world.gate().submit(world.proposal())
    # One send, one resend under the key after the in-doubt answer, then it waits for recover().
    assert receipt.final_state == "DISPATCHED"
    assert (receipt.happened, receipt.recorded) == ("unknown", False)
    assert len(world.target.acted) == 2
    world.verify(receipt)


# The seed's three gated email systems as target settings; faults and outcomes in SEED_EMAIL_TABLE.
SYSTEMS = {
    "interlock": {"tier": Tier.DEDUPES, "queryable": True},
    "interlock_noprobe": {"tier": Tier.DEDUPES, "queryable": False},
    "interlock_tier3": {"tier": Tier.NEITHER, "queryable": False, "dedupes": False},
}


@pytest.mark.parametrize(("system", "fault"), list(SEED_EMAIL_TABLE), ids="-".join)
def test_the_seed_email_table_comes_out_as_published(
    make_world: Callable[..., World], system: str, fault: str
) -> None:
    world = make_world(**SYSTEMS[system])
    if fault == "refused_before_send":
        world.target.crash_before_acting = True
    else:
        world.target.crash_after_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    if fault != "crash_after_send":
        world.refund_status = "failed"  # the refund failed during the outage
    world.sleep(35)
    (receipt,) = world.gate().recover()
    state, emails = SEED_EMAIL_TABLE[(system, fault)]
    assert receipt.final_state == state
    assert world.target.times_acted(receipt.effect_id) == emails
    truth = emails == 1
    assert receipt.happened in (truth, "unknown")
    assert receipt.recorded is (receipt.happened != "unknown")
    world.verify(receipt)


def test_tier_2_waits_out_the_in_flight_window_then_resends_what_never_arrived(
    make_world: Callable[..., World],
) -> None:
    world = make_world(tier=Tier.LOOKUP, dedupes=False, max_inflight=timedelta(seconds=5))
    world.target.crash_before_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    crashed_at = world.now
    (receipt,) = world.gate().recover()
    assert receipt.final_state == "COMMITTED_BY_RETRY"
    assert world.now - crashed_at >= timedelta(seconds=5)  # not found counted only after 5 s
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)


def test_tier_2_finds_what_arrived_and_does_not_resend(make_world: Callable[..., World]) -> None:
    world = make_world(tier=Tier.LOOKUP, dedupes=False)
    world.target.crash_after_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    crashed_at = world.now
    (receipt,) = world.gate().recover()
    assert receipt.final_state == "COMMITTED_ON_QUERY"
    assert world.now == crashed_at  # a found counts at once
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)


@pytest.mark.parametrize("acted", [True, False], ids=["had-acted", "had-not"])
def test_a_lease_revoked_during_the_outage_blocks_the_resend(
    make_world: Callable[..., World], acted: bool
) -> None:
    world = make_world()
    if acted:
        world.target.crash_after_acting = True
    else:
        world.target.crash_before_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    world.journal.revoke_lease("lease_1", by="finance", reason="customer disputed")
    world.sleep(10)
    (receipt,) = world.gate().recover()
    if acted:
        assert receipt.final_state == "COMMITTED_ON_QUERY"
        # It fired while the lease was live; the revocation came later in the journal.
        assert receipt.authorized_when_fired is True
    else:
        assert receipt.final_state == "REFUSED:lease_revoked_at_recovery"
        assert receipt.authorized_when_fired is None
    assert receipt.recheck_at_recovery is not None
    assert receipt.recheck_at_recovery["reason"] == "lease_revoked"
    assert world.target.times_acted(receipt.effect_id) == int(acted)
    world.verify(receipt)


def test_past_its_key_window_a_queryable_target_is_settled_by_its_lookup(
    make_world: Callable[..., World],
) -> None:
    """Rule e: once the key is forgotten a resend could act twice, but a target that can be
    looked up is tier 2: found is committed, nothing sent again."""
    world = make_world(key_window=timedelta(hours=24), dedupes=False)
    world.target.crash_after_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    world.sleep(25 * 3600)
    (receipt,) = world.gate().recover()
    assert receipt.final_state == "COMMITTED_ON_QUERY"
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)


def test_past_its_key_window_not_found_is_resent_once_after_a_re_check(
    make_world: Callable[..., World],
) -> None:
    world = make_world(key_window=timedelta(hours=24), dedupes=False)
    world.target.crash_before_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    world.sleep(25 * 3600)
    (receipt,) = world.gate().recover()
    assert receipt.final_state == "COMMITTED_BY_RETRY"
    assert receipt.recheck_at_recovery is not None
    assert receipt.recheck_at_recovery["lookup"] == "not_found"
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)


def test_past_its_key_window_a_target_with_nothing_to_ask_is_ambiguous(
    make_world: Callable[..., World],
) -> None:
    world = make_world(key_window=timedelta(hours=24), queryable=False, dedupes=False)
    world.target.crash_after_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    world.sleep(25 * 3600)
    (receipt,) = world.gate().recover()
    assert (receipt.final_state, receipt.happened) == ("AMBIGUOUS", "unknown")
    assert world.target.times_acted(receipt.effect_id) == 1


def test_a_live_attempt_is_waited_for_and_its_answer_stands(
    make_world: Callable[..., World],
) -> None:
    """Rule c: a process meeting a tier-3 effect another process dispatched a moment ago waits
    out max in-flight for that process's answer instead of calling it AMBIGUOUS."""
    world = make_world(tier=Tier.NEITHER, queryable=False, key_window=None, dedupes=False)
    world.target.crash_after_acting = True
    with pytest.raises(SimulatedCrash):
        world.gate().submit(world.proposal())
    effect_id = world.proposal().effect_id
    answered: list[Entry] = []

    def the_sender_answers(seconds: float) -> None:
        world.sleep(seconds)
        if not answered:  # the first process was slow, not dead: its answer arrives now
            answered.append(
                world.journal.record(
                    kind=EntryKind.COMMITTED,
                    effect_id=effect_id,
                    body={
                        "state": "COMMITTED",
                        "attempt": 1,
                        "result_ref": "ref-1",
                        "recheck": None,
                    },
                )
            )

    gate = world.gate()
    gate.sleep = the_sender_answers
    receipt = gate.submit(world.proposal())
    assert receipt.final_state == "COMMITTED"
    assert world.target.times_acted(effect_id) == 1


@pytest.mark.parametrize("tier", [Tier.DEDUPES, Tier.LOOKUP])
def test_a_dispatch_acknowledged_after_its_in_flight_time_is_never_sent(
    make_world: Callable[..., World], tier: Tier
) -> None:
    """Rule c's other side: a live attempt is not a crashed one, so a crashed-looking one must
    not come alive. The DISPATCHED of attempt 1 is acknowledged 6 s late (max in-flight 5 s);
    meanwhile another process recovers the effect: not found at the target, the premise now
    false, REFUSED at recovery. The slow process must not send then: a request started after
    that verdict would act against it (the service refunds what the receipt says it did not)."""
    key_window = timedelta(hours=24) if tier is Tier.DEDUPES else None
    world = make_world(tier=tier, key_window=key_window, dedupes=tier is Tier.DEDUPES)
    slow = world.gate()
    acknowledge = slow.journal.dispatch
    verdicts: list[Receipt] = []

    def acknowledged_late(request: DispatchRequest) -> Entry:
        recorded = acknowledge(request)
        world.now += timedelta(seconds=6)  # the answer takes 6 s to come back
        world.refund_status = "failed"
        if not verdicts:
            verdicts.extend(world.gate().recover())  # another process, meanwhile
        return recorded

    slow.journal.dispatch = acknowledged_late  # type: ignore[method-assign]
    receipt = slow.submit(world.proposal())
    assert [v.final_state for v in verdicts] == ["REFUSED:stale_premise_at_recovery"]
    assert receipt.final_state == "REFUSED:stale_premise_at_recovery"
    assert receipt.happened is False and not receipt.contradicted
    assert world.target.times_acted(receipt.effect_id) == 0
    world.verify(receipt)


def test_a_late_acknowledgement_alone_resends_as_a_new_attempt(
    make_world: Callable[..., World],
) -> None:
    """The same late answer with nobody else recovering: the request that was not started is
    not found, so the gate re-checks and dispatches attempt 2, which it sends at once."""
    world = make_world(tier=Tier.LOOKUP, key_window=None, dedupes=False)
    slow = world.gate()
    acknowledge = slow.journal.dispatch
    late = [True]

    def acknowledged_late(request: DispatchRequest) -> Entry:
        recorded = acknowledge(request)
        if late.pop() if late else False:
            world.now += timedelta(seconds=6)
        return recorded

    slow.journal.dispatch = acknowledged_late  # type: ignore[method-assign]
    receipt = slow.submit(world.proposal())
    assert receipt.final_state == "COMMITTED_BY_RETRY"
    assert world.target.acted == [(receipt.effect_id, dict(world.proposal().payload))]
    world.verify(receipt)


def test_a_decision_durable_before_the_crash_is_dispatched_at_recovery(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    calls = []

    def dies_on_the_dispatch_check() -> PremiseResult:
        calls.append(1)
        if len(calls) == 2:  # the first check is recorded in PROPOSED; the process dies next
            raise SimulatedCrash("after PROPOSED")
        return PremiseResult(True, {"calls": len(calls)})

    proposal = world.proposal()
    dying = Proposal(
        **{**proposal.__dict__, "premises": [Premise("p", dies_on_the_dispatch_check)]}
    )
    with pytest.raises(SimulatedCrash):
        world.gate().submit(dying)
    assert [e.kind for e in LocalJournal(world.path).history(proposal.effect_id)] == ["PROPOSED"]
    (receipt,) = world.gate().recover()
    assert receipt.final_state == "COMMITTED"
    assert world.target.times_acted(receipt.effect_id) == 1
    world.verify(receipt)


def test_verify_receipt_catches_a_changed_field_and_a_changed_journal(
    make_world: Callable[..., World],
) -> None:
    world = make_world()
    receipt = world.gate().submit(world.proposal())
    entries = LocalJournal(world.path).entries()
    verify_receipt(receipt, entries, origin=ORIGIN)
    for field, value in [
        ("final_state", "COMMITTED_BY_RETRY"),
        ("happened", "unknown"),
        ("authorized_when_fired", False),
        ("assumptions_held", None),
        ("recorded", False),
    ]:
        forged = Receipt(**{**receipt.to_dict(), field: value})
        with pytest.raises(ReceiptError, match=field):
            verify_receipt(forged, entries, origin=ORIGIN)
    with pytest.raises(ReceiptError, match="missing"):
        verify_receipt(receipt, entries[:1] + entries[2:], origin=ORIGIN)
    with pytest.raises(ReceiptError, match="does not link"):
        verify_receipt(receipt, entries, origin="another.origin/journal")
