"""The admin, for finance staff and operators: the AMBIGUOUS review queue and each effect's page,
leases with a revoke action (confirmed, with a reason), API keys (a new one shown once), tenants
and targets, who was told of each review (notify_reviewers sets who is), and what reconciliation
with the providers found (each finding with its evidence; its effect's page shows it too).
Nothing in the ledger is edited here: a decision or a revocation is a ledger entry written by a
service."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

from babel.numbers import get_currency_precision, list_currencies
from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.contrib.auth.models import User
from django.core.exceptions import PermissionDenied
from django.db.models import (
    Case,
    ExpressionWrapper,
    F,
    FloatField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Value,
    When,
)
from django.db.models.expressions import OrderBy
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseRedirect,
    StreamingHttpResponse,
)
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from django.utils.timesince import timesince

from gate_client.leases import cases_in_words
from gate_client.mandates import mandate_in_words
from ledger.admin import ReadOnlyAdmin
from notary import selectors, services
from notary.errors import NotaryConflict, NotaryInputError
from notary.exports import export_receipts
from notary.models import (
    AmbiguousEffect,
    ApiKey,
    Effect,
    Lease,
    LeaseRequest,
    MandateKey,
    ReconciliationFinding,
    ReconciliationSource,
    ReviewNotice,
    ReviewNotifications,
    Target,
    Tenant,
)
from notary.templatetags.review import as_json, budgets, limits, money

# The desk's pages need the width: the queue's columns and an effect's ledger entries matter
# more than a sidebar repeating the home page's list.
admin.site.enable_nav_sidebar = False
admin.site.site_header = "Interlock notary"
admin.site.site_title = "Interlock notary"


class AgeFilter(admin.SimpleListFilter):
    title = "age"
    parameter_name = "age"
    since = "proposed_at"  # the moment an effect's age counts from
    _AGES = {"1h": timedelta(hours=1), "1d": timedelta(days=1), "7d": timedelta(days=7)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("1h", "older than an hour"),
            ("1d", "older than a day"),
            ("7d", "older than a week"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        age = self._AGES.get(self.value() or "")
        if age is None:
            return queryset
        return queryset.filter(**{f"{self.since}__lte": timezone.now() - age})


class WaitingFilter(AgeFilter):
    """In the review queue, age is how long an effect has waited for a person."""

    title = "waiting"
    since = "queued_at"


class OverdueFilter(admin.SimpleListFilter):
    title = "review SLA"
    parameter_name = "overdue"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "overdue"), ("no", "within its SLA")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        now = timezone.now()
        if self.value() == "yes":
            return queryset.filter(review_due__lte=now)
        if self.value() == "no":
            return queryset.filter(review_due__gt=now)
        return queryset


class AmountFilter(admin.SimpleListFilter):
    """Amounts in each effect's own currency, counted in its major unit (dollars, yen)."""

    title = "amount"
    parameter_name = "amount"
    _BANDS = {"small": (None, 100), "medium": (100, 1000), "large": (1000, None)}

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("small", "under 100"),
            ("medium", "100 to 1,000"),
            ("large", "1,000 or more"),
            ("none", "no amount"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "none":
            return queryset.filter(amount_minor__isnull=True)
        band = self._BANDS.get(self.value() or "")
        if band is None:
            return queryset
        low, high = band
        chosen = Q(pk__in=[])
        for currency in queryset.values_list("currency", flat=True).distinct():
            unit = 10 ** (get_currency_precision(currency) if currency else 2)  # none: as cents
            within = Q(currency=currency, amount_minor__isnull=False)
            if low is not None:
                within &= Q(amount_minor__gte=low * unit)
            if high is not None:
                within &= Q(amount_minor__lt=high * unit)
            chosen |= within
        return queryset.filter(chosen)


def _amount_in_major_units() -> ExpressionWrapper[Case]:
    """An effect's amount in whole units of its own currency (dollars, yen), to sort by."""
    minor = ExpressionWrapper(F("amount_minor") * Value(1.0), output_field=FloatField())
    exponents = {code: get_currency_precision(code) for code in list_currencies()}
    return ExpressionWrapper(
        Case(
            *[
                When(currency=code, then=minor / Value(10.0**exponent))
                for code, exponent in sorted(exponents.items())
                if exponent != 2
            ],
            default=minor / Value(100.0),
        ),
        output_field=FloatField(),
    )


_AMOUNT_MAJOR = _amount_in_major_units()


class RevokedFilter(admin.SimpleListFilter):
    title = "revoked"
    parameter_name = "revoked"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("yes", "yes"), ("no", "no")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() not in ("yes", "no"):
            return queryset
        return queryset.filter(revoked_at__isnull=self.value() == "no")


def _plural(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


def _leases_revoked(seqs: list[int], already: int) -> str:
    """What the revoke action wrote, counted: a lease revoked before gets no second entry."""
    said = "No lease revoked"
    if seqs:
        entries = ", ".join(str(seq) for seq in seqs)
        said = (
            f"Revoked {len(seqs)} {_plural(len(seqs), 'lease', 'leases')} "
            f"(ledger {_plural(len(seqs), 'entry', 'entries')} {entries})"
        )
    if already:
        said += (
            f"; {already} {_plural(already, 'was', 'were')} already revoked, "
            f"nothing written for {_plural(already, 'it', 'them')}"
        )
    return said + "."


def _keys_revoked(revoked: int, already: int) -> str:
    said = f"Revoked {revoked} {_plural(revoked, 'key', 'keys')}" if revoked else "No key revoked"
    if already:
        said += f"; {already} {_plural(already, 'was', 'were')} already revoked"
    return said + "."


class RevokeForm(forms.Form):
    reason = forms.CharField(
        max_length=services.MAX_REVOCATION_REASON,
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="Why these leases end: recorded in each LEASE_REVOKED entry with your name.",
    )


class ResolveForm(forms.Form):
    happened = forms.TypedChoiceField(
        label="Decision",
        choices=[("yes", "It happened"), ("no", "It did not happen")],
        coerce=lambda value: value == "yes",
        widget=forms.RadioSelect,
    )
    reason = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3, "cols": 80}),
        help_text="What you checked, and where: it is recorded in the ledger with your name.",
    )
    # Set by the confirmation step: the decision is written only once it was shown back.
    confirmed = forms.BooleanField(required=False, widget=forms.HiddenInput)


