"""Who uses the notary: tenants (each owning one ledger log) and their API keys."""

from __future__ import annotations

from django.db import models

from ledger.models import Log


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    log = models.OneToOneField(Log, on_delete=models.PROTECT, related_name="tenant")
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.slug


class Role(models.TextChoices):
    AGENT = "agent"  # proposes, dispatches and reports outcomes of effects
    SERVICE = "service"  # a cooperating service attesting what it did
    APPROVER = "approver"  # grants and revokes leases
    AUDITOR = "auditor"  # reads receipts, proofs and exports


class ApiKey(models.Model):
    """A bearer key. Its secret is shown once at issue and stored only as a SHA-256 digest:
    the secret is 256 random bits, so a slow password hash would add nothing but latency."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="api_keys")
    key_id = models.CharField(max_length=16, unique=True)
    secret_sha256 = models.CharField(max_length=64)
    role = models.CharField(max_length=16, choices=Role.choices)
    label = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(role__in=Role.values), name="apikey_role_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.key_id} ({self.role})"
