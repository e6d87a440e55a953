"""Writes of the webhooks app: storing what arrived, and ingesting it as ledger evidence."""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F, Q, QuerySet
from django.utils import timezone

from notary import counters
from notary import services as notary_services
from notary.models import Effect, Target, Tenant
from webhooks import providers, queue, selectors
from webhooks.models import (
    Endpoint,
    EndpointSecret,
    Ingestion,
    Provider,
    RawEvent,
    UnverifiedRequest,
)

log = logging.getLogger(__name__)

# What the quarantine keeps of each header: enough to see what was sent, bounded.
QUARANTINED_HEADER_CHARS = 1000
ERROR_CHARS = 2000
RATE_LIMITED = "rate_limited"
GONE = "not_found"


class WebhookInputError(ValueError):
    """The endpoint cannot be set up as asked; nothing was written."""


class WebhookRefused(Exception):
    """The request is not taken as a verified event. `code` is a Refusal value (the request is
    in the quarantine), RATE_LIMITED (it is not: the endpoint had too many this minute) or GONE
    (the endpoint was removed as the request came)."""

    def __init__(self, code: str, detail: str) -> None:
        super().__init__(f"{code}: {detail}")
        self.code = code
        self.detail = detail


@transaction.atomic(durable=True)
def endpoint_create(
    *,
    tenant: Tenant,
    target: Target,
    provider: str,
    secrets: Sequence[str],
    effect_id_path: str = "",
    positive_types: Sequence[str] = (),
    negative_types: Sequence[str] = (),
) -> Endpoint:
    if provider not in Provider.values:
        raise WebhookInputError(f"provider {provider!r}: one of {', '.join(Provider.values)}")
    if target.tenant_id != tenant.pk:
        raise WebhookInputError("the target belongs to another tenant")
    if not secrets:
        raise WebhookInputError("an endpoint needs at least one signing secret")
    webhook_provider = providers.PROVIDERS[provider]
    for secret in secrets:
        try:
            webhook_provider.check_secret(secret)
        except ValueError as exc:
            raise WebhookInputError(str(exc)) from exc
    refusal = webhook_provider.endpoint_refusal(effect_id_path=effect_id_path)
    if refusal is not None:
        raise WebhookInputError(refusal)
    endpoint = Endpoint.objects.create(
        tenant=tenant,
        target=target,
        provider=provider,
        effect_id_path=effect_id_path,
        positive_types=list(positive_types),
        negative_types=list(negative_types),
    )
    EndpointSecret.objects.bulk_create(EndpointSecret(endpoint=endpoint, secret=s) for s in secrets)
    return endpoint


def event_receive(
    *, endpoint: Endpoint, secrets: Sequence[str], body: bytes, headers: Mapping[str, str]
) -> tuple[RawEvent, bool]:
    """Verify and store one request; return the stored event and whether it is new.

    `secrets` are the endpoint's active ones as selectors.endpoint_for_url read them, perhaps
    for an earlier request (selectors.endpoint_remembered). A verified event is stored as it
    came, append-only, by one INSERT that is its own commit (outside a caller's transaction),
    so the row is durable before anyone is answered; the INSERT checks that the secret that
    verified it is still active on the endpoint, and adds nothing for an id stored before.
    Anything but a new stored event is decided on the endpoint as read again now. A new
    verified event is queued for ingestion once its row is committed; with the queue down it
    waits for the periodic sweep. Anything else raises WebhookRefused: kept in the endpoint's
    bounded quarantine (a digest, not the body) and counted, or, past
    WEBHOOK_UNVERIFIED_PER_MINUTE for the endpoint, not kept at all. A forgery claims no id."""
    kept = _kept_headers(headers)
    outcome = _store_new(endpoint=endpoint, secrets=secrets, body=body, headers=headers, kept=kept)
    if isinstance(outcome, RawEvent):
        return outcome, True
    found = selectors.endpoint_for_url(public_id=str(endpoint.public_id))
    if found is None:
        raise WebhookRefused(GONE, "no such webhook endpoint (it was removed)")
    if (found[0].provider, found[1]) != (endpoint.provider, [*secrets]):
        endpoint, secrets = found  # what the caller read is out of date: go by this
        outcome = _store_new(
            endpoint=endpoint, secrets=secrets, body=body, headers=headers, kept=kept
        )
        if isinstance(outcome, RawEvent):
            return outcome, True
    if isinstance(outcome, providers.RequestRefused):
        _refuse(endpoint=endpoint, body=body, headers=kept, refusal=outcome)
    # Stored before, or by a concurrent delivery a moment ago; else its secret was just retired.
    stored = RawEvent.objects.filter(
        endpoint=endpoint, provider_event_id=outcome.event_id, verified=True
    ).first()
    if stored is None:
        retired = providers.VerificationFailed("the secret that verified it was retired")
        _refuse(endpoint=endpoint, body=body, headers=kept, refusal=retired)
    return stored, False