@admin.register(Effect)
class EffectAdmin(ReadOnlyAdmin):
    list_display = [
        "effect_id",
        "amount",
        "action",
        "case_id",
        "target",
        "state",
        "held",
        "tenant",
        "proposed_at",
    ]
    list_filter = ["state", "target", "tenant", AgeFilter, AmountFilter, "currency"]
    search_fields = ["effect_id", "case_id"]
    ordering = ["proposed_at"]
    list_select_related = ["tenant"]

    @admin.display(description="amount", ordering=OrderBy(F("amount_major"), nulls_last=True))
    def amount(self, effect: Any) -> str:
        return money(effect.amount_minor, effect.currency)

    @admin.display(description="held by")
    def held(self, effect: Any) -> str:
        """The effect holding a HELD one, linked to its page."""
        if effect.holder_pk is None:
            return str(effect.held_by)  # "" unless held (by an effect no longer projected)
        url = reverse("admin:notary_effect_change", args=[effect.holder_pk])
        return format_html('<a href="{}">{}</a>', url, effect.held_by)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        holder = Effect.objects.filter(tenant=OuterRef("tenant"), effect_id=OuterRef("held_by"))
        effects: QuerySet[Any] = (
            super()
            .get_queryset(request)
            .annotate(amount_major=_AMOUNT_MAJOR, holder_pk=Subquery(holder.values("pk")[:1]))
        )
        return effects

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """The effect's page: what it was, what the ledger says, who is on it and their notes,
        and for an AMBIGUOUS or contradicted one that the viewer may decide, the decision."""
        # Any state: an effect someone decided meanwhile is shown as decided, not as a 404.
        effect = Effect.objects.select_related("tenant").filter(pk=object_id).first()
        if effect is None or not self.has_view_permission(request, effect):
            raise Http404("no such effect")
        open_ = effect.state == "AMBIGUOUS" or effect.contradicted
        may_decide = request.user.has_perm("notary.resolve_effect")
        posted = request.POST if request.method == "POST" and "reason" in request.POST else None
        form = ResolveForm(posted) if open_ and may_decide else None
        note = NoteForm(request.POST if "note" in request.POST else None)
        overtaken: str | None = None  # what the reviewer posted, kept when it came too late
        confirming: ResolveForm | None = None
        if request.method == "POST":
            if not may_decide:
                raise PermissionDenied("this effect cannot be worked by you")
            if "note" in request.POST or "assign_to" in request.POST:
                done = self._work(request, effect, note)
            else:
                done, overtaken, confirming, form = self._decide(request, effect, form)
            if done is not None:
                return done
        review = selectors.effect_review(effect=effect)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": f"{effect.action} on {effect.case_id}",
            "effect": effect,
            "review": review,
            "form": form,
            "note_form": note if may_decide else None,
            "reviewers": selectors.reviewers() if may_decide and open_ else None,
            "overtaken": overtaken,
            "confirming": confirming,
            "decided": review.last_resolution if overtaken is not None else None,
            "holder": selectors.effect_holder(effect=effect),
        }
        return TemplateResponse(request, "admin/notary/effect/review.html", context)

    def _decide(
        self, request: HttpRequest, effect: Effect, form: ResolveForm | None
    ) -> tuple[HttpResponse | None, str | None, ResolveForm | None, ResolveForm | None]:
        """A decision posted: (the redirect once it is written, what the reviewer wrote when
        someone decided first, the form to confirm, the decision form to show again)."""
        if form is None:
            return None, request.POST.get("reason", ""), None, None
        if not form.is_valid():
            return None, None, None, form
        if not form.cleaned_data["confirmed"]:
            return None, None, form, form  # shown back, to be confirmed once
        try:
            entry = services.effect_resolve(
                tenant=effect.tenant,
                effect_id=effect.effect_id,
                happened=form.cleaned_data["happened"],
                reason=form.cleaned_data["reason"],
                by=request.user.get_username(),
            )
        except NotaryConflict:  # decided between this page and this submit
            effect.refresh_from_db()
            return None, form.cleaned_data["reason"], None, None
        decided = "it happened" if form.cleaned_data["happened"] else "it did not happen"
        self.log_change(request, effect, f"Resolved ({decided}): ledger entry {entry.seq}")
        messages.success(request, f"Resolved {effect.effect_id}: ledger entry {entry.seq}")
        return (
            HttpResponseRedirect(reverse("admin:notary_ambiguouseffect_changelist")),
            None,
            None,
            None,
        )

    def _work(self, request: HttpRequest, effect: Effect, note: NoteForm) -> HttpResponse | None:
        """A note written, or the effect taken or assigned: back to its page, or None to show
        the page again with the form's errors."""
        page = HttpResponseRedirect(request.path)
        by = request.user.get_username()
        if "note" in request.POST:
            if not note.is_valid():
                return None
            try:
                entry = services.effect_note(
                    tenant=effect.tenant,
                    effect_id=effect.effect_id,
                    text=note.cleaned_data["note"],
                    by=by,
                )
            except NotaryInputError as refused:
                note.add_error("note", str(refused))
                return None
            self.log_change(request, effect, f"Noted: ledger entry {entry.seq}")
            messages.success(request, f"Your note is ledger entry {entry.seq}")
            return page
        chosen = request.POST.get("assign_to", "")
        if chosen == "":
            if services.review_unassign(tenant=effect.tenant, effect_id=effect.effect_id):
                self.log_change(request, effect, "Given back to the queue")
            return page
        assignee = selectors.reviewers().filter(pk=chosen).first() if chosen.isdigit() else None
        if assignee is None:
            messages.error(request, "Choose a reviewer from the list.")
            return page
        _assign(self, request, effect.tenant, [effect], assignee)
        return page


