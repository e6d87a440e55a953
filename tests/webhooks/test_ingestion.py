"""Ingestion: a verified event becomes OBSERVED evidence on its effect and settles it when nothing
better stands — a dispatched or AMBIGUOUS effect becomes COMMITTED_ON_EVIDENCE or FAILED — and
late or out-of-order events never move a verdict. Events whose task was lost are swept up."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from gate_client.receipts import derive_receipt
from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries
from notary import services as notary_services
from notary.models import Effect, ReviewNotice, Tenant
from testkit.factories import INSTANT, client_for, dispatched, register
from testkit.notary_server import free_port, running_notary
from testkit.paths import child_database_url
from testkit.webhook_signing import (
    as_headers,
    body_of,
    new_secret,
    resend_event,
    signed_headers,
    stripe_refund_event,
)
from webhooks import selectors, services
from webhooks.models import Endpoint, Ingestion, RawEvent
from webhooks.tasks import ingest_event

pytestmark = pytest.mark.django_db


def endpoint_for(tenant: Tenant, provider: str, target: str = "refunds") -> tuple[Endpoint, str]:
    secret = new_secret(provider)
    made = services.endpoint_create(
        tenant=tenant,
        target=register(tenant, target, evidence_window=INSTANT),
        provider=provider,
        secrets=[secret],
    )
    return made, secret


def deliver(made: Endpoint, secret: str, event: dict[str, Any], event_id: str = "") -> Ingestion:
    body = body_of(event)
    headers = as_headers(signed_headers(made.provider, body, secret, event_id=event_id))
    stored, new = services.event_receive(
        endpoint=made, secrets=[secret], body=body, headers=headers
    )
    assert stored.verified and new
    return services.event_ingest(raw_event_id=stored.pk)


def state(tenant: Tenant, effect_id: str) -> str:
    return derive_receipt(list(iter_entries(log=tenant.log)), effect_id).final_state


def kinds(tenant: Tenant, effect_id: str) -> list[str]:
    return [e.kind for e in iter_entries(log=tenant.log) if e.effect_id == effect_id]


def test_a_refund_webhook_settles_a_dispatched_effect_on_evidence(acme: Tenant) -> None:
    made, secret = endpoint_for(acme, "stripe")
    effect_id = dispatched(acme, "refunds", "case-1")
    event = stripe_refund_event(effect_id)
    ingestion = deliver(made, secret, event)
    assert ingestion.outcome == "committed_on_evidence"
    assert state(acme, effect_id) == "COMMITTED_ON_EVIDENCE"
    observed = next(e for e in iter_entries(log=acme.log) if e.kind == EntryKind.OBSERVED)
    assert observed.seq == ingestion.observed_seq
    assert observed.body_value()["event_id"] == event["id"]
    assert Effect.objects.get(effect_id=effect_id).result_ref == event["data"]["object"]["id"]
    again = services.event_ingest(raw_event_id=ingestion.raw_event_id)
    assert again == ingestion  # ingesting twice adds nothing
    assert kinds(acme, effect_id) == ["PROPOSED", "DISPATCHED", "OBSERVED", "COMMITTED"]


def test_late_evidence_settles_an_ambiguous_effect_and_nothing_moves_back(acme: Tenant) -> None:
    made, secret = endpoint_for(acme, "stripe")
    effect_id = dispatched(acme, "refunds", "case-1")
    assert notary_services.effect_sweep(tenant=acme, effect_id=effect_id) == "ambiguous"
    deliver(made, secret, stripe_refund_event(effect_id))
    assert state(acme, effect_id) == "COMMITTED_ON_EVIDENCE"
    late = deliver(made, secret, stripe_refund_event(effect_id, status="failed"))
    assert late.outcome == "recorded"  # evidence kept; the verdict stands
    assert state(acme, effect_id) == "COMMITTED_ON_EVIDENCE"
    agent = notary_services.effect_record_outcome(
        tenant=acme, effect_id=effect_id, kind="AMBIGUOUS", body={}
    )
    assert agent[1] is False  # an agent's late AMBIGUOUS does not undo the evidence
    assert state(acme, effect_id) == "COMMITTED_ON_EVIDENCE"


def test_a_failed_refund_is_evidence_of_failure(acme: Tenant) -> None:
    made, secret = endpoint_for(acme, "stripe")
    effect_id = dispatched(acme, "refunds", "case-1")
    event = stripe_refund_event(effect_id, status="failed", event_type="refund.failed")
    assert deliver(made, secret, event).outcome == "failed_on_evidence"
    assert state(acme, effect_id) == "FAILED:evidence:refund.failed"
    late = deliver(made, secret, stripe_refund_event(effect_id))
    assert late.outcome == "contradicts", "a refund seen after its failure is never filed away"
    assert state(acme, effect_id) == "FAILED:evidence:refund.failed"
    assert Effect.objects.get(tenant=acme, effect_id=effect_id).contradicted


def test_resend_matches_by_tag_or_by_the_email_id_the_gate_committed(acme: Tenant) -> None:
    made, secret = endpoint_for(acme, "resend", target="mail")
    tagged = dispatched(acme, "mail", "case-1")
    assert deliver(made, secret, resend_event("email.sent", effect_id=tagged), "m1").outcome == (
        "committed_on_evidence"
    )
    untagged = dispatched(acme, "mail", "case-2")
    notary_services.effect_record_outcome(
        tenant=acme,
        effect_id=untagged,
        kind="COMMITTED",
        body={"state": "COMMITTED", "attempt": 1, "result_ref": "em_42", "recheck": None},
    )
    bounced = deliver(made, secret, resend_event("email.bounced", email_id="em_42"), "m2")
    assert bounced.effect_id == untagged
    assert bounced.outcome == "recorded"  # committed already: the bounce is kept as evidence
    unknown = deliver(made, secret, resend_event("email.sent", email_id="em_nobody"), "m3")
    assert (unknown.outcome, unknown.effect_id, unknown.observed_seq) == ("unmatched", "", None)


def stored(made: Endpoint, secret: str, event: dict[str, Any], event_id: str = "") -> int:
    body = body_of(event)
    headers = as_headers(signed_headers(made.provider, body, secret, event_id=event_id))
    raw, new = services.event_receive(endpoint=made, secrets=[secret], body=body, headers=headers)
    assert new
    return raw.pk


def test_a_batch_ingests_its_events_as_one_after_another_would(
    acme: Tenant, globex: Tenant
) -> None:
    made, secret = endpoint_for(acme, "resend", target="mail")
    effect_id = dispatched(acme, "mail", "case-1")
    register(globex, "mail")
    theirs = dispatched(globex, "mail", "case-1")
    sent = stored(
        made, secret, resend_event("email.sent", effect_id=effect_id, email_id="em_7"), "m1"
    )
    # Untagged: matched by the email id, which only the event before it in the batch recorded.
    bounced = stored(made, secret, resend_event("email.bounced", email_id="em_7"), "m2")
    foreign = stored(made, secret, resend_event("email.sent", effect_id=theirs), "m3")
    ingestions = services.events_ingest(raw_event_ids=[foreign, bounced, sent, 10**9])
    assert [i.raw_event_id for i in ingestions] == [sent, bounced, foreign]  # as they arrived
    assert [(i.effect_id, i.outcome) for i in ingestions] == [
        (effect_id, "committed_on_evidence"),
        (effect_id, "recorded"),  # settled already: the bounce is kept as evidence
        ("", "unmatched"),  # another tenant's effect id names nothing here
    ]
    assert kinds(acme, effect_id) == ["PROPOSED", "DISPATCHED", "OBSERVED", "COMMITTED", "OBSERVED"]
    again = services.events_ingest(raw_event_ids=[sent, bounced, foreign])
    assert again == ingestions  # nothing ingested twice
    assert Ingestion.objects.count() == 3
    assert state(globex, theirs) == "DISPATCHED"


def ingested_story(tenant: Tenant, *, batched: bool) -> dict[str, Any]:
    """Six events on three effects of the tenant, interleaved, ingested one by one or as one
    batch; what they did, tenant-neutral (effects by case, no ids, no instants)."""
    made, secret = endpoint_for(tenant, "stripe")
    settled, ambiguous, quiet = (dispatched(tenant, "refunds", f"case-{n}") for n in range(3))
    assert notary_services.effect_sweep(tenant=tenant, effect_id=ambiguous) == "ambiguous"
    failed = {"status": "failed", "event_type": "refund.failed"}
    events = [
        stripe_refund_event(settled),  # settles it
        stripe_refund_event(ambiguous, **failed),  # settles the AMBIGUOUS one as FAILED
        stripe_refund_event(settled, **failed),  # contradicts the verdict just settled
        stripe_refund_event(quiet, status="requires_action"),  # says nothing either way
        stripe_refund_event(ambiguous),  # contradicts the failure: back to a person
        stripe_refund_event(settled),  # agrees with the verdict
    ]
    for n, event in enumerate(events):  # the same in both tenants, as their results show
        event["id"], event["created"], event["data"]["object"]["id"] = f"evt_{n}", n, f"re_{n}"
    size = tenant.log.size
    raw_ids = [stored(made, secret, event) for event in events]
    if batched:
        ingestions = services.events_ingest(raw_event_ids=[*raw_ids, raw_ids[2]])  # one twice
    else:
        ingestions = [services.event_ingest(raw_event_id=raw_id) for raw_id in raw_ids]
    case = dict(Effect.objects.filter(tenant=tenant).values_list("effect_id", "case_id"))
    added = [e for e in iter_entries(log=tenant.log) if e.seq >= size]
    return {
        "log size before": size,
        "ingestions": [(case[i.effect_id], i.observed_seq, i.outcome) for i in ingestions],
        "entries": [
            (e.seq, e.kind, case[e.effect_id], {**e.body_value(), "body_sha256": ""}) for e in added
        ],
        "effects": [
            (
                row.case_id,
                row.state,
                row.contradicted,
                row.attempts,
                row.last_seq,
                row.result_ref,
                row.settled_at is not None,
                row.queued_at is not None,
            )
            for row in Effect.objects.filter(tenant=tenant).order_by("case_id")
        ],
        "notices": sorted(
            (case[n.effect_id], n.event, n.cause)
            for n in ReviewNotice.objects.filter(tenant=tenant)
        ),
    }


def test_a_batch_touching_one_effect_several_times_does_what_one_by_one_would(
    acme: Tenant, globex: Tenant
) -> None:
    one_by_one = ingested_story(acme, batched=False)
    batched = ingested_story(globex, batched=True)
    assert batched == one_by_one
    assert [(case, outcome) for case, _, outcome in batched["ingestions"]] == [
        ("case-0", "committed_on_evidence"),
        ("case-1", "failed_on_evidence"),
        ("case-0", "recorded"),  # evidence is positive-only: a failure does not undo it
        ("case-2", "recorded"),
        ("case-1", "contradicts"),  # the first final verdict stands, contradicted
        ("case-0", "contradicts"),  # a second refund: a duplicate effect, shown
    ]
    assert [kind for _, kind, _, _ in batched["entries"]] == [
        "OBSERVED",
        "COMMITTED",
        "OBSERVED",
        "FAILED",
        *["OBSERVED"] * 4,
    ]
    assert [(case, event) for case, event, _ in batched["notices"]] == [
        ("case-0", "entered_queue"),
        ("case-1", "entered_queue"),  # contradicted after its evidence settled it
        ("case-1", "entered_queue"),  # AMBIGUOUS, before any evidence
    ]


def test_a_batch_costs_as_many_statements_for_six_events_as_for_two(acme: Tenant) -> None:
    made, secret = endpoint_for(acme, "stripe")

    def statements(count: int) -> int:
        effects = [dispatched(acme, "refunds", f"case-{count}-{n}") for n in range(count)]
        raw_ids = [stored(made, secret, stripe_refund_event(effect)) for effect in effects]
        with CaptureQueriesContext(connection) as ran:
            ingestions = services.events_ingest(raw_event_ids=raw_ids)
        assert [i.outcome for i in ingestions] == ["committed_on_evidence"] * count
        return len(ran.captured_queries)

    assert statements(2) == statements(6)  # the batch's, none per event


def test_another_tenants_effect_is_never_touched(acme: Tenant, globex: Tenant) -> None:
    made, secret = endpoint_for(acme, "stripe")
    register(globex, "refunds")
    theirs = dispatched(globex, "refunds", "case-1")
    size = globex.log.size
    assert deliver(made, secret, stripe_refund_event(theirs)).outcome == "unmatched"
    globex.log.refresh_from_db()
    assert globex.log.size == size
    assert state(globex, theirs) == "DISPATCHED"


def test_an_attestation_settles_through_the_api(acme: Tenant, globex: Tenant) -> None:
    register(acme, "ledger-sync", evidence_window=INSTANT)
    effect_id = dispatched(acme, "ledger-sync", "case-1")
    service = client_for(acme, "service", "erp", targets=["ledger-sync"])
    answer = service.post(
        "/v1/attestations",
        {"effect_id": effect_id, "performed": True, "reference": "doc_7"},
        format="json",
    )
    assert answer.status_code == 201, answer.json()
    assert answer.json()["settled"] == "committed_on_evidence"
    assert answer.json()["entry"]["body"]["by"] == "erp"
    assert state(acme, effect_id) == "COMMITTED_ON_EVIDENCE"
    assert client_for(acme, "agent", "bot").post("/v1/attestations", {}).status_code == 403
    outsider = client_for(globex, "service", "other-erp")
    missing = outsider.post(
        "/v1/attestations", {"effect_id": effect_id, "performed": False}, format="json"
    )
    assert missing.status_code == 404
    bad = service.post("/v1/attestations", {"effect_id": effect_id}, format="json")
    assert bad.status_code == 400
    assert set(bad.json()) == {"error", "detail"}


@pytest.mark.slow
def test_an_event_that_arrived_while_redis_was_down_is_ingested_by_the_sweep(
    transactional_db: None, tmp_path: Path
) -> None:
    acme = notary_services.tenant_create(slug="acme", name="Acme")
    made, secret = endpoint_for(acme, "stripe")
    effect_id = dispatched(acme, "refunds", "case-1")
    body = body_of(stripe_refund_event(effect_id))
    dead_broker = {
        "REDIS_URL": f"redis://127.0.0.1:{free_port()}/0",  # nothing listens there
        "CELERY_TASK_ALWAYS_EAGER": "false",
    }
    with running_notary(child_database_url(), tmp_path, settings=dead_broker) as url:
        answer = httpx.post(
            f"{url}/webhooks/{made.public_id}/",
            content=body,
            headers={
                "Content-Type": "application/json",
                **as_headers(signed_headers("stripe", body, secret)),
            },
            timeout=60,
        )
    assert answer.status_code == 200, answer.text  # stored and answered with the queue down
    stored = RawEvent.objects.get()
    assert not Ingestion.objects.exists()
    stranded = selectors.events_awaiting_ingestion(
        received_before=timezone.now() + timedelta(seconds=1)
    )
    assert stranded == [stored.pk]
    assert [ingest_event(raw_event_id) for raw_event_id in stranded] == ["committed_on_evidence"]
    assert selectors.events_awaiting_ingestion(received_before=timezone.now()) == []
    assert state(acme, effect_id) == "COMMITTED_ON_EVIDENCE"