def _store_new(
    *,
    endpoint: Endpoint,
    secrets: Sequence[str],
    body: bytes,
    headers: Mapping[str, str],
    kept: dict[str, str],
) -> RawEvent | providers.Verified | providers.RequestRefused:
    """The request verified and stored (with the `kept` headers) as a new event, queued once
    committed; or, not stored, the verified event (its id was stored before, or its secret is
    no longer active) or why it is not one."""
    try:
        verified = providers.PROVIDERS[endpoint.provider].verify(body, headers, secrets)
    except providers.RequestRefused as refusal:
        return refusal
    event = RawEvent(
        endpoint=endpoint,
        received_at=timezone.now(),
        provider_event_id=verified.event_id,
        headers=kept,
        body=body,
        verified=True,
        verification_error="",
    )
    event.pk = _insert_new(event, provider=endpoint.provider, secret=verified.secret)
    if event.pk is None:
        return verified
    raw_event_id = event.pk
    transaction.on_commit(lambda: _enqueue(raw_event_id))
    return event


def _kept_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {
        name: headers[name].replace("\x00", "\ufffd")  # PostgreSQL's jsonb holds no NUL
        for name in providers.KEPT_HEADERS
        if name in headers
    }


def _insert_new(event: RawEvent, *, provider: str, secret: str) -> int | None:
    """Insert the verified event unless one with its id is stored (the partial unique index
    rawevent_unique_verified_id decides, so concurrent deliveries race safely) or `secret` is
    not an active secret of its endpoint for `provider`; its id, or None. One statement, one
    round trip: no savepoint, no read first, and outside a transaction its own commit."""
    values = [f.get_db_prep_save(getattr(event, f.attname), connection) for f in _INSERTED]
    with connection.cursor() as cursor:
        cursor.execute(_INSERT_NEW, [*values, event.endpoint_id, provider, secret])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


# Every column but the id, in the model's order, each value prepared by its field as the ORM would.
_INSERTED = [field for field in RawEvent._meta.concrete_fields if not field.primary_key]
# The conflict target names the partial unique index by its columns and condition (PostgreSQL
# and SQLite both infer it); RETURNING gives nothing when the row was not inserted. The WHERE
# is SQLite's too, which needs one to read the ON CONFLICT of an INSERT ... SELECT.
_COLUMNS = ", ".join(f'"{field.column}"' for field in _INSERTED)
_INSERT_NEW = (
    f'INSERT INTO "{RawEvent._meta.db_table}" ({_COLUMNS}) '
    f"SELECT {', '.join(['%s'] * len(_INSERTED))} "
    'WHERE EXISTS (SELECT 1 FROM "webhooks_endpointsecret" s JOIN "webhooks_endpoint" e '
    "ON e.id = s.endpoint_id WHERE e.id = %s AND e.provider = %s AND s.secret = %s "
    "AND s.retired_at IS NULL) "
    "ON CONFLICT (endpoint_id, provider_event_id) WHERE verified DO NOTHING RETURNING id"
)


def _refuse(
    *,
    endpoint: Endpoint,
    body: bytes,
    headers: Mapping[str, str],
    refusal: providers.RequestRefused,
) -> NoReturn:
    """Count the refused request, quarantine it unless the endpoint is over its limit, and
    raise WebhookRefused saying which."""
    limit = settings.WEBHOOK_UNVERIFIED_PER_MINUTE
    seen = counters.count(selectors.unverified_counter_key(endpoint=endpoint), window_seconds=60)
    if seen > limit:
        raise WebhookRefused(
            RATE_LIMITED,
            f"more than {limit} requests to this endpoint in a minute were not verified events; "
            "the rest of the minute's are refused and not kept",
        )
    error = str(refusal).replace("\x00", "\ufffd")[:ERROR_CHARS]
    quarantine_add(
        endpoint=endpoint, reason=refusal.reason, body=body, headers=headers, error=error
    )
    raise WebhookRefused(refusal.reason, error)