def _assign(
    model_admin: admin.ModelAdmin[Any],
    request: HttpRequest,
    tenant: Tenant,
    effects: list[Effect],
    assignee: User,
) -> int:
    """Assign `effects` (of one tenant) and say so, in a message and in the admin's history."""
    by = request.user.get_username()
    assigned = services.review_assign(
        tenant=tenant, effect_ids=[e.effect_id for e in effects], assignee=assignee, by=by
    )
    for effect in effects:
        if effect.effect_id in assigned:
            model_admin.log_change(request, effect, f"Assigned to {assignee.get_username()}")
    left = len(effects) - len(assigned)
    said = f"Assigned {_count(len(assigned), 'effect')} to {assignee.get_username()}"
    if left:
        said += f"; {_count(left, 'effect')} no longer waiting for a person, left as they were"
    messages.success(request, said + ".")
    return len(assigned)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


class NoteForm(forms.Form):
    note = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 3}),
        max_length=services.MAX_NOTE,
        help_text="Kept in the ledger with the effect, with your name and the time.",
    )


class AssignForm(forms.Form):
    assignee = forms.ModelChoiceField(queryset=User.objects.none(), label="Assign to")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fields["assignee"].queryset = selectors.reviewers()  # type: ignore[attr-defined]


class AssignedFilter(admin.SimpleListFilter):
    title = "assigned"
    parameter_name = "assigned"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [("me", "to me"), ("nobody", "to nobody"), ("anyone", "to anyone")]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "me":
            return queryset.filter(assigned_to=request.user.get_username())
        if self.value() == "nobody":
            return queryset.filter(assigned_to__isnull=True)
        if self.value() == "anyone":
            return queryset.filter(assigned_to__isnull=False)
        return queryset


