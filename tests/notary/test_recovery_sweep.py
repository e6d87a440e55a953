"""The notary's recovery sweep: effects left DISPATCHED past their target's max in-flight are
settled from evidence, from the target's own lookup, or as AMBIGUOUS once the evidence window
has passed — and nothing is ever sent again by the notary."""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from gate_client.http_target import HttpTarget
from gate_client.receipts import derive_receipt
from gate_client.targets import Sent, Tier
from ledger.selectors import iter_entries
from notary import selectors, services
from notary.models import Effect, Tenant
from notary.tasks import settle_in_flight_effect, sweep_in_flight
from testkit.celery_worker import running_worker
from testkit.factories import INSTANT, dispatched, register
from testkit.peers.reference_service import RunningServer, read_acts, running_server


@pytest.fixture
def service(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(tmp_path / "store", dedupe=False, lookup=True) as running:
        yield running


def receipt(tenant: Tenant, effect_id: str) -> dict[str, object]:
    return derive_receipt(list(iter_entries(log=tenant.log)), effect_id).to_dict()


@pytest.mark.django_db
def test_only_effects_past_their_window_and_unsettled_are_due(acme: Tenant) -> None:
    register(acme, "fast")
    register(acme, "slow", max_inflight=timedelta(hours=1))
    due = dispatched(acme, "fast", "case-1")
    dispatched(acme, "slow", "case-2")
    settled = dispatched(acme, "fast", "case-3")
    services.effect_record_outcome(tenant=acme, effect_id=settled, kind="AMBIGUOUS", body={})
    mine = [e for t, e in selectors.effects_due_for_sweep(now=timezone.now()) if t == acme.pk]
    assert mine == [due]


@pytest.mark.django_db
def test_late_evidence_settles_what_the_sweep_left_ambiguous_without_a_person(
    acme: Tenant,
) -> None:
    register(acme, "mail", evidence_window=INSTANT)
    effect_id = dispatched(acme, "mail", "case-1")
    assert services.effect_sweep(tenant=acme, effect_id=effect_id) == "ambiguous"
    observed, settled = services.attestation_record(
        tenant=acme,
        by="mailer",
        effect_id=effect_id,
        stage="performed",
        reference="msg_9",
        detail="",
    )
    assert settled == "committed_on_evidence"
    after = receipt(acme, effect_id)
    assert after["final_state"] == "COMMITTED_ON_EVIDENCE"
    assert after["happened"] is True
    assert after["recheck_at_recovery"] == {
        "by": "notary",
        "evidence": "found",
        "evidence_seq": observed.seq,
    }
    assert Effect.objects.get(effect_id=effect_id).result_ref == "msg_9"
    assert services.effect_sweep(tenant=acme, effect_id=effect_id) == "nothing_to_do"


@pytest.mark.django_db
def test_a_tier_2_lookup_settles_what_the_service_did_and_never_resends(
    acme: Tenant, service: RunningServer
) -> None:
    register(acme, "crm", tier=2, lookup_url=service.url)
    acted = dispatched(acme, "crm", "case-acted")
    sent = HttpTarget(
        name="crm",
        base_url=service.url,
        tier=Tier.LOOKUP,
        queryable=True,
        key_window=None,
        max_inflight=timedelta(seconds=5),
    ).send(acted, {"to": "customer@example.com"})  # the agent's request; then it crashed
    assert isinstance(sent, Sent)
    never = dispatched(acme, "crm", "case-never")

    assert services.effect_sweep(tenant=acme, effect_id=acted) == "committed_on_query"
    assert receipt(acme, acted)["final_state"] == "COMMITTED_ON_QUERY"
    # Known not sent: a resend needs a re-check with the agent's credentials, left to recover().
    assert services.effect_sweep(tenant=acme, effect_id=never) == "needs_agent"
    assert Effect.objects.get(effect_id=never).state == "DISPATCHED"
    assert len(read_acts(service.store, acted)) == 1
    assert read_acts(service.store, never) == []


@pytest.mark.django_db
def test_the_sweep_says_ambiguous_where_the_gate_would_and_leaves_resends_to_the_agent(
    acme: Tenant,
) -> None:
    register(acme, "mail", evidence_window=INSTANT)
    register(acme, "pager")
    register(acme, "payments", tier=1)
    lapsed = dispatched(acme, "mail", "case-1")
    unaskable = dispatched(acme, "pager", "case-2")
    keyed = dispatched(acme, "payments", "case-3")
    assert sweep_in_flight() >= 3  # eager in tests: the settle tasks run inline
    assert receipt(acme, lapsed)["final_state"] == "AMBIGUOUS"
    assert receipt(acme, lapsed)["recheck_at_recovery"] == {
        "by": "notary",
        "evidence": "none within the evidence window; silence proves nothing",
    }
    assert receipt(acme, unaskable)["final_state"] == "AMBIGUOUS"
    # Tier 1 inside its key window is resent by the agent, after a re-check only it can make.
    assert Effect.objects.get(effect_id=keyed).state == "DISPATCHED"
    assert services.effect_sweep(tenant=acme, effect_id=keyed) == "needs_agent"
    assert services.effect_sweep(tenant=acme, effect_id=lapsed) == "nothing_to_do"


@pytest.mark.slow
def test_a_real_worker_settles_from_the_redis_queue(transactional_db: None) -> None:
    tenant = services.tenant_create(slug=f"sweep-{secrets.token_hex(4)}", name="Sweep")
    register(tenant, "mail", evidence_window=INSTANT)
    effect_id = dispatched(tenant, "mail", "case-1")
    with running_worker() as (queue, wait_until):
        for _ in range(2):  # a task delivered twice does no harm
            settle_in_flight_effect.apply_async((tenant.pk, effect_id), queue=queue)
        wait_until(lambda: Effect.objects.get(effect_id=effect_id).state == "AMBIGUOUS")
        time.sleep(0.5)  # time for the second delivery to run, too
    kinds = [e.kind for e in iter_entries(log=tenant.log) if e.effect_id == effect_id]
    assert kinds == ["PROPOSED", "DISPATCHED", "AMBIGUOUS"]