@transaction.atomic
def quarantine_add(
    *, endpoint: Endpoint, reason: str, body: bytes, headers: Mapping[str, str], error: str
) -> UnverifiedRequest:
    """Keep what is worth keeping of a request that is not a verified event, count it on the
    endpoint, and drop the endpoint's requests past the newest WEBHOOK_QUARANTINE_KEEP and
    those older than WEBHOOK_QUARANTINE_SECONDS. The endpoint's row is updated first, so
    concurrent requests to one endpoint prune one after another."""
    now = timezone.now()
    Endpoint.objects.filter(pk=endpoint.pk).update(
        unverified_count=F("unverified_count") + 1, last_unverified_at=now
    )
    kept = UnverifiedRequest.objects.create(
        endpoint=endpoint,
        reason=reason,
        body_sha256=hashlib.sha256(body).hexdigest(),
        body_size=len(body),
        headers={name: value[:QUARANTINED_HEADER_CHARS] for name, value in headers.items()},
        error=error,
    )
    stale = Q(received_at__lt=_quarantine_horizon(now))
    keep = settings.WEBHOOK_QUARANTINE_KEEP
    mine = UnverifiedRequest.objects.filter(endpoint=endpoint)
    beyond = mine.order_by("-pk").values_list("pk", flat=True)[keep : keep + 1]
    oldest_dropped = next(iter(beyond), None)
    if oldest_dropped is not None:
        stale |= Q(pk__lte=oldest_dropped)
    mine.filter(stale).delete()
    return kept


def quarantine_prune() -> int:
    """Drop every quarantined request older than WEBHOOK_QUARANTINE_SECONDS (endpoints that
    receive nothing new prune nothing on insert); return how many. Safe to rerun."""
    expired = UnverifiedRequest.objects.filter(received_at__lt=_quarantine_horizon(timezone.now()))
    deleted, _ = expired.delete()
    return deleted


def _quarantine_horizon(now: datetime) -> datetime:
    return now - timedelta(seconds=settings.WEBHOOK_QUARANTINE_SECONDS)


@transaction.atomic(durable=True)
def event_ingest(*, raw_event_id: int) -> Ingestion:
    """Match a verified event to its effect and record it as OBSERVED evidence, settling the
    effect when the evidence can (notary.services.effects_observe); all in one transaction with
    the Ingestion row, so an event is ingested exactly once however often this runs."""
    [ingestion] = _ingest([_for_ingestion().get(pk=raw_event_id)])
    return ingestion


@transaction.atomic(durable=True)
def events_ingest(*, raw_event_ids: Sequence[int]) -> list[Ingestion]:
    """event_ingest for several events in one transaction (one commit, each log locked once
    and kept to the end); returns their Ingestion rows, ids that name no event left out. Each
    tenant's events go into its log in the order they arrived, and the logs are locked in one
    order (by tenant), so two batches wait for each other and never deadlock. All or nothing:
    if one event fails, none is ingested (the caller then takes them one at a time)."""
    return _ingest(
        list(_for_ingestion().filter(pk__in=raw_event_ids).order_by("endpoint__tenant", "pk"))
    )


def _for_ingestion() -> QuerySet[RawEvent]:
    # The raw event's row is the claim: locked until commit, so two ingestions of one event
    # queue and the second finds the first's Ingestion. Only that row: the endpoint's, tenant's
    # and log's come along to be read, and the log is locked by effects_observe as it appends.
    return RawEvent.objects.select_for_update(of=("self",)).select_related(
        "endpoint__tenant__log", "endpoint__target"
    )