@admin.register(AmbiguousEffect)
class AmbiguousEffectAdmin(EffectAdmin):
    list_display = [
        "effect_id",
        "amount",
        "action",
        "case_id",
        "target",
        "waiting",
        "assigned",
        "tenant",
    ]
    list_filter = [
        AssignedFilter,
        OverdueFilter,
        WaitingFilter,
        AmountFilter,
        "currency",
        "target",
        "tenant",
    ]
    ordering = ["queued_at"]
    actions = ["take", "assign"]

    @admin.display(description="assigned to", ordering="assigned_to")
    def assigned(self, effect: Any) -> str:
        return effect.assigned_to or "-"

    @admin.action(description="Take the selected effects (assign them to me)", permissions=["work"])
    def take(self, request: HttpRequest, queryset: QuerySet[Effect]) -> None:
        me = selectors.reviewers().filter(username=request.user.get_username()).first()
        if me is None:
            messages.error(request, "Only a reviewer who may decide effects takes them.")
            return
        for tenant, effects in _by_tenant(queryset):
            _assign(self, request, tenant, effects, me)

    @admin.action(description="Assign the selected effects to…", permissions=["work"])
    def assign(self, request: HttpRequest, queryset: QuerySet[Effect]) -> HttpResponse | None:
        """Asks whom to, on a page of its own, then assigns."""
        form = AssignForm(request.POST if "assignee" in request.POST else None)
        if form.is_valid():
            for tenant, effects in _by_tenant(queryset):
                _assign(self, request, tenant, effects, form.cleaned_data["assignee"])
            return None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Assign effects to a reviewer",
            "effects": list(queryset.select_related("tenant")),
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/notary/effect/assign.html", context)

    def has_work_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("notary.resolve_effect")

    @admin.display(description="waiting", ordering="queued_at")
    def waiting(self, effect: Any) -> str:
        """How long it has waited for a person, marked once past its target's review SLA."""
        if effect.queued_at is None:
            return "-"
        now = timezone.now()
        waited = timesince(effect.queued_at, now, depth=1)
        if effect.review_due is not None and effect.review_due <= now:
            overdue = timesince(effect.review_due, now, depth=1)
            return format_html('<span class="overdue">{} · overdue by {}</span>', waited, overdue)
        return waited

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        return selectors.review_queue(super().get_queryset(request))

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        """Titled as what it is, not Django's "Select ... to view"."""
        title = {"title": "Review queue: AMBIGUOUS or contradicted effects"}
        return super().changelist_view(request, {**title, **(extra_context or {})})


def _by_tenant(queryset: QuerySet[Effect]) -> list[tuple[Tenant, list[Effect]]]:
    """The selection, a tenant at a time: an assignment is written per tenant."""
    effects = sorted(queryset.select_related("tenant"), key=lambda e: (e.tenant_id, e.pk))
    return [
        (group[0].tenant, group)
        for group in (list(g) for _, g in itertools.groupby(effects, key=lambda e: e.tenant_id))
    ]


