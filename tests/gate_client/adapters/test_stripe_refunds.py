"""The Stripe refund target, driven by the official SDK against localstripe.

localstripe ignores Idempotency-Key, so here the target is declared tier 2 (lookup only), and
the ground truth is localstripe's own list of the payment's refunds."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import stripe
from stripe.params import RefundCreateParams

from gate_client.adapters.stripe_refunds import (
    METADATA_KEY,
    StripeRefunds,
    payment_can_refund,
    refund_premises,
)
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.targets import FailedDefinitively, Found, NotFound, Sent, Tier, Unknown
from testkit.agents import refund_agent
from testkit.peers.localstripe import paid_intent, refunds_of, running_localstripe, stripe_client
from testkit.processes import spawn_armed

AGENT = "testkit.agents.refund_agent"
PAYMENT_CENTS = 10_000
REFUND_CENTS = 2_000


@pytest.fixture(scope="module")
def localstripe_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_localstripe(tmp_path_factory.mktemp("localstripe")) as url:
        yield url


@pytest.fixture
def client(localstripe_url: str) -> stripe.StripeClient:
    return stripe_client(localstripe_url)


@pytest.fixture
def payment(client: stripe.StripeClient) -> str:
    return paid_intent(client, PAYMENT_CENTS)


def grant(journal: LocalJournal, case_id: str) -> None:
    expires = datetime.now(UTC) + timedelta(hours=1)
    lease = Lease(refund_agent.LEASE_ID, case_id, refund_agent.ACTION, expires, "support")
    journal.grant_lease(lease)


def test_localstripe_refunds_twice_under_one_key(client: stripe.StripeClient, payment: str) -> None:
    """Why the target is tier 2 here: this peer does not dedupe, so a key alone is no guard."""
    params: RefundCreateParams = {"payment_intent": payment, "amount": REFUND_CENTS}
    first = client.v1.refunds.create(params=params, options={"idempotency_key": "k"})
    second = client.v1.refunds.create(params=params, options={"idempotency_key": "k"})
    assert first.id != second.id
    assert len(refunds_of(client, payment)) == 2


def test_send_carries_the_effect_id_and_the_lookup_finds_it(
    client: stripe.StripeClient, payment: str
) -> None:
    target = StripeRefunds(client, tier=Tier.LOOKUP)
    payload = {"payment_intent": payment, "amount": REFUND_CENTS}  # localstripe takes no reason
    sent = target.send("eff_one", payload)
    assert isinstance(sent, Sent)
    [refund] = refunds_of(client, payment)
    assert (refund.id, refund.amount) == (sent.result_ref, REFUND_CENTS)
    assert refund.metadata is not None and refund.metadata.to_dict() == {METADATA_KEY: "eff_one"}
    assert target.lookup("eff_one", payload) == Found(sent.result_ref)
    assert target.lookup("eff_other", payload) == NotFound()
    elsewhere = {"payment_intent": "pi_missing", "amount": REFUND_CENTS}
    assert isinstance(target.lookup("eff_one", elsewhere), Unknown)


def test_a_refund_stripe_refuses_is_a_definitive_failure(client: stripe.StripeClient) -> None:
    target = StripeRefunds(client, tier=Tier.LOOKUP)
    outcome = target.send("eff_x", {"payment_intent": "pi_missing", "amount": REFUND_CENTS})
    assert outcome == FailedDefinitively("http_404")


def test_the_premise_counts_other_refunds_and_not_this_effects_own(
    client: stripe.StripeClient, payment: str
) -> None:
    premise = payment_can_refund(
        client, payment_intent=payment, amount=REFUND_CENTS, effect_id="eff_mine"
    )
    assert premise.evaluate()["holds"]
    target = StripeRefunds(client, tier=Tier.LOOKUP)
    target.send("eff_mine", {"payment_intent": payment, "amount": REFUND_CENTS})
    assert premise.evaluate()["holds"], "its own refund must not make a resend look unsafe"
    client.v1.refunds.create(params={"payment_intent": payment, "amount": 9_000})
    result = premise.evaluate()
    assert not result["holds"]
    assert result["observed"] == {"status": "succeeded", "amount": 10_000, "refunded": 9_000}


def test_the_gate_refunds_once_and_a_resubmit_sends_nothing(
    client: stripe.StripeClient, payment: str, tmp_path: Path
) -> None:
    journal = LocalJournal(tmp_path / "journal")
    grant(journal, "case-1")
    gate = refund_agent.build_gate(client, journal.path, Tier.LOOKUP)
    payload = {"payment_intent": payment, "amount": REFUND_CENTS}
    proposal = Proposal(
        "case-1", refund_agent.TARGET, refund_agent.ACTION, payload, refund_agent.LEASE_ID
    )
    premises = refund_premises(client)(proposal.proposed_body([]))
    proposal = dataclasses.replace(proposal, premises=premises)
    first = gate.submit(proposal)
    again = gate.submit(proposal)
    assert first.final_state == "COMMITTED" and again == first
    assert len(refunds_of(client, payment)) == 1


def crash_then_recover(
    localstripe_url: str,
    payment: str,
    journal: Path,
    case_id: str,
    crash: CrashPoint,
    *,
    during_outage: Callable[[], None] | None = None,
) -> tuple[int, dict[str, object]]:
    """An agent SIGKILLed at `crash`; what changed during the outage; a new process recovers.
    Returns the first process's exit code and the recovered receipt."""
    common = ["--stripe", localstripe_url, "--payment", payment, "--case", case_id]
    common += ["--amount", str(REFUND_CENTS), "--journal", str(journal)]
    worker = spawn_armed(AGENT, ["submit", *common], crash)
    if during_outage is not None:
        during_outage()
    restarted = spawn_armed(AGENT, ["recover", *common], None)
    assert restarted.returncode == 0, restarted.stderr
    [receipt] = [json.loads(line) for line in restarted.stdout.splitlines()]
    return worker.returncode, receipt


