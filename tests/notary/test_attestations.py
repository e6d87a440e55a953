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
from notary.models import WAITING_FOR_A_PERSON, Effect, ReviewEvent, ReviewNotice, Tenant
from testkit.factories import client_for, dispatched, proposed


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


def kinds_of(tenant: Tenant, effect_id: str) -> list[str]:
    return [str(e.kind) for e in iter_entries(log=tenant.log) if e.effect_id == effect_id]


def waiting(tenant: Tenant, effect_id: str) -> bool:
    return Effect.objects.filter(WAITING_FOR_A_PERSON, tenant=tenant, effect_id=effect_id).exists()


@pytest.mark.django_db
def test_performed_with_no_acknowledged_intent_is_refused_kept_and_holds_the_effect(
    acme: Tenant,
) -> None:
    """The agent died after PROPOSED; the service's key says it performed the effect, which no
    request was ever acknowledged for. Refused, but kept: the effect is contradicted, waits for
    a person, and nothing dispatches it, until the person's decision settles it."""
    attesting_target(acme, timedelta(seconds=30))
    effect_id = proposed(acme, "erp", "case-1")
    with pytest.raises(NotaryConflict, match="no intent to act on it was acknowledged") as refused:
        attest(acme, effect_id, "performed", "doc_1")
    assert kinds_of(acme, effect_id) == ["PROPOSED", "OBSERVED"]
    [kept] = [e for e in iter_entries(log=acme.log) if e.kind == "OBSERVED"]
    assert refused.value.extra == {"kept_as": kept.seq} and "refused" in kept.body_value()
    row = Effect.objects.get(tenant=acme, effect_id=effect_id)
    assert (row.state, row.contradicted, row.held_by) == ("HELD", True, effect_id)
    assert waiting(acme, effect_id)

    for _ in range(2):  # the notary's dispatch endpoint holds it, recording the hold once
        with pytest.raises(NotaryConflict, match="performed") as held:
            services.effect_dispatch(
                tenant=acme, effect_id=effect_id, attempt=1, premises=[], recovery=True
            )
        assert held.value.code == "held" and held.value.extra == {"held_by": effect_id}
    assert kinds_of(acme, effect_id) == ["PROPOSED", "OBSERVED", "HELD"]

    services.effect_resolve(
        tenant=acme, effect_id=effect_id, happened=False, reason="no such document", by="fin"
    )
    receipt = derive_receipt(list(iter_entries(log=acme.log)), effect_id)
    assert (receipt.final_state, receipt.contradicted) == ("RESOLVED_NOT_HAPPENED", False)
    assert not waiting(acme, effect_id)
    with pytest.raises(NotaryConflict, match="verdict"):
        services.effect_dispatch(
            tenant=acme, effect_id=effect_id, attempt=1, premises=[], recovery=True
        )


@pytest.mark.django_db
def test_after_a_dispatch_too_a_word_with_no_intent_answers_nothing_and_holds_any_resend(
    acme: Tenant,
) -> None:
    attesting_target(acme, timedelta(milliseconds=50))
    effect_id = dispatched(acme, "erp", "case-1")
    with pytest.raises(NotaryConflict, match="no intent"):
        attest(acme, effect_id, "not_performed")
    assert kinds_of(acme, effect_id) == ["PROPOSED", "DISPATCHED"], "a 'not performed' is not kept"
    with pytest.raises(NotaryConflict, match="no intent"):
        attest(acme, effect_id, "performed", "doc_1")
    receipt = derive_receipt(list(iter_entries(log=acme.log)), effect_id)
    assert (receipt.final_state, receipt.happened) == ("DISPATCHED", "unknown")
    assert [c["kind"] for c in receipt.contradictions] == ["performed_unacknowledged"]
    assert receipt.held_by == effect_id, "held by its own evidence before any resend is tried"
    assert Effect.objects.get(tenant=acme, effect_id=effect_id).held_by == effect_id
    assert waiting(acme, effect_id)
    with pytest.raises(NotaryConflict, match="contradicted"):
        attest(acme, effect_id, "before_acting")
    with pytest.raises(NotaryConflict, match="performed") as held:
        services.effect_dispatch(
            tenant=acme, effect_id=effect_id, attempt=2, premises=[], recovery=True
        )
    assert held.value.code == "held"