def _ingest(events: Sequence[RawEvent]) -> list[Ingestion]:
    """Ingest the locked events in order, those ingested before left as they were; the reads
    that do not depend on what an earlier event changed (their Ingestion rows, the effects
    they name by id) are made once for all, and the new Ingestion rows written together. The
    evidence of consecutive matched events of one tenant is recorded together
    (notary.services.effects_observe does what one event after another would); an event
    matched by a lookup first has what came before it recorded, since that may be its match."""
    done = {i.raw_event_id: i for i in Ingestion.objects.filter(raw_event__in=events)}
    todo = [event for event in events if event.pk not in done]
    unverified = next((event for event in todo if not event.verified), None)
    if unverified is not None:
        raise WebhookInputError(f"raw event {unverified.pk} failed verification: nothing to ingest")
    observations = [_observation(event) for event in todo]
    named = set(
        Effect.objects.filter(
            effect_id__in={o.effect_id for o in observations if o.effect_id}
        ).values_list("tenant_id", "target", "effect_id")
    )
    made: dict[int, Ingestion] = {}
    matched: list[tuple[RawEvent, str, dict[str, Any]]] = []
    for event, observation in zip(todo, observations, strict=True):
        endpoint = event.endpoint
        if matched and (
            _by_result_ref(endpoint, observation)
            or matched[0][0].endpoint.tenant_id != endpoint.tenant_id
        ):
            made.update(_record(matched))
            matched = []
        effect_id = _effect_for(endpoint, observation, named)
        if effect_id is None:
            made[event.pk] = Ingestion(raw_event=event, outcome="unmatched")
        else:
            matched.append((event, effect_id, _evidence(event, observation)))
    made.update(_record(matched))
    Ingestion.objects.bulk_create([made[event.pk] for event in todo])
    return [done.get(event.pk) or made[event.pk] for event in events]


def _observation(event: RawEvent) -> providers.Observation:
    endpoint = event.endpoint
    return providers.PROVIDERS[endpoint.provider].observe(
        providers.Verified(event.provider_event_id, providers.json_object(bytes(event.body))),
        effect_id_path=endpoint.effect_id_path,
        positive_types=endpoint.positive_types,
        negative_types=endpoint.negative_types,
    )


def _evidence(event: RawEvent, observation: providers.Observation) -> dict[str, Any]:
    return {
        "source": "webhook",
        "provider": observation.provider,
        "event_id": observation.event_id,
        "type": observation.event_type,
        "occurred_at": observation.occurred_at,
        "outcome": observation.outcome,
        "result_ref": observation.result_ref,
        "body_sha256": hashlib.sha256(bytes(event.body)).hexdigest(),
    }


def _record(matched: Sequence[tuple[RawEvent, str, dict[str, Any]]]) -> dict[int, Ingestion]:
    """What the matched events of one tenant do, as their Ingestion rows (not saved yet): OBSERVED
    evidence on their effects, recorded together and in order."""
    if not matched:
        return {}
    recorded = notary_services.effects_observe(
        tenant=matched[0][0].endpoint.tenant,
        observations=[(effect_id, evidence) for _, effect_id, evidence in matched],
    )
    return {
        event.pk: Ingestion(
            raw_event=event, effect_id=effect_id, observed_seq=observed.seq, outcome=settled
        )
        for (event, effect_id, _), (observed, settled) in zip(matched, recorded, strict=True)
    }


def _effect_for(
    endpoint: Endpoint, observation: providers.Observation, named: set[tuple[int, str, str]]
) -> str | None:
    """The endpoint tenant's effect on the endpoint's target the event speaks of: by the effect
    id the gate put on the request (among `named`, the effects the batch's events name), else
    (Resend) by the email id the gate committed, looked up now: an earlier event of the batch
    may have recorded it."""
    target = endpoint.target.name
    if observation.effect_id:
        found = (endpoint.tenant_id, target, observation.effect_id) in named
        return observation.effect_id if found else None
    if _by_result_ref(endpoint, observation):
        effects = Effect.objects.filter(tenant_id=endpoint.tenant_id, target=target)
        return (
            effects.filter(result_ref=observation.result_ref)
            .values_list("effect_id", flat=True)
            .first()
        )
    return None


def _by_result_ref(endpoint: Endpoint, observation: providers.Observation) -> bool:
    """Whether the event is matched by a lookup of the email id it carries (no effect id)."""
    return (
        not observation.effect_id
        and bool(observation.result_ref)
        and providers.PROVIDERS[endpoint.provider].matches_result_ref
    )


def _enqueue(raw_event_id: int) -> None:
    """Queue a committed event for ingestion: inline where tasks run eagerly (the embedded mode,
    no broker), else its id onto the ingestion queue, sending ingest_pending if none is due."""
    from celery import current_app

    from webhooks.tasks import ingest_event, ingest_pending

    try:
        if current_app.conf.task_always_eager:
            ingest_event.delay(raw_event_id)
        elif queue.add(raw_event_id):
            ingest_pending.delay()
    except Exception:  # the broker is down: the event is stored, the sweep will ingest it
        log.warning("could not queue raw event %s for ingestion", raw_event_id, exc_info=True)
