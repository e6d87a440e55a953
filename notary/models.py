"""Who uses the notary and what they act on: tenants (each owning one ledger log), their API
keys, and the targets their agents send effects to."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import models

from gate_client.holds import DEFAULT_HOLD_SCOPE, HoldScope
from gate_client.leases import cases_in_words
from gate_client.money import MoneyDeclaration
from gate_client.protocol import TargetDeclaration
from gate_client.reconciliation import FindingKind
from gate_client.targets import Tier as GateTier
from ledger.core.entries import MAX_EFFECT_ID_LENGTH
from ledger.models import Log

# What an approver may grant unless the tenant's policy says otherwise.
DEFAULT_MAX_LEASE_AMOUNT_CENTS = 1_000_000
DEFAULT_MAX_LEASE_DURATION = timedelta(days=30)
DEFAULT_REVIEW_SLA = timedelta(hours=24)


class Tenant(models.Model):
    slug = models.SlugField(max_length=63, unique=True)
    name = models.CharField(max_length=200)
    log = models.OneToOneField(Log, on_delete=models.PROTECT, related_name="tenant")
    created_at = models.DateTimeField(auto_now_add=True)
    # The grant policy: no approver grants a lease whose amount_cents limit is larger, or that
    # runs longer from the moment it is granted.
    max_lease_amount_cents = models.PositiveBigIntegerField(
        default=DEFAULT_MAX_LEASE_AMOUNT_CENTS,
        help_text="the largest amount_cents limit an approver may grant on one lease",
    )
    max_lease_duration = models.DurationField(
        default=DEFAULT_MAX_LEASE_DURATION,
        help_text="the longest a lease may run, from its grant to its expires_at",
    )
    # Which new effects an effect waiting for a person holds undispatched (gate_client.holds).
    hold_scope = models.CharField(
        max_length=16,
        choices=[(scope.value, scope.label) for scope in HoldScope],
        default=DEFAULT_HOLD_SCOPE.value,
        help_text="while an effect is AMBIGUOUS or contradicted, which new effects of its case "
        "are held, not dispatched, until a person resolves it",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(hold_scope__in=[scope.value for scope in HoldScope]),
                name="tenant_hold_scope_valid",
            ),
            models.CheckConstraint(
                condition=models.Q(max_lease_amount_cents__gt=0),
                name="tenant_max_lease_amount_positive",
            ),
            models.CheckConstraint(
                condition=models.Q(max_lease_duration__gt=timedelta(0)),
                name="tenant_max_lease_duration_positive",
            ),
        ]

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
    # The person or system that holds the key, in canonical form (notary.identities): an
    # approver may not approve a request made under a key they hold.
    holder = models.CharField(max_length=200)
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # A service key attests only effects sent to these targets (none: it attests nothing).
    targets: models.ManyToManyField[Target, Any] = models.ManyToManyField(
        "Target",
        blank=True,
        related_name="service_keys",
        help_text="service keys: the targets whose effects it may attest",
    )

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(role__in=Role.values), name="apikey_role_valid"
            )
        ]

    def __str__(self) -> str:
        return f"{self.key_id} ({self.role})"


class Tier(models.IntegerChoices):
    DEDUPES = 1, "dedupes on a key"
    LOOKUP = 2, "can be looked up"
    NEITHER = 3, "neither"


class Target(models.Model):
    """A service effects are sent to, with what it allows (DESIGN §3). The windows decide when
    a "not found" may count: after max_inflight for a lookup, after evidence_window for
    webhook evidence."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="targets")
    name = models.CharField(max_length=63)
    tier = models.PositiveSmallIntegerField(choices=Tier.choices)
    queryable = models.BooleanField()
    key_window = models.DurationField(null=True, blank=True)
    max_inflight = models.DurationField()
    evidence_window = models.DurationField(null=True, blank=True)
    # Its service attests every request here before acting and refuses to act unacknowledged:
    # no attestation by max_inflight after a dispatch means it never acted.
    attests_before_acting = models.BooleanField(default=False)
    # Its lookup asks about the idempotency key (Resend's probe), so it says nothing once the
    # target has forgotten the key: past the key window it is not tier 2.
    lookup_needs_key = models.BooleanField(default=False)
    lookup_url = models.URLField(blank=True)  # the notary's own lookup, for tier 2
    # Where its payloads hold the money they move, in minor units (gate_client.money): the
    # amount's field ("" for a target that moves none), and the currency's field or the one
    # fixed currency (or neither).
    money_amount_field = models.CharField(max_length=100, blank=True)
    money_currency_field = models.CharField(max_length=100, blank=True)
    money_currency = models.CharField(max_length=3, blank=True)
    # How long its effects may wait for a person in the review queue before they are overdue.
    review_sla = models.DurationField(
        default=DEFAULT_REVIEW_SLA,
        help_text="how long an effect may wait in the review queue before it is overdue",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "name"], name="target_unique_name"),
            models.CheckConstraint(condition=models.Q(tier__in=Tier.values), name="target_tier"),
            models.CheckConstraint(
                condition=~models.Q(tier=Tier.LOOKUP) | models.Q(queryable=True),
                name="target_tier2_queryable",
            ),
            models.CheckConstraint(
                condition=models.Q(key_window__isnull=True) | models.Q(tier=Tier.DEDUPES),
                name="target_key_window_tier1",
            ),
            models.CheckConstraint(
                condition=models.Q(review_sla__gt=timedelta(0)), name="target_review_sla_positive"
            ),
            # Money is declared whole: a currency only beside an amount, in a field or fixed
            # (not both), the fixed one three capitals, and the amount and currency two fields.
            models.CheckConstraint(
                condition=(
                    models.Q(money_amount_field="", money_currency_field="", money_currency="")
                    | (
                        models.Q(money_amount_field__regex=r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
                        & (models.Q(money_currency_field="") | models.Q(money_currency=""))
                        & (
                            models.Q(money_currency="")
                            | models.Q(money_currency__regex=r"^[A-Z]{3}$")
                        )
                        & ~models.Q(money_currency_field=models.F("money_amount_field"))
                    )
                ),
                name="target_money_declared_whole",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.tenant.slug}/{self.name} (tier {self.tier})"

    def declaration(self) -> TargetDeclaration:
        """What this record declares, in the protocol's terms: the declaration the gate's
        adapter must match and every PROPOSED of the target carries."""
        money = (
            MoneyDeclaration(
                self.money_amount_field,
                self.money_currency_field or None,
                self.money_currency or None,
            )
            if self.money_amount_field
            else None
        )
        return TargetDeclaration(
            tier=GateTier(self.tier),
            queryable=self.queryable,
            max_inflight=self.max_inflight,
            key_window=self.key_window,
            evidence_window=self.evidence_window,
            attests_before_acting=self.attests_before_acting,
            lookup_needs_key=self.lookup_needs_key,
            money=money,
        )


def _one_case_scope(name: str) -> models.CheckConstraint:
    """A lease covers one case, or (standing) a class of cases, or a pattern: exactly one."""
    one, class_, pattern = (
        models.Q(case_id__gt="", case_class="", case_pattern=""),
        models.Q(case_id="", case_class__gt="", case_pattern=""),
        models.Q(case_id="", case_class="", case_pattern__gt=""),
    )
    return models.CheckConstraint(condition=one | class_ | pattern, name=name)


class Lease(models.Model):
    """A projection of the tenant's LEASE_GRANTED / LEASE_REVOKED ledger entries, kept for
    queries; the entries are what a receipt's authorized_when_fired is replayed from."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="leases")
    lease_id = models.CharField(max_length=40, unique=True)
    case_id = models.CharField(max_length=200, blank=True)  # "": a standing lease
    action = models.CharField(max_length=100)
    limits = models.JSONField(default=dict)
    payload_hash = models.CharField(max_length=64, blank=True)  # "": any payload in scope
    # ISO 4217: it approves only payloads in this currency, and its limits count in it.
    currency = models.CharField(max_length=3, blank=True)  # "": any currency
    # A standing lease: every case of this class, or every case id matching this pattern
    # (case_id is then ""); see gate_client.leases.Lease.
    case_class = models.CharField(max_length=200, blank=True)
    case_pattern = models.CharField(max_length=200, blank=True)
    # Rolling budgets, each as gate_client.budgets.Budget.body() gives it; []: none.
    budgets = models.JSONField(default=list, blank=True)
    expires_at = models.DateTimeField()
    requested_by = models.CharField(max_length=200)
    granted_by = models.CharField(max_length=200)
    granted_seq = models.BigIntegerField()
    revoked_at = models.DateTimeField(null=True, blank=True)
    revoked_by = models.CharField(max_length=200, blank=True)
    revoked_seq = models.BigIntegerField(null=True, blank=True)
    revoked_reason = models.TextField(blank=True)  # as the LEASE_REVOKED entry records it
    # Granted from an AP2 mandate: its hash (gate_client.mandates.mandate_hash), the budget
    # pool the leases of one mandate share; "": none. `mandate_once`: a one-payment or
    # Checkout Mandate, which grants one lease.
    mandate_hash = models.CharField(max_length=64, blank=True)
    mandate_once = models.BooleanField(default=False)

    class Meta:
        permissions = [("revoke_lease", "Can revoke a lease (writes LEASE_REVOKED)")]
        constraints = [
            _one_case_scope("lease_one_case_scope"),
            # The grant refuses a second lease under the log lock; this is the second line.
            models.UniqueConstraint(
                fields=["tenant", "mandate_hash"],
                condition=models.Q(mandate_once=True),
                name="lease_mandate_once",
            ),
        ]
        indexes = [
            models.Index(
                fields=["tenant", "mandate_hash"],
                name="lease_mandate",
                condition=models.Q(mandate_hash__gt=""),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.lease_id}: {self.action} on {self.cases}"

    @property
    def cases(self) -> str:
        return cases_in_words(self.case_id, self.case_class, self.case_pattern)


class LeaseRequest(models.Model):
    """A lease asked for under an agent key: the key's holder is the requester, and no approver
    who holds that key grants it. Granting it makes the Lease named here."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="lease_requests")
    request_id = models.CharField(max_length=40, unique=True)
    case_id = models.CharField(max_length=200, blank=True)  # "": a standing lease
    action = models.CharField(max_length=100)
    limits = models.JSONField(default=dict)
    payload_hash = models.CharField(max_length=64, blank=True)  # "": any payload in scope
    # ISO 4217: it approves only payloads in this currency, and its limits count in it.
    currency = models.CharField(max_length=3, blank=True)  # "": any currency
    # A standing lease: every case of this class, or every case id matching this pattern
    # (case_id is then ""); see gate_client.leases.Lease.
    case_class = models.CharField(max_length=200, blank=True)
    case_pattern = models.CharField(max_length=200, blank=True)
    budgets = models.JSONField(default=list, blank=True)  # as on Lease
    expires_at = models.DateTimeField()
    requested_key = models.ForeignKey(
        ApiKey, on_delete=models.PROTECT, related_name="lease_requests"
    )
    requested_by = models.CharField(max_length=200)  # the key's holder when it asked
    created_at = models.DateTimeField(auto_now_add=True)
    lease = models.OneToOneField(
        Lease, null=True, blank=True, on_delete=models.PROTECT, related_name="request"
    )

    class Meta:
        constraints = [_one_case_scope("leaserequest_one_case_scope")]

    def __str__(self) -> str:
        return f"{self.request_id}: {self.action} on {self.case_id} for {self.requested_by}"


class Effect(models.Model):
    """A projection of one effect's ledger entries, kept for queries (the in-flight list, the
    recovery sweep, the review queue). `rebuild_effects` recomputes it from the entries alone;
    the entries, never this row, are what a receipt is derived from."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="effects")
    effect_id = models.CharField(max_length=MAX_EFFECT_ID_LENGTH)
    case_id = models.CharField(max_length=200)
    target = models.CharField(max_length=63)
    action = models.CharField(max_length=100)
    lease_id = models.CharField(max_length=100)
    payload_hash = models.CharField(max_length=64)
    state = models.CharField(max_length=100)  # the receipt's final state
    attempts = models.PositiveIntegerField(default=0)
    proposed_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    proposed_at = models.DateTimeField()
    dispatched_at = models.DateTimeField(null=True, blank=True)  # the last attempt's
    settled_at = models.DateTimeField(null=True, blank=True)  # its first verdict's time
    # What the target called it (a refund id, an email id), once committed: a webhook naming
    # only that is matched to the effect by it.
    result_ref = models.CharField(max_length=255, blank=True)
    # Evidence at odds with the final state that no person has settled: back in the queue.
    contradicted = models.BooleanField(default=False)
    # What it moves, as its payload says (gate_client.money): shown and filtered as money.
    amount_minor = models.BigIntegerField(null=True, blank=True)
    currency = models.CharField(max_length=3, blank=True)
    # Since when it waits for a person (AMBIGUOUS, or contradicted); null: for nobody.
    queued_at = models.DateTimeField(null=True, blank=True)
    # What it holds of its lease's budgets (gate_client.budgets.spend_of): from its first
    # dispatch, by its agent key; null once it gives the spend back, or if it never spent.
    spent_at = models.DateTimeField(null=True, blank=True)
    spent_amount = models.BigIntegerField(null=True, blank=True)
    spent_by = models.CharField(max_length=16, blank=True)
    # HELD: the effect of its case whose wait for a person holds it (gate_client.holds).
    held_by = models.CharField(max_length=MAX_EFFECT_ID_LENGTH, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "effect_id"], name="effect_unique_id"),
        ]
        indexes = [
            models.Index(fields=["tenant", "state", "proposed_seq"], name="effect_state"),
            models.Index(fields=["tenant", "result_ref"], name="effect_result_ref"),
            models.Index(
                fields=["tenant", "lease_id", "spent_at"],
                name="effect_budget_spends",
                condition=models.Q(spent_at__isnull=False),
            ),
            # The holds: a case's effects, on a target (gate_client.holds.scope_fields).
            models.Index(fields=["tenant", "case_id", "target"], name="effect_case"),
        ]
        permissions = [("resolve_effect", "Can resolve an AMBIGUOUS effect (writes RESOLVED)")]

    def __str__(self) -> str:
        return f"{self.effect_id}: {self.state}"


# The effects waiting for a person: AMBIGUOUS, or whose evidence contradicts their verdict. The
# same condition twice, side by side: as a query, and of one row's fields in hand.
WAITING_FOR_A_PERSON = models.Q(state="AMBIGUOUS") | models.Q(contradicted=True)


def waits_for_a_person(fields: Mapping[str, Any] | None) -> bool:
    """WAITING_FOR_A_PERSON, of one effect's projected fields (None: no row yet)."""
    return fields is not None and (fields["state"] == "AMBIGUOUS" or bool(fields["contradicted"]))


class AmbiguousEffect(Effect):
    """The review queue: effects the notary cannot settle, or whose evidence contradicts their
    verdict, waiting for a person."""

    class Meta:
        proxy = True
        verbose_name = "effect to review"
        verbose_name_plural = "effects to review"


class ReviewAssignment(models.Model):
    """Who is working an effect in the review queue: the desk's workflow, not the record, so it
    is kept beside the Effect projection (which rebuild_effects recreates) and never in the
    ledger. A person's notes on the effect are NOTED ledger entries."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="assignments")
    effect_id = models.CharField(max_length=MAX_EFFECT_ID_LENGTH)
    assignee = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="review_assignments"
    )
    assigned_by = models.CharField(max_length=150)  # the username of whoever assigned it
    assigned_at = models.DateTimeField()

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "effect_id"], name="assignment_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.effect_id} → {self.assignee}"


class ReviewNotifications(models.Model):
    """Who a tenant's review notices go to: these addresses (none: the active Finance reviewers
    with an email address), and a chat tool's webhook, signed with the notary's secret for it
    (Standard Webhooks, `whsec_...`), which `notify_reviewers` shows once."""

    tenant = models.OneToOneField(
        Tenant, on_delete=models.PROTECT, related_name="review_notifications"
    )
    emails = models.JSONField(default=list, blank=True)
    webhook_url = models.URLField(max_length=2000, blank=True)
    webhook_secret = models.CharField(max_length=200, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "review notifications"
        verbose_name_plural = "review notifications"
        constraints = [
            models.CheckConstraint(
                condition=models.Q(webhook_url="") | ~models.Q(webhook_secret=""),
                name="reviewnotifications_webhook_signed",
            )
        ]

    def __str__(self) -> str:
        return f"review notifications of {self.tenant.slug}"


class ReviewEvent(models.TextChoices):
    ENTERED_QUEUE = "entered_queue", "entered the review queue"
    SLA_PASSED = "sla_passed", "passed its review SLA"
    DECISION_CONTRADICTED = "decision_contradicted", "a person's decision was contradicted"


class ReviewNotice(models.Model):
    """The outbox of what the reviewers are told: written in the transaction that changed the
    effect, once per event and cause (the entry that queued or contradicted it, or for an SLA
    the moment it began waiting), and sent after commit. A channel's `*_sent_at` is its claim,
    taken before sending, so nothing is sent twice; `*_error` says why the last try did not
    (certainly) deliver."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="review_notices")
    effect_id = models.CharField(max_length=MAX_EFFECT_ID_LENGTH)
    event = models.CharField(max_length=32, choices=ReviewEvent.choices)
    cause = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    email_to = models.TextField(blank=True)  # the addresses it went to, when claimed
    email_sent_at = models.DateTimeField(null=True, blank=True)
    email_error = models.TextField(blank=True)
    webhook_url = models.URLField(max_length=2000, blank=True)  # where it went, when claimed
    webhook_sent_at = models.DateTimeField(null=True, blank=True)
    webhook_error = models.TextField(blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "effect_id", "event", "cause"], name="reviewnotice_once"
            ),
            models.CheckConstraint(
                condition=models.Q(event__in=ReviewEvent.values), name="reviewnotice_event_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.effect_id}: {self.event} ({self.cause})"


class ReconciliationProvider(models.TextChoices):
    STRIPE = "stripe"  # Stripe refunds, listed by created time through the stripe SDK
    RESEND = "resend"  # Resend emails: its list and each email's tags (a full-access key)
    REFERENCE = "reference"  # the HttpTarget contract's list, GET /effects?created_gte=...


class ReconciliationSource(models.Model):
    """Where the notary lists what a target's provider did, and the key it reads with.

    The key is kept server-side, for the notary's reconciliation only: it is never shown (the
    admin says only whether one is set), logged, or written into a finding. A read-only key is
    enough and is the one to give (a Stripe restricted key that reads refunds; Resend's list
    needs a full-access key, which is why an email target may go unreconciled)."""

    target = models.OneToOneField(
        Target, on_delete=models.PROTECT, related_name="reconciliation_source"
    )
    provider = models.CharField(max_length=16, choices=ReconciliationProvider.choices)
    base_url = models.URLField(max_length=2000, blank=True)  # "": the provider's own API
    api_key = models.CharField(max_length=500, blank=True)
    # How long before a window the provider is listed: an effect settled in the window may
    # have had its object made that much earlier (gate_client.reconciliation).
    lookback = models.DurationField()
    enabled = models.BooleanField(default=True)  # the beat reconciles it
    # The end of the last window the beat reconciled: where its next window starts.
    reconciled_until = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=models.Q(provider__in=ReconciliationProvider.values),
                name="reconciliationsource_provider_valid",
            ),
            models.CheckConstraint(
                condition=~models.Q(provider=ReconciliationProvider.REFERENCE)
                | ~models.Q(base_url=""),
                name="reconciliationsource_reference_has_url",
            ),
            models.CheckConstraint(
                condition=models.Q(lookback__gte=timedelta(0)),
                name="reconciliationsource_lookback_not_negative",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.provider} for {self.target}"


