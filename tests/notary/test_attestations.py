"""Write-ahead attestation: a service attests each request before acting and acts only on the
notary's acknowledgement, so silence by max in-flight is conclusive for its target."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from gate_client.receipts import derive_receipt
from ledger.selectors import iter_entries
from notary import services
from notary.errors import NotaryConflict
from notary.models import Effect, Tenant
from testkit.factories import dispatched


def attest(tenant: Tenant, effect_id: str, stage: str, reference: str = "") -> str:
    return services.attestation_record(
        tenant=tenant, by="erp", effect_id=effect_id, stage=stage, reference=reference, detail=""
    )[1]


def attesting_target(tenant: Tenant, max_inflight: timedelta) -> None:
    services.target_register(
        tenant=tenant,
        name="erp",
        tier=3,
        queryable=False,
        max_inflight=max_inflight,
        attests_before_acting=True,
    )


@pytest.mark.django_db
def test_one_request_is_acknowledged_while_its_dispatch_is_in_flight(acme: Tenant) -> None:
    attesting_target(acme, timedelta(seconds=30))
    effect_id = dispatched(acme, "erp", "case-1")
    assert attest(acme, effect_id, "before_acting") == "acknowledged"
    with pytest.raises(NotaryConflict, match="attested already"):
        attest(acme, effect_id, "before_acting")  # a second request in flight must not act
    assert attest(acme, effect_id, "performed", "doc_1") == "committed_on_evidence"
    receipt = derive_receipt(list(iter_entries(log=acme.log)), effect_id)
    assert (receipt.final_state, receipt.happened) == ("COMMITTED_ON_EVIDENCE", True)


@pytest.mark.django_db
def test_none_is_acknowledged_once_recovery_may_count_it_as_never_sent(acme: Tenant) -> None:
    attesting_target(acme, timedelta(milliseconds=50))
    effect_id = dispatched(acme, "erp", "case-1")
    effect = Effect.objects.get(tenant=acme, effect_id=effect_id)
    assert effect.dispatched_at is not None
    while timezone.now() < effect.dispatched_at + timedelta(milliseconds=50):
        time.sleep(0.01)  # until the dispatch can no longer be in flight
    with pytest.raises(NotaryConflict, match="max in-flight"):
        attest(acme, effect_id, "before_acting")
    kinds = [e.kind for e in iter_entries(log=acme.log) if e.effect_id == effect_id]
    assert kinds == ["PROPOSED", "DISPATCHED"], "a refused attestation records nothing"


@pytest.mark.django_db
def test_a_refusal_resting_on_silence_is_refused_once_an_attestation_arrived(
    acme: Tenant,
) -> None:
    """The agent read "nothing attested", then the service's attestation, acknowledged just
    inside max in-flight, committed: the refusal's premise is gone, and it is not recorded."""
    attesting_target(acme, timedelta(seconds=30))
    effect_id = dispatched(acme, "erp", "case-1")
    assert attest(acme, effect_id, "before_acting") == "acknowledged"
    body = {
        "reason": "stale_premise_at_recovery",
        "recheck": {"reason": "stale_premise", "lookup": "not_attested"},
    }
    with pytest.raises(NotaryConflict, match="attested this effect"):
        services.effect_record_outcome(tenant=acme, effect_id=effect_id, kind="REFUSED", body=body)
    kinds = [e.kind for e in iter_entries(log=acme.log) if e.effect_id == effect_id]
    assert kinds == ["PROPOSED", "DISPATCHED", "OBSERVED"]