@pytest.mark.slow
@pytest.mark.parametrize(
    ("crash", "state"),
    [
        (CrashPoint.AFTER_DISPATCHED, "COMMITTED_BY_RETRY"),
        (CrashPoint.AFTER_TARGET_ACTED, "COMMITTED_ON_QUERY"),
        (CrashPoint.AFTER_RESPONSE, "COMMITTED_ON_QUERY"),
    ],
)
def test_a_killed_agent_is_recovered_with_exactly_one_refund(
    localstripe_url: str,
    client: stripe.StripeClient,
    payment: str,
    tmp_path: Path,
    crash: CrashPoint,
    state: str,
) -> None:
    journal = tmp_path / "journal"
    grant(LocalJournal(journal), "case-crash")
    exit_code, receipt = crash_then_recover(localstripe_url, payment, journal, "case-crash", crash)
    assert exit_code == -9
    assert receipt["final_state"] == state
    [refund] = refunds_of(client, payment)
    assert refund.metadata is not None
    assert refund.metadata.to_dict()[METADATA_KEY] == refund_agent.effect_id("case-crash")


@pytest.mark.slow
def test_a_plain_retry_with_a_key_refunds_twice_where_the_gate_refunds_once(
    localstripe_url: str, client: stripe.StripeClient, tmp_path: Path
) -> None:
    """The same crash, after Stripe acted, for both: the SDK's documented retry under the same
    Idempotency-Key, and the gate declared at the tier this peer really offers."""
    plain_payment = paid_intent(client, PAYMENT_CENTS)
    args = ["plain", "--stripe", localstripe_url, "--payment", plain_payment]
    args += ["--case", "case-plain", "--amount", str(REFUND_CENTS)]
    assert spawn_armed(AGENT, args, CrashPoint.AFTER_TARGET_ACTED).returncode == -9
    assert spawn_armed(AGENT, args, None).returncode == 0
    assert len(refunds_of(client, plain_payment)) == 2

    gated_payment = paid_intent(client, PAYMENT_CENTS)
    journal = tmp_path / "journal"
    grant(LocalJournal(journal), "case-gated")
    exit_code, receipt = crash_then_recover(
        localstripe_url, gated_payment, journal, "case-gated", CrashPoint.AFTER_TARGET_ACTED
    )
    assert (exit_code, receipt["final_state"]) == (-9, "COMMITTED_ON_QUERY")
    assert len(refunds_of(client, gated_payment)) == 1


@pytest.mark.slow
def test_support_refunding_by_hand_during_the_outage_stops_the_resend(
    localstripe_url: str, client: stripe.StripeClient, payment: str, tmp_path: Path
) -> None:
    journal = tmp_path / "journal"
    grant(LocalJournal(journal), "case-manual")

    def support_refunds_by_hand() -> None:
        client.v1.refunds.create(params={"payment_intent": payment, "amount": 9_000})

    exit_code, receipt = crash_then_recover(
        localstripe_url,
        payment,
        journal,
        "case-manual",
        CrashPoint.AFTER_DISPATCHED,
        during_outage=support_refunds_by_hand,
    )
    assert (exit_code, receipt["final_state"]) == (-9, "REFUSED:stale_premise_at_recovery")
    assert [r.amount for r in refunds_of(client, payment)] == [9_000]


@pytest.mark.slow
def test_a_refund_made_before_its_lease_was_revoked_is_found_not_refused(
    localstripe_url: str, client: stripe.StripeClient, payment: str, tmp_path: Path
) -> None:
    journal = LocalJournal(tmp_path / "journal")
    grant(journal, "case-revoked")

    def revoke() -> None:
        journal.revoke_lease(refund_agent.LEASE_ID, by="finance", reason="case reopened")

    exit_code, receipt = crash_then_recover(
        localstripe_url,
        payment,
        journal.path,
        "case-revoked",
        CrashPoint.AFTER_TARGET_ACTED,
        during_outage=revoke,
    )
    assert (exit_code, receipt["final_state"]) == (-9, "COMMITTED_ON_QUERY")
    assert receipt["authorized_when_fired"] is True
    assert len(refunds_of(client, payment)) == 1
