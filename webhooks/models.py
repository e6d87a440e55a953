"""Signed provider webhooks as the notary receives them: where each provider posts, the secrets
it signs with, and every request exactly as it arrived.

Raw events are append-only (triggers, migration 0002) and hold verified events only (migration
0003): what a provider said is kept byte for byte, so the evidence the ledger cites can be checked
against it. What ingestion made of an event is a separate row, written once. A request that is
not a verified event is kept apart, bounded: a few recent ones per endpoint, as digests, in a
quarantine that expires, and a count of them on the endpoint."""

from __future__ import annotations

import uuid

from django.db import models

from ledger.core.entries import MAX_EFFECT_ID_LENGTH
from notary.models import Target, Tenant

# The longest provider event id kept (Stripe's and svix's ids are some 30 characters).
MAX_EVENT_ID_LENGTH = 255


class Provider(models.TextChoices):
    STRIPE = "stripe"  # Stripe-Signature, verified by the stripe library
    RESEND = "resend"  # svix-* headers, verified by the svix library
    STANDARD = "standard"  # webhook-* headers (Standard Webhooks), by standardwebhooks


class Refusal(models.TextChoices):
    """Why a request is not a verified event; also the `error` code of its 400."""

    SIGNATURE = "signature"  # no active secret verifies it
    EVENT = "invalid_event"  # signed, but not an event the notary can keep


class Endpoint(models.Model):
    """One URL a provider posts to, reporting on one target of one tenant."""

    public_id = models.UUIDField(default=uuid.uuid4, unique=True, editable=False)
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="webhook_endpoints")
    target = models.ForeignKey(Target, on_delete=models.PROTECT, related_name="webhook_endpoints")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    # Standard Webhooks only: where the effect id sits in an event (a dotted path), and which
    # event types say the effect was done or was not.
    effect_id_path = models.CharField(max_length=200, blank=True)
    positive_types = models.JSONField(default=list, blank=True)
    negative_types = models.JSONField(default=list, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    # Requests quarantined since the endpoint was made (the quarantine keeps only recent ones).
    unverified_count = models.PositiveBigIntegerField(default=0)
    last_unverified_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(provider__in=Provider.values), name="endpoint_provider_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.provider} → {self.target}"


class EndpointSecret(models.Model):
    """A signing secret the provider may use. Several are active while a secret is rotated; the
    secret itself must be kept, since verifying an HMAC needs it."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.PROTECT, related_name="secrets")
    secret = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    retired_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"secret {self.pk} of {self.endpoint}"


class RawEvent(models.Model):
    """A verified event, exactly as it arrived. Rows stored before migration 0003 may be
    unverified (verified=False, with the reason); none are added since."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.PROTECT, related_name="raw_events")
    received_at = models.DateTimeField(auto_now_add=True)
    provider_event_id = models.CharField(max_length=MAX_EVENT_ID_LENGTH, blank=True)
    headers = models.JSONField()  # the signature headers and the content type, as sent
    body = models.BinaryField()  # the exact bytes the signature covers
    verified = models.BooleanField()
    verification_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            # Only a verified event claims its id: a forged request cannot pre-empt a real one.
            models.UniqueConstraint(
                fields=["endpoint", "provider_event_id"],
                condition=models.Q(verified=True),
                name="rawevent_unique_verified_id",
            ),
            # Checked for new rows only (NOT VALID on PostgreSQL, an insert trigger on SQLite):
            # rows stored before it, unverified ones included, stay as they were.
            models.CheckConstraint(
                condition=models.Q(verified=True), name="rawevent_verified_only"
            ),
        ]
        indexes = [models.Index(fields=["verified", "received_at"], name="rawevent_verified")]

    def __str__(self) -> str:
        return f"{self.endpoint.provider} {self.provider_event_id or '(unverified)'}"


class UnverifiedRequest(models.Model):
    """A request that is not a verified event, kept so that it can be looked into: its digest
    and size (not its body), the headers the signature would use and why it was refused. The
    newest WEBHOOK_QUARANTINE_KEEP per endpoint are kept, none past WEBHOOK_QUARANTINE_SECONDS;
    the endpoint counts them all."""

    endpoint = models.ForeignKey(Endpoint, on_delete=models.CASCADE, related_name="unverified")
    received_at = models.DateTimeField(auto_now_add=True)
    reason = models.CharField(max_length=16, choices=Refusal.choices)
    body_sha256 = models.CharField(max_length=64)
    body_size = models.PositiveIntegerField()
    headers = models.JSONField()  # the kept headers, each value cut to a bounded length
    error = models.TextField()

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(reason__in=Refusal.values), name="unverified_reason_valid"
            )
        ]
        indexes = [
            models.Index(fields=["endpoint", "id"], name="unverified_endpoint"),
            models.Index(fields=["received_at"], name="unverified_received"),
        ]

    def __str__(self) -> str:
        return f"{self.reason} at {self.endpoint}"


class Ingestion(models.Model):
    """What ingestion made of one verified event: the effect it matched and the OBSERVED entry
    it appended, or why it matched none. Its existence is what makes ingestion run once."""

    raw_event = models.OneToOneField(RawEvent, on_delete=models.PROTECT, related_name="ingestion")
    ingested_at = models.DateTimeField(auto_now_add=True)
    effect_id = models.CharField(max_length=MAX_EFFECT_ID_LENGTH, blank=True)
    observed_seq = models.BigIntegerField(null=True, blank=True)
    outcome = models.CharField(max_length=40)  # what the evidence did (see services)

    def __str__(self) -> str:
        return f"{self.raw_event}: {self.outcome}"