class ReconciliationFinding(models.Model):
    """A projection of the tenant's RECONCILED ledger entries, kept for the admin's list and so
    that each finding is written once: one per target, kind and subject (the provider's object,
    or the effect the provider does not show). The entry, never this row, is the record."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="findings")
    target = models.CharField(max_length=63)
    kind = models.CharField(max_length=32, choices=[(k.value, k.value) for k in FindingKind])
    subject = models.CharField(max_length=255)
    effect_id = models.CharField(max_length=MAX_EFFECT_ID_LENGTH, blank=True)  # "": none
    provider_ref = models.CharField(max_length=255, blank=True)  # "": not shown
    since = models.DateTimeField()  # the window it was found in
    until = models.DateTimeField()
    seq = models.BigIntegerField()  # its RECONCILED entry
    found_at = models.DateTimeField()
    body = models.JSONField()  # the entry's body: the window, the finding, the evidence

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["tenant", "target", "kind", "subject"], name="finding_once"
            ),
            models.CheckConstraint(
                condition=models.Q(kind__in=[k.value for k in FindingKind]),
                name="finding_kind_valid",
            ),
        ]
        indexes = [
            models.Index(fields=["tenant", "effect_id"], name="finding_effect"),
            models.Index(fields=["tenant", "seq"], name="finding_seq"),  # the API's pages
        ]

    def __str__(self) -> str:
        return f"{self.target}: {self.kind} {self.subject}"


class MandateKeyRole(models.TextChoices):
    USER = "user"  # signs mandates: a user's key, or their agent provider's trusted surface's
    MERCHANT = "merchant"  # signs the checkout JWTs that closed Checkout Mandates approve


class MandateKey(models.Model):
    """A public key whose AP2 mandates the tenant accepts as the evidence of a lease. Its id is
    the key's RFC 7638 thumbprint: a mandate's signer is the key that verifies it, never a name
    the mandate gives itself. Revoked, it verifies no new grant; leases granted stand."""

    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="mandate_keys")
    key_id = models.CharField(max_length=64)
    role = models.CharField(max_length=16, choices=MandateKeyRole.choices)
    holder = models.CharField(max_length=200)
    jwk = models.JSONField()  # the public JWK, as gate_client.mandates.trusted_key keeps it
    created_at = models.DateTimeField(auto_now_add=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["tenant", "key_id"], name="mandatekey_once"),
            models.CheckConstraint(
                condition=models.Q(role__in=MandateKeyRole.values), name="mandatekey_role_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.holder} ({self.role} key {self.key_id})"