@pytest.mark.django_db
def test_the_api_answers_a_performed_with_no_intent_409_naming_the_entry_kept(
    acme: Tenant,
) -> None:
    attesting_target(acme, timedelta(seconds=30))
    effect_id = proposed(acme, "erp", "case-1")
    erp = client_for(acme, "service", "erp-service", targets=["erp"])
    answer = erp.post(
        "/v1/attestations",
        {"effect_id": effect_id, "stage": "performed", "reference": "doc_1"},
        format="json",
    )
    assert answer.status_code == 409, answer.content
    body = answer.json()
    assert body["error"] == "not_acknowledged" and "kept as a contradiction" in body["detail"]
    [kept] = [e for e in iter_entries(log=acme.log) if e.kind == "OBSERVED"]
    assert body["kept_as"] == kept.seq


@pytest.mark.django_db
def test_a_service_repeating_its_word_after_a_person_found_it_happened_reopens_nothing(
    acme: Tenant,
) -> None:
    """The effect was held on the service's word with no intent; a person found it happened.
    The service, retrying its post, says the same again: still refused (it answers no
    request), but it agrees with the person, so the effect stays settled and out of the queue,
    and no one is told the decision was contradicted. A different result would be."""
    attesting_target(acme, timedelta(seconds=30))
    effect_id = proposed(acme, "erp", "case-1")
    with pytest.raises(NotaryConflict, match="no intent"):
        attest(acme, effect_id, "performed", "doc_1")
    services.effect_resolve(
        tenant=acme, effect_id=effect_id, happened=True, reason="doc_1 is booked", by="fin"
    )
    with pytest.raises(NotaryConflict, match="no intent"):
        attest(acme, effect_id, "performed", "doc_1")
    receipt = derive_receipt(list(iter_entries(log=acme.log)), effect_id)
    assert (receipt.final_state, receipt.contradicted) == ("RESOLVED_HAPPENED", False)
    assert not waiting(acme, effect_id)
    contradicted = ReviewNotice.objects.filter(
        tenant=acme, effect_id=effect_id, event=ReviewEvent.DECISION_CONTRADICTED
    )
    assert not contradicted.exists()

    with pytest.raises(NotaryConflict, match="no intent"):
        attest(acme, effect_id, "performed", "doc_2")
    receipt = derive_receipt(list(iter_entries(log=acme.log)), effect_id)
    assert [c["kind"] for c in receipt.contradictions] == ["duplicate_at_target"]
    assert waiting(acme, effect_id) and contradicted.exists()


@pytest.mark.django_db
def test_a_refusal_resting_on_silence_is_refused_once_the_service_said_it_performed(
    acme: Tenant,
) -> None:
    """The agent read "nothing attested" and found a premise failed; before its refusal is
    recorded, the service says it performed the effect, with no intent acknowledged. That word
    answers no request, but the silence the refusal rests on is broken all the same: recorded,
    the refusal would say the effect never happened beside a service saying it did."""
    attesting_target(acme, timedelta(seconds=30))
    effect_id = dispatched(acme, "erp", "case-1")
    with pytest.raises(NotaryConflict, match="no intent"):
        attest(acme, effect_id, "performed", "doc_1")
    body = {
        "reason": "stale_premise_at_recovery",
        "recheck": {"reason": "stale_premise", "lookup": "not_attested"},
    }
    with pytest.raises(NotaryConflict, match="attested this effect") as refused:
        services.effect_record_outcome(tenant=acme, effect_id=effect_id, kind="REFUSED", body=body)
    assert refused.value.code == "evidence_arrived"
    assert kinds_of(acme, effect_id) == ["PROPOSED", "DISPATCHED", "OBSERVED"]
    receipt = derive_receipt(list(iter_entries(log=acme.log)), effect_id)
    assert (receipt.final_state, receipt.happened, receipt.held_by) == (
        "DISPATCHED",
        "unknown",
        effect_id,
    )