class LimitsInWords:
    """A lease's terms as a person reads them, not as a dict: "amount at most $20.00" in the
    lease's currency (or "amount at most 2,000 in the payload's minor units" for a lease that
    approves any currency), and "cases of class refunds-queue" for a standing lease."""

    @admin.display(description="limits")
    def limits_in_words(self, obj: Lease | LeaseRequest) -> str:
        return limits(obj.limits, obj.currency)

    @admin.display(description="cases", ordering="case_id")
    def cases(self, obj: Lease | LeaseRequest) -> str:
        return cases_in_words(obj.case_id, obj.case_class, obj.case_pattern)

    @admin.display(description="budgets")
    def budgets_in_words(self, obj: Lease | LeaseRequest) -> str:
        return budgets(obj.budgets, obj.currency)


@admin.register(Lease)
class LeaseAdmin(LimitsInWords, ReadOnlyAdmin):
    list_display = [
        "lease_id",
        "cases",
        "action",
        "limits_in_words",
        "tenant",
        "granted_by",
        "expires_at",
        "revoked",
    ]
    list_filter = ["tenant", "action", RevokedFilter]
    search_fields = ["lease_id", "case_id", "case_class", "case_pattern"]
    fields = [
        "tenant",
        "lease_id",
        "cases",
        "action",
        "limits_in_words",
        "budgets_in_words",
        "budgets_now",
        "payload_hash",
        "expires_at",
        "requested_by",
        "granted_by",
        "granted_seq",
        "mandate",
        "revoked_at",
        "revoked_by",
        "revoked_seq",
        "revoked_reason",
    ]
    actions = ["revoke"]

    @admin.display(description="spent now")
    def budgets_now(self, obj: Lease) -> str:
        """What each budget holds now: the window up to this instant, as a dispatch now would
        be checked against it; per agent key, the key that has spent most."""
        if not obj.budgets:
            return "-"
        return "; ".join(
            f"{money(spent.amount, obj.currency)} in {spent.count} effects"
            + (f" (most by one key: {spender})" if spender else "")
            for spent, spender in selectors.lease_budgets_now(lease=obj, now=timezone.now())
        )

    @admin.display(description="mandate")
    def mandate(self, obj: Lease) -> str:
        """Who signed the AP2 mandate the lease was granted from, and its constraints; the
        other leases granted from it, whose spends its budget counts too."""
        evidence = selectors.lease_mandate(lease=obj)
        if evidence is None:
            return "-"
        words = mandate_in_words(evidence)
        others = [
            lease_id
            for lease_id in selectors.budget_pool(tenant=obj.tenant, lease_id=obj.lease_id)
            if lease_id != obj.lease_id
        ]
        if others:
            words.append(f"also granted as {', '.join(others)}: one budget counts them all")
        return format_html_join(mark_safe("<br>"), "{}", ((line,) for line in words))

    @admin.display(description="revoked", ordering="revoked_at")
    def revoked(self, obj: Lease) -> str:
        if obj.revoked_at is None:
            return "-"
        return f"by {obj.revoked_by} at {timezone.localtime(obj.revoked_at):%Y-%m-%d %H:%M:%S %Z}"

    @admin.action(description="Revoke the selected leases", permissions=["revoke"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[Lease]) -> HttpResponse | None:
        """A confirmation page first, as for a delete: each revocation is an irreversible
        ledger entry that stops agents dispatching, so it is written only once the reviewer
        saw the leases and gave the reason it records."""
        leases = list(queryset.select_related("tenant"))
        form = RevokeForm(request.POST if "post" in request.POST else None)
        if form.is_valid():
            try:
                seqs = self._revoke_all(request, leases, reason=form.cleaned_data["reason"])
            except NotaryInputError as refused:  # the reason, refused before anything is written
                form.add_error("reason", str(refused))
            else:
                level = messages.SUCCESS if seqs else messages.WARNING
                self.message_user(request, _leases_revoked(seqs, len(leases) - len(seqs)), level)
                return None
        request.current_app = self.admin_site.name
        context = {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": "Revoke the selected leases",
            "leases": leases,
            "form": form,
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/notary/lease/revoke_confirmation.html", context)

    def _revoke_all(self, request: HttpRequest, leases: list[Lease], *, reason: str) -> list[int]:
        """The seqs of the LEASE_REVOKED entries written, each also in the admin's history."""
        seqs = []
        for lease in leases:
            revocation = services.lease_revoke(
                tenant=lease.tenant,
                lease_id=lease.lease_id,
                by=request.user.get_username(),
                reason=reason,
            )
            if revocation.seq is not None:
                message = f"Revoked (ledger entry {revocation.seq}): {reason}"
                self.log_change(request, revocation.lease, message)
                seqs.append(revocation.seq)
        return seqs

    def has_revoke_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("notary.revoke_lease")


@admin.register(LeaseRequest)
class LeaseRequestAdmin(LimitsInWords, ReadOnlyAdmin):
    list_display = [
        "request_id",
        "cases",
        "action",
        "limits_in_words",
        "tenant",
        "requested_by",
        "lease",
    ]
    list_filter = ["tenant", "action"]
    search_fields = ["request_id", "case_id", "requested_by"]
    fields = [
        "tenant",
        "request_id",
        "cases",
        "action",
        "limits_in_words",
        "budgets_in_words",
        "payload_hash",
        "expires_at",
        "requested_by",
        "requested_key",
        "created_at",
        "lease",
    ]


class TenantPolicyForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = Tenant
        fields = ["max_lease_amount_cents", "max_lease_duration", "hold_scope"]

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        amount, duration = data.get("max_lease_amount_cents"), data.get("max_lease_duration")
        if amount is not None and duration is not None:
            try:
                services.grant_policy_check(
                    max_lease_amount_cents=amount, max_lease_duration=duration
                )
            except NotaryInputError as refused:
                raise forms.ValidationError(str(refused)) from refused
        return data


@admin.register(Tenant)
class TenantAdmin(ReadOnlyAdmin):
    """Tenants are created by `create_tenant`; here only their policy is changed: what an
    approver may grant, and which new effects a waiting one holds."""

    list_display = [
        "slug",
        "name",
        "log",
        "max_lease_amount_cents",
        "max_lease_duration",
        "hold_scope",
        "created_at",
    ]
    fields = [
        "slug",
        "name",
        "log",
        "max_lease_amount_cents",
        "max_lease_duration",
        "hold_scope",
        "created_at",
    ]
    _POLICY = ("max_lease_amount_cents", "max_lease_duration", "hold_scope")
    form = TenantPolicyForm
    actions = ["export_receipts", "receipts_summary"]

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return request.user.has_perm("notary.change_tenant")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        if not self.has_change_permission(request, obj):
            return self.fields
        return [name for name in self.fields if name not in self._POLICY]

    def save_model(self, request: HttpRequest, obj: Tenant, form: Any, change: bool) -> None:
        """Through the service; the form checked the bounds as the service does."""
        services.tenant_policy_set(
            tenant=obj,
            max_lease_amount_cents=obj.max_lease_amount_cents,
            max_lease_duration=obj.max_lease_duration,
            hold_scope=obj.hold_scope,
        )

    @admin.action(description="Download the receipts export (for auditors)", permissions=["view"])
    def export_receipts(
        self, request: HttpRequest, queryset: QuerySet[Tenant]
    ) -> StreamingHttpResponse | None:
        """The tenant's receipts as interlock-receipts-export/v1, streamed: check it with
        `python -m gate_client.verify FILE --vkey VKEY`."""
        if queryset.count() != 1:
            messages.error(request, "Choose one tenant: an export covers one log.")
            return None
        tenant = queryset.select_related("log").get()
        try:
            lines = export_receipts(tenant=tenant)
            first = next(lines)
        except NotaryConflict as refused:
            messages.error(request, refused.detail)
            return None
        response = StreamingHttpResponse(
            itertools.chain([first], lines), content_type="application/x-ndjson"
        )
        response["Content-Disposition"] = f'attachment; filename="receipts-{tenant.slug}.jsonl"'
        return response

    @admin.action(
        description="Download the receipts summary (CSV, for finance)", permissions=["view"]
    )
    def receipts_summary(
        self, request: HttpRequest, queryset: QuerySet[Tenant]
    ) -> HttpResponse | None:
        """Receipts and money per month, target, final state and currency, for one tenant:
        the table `python -m gate_client.verify EXPORT --summary` gives for its export."""
        if queryset.count() != 1:
            messages.error(request, "Choose one tenant: a summary covers one log.")
            return None
        tenant = queryset.select_related("log").get()
        response = HttpResponse(content_type="text/csv; charset=utf-8")
        selectors.receipt_summary(tenant=tenant).write_csv(response)
        response["Content-Disposition"] = f'attachment; filename="summary-{tenant.slug}.csv"'
        return response


@admin.register(Target)
class TargetAdmin(ReadOnlyAdmin):
    list_display = [
        "name",
        "tenant",
        "tier",
        "queryable",
        "max_inflight",
        "key_window",
        "evidence_window",
        "attests_before_acting",
        "money_amount_field",
    ]
    list_filter = ["tenant", "tier", "attests_before_acting"]
    fields = [
        "name",
        "tenant",
        "tier",
        "queryable",
        "max_inflight",
        "key_window",
        "evidence_window",
        "attests_before_acting",
        "lookup_needs_key",
        "lookup_url",
        "money_amount_field",
        "money_currency_field",
        "money_currency",
        "created_at",
    ]


class ApiKeyIssueForm(forms.ModelForm):  # type: ignore[type-arg]
    class Meta:
        model = ApiKey
        fields = ["tenant", "role", "holder", "label", "targets"]

    def clean(self) -> dict[str, Any]:
        """The service's own checks, so a refused key is a form error, never a server error."""
        data = super().clean() or {}
        tenant, role, holder = data.get("tenant"), data.get("role"), data.get("holder")
        if tenant is not None and role and holder:
            chosen = list(data.get("targets") or [])
            if any(target.tenant_id != tenant.pk for target in chosen):
                raise forms.ValidationError("a key attests only for targets of its own tenant")
            targets = [target.name for target in chosen]
            try:
                services.api_key_scope(tenant=tenant, role=role, holder=holder, targets=targets)
            except NotaryInputError as refused:
                raise forms.ValidationError(str(refused)) from refused
        return data


@admin.register(ApiKey)
class ApiKeyAdmin(ReadOnlyAdmin):
    list_display = [
        "key_id",
        "tenant",
        "role",
        "holder",
        "scope",
        "label",
        "created_at",
        "revoked_at",
    ]
    list_filter = ["tenant", "role"]
    fields = ["key_id", "tenant", "role", "holder", "scope", "label", "created_at", "revoked_at"]
    form = ApiKeyIssueForm
    filter_horizontal = ["targets"]
    actions = ["revoke"]

    @admin.display(description="attests for")
    def scope(self, obj: ApiKey) -> str:
        """A service key's targets; other roles attest nothing."""
        if obj.role != "service":
            return "-"
        return ", ".join(sorted(t.name for t in obj.targets.all())) or "no target"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("notary.add_apikey")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return ApiKeyIssueForm.Meta.fields if obj is None else self.fields

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return () if obj is None else self.fields

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        """Issue through the service; the token is shown here, once, and never again."""
        issued, token = services.api_key_issue(
            tenant=obj.tenant,
            role=obj.role,
            holder=obj.holder,
            label=obj.label,
            targets=[target.name for target in form.cleaned_data.get("targets") or []],
        )
        obj.pk, obj.key_id, obj.created_at = issued.pk, issued.key_id, issued.created_at
        obj.holder = issued.holder
        messages.warning(request, f"The new key, shown this once: {token}")

    @admin.action(description="Revoke the selected keys", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        """Each live key revoked now and in the admin's history; one revoked before is not
        counted again."""
        api_keys = list(queryset)
        revoked = [api_key for api_key in api_keys if services.api_key_revoke(api_key=api_key)]
        for api_key in revoked:
            self.log_change(request, api_key, "Revoked")
        messages.success(request, _keys_revoked(len(revoked), len(api_keys) - len(revoked)))

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return obj is None and request.user.has_perm("notary.change_apikey")


@admin.register(MandateKey)
class MandateKeyAdmin(ReadOnlyAdmin):
    """The keys whose AP2 mandates each tenant trusts (manage.py trust_mandate_key)."""

    list_display = ["key_id", "role", "holder", "tenant", "created_at", "revoked_at"]
    list_filter = ["tenant", "role"]
    search_fields = ["key_id", "holder"]
    fields = ["tenant", "key_id", "role", "holder", "jwk", "created_at", "revoked_at"]


@admin.register(ReviewNotice)
class ReviewNoticeAdmin(ReadOnlyAdmin):
    """Who was told what, and when: each channel's recipients, send time and last error."""

    list_display = ["created_at", "effect_id", "event", "tenant", "emailed", "webhook"]
    list_filter = ["event", "tenant"]
    search_fields = ["effect_id"]
    ordering = ["-created_at"]
    list_select_related = ["tenant"]
    fields = [
        "tenant",
        "effect_id",
        "event",
        "cause",
        "created_at",
        "email_to",
        "email_sent_at",
        "email_error",
        "webhook_url",
        "webhook_sent_at",
        "webhook_error",
    ]

    @admin.display(description="email")
    def emailed(self, notice: ReviewNotice) -> str:
        return _channel(notice.email_sent_at, notice.email_error)

    @admin.display(description="webhook")
    def webhook(self, notice: ReviewNotice) -> str:
        return _channel(notice.webhook_sent_at, notice.webhook_error)


def _channel(sent_at: Any, error: str) -> str:
    if sent_at is None:
        return error or "not yet"
    when = f"sent {timezone.localtime(sent_at):%Y-%m-%d %H:%M:%S}"
    return f"{when} ({error})" if error else when


@admin.register(ReviewNotifications)
class ReviewNotificationsAdmin(ReadOnlyAdmin):
    """Set by `notify_reviewers`; the webhook's signing secret is never shown here."""

    list_display = ["tenant", "addresses", "webhook_url", "updated_at"]
    fields = ["tenant", "addresses", "webhook_url", "updated_at"]

    @admin.display(description="emails")
    def addresses(self, config: ReviewNotifications) -> str:
        return ", ".join(config.emails) or "the Finance reviewers with an address"


@admin.register(ReconciliationFinding)
class ReconciliationFindingAdmin(ReadOnlyAdmin):
    """What reconciliation found, each with the provider's record as its evidence: written by
    the reconcile task and command as RECONCILED ledger entries, never here."""

    list_display = [
        "found_at",
        "kind",
        "target",
        "provider_ref",
        "effect_link",
        "state",
        "amount",
        "tenant",
    ]
    list_filter = ["target", "kind", "tenant"]
    search_fields = ["provider_ref", "effect_id", "subject"]
    ordering = ["-seq"]
    list_select_related = ["tenant"]
    fields = [
        "tenant",
        "target",
        "kind",
        "effect_link",
        "state",
        "provider_ref",
        "since",
        "until",
        "found_at",
        "seq",
        "evidence",
    ]

    @admin.display(description="effect")
    def effect_link(self, finding: ReconciliationFinding) -> str:
        if not finding.effect_id:
            claimed = finding.body.get("claimed_effect_id")
            return f"none admitted (the provider's object names {claimed})" if claimed else "none"
        effect = Effect.objects.filter(tenant=finding.tenant, effect_id=finding.effect_id).first()
        if effect is None:
            return finding.effect_id
        url = reverse("admin:notary_effect_change", args=[effect.pk])
        return format_html('<a href="{}">{}</a>', url, finding.effect_id)

    @admin.display(description="ledger state when found")
    def state(self, finding: ReconciliationFinding) -> str:
        return str(finding.body.get("state", "-"))

    @admin.display(description="amount")
    def amount(self, finding: ReconciliationFinding) -> str:
        shown = finding.body.get("evidence", {})
        amount, currency = shown.get("amount"), str(shown.get("currency", "")).upper()
        return money(amount, currency) if isinstance(amount, int) else "-"

    @admin.display(description="evidence: the provider's record and the finding's entry")
    def evidence(self, finding: ReconciliationFinding) -> str:
        return format_html("<pre>{}</pre>", as_json(finding.body))


@admin.register(ReconciliationSource)
class ReconciliationSourceAdmin(ReadOnlyAdmin):
    """Set by `manage.py reconciliation_source`; the key is never shown, only whether one is."""

    list_display = ["target", "provider", "base_url", "key", "enabled", "reconciled_until"]
    list_filter = ["provider", "enabled"]
    fields = ["target", "provider", "base_url", "key", "lookback", "enabled", "reconciled_until"]

    @admin.display(description="API key")
    def key(self, source: ReconciliationSource) -> str:
        return "set" if source.api_key else "not set"
