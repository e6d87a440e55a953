"""Races at the notary, over HTTP through gunicorn, with real client processes.

Eight agents dispatching one effect at once get exactly one DISPATCHED per attempt; the rest are
told the attempt is taken. The same holds for the gate's one round trip (PROPOSED and attempt 1
in one request), eight at once, and for that round trip racing plain dispatches. An approver
revoking a lease while an agent dispatches under it leaves a ledger whose order alone says
whether the lease was live when the effect fired: either DISPATCHED precedes LEASE_REVOKED and
the receipt says authorized, or the dispatch was refused and nothing was recorded for it. The
clients are separate interpreters (testkit.agents.http_racer), released together for each round."""

from __future__ import annotations

import random
import secrets
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from gate_client.proposal import Proposal
from gate_client.receipts import check_chain, derive_receipt, verify_receipt
from ledger.core.entries import Entry, EntryKind
from ledger.selectors import iter_entries
from notary import services
from notary.models import ApiKey, Effect, Tenant
from testkit.factories import CENTS_MONEY
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.racers import racers

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AGENTS = 8
ROUNDS = 4  # effects raced by all eight agents, each at attempt 1 and then attempt 2
TRIALS = 200  # revoke-versus-dispatch races, each with its own lease and effect
JITTER_MS = 3.0  # the head start one side of a revoke race gets, at random, up to this
PREMISES = [{"name": "payment_settled", "holds": True, "observed": {"status": "paid"}}]


