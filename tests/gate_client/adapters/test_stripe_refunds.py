"""The Stripe refund target, driven by the official SDK against localstripe.

localstripe ignores Idempotency-Key, so here the target is declared tier 2 (lookup only), and
the ground truth is localstripe's own list of the payment's refunds."""

from __future__ import annotations

import dataclasses
import json
import socket
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import stripe
from stripe.params import RefundCreateParams

from gate_client.adapters.declarations import INFLIGHT_MARGIN
from gate_client.adapters.stripe_refunds import (
    METADATA_KEY,
    STRIPE_KEY_WINDOW,
    StripeRefunds,
    client_request_bound,
    payment_can_refund,
    refund_premises,
)
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.protocol import Mode, TargetDeclaration, asking_mode
from gate_client.targets import FailedDefinitively, Found, InDoubt, NotFound, Sent, Tier, Unknown
from testkit.agents import refund_agent
from testkit.peers.localstripe import paid_intent, refunds_of, running_localstripe, stripe_client
from testkit.processes import spawn_armed

AGENT = "testkit.agents.refund_agent"
SilentPeer = tuple[str, list[socket.socket]]  # conftest's silent_peer: its URL, its connections
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
    gate = refund_agent.build_gate(client, journal, Tier.LOOKUP)
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


# --- the declaration follows from the client and the tier ---------------------------------------


def client_for(url: str, timeout: float | tuple[float, float], retries: int) -> stripe.StripeClient:
    return stripe.StripeClient(
        "sk_test_interlock",
        base_addresses={"api": url},
        max_network_retries=retries,
        http_client=stripe.RequestsClient(timeout=timeout),
    )


def test_max_inflight_follows_the_clients_timeout_and_retries(localstripe_url: str) -> None:
    """Every attempt may take its connect and its read timeout, and the SDK sleeps between
    attempts (0.5 s, 1 s, 2 s, 4 s, then 5 s each: INITIAL_DELAY doubling up to MAX_DELAY)."""
    one_try = StripeRefunds(stripe_client(localstripe_url, timeout_seconds=3), tier=Tier.LOOKUP)
    assert one_try.max_inflight == timedelta(seconds=3 + 3) + INFLIGHT_MARGIN
    pair = StripeRefunds(client_for(localstripe_url, (1, 4), retries=2))
    assert pair.max_inflight == timedelta(seconds=3 * (1 + 4) + 0.5 + 1) + INFLIGHT_MARGIN
    capped = StripeRefunds(client_for(localstripe_url, 2, retries=6))
    backoff = 0.5 + 1 + 2 + 4 + 5 + 5
    assert capped.max_inflight == timedelta(seconds=7 * (2 + 2) + backoff) + INFLIGHT_MARGIN
    # The SDK's defaults: requests with 80 s each way, and (for a StripeClient) no retries.
    default = StripeRefunds(stripe.StripeClient("sk_test_interlock"))
    assert default.max_inflight == timedelta(seconds=160) + INFLIGHT_MARGIN
    slow = StripeRefunds(client_for(localstripe_url, 120, retries=0), tier=Tier.LOOKUP)
    assert slow.max_inflight > timedelta(seconds=240), "a fixed 80 s would end mid-request"
    # What it derives is what the gate goes by.
    assert TargetDeclaration.of(slow).max_inflight == slow.max_inflight


def test_the_derived_bound_covers_a_request_that_never_answers(silent_peer: SilentPeer) -> None:
    """Against a peer that never answers, the client gives up within its bound (three
    attempts here), so no attempt is still in flight when max_inflight says none is."""
    url, connections = silent_peer
    target = StripeRefunds(client_for(url, 0.5, retries=2))
    started = time.monotonic()
    with pytest.raises(InDoubt):
        target.send("eff_hang", {"payment_intent": "pi_hang", "amount": REFUND_CENTS})
    took = timedelta(seconds=time.monotonic() - started)
    assert len(connections) == 3, "the SDK's own retries are part of the request"
    assert took <= client_request_bound(target.client) == target.max_inflight - INFLIGHT_MARGIN


def test_a_client_whose_timeout_the_sdk_does_not_expose_needs_max_inflight(
    localstripe_url: str, client: stripe.StripeClient, payment: str
) -> None:
    unbounded = stripe.StripeClient(
        "sk_test_interlock",
        base_addresses={"api": localstripe_url},
        max_network_retries=0,
        http_client=stripe.UrllibClient(),  # urllib with no timeout at all
    )
    with pytest.raises(TypeError, match=r"UrllibClient.*give max_inflight="):
        StripeRefunds(unbounded, tier=Tier.LOOKUP)
    target = StripeRefunds(unbounded, tier=Tier.LOOKUP, max_inflight=timedelta(minutes=5))
    assert target.max_inflight == timedelta(minutes=5)
    sent = target.send("eff_urllib", {"payment_intent": payment, "amount": REFUND_CENTS})
    assert isinstance(sent, Sent) and len(refunds_of(client, payment)) == 1


def test_the_declaration_follows_from_the_tier(client: stripe.StripeClient) -> None:
    tier1, tier2, tier3 = (StripeRefunds(client, tier=tier) for tier in Tier)
    assert (tier1.queryable, tier1.key_window) == (True, STRIPE_KEY_WINDOW)
    assert (tier2.queryable, tier2.key_window) == (True, None)
    assert (tier3.queryable, tier3.key_window) == (False, None)
    assert asking_mode(TargetDeclaration.of(tier3)) == Mode.NOTHING_TO_ASK
    assert not any(t.lookup_needs_key or t.attests_before_acting for t in (tier1, tier2, tier3))
    assert StripeRefunds(client, queryable=False).queryable is False  # tier 1 without a lookup


@pytest.mark.parametrize(
    ("declared", "contradiction"),
    [
        ({"tier": Tier.NEITHER, "queryable": True}, "tier 3 .* cannot be queryable=True"),
        ({"tier": Tier.NEITHER, "key_window": STRIPE_KEY_WINDOW}, "tier 3 cannot have key_win"),
        ({"tier": Tier.LOOKUP, "key_window": STRIPE_KEY_WINDOW}, "tier 2 cannot have key_win"),
        ({"tier": Tier.LOOKUP, "queryable": False}, "tier 2 .* cannot be queryable=False"),
        ({"tier": Tier.DEDUPES, "key_window": None}, "key_window=None .* forgets a key"),
    ],
)
def test_arguments_that_contradict_the_tier_are_refused(
    client: stripe.StripeClient, declared: dict[str, object], contradiction: str
) -> None:
    with pytest.raises(TypeError, match=contradiction):
        StripeRefunds(client, **declared)  # type: ignore[arg-type]


def test_a_client_that_retries_by_itself_contradicts_a_tier_without_dedup(
    localstripe_url: str,
) -> None:
    retrying = client_for(localstripe_url, 5, retries=2)
    for tier in (Tier.LOOKUP, Tier.NEITHER):
        with pytest.raises(TypeError, match="max_network_retries=2"):
            StripeRefunds(retrying, tier=tier)
    assert StripeRefunds(retrying).tier == Tier.DEDUPES  # Stripe replays them under the key
