"""Signed provider webhooks as the notary receives them: where each provider posts, the secrets
it signs with, and every request exactly as it arrived.

Raw events are append-only (triggers, migration 0002): what a provider said is kept byte for byte,
so the evidence the ledger cites can be checked against it. What ingestion made of an event is a
separate row, written once."""

from __future__ import annotations

import uuid

from django.db import models

from ledger.core.entries import MAX_EFFECT_ID_LENGTH
from notary.models import Target, Tenant


class Provider(models.TextChoices):
    STRIPE = "stripe"  # Stripe-Signature, verified by the stripe library
    RESEND = "resend"  # svix-* headers, verified by the svix library
    STANDARD = "standard"  # webhook-* headers (Standard Webhooks), by standardwebhooks


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
    endpoint = models.ForeignKey(Endpoint, on_delete=models.PROTECT, related_name="raw_events")
    received_at = models.DateTimeField(auto_now_add=True)
    provider_event_id = models.CharField(max_length=255, blank=True)
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
            )
        ]
        indexes = [models.Index(fields=["verified", "received_at"], name="rawevent_verified")]

    def __str__(self) -> str:
        return f"{self.endpoint.provider} {self.provider_event_id or '(unverified)'}"


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