@pytest.fixture(scope="module")
def notary_url(
    django_db_setup: Any, django_db_blocker: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """One gunicorn for the module, on the test database; each test's rows are committed (so
    gunicorn sees them) and flushed after it by pytest-django."""
    directory = tmp_path_factory.mktemp("effect_concurrency")
    with django_db_blocker.unblock():
        database_url = child_database_url()
    with running_notary(database_url, directory, workers=2, threads=8) as url:
        yield url


@dataclass(frozen=True)
class Desk:
    """A tenant with a refund target, an approver and an agent, and their tokens."""

    tenant: Tenant
    approver: ApiKey
    approver_token: str
    agent_token: str

    def lease(self, case_id: str) -> str:
        return services.lease_grant(
            tenant=self.tenant,
            approver=self.approver,
            case_id=case_id,
            action="refund",
            expires_at=timezone.now() + timedelta(hours=1),
            requested_by="refund-bot",
            limits={"amount_cents": 5000},
        ).lease_id

    def proposal(self, case_id: str, lease_id: str) -> tuple[str, dict[str, Any]]:
        """(effect id, the PROPOSED body the gate writes) of one refund on the case."""
        proposal = Proposal(
            case_id=case_id,
            target="refunds",
            action="refund",
            payload={"payment": f"pay_{case_id}", "amount_cents": 1200},
            lease_id=lease_id,
            tenant=self.tenant.slug,
        )
        body = proposal.proposed_body(PREMISES)
        return proposal.effect_id, body

    def propose(self, case_id: str) -> tuple[str, str]:
        """Grant a lease for the case and propose one refund under it: (lease id, effect id)."""
        lease_id = self.lease(case_id)
        effect_id, body = self.proposal(case_id, lease_id)
        proposed = services.effect_propose(tenant=self.tenant, effect_id=effect_id, proposal=body)
        assert proposed.created
        return lease_id, effect_id

    def entries(self) -> list[Entry]:
        return check_chain(iter_entries(log=self.tenant.log), origin=self.tenant.log.origin)


def open_desk(prefix: str) -> Desk:
    tenant = services.tenant_create(slug=f"{prefix}-{secrets.token_hex(4)}", name=prefix)
    services.target_register(
        tenant=tenant,
        name="refunds",
        tier=1,
        queryable=True,
        max_inflight=timedelta(seconds=5),
        money=CENTS_MONEY,
    )
    approver, approver_token = services.api_key_issue(
        tenant=tenant, role="approver", holder="alice"
    )
    _, agent_token = services.api_key_issue(tenant=tenant, role="agent", holder="refund-bot")
    return Desk(tenant, approver, approver_token, agent_token)


def dispatch(effect_id: str, attempt: int, delay_ms: float = 0.0) -> dict[str, Any]:
    body = {"attempt": attempt, "premises": PREMISES, "recovery": attempt > 1}
    path = f"/v1/effects/{effect_id}/dispatch"
    return {"method": "POST", "path": path, "json": body, "delay_ms": delay_ms}


def propose_and_dispatch(effect_id: str, body: dict[str, Any]) -> dict[str, Any]:
    """The gate's one round trip: PROPOSED and, if nothing was dispatched, attempt 1."""
    request = {"effect_id": effect_id, "proposal": body, "dispatch": {"premises": PREMISES}}
    return {"method": "POST", "path": "/v1/effects", "json": request}


def revoke(lease_id: str, delay_ms: float = 0.0) -> dict[str, Any]:
    path = f"/v1/leases/{lease_id}/revoke"
    return {"method": "POST", "path": path, "json": {"reason": "disputed"}, "delay_ms": delay_ms}


def test_eight_agents_dispatching_one_effect_record_one_attempt(notary_url: str) -> None:
    desk = open_desk("dispatch-race")
    effects = [desk.propose(f"case-{n}")[1] for n in range(ROUNDS)]

    with racers(notary_url, [desk.agent_token] * AGENTS) as clients:
        for effect_id in effects:
            for attempt in (1, 2):
                answers = clients.race([dispatch(effect_id, attempt)] * AGENTS)
                won = [a for a in answers if a["status"] == 201]
                lost = [a for a in answers if a["status"] != 201]
                assert len(won) == 1, answers
                assert won[0]["body"]["kind"] == "DISPATCHED"
                assert len(lost) == AGENTS - 1
                for answer in lost:
                    assert answer["status"] == 409, answer
                    assert answer["body"]["error"] == "attempt_taken", answer
                    assert answer["body"]["current"] == attempt, answer

    entries = desk.entries()
    for effect_id in effects:
        dispatched = [e for e in entries if e.effect_id == effect_id and e.kind == "DISPATCHED"]
        assert [e.body_value()["attempt"] for e in dispatched] == [1, 2]
        receipt = derive_receipt(entries, effect_id)
        assert receipt.final_state == "DISPATCHED"
        assert receipt.authorized_when_fired is True
        verify_receipt(receipt, entries, origin=desk.tenant.log.origin)
        effect = Effect.objects.get(tenant=desk.tenant, effect_id=effect_id)
        assert (effect.state, effect.attempts) == ("DISPATCHED", 2)


def test_eight_agents_proposing_and_dispatching_at_once_record_one_attempt(
    notary_url: str,
) -> None:
    """Eight one-round-trip submits of a new effect; then, on a proposed effect, four of those
    against four plain dispatches of attempt 1. Either way one request records attempt 1."""
    desk = open_desk("propose-race")
    half = AGENTS // 2
    effects = []
    winners: Counter[str] = Counter()

    with racers(notary_url, [desk.agent_token] * AGENTS) as clients:
        for n in range(ROUNDS):
            case_id = f"new-{n}"
            effect_id, body = desk.proposal(case_id, desk.lease(case_id))
            answers = clients.race([propose_and_dispatch(effect_id, body)] * AGENTS)
            assert sorted(a["status"] for a in answers) == [200] * (AGENTS - 1) + [201], answers
            assert all(a["body"]["dispatch_refused"] is None for a in answers), answers
            [created] = [a for a in answers if a["status"] == 201]
            assert created["body"]["created"] is True
            # The request that recorded PROPOSED recorded attempt 1 in the same transaction.
            assert [a for a in answers if a["body"]["dispatched"] is not None] == [created]
            effects.append(effect_id)

            case_id = f"proposed-{n}"
            lease_id, effect_id = desk.propose(case_id)
            _, body = desk.proposal(case_id, lease_id)
            answers = clients.race(
                [propose_and_dispatch(effect_id, body)] * half + [dispatch(effect_id, 1)] * half
            )
            by_propose, by_dispatch = answers[:half], answers[half:]
            for answer in by_propose:
                assert answer["status"] == 200, answer
                assert answer["body"]["created"] is False, answer
                assert answer["body"]["dispatch_refused"] is None, answer
            for answer in by_dispatch:
                assert answer["status"] == 201 or (
                    answer["status"] == 409 and answer["body"]["error"] == "attempt_taken"
                ), answer
            won = [a for a in by_propose if a["body"]["dispatched"] is not None]
            won += [a for a in by_dispatch if a["status"] == 201]
            assert len(won) == 1, answers
            winners["propose+dispatch" if won[0] in by_propose else "dispatch"] += 1
            effects.append(effect_id)

    print(f"\nmixed rounds won by: {dict(winners)}")
    entries = desk.entries()
    for effect_id in effects:
        kinds = [
            (e.kind, e.body_value().get("attempt")) for e in entries if e.effect_id == effect_id
        ]
        assert kinds == [("PROPOSED", None), ("DISPATCHED", 1)], (effect_id, kinds)
        receipt = derive_receipt(entries, effect_id)
        assert (receipt.final_state, receipt.authorized_when_fired) == ("DISPATCHED", True)
        verify_receipt(receipt, entries, origin=desk.tenant.log.origin)


def test_a_revoke_racing_a_dispatch_agrees_with_ledger_order(notary_url: str) -> None:
    desk = open_desk("revoke-race")
    trials = [desk.propose(f"case-{n}") for n in range(TRIALS)]
    rng = random.Random(4711)

    started = time.monotonic()
    answers: list[tuple[dict[str, Any], dict[str, Any]]] = []
    with racers(notary_url, [desk.approver_token, desk.agent_token]) as clients:
        for lease_id, effect_id in trials:
            # Either side may get a small head start, so both orders are exercised.
            head_start = rng.uniform(0, JITTER_MS)
            revoke_delay, dispatch_delay = (
                (head_start, 0.0) if rng.random() < 0.5 else (0.0, head_start)
            )
            revoked, dispatched = clients.race(
                [revoke(lease_id, revoke_delay), dispatch(effect_id, 1, dispatch_delay)]
            )
            answers.append((revoked, dispatched))
    raced = time.monotonic() - started

    entries = desk.entries()
    revocations = {
        e.body_value()["lease_id"]: e for e in entries if e.kind == EntryKind.LEASE_REVOKED
    }
    ways: Counter[str] = Counter()
    for (lease_id, effect_id), (revoked, dispatched) in zip(trials, answers, strict=True):
        assert revoked["status"] == 200, revoked
        revocation = revocations[lease_id]
        assert revoked["body"]["revoked_seq"] == revocation.seq
        fired = [e for e in entries if e.effect_id == effect_id and e.kind == "DISPATCHED"]
        receipt = derive_receipt(entries, effect_id)
        verify_receipt(receipt, entries, origin=desk.tenant.log.origin)
        effect = Effect.objects.get(tenant=desk.tenant, effect_id=effect_id)
        if dispatched["status"] == 201:
            [entry] = fired
            assert dispatched["body"]["seq"] == entry.seq
            live_by_order = revocation.seq > entry.seq
            assert receipt.authorized_when_fired is live_by_order, (effect_id, entry, revocation)
            # The notary checks the lease under the same lock that writes DISPATCHED, so a
            # dispatch it accepted cannot come after the revocation.
            assert live_by_order, (effect_id, entry.seq, revocation.seq)
            assert (receipt.final_state, effect.state) == ("DISPATCHED", "DISPATCHED")
            ways["dispatched, then revoked"] += 1
        else:
            assert dispatched["status"] == 409, dispatched
            assert dispatched["body"]["error"] == "lease_refused", dispatched
            assert dispatched["body"]["reason"] == "lease_revoked", dispatched
            assert fired == [], (effect_id, fired)
            assert (receipt.final_state, receipt.happened) == ("PROPOSED", False)
            assert receipt.authorized_when_fired is None
            assert effect.state == "PROPOSED"
            ways["revoked, then refused"] += 1

    print(f"\n{TRIALS} revoke/dispatch races in {raced:.1f} s: {dict(ways)}")
    assert sum(ways.values()) == TRIALS
    assert ways["dispatched, then revoked"] >= 1, dict(ways)
    assert ways["revoked, then refused"] >= 1, dict(ways)
