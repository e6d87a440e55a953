"""Reads of the notary's own records."""

from __future__ import annotations

import functools
import hmac
import itertools
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TypeVar

from django.contrib.auth.models import User
from django.db import connection
from django.db.models import (
    Count,
    DateTimeField,
    DurationField,
    ExpressionWrapper,
    F,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.functions import Coalesce

from gate_client.budgets import Budget, BudgetPer, Spent, window_start
from gate_client.holds import HoldScope, scope_fields
from gate_client.money import Money
from gate_client.protocol import Intent, Negative, evidence_answer, queued_by, standing
from gate_client.receipts import Receipt, ReceiptError, derive_receipt
from gate_client.reconciliation import AdmittedEffect, Window
from gate_client.summary import Summary
from gate_client.targets import Found
from ledger.core.entries import Entry as LedgerEntry
from ledger.core.entries import EntryKind
from ledger.models import Entry as LedgerEntryRow
from ledger.models import Log
from ledger.selectors import (
    ENTRY_COLUMNS,
    effect_entries,
    entries_at,
    entries_of_rows,
    get_entry,
    iter_effect_histories,
    iter_entries_of_kind,
    published_checkpoint,
    tlog_proof,
)
from notary.errors import NotaryNotFound
from notary.explain import explain
from notary.groups import FINANCE_REVIEWERS
from notary.models import (
    DEFAULT_REVIEW_SLA,
    WAITING_FOR_A_PERSON,
    ApiKey,
    Effect,
    Lease,
    ReconciliationFinding,
    ReconciliationSource,
    ReviewAssignment,
    ReviewEvent,
    ReviewNotice,
    ReviewNotifications,
    Target,
    Tenant,
)
from notary.projection import effect_fields, finding_fields
from notary.tokens import TOKEN_PREFIX, secret_digest


def api_key_for_token(*, token: str) -> ApiKey | None:
    """The live key this bearer token belongs to, or None; the secret is compared in constant
    time, and an unknown key id costs the same digest as a known one."""
    prefix, _, rest = token.partition("_")
    key_id, _, secret = rest.partition("_")
    if prefix != TOKEN_PREFIX or not key_id or not secret:
        return None
    api_key = _live_key(key_id=key_id)
    expected = api_key.secret_sha256 if api_key is not None else "0" * 64
    if not hmac.compare_digest(expected, secret_digest(secret)) or api_key is None:
        return None
    return api_key


def _live_key(*, key_id: str) -> ApiKey | None:
    """The unrevoked key with this id, its tenant and the tenant's log, as
    ApiKey.objects.select_related("tenant__log") loads them, in one written-out statement:
    every API request reads it first, and the ORM took longer to build it than to run it."""
    with connection.cursor() as cursor:
        cursor.execute(_LIVE_KEY, [key_id])
        row = cursor.fetchone()
    if row is None:
        return None
    api_key, rest = _loaded(ApiKey, row)
    tenant, rest = _loaded(Tenant, rest)
    tenant.log, _ = _loaded(Log, rest)
    api_key.tenant = tenant
    return api_key


def lease_with_tenant(*, tenant: Tenant, lease_id: str) -> Lease | None:
    """The tenant's lease and the tenant's row as stored now (its hold_scope, not as the
    caller's key read it when the request began), in one written-out statement: every dispatch
    reads it under the log lock."""
    with connection.cursor() as cursor:
        cursor.execute(_LEASE_WITH_TENANT, [tenant.pk, lease_id])
        row = cursor.fetchone()
    if row is None:
        return None
    lease, rest = _loaded(Lease, row)
    lease.tenant, _ = _loaded(Tenant, rest)
    return lease


def _columns(model: type[Model], alias: str) -> list[str]:
    quote = connection.ops.quote_name
    return [f"{alias}.{quote(str(field.column))}" for field in model._meta.concrete_fields]


_M = TypeVar("_M", bound=Model)
_LIVE_KEY = (
    f"SELECT {', '.join(_columns(ApiKey, 'k') + _columns(Tenant, 't') + _columns(Log, 'l'))}"
    f" FROM {ApiKey._meta.db_table} k"
    f" JOIN {Tenant._meta.db_table} t ON t.id = k.tenant_id"
    f" JOIN {Log._meta.db_table} l ON l.id = t.log_id"
    " WHERE k.key_id = %s AND k.revoked_at IS NULL"
)
_LEASE_WITH_TENANT = (
    f"SELECT {', '.join(_columns(Lease, 'l') + _columns(Tenant, 't'))}"
    f" FROM {Lease._meta.db_table} l JOIN {Tenant._meta.db_table} t ON t.id = l.tenant_id"
    " WHERE l.tenant_id = %s AND l.lease_id = %s"
)


def _loaded(model: type[_M], row: Sequence[Any]) -> tuple[_M, Sequence[Any]]:
    """The instance of `model` whose columns (_columns) begin `row`, its values converted as the
    ORM converts them for this database (SQLite's instants, durations; JSON), and the rest of
    the row."""
    fields = model._meta.concrete_fields
    values = []
    for (column, converters), value in zip(
        _conversions(model, connection.vendor), row[: len(fields)], strict=True
    ):
        for convert in converters:
            value = convert(value, column, connection)
        values.append(value)
    return model.from_db(connection.alias, [f.attname for f in fields], values), row[len(fields) :]


@functools.cache
def _conversions(model: type[Model], vendor: str) -> list[tuple[Any, list[Any]]]:
    """Per concrete field of `model`: its column and the converters the ORM applies to its
    values on this database (`vendor`, the cache's key: none on PostgreSQL for these models)."""
    conversions = []
    for field in model._meta.concrete_fields:
        column = field.get_col(model._meta.db_table)
        converters = connection.ops.get_db_converters(column) + field.get_db_converters(connection)
        conversions.append((column, converters))
    return conversions


def lease_get(*, tenant: Tenant, lease_id: str) -> Lease:
    """The tenant's lease; another tenant's lease does not exist for this caller."""
    lease = Lease.objects.filter(tenant=tenant, lease_id=lease_id).first()
    if lease is None:
        raise NotaryNotFound(f"no lease {lease_id!r}")
    return lease


def target_get(*, tenant: Tenant, name: str) -> Target:
    """The tenant's target; another tenant's target does not exist for this caller."""
    target = Target.objects.filter(tenant=tenant, name=name).first()
    if target is None:
        raise NotaryNotFound(f"no target {name!r}: register it first")
    return target


def target_registered(*, tenant: Tenant, name: str) -> Target | None:
    """The tenant's target of this name, if registered: every proposal is checked against its
    declaration."""
    return Target.objects.filter(tenant=tenant, name=name).first()


def targets_of(*, tenant: Tenant) -> list[Target]:
    return list(Target.objects.filter(tenant=tenant).order_by("name"))


def effect_get(*, tenant: Tenant, effect_id: str) -> Effect:
    effect = Effect.objects.filter(tenant=tenant, effect_id=effect_id).first()
    if effect is None:
        raise NotaryNotFound(f"no effect {effect_id!r}")
    return effect


def effect_entries_for_receipt(
    *, tenant: Tenant, effect: Effect
) -> tuple[list[LedgerEntry], list[LedgerEntry]]:
    """The effect's own entries, and its lease's grant and revocation: everything its receipt
    is derived from (whether the lease was live is read from their order)."""
    history = effect_entries(log=tenant.log, effect_id=effect.effect_id)
    return history, lease_entries(tenant=tenant, lease_id=effect.lease_id)


def lease_entries(*, tenant: Tenant, lease_id: str) -> list[LedgerEntry]:
    """The lease's LEASE_GRANTED and LEASE_REVOKED entries (none for an unknown lease), in one
    written-out statement that reads the lease row too: every outcome answers with them."""
    with connection.cursor() as cursor:
        cursor.execute(_LEASE_ENTRIES, [tenant.log_id, tenant.pk, lease_id])
        return entries_of_rows(cursor.fetchall())


_LEASE_ENTRIES = (
    f"SELECT {', '.join(f'e.{column}' for column in ENTRY_COLUMNS)}"
    f" FROM {Lease._meta.db_table} l JOIN {LedgerEntryRow._meta.db_table} e"
    " ON e.seq IN (l.granted_seq, l.revoked_seq)"
    " WHERE e.log_id = %s AND l.tenant_id = %s AND l.lease_id = %s ORDER BY e.seq"
)


def lease_mandate(*, lease: Lease) -> dict[str, Any] | None:
    """The AP2 mandate the lease was granted from, as its LEASE_GRANTED records it."""
    body = get_entry(log=lease.tenant.log, seq=lease.granted_seq).body_value()
    mandate: dict[str, Any] | None = body.get("mandate")
    return mandate


@dataclass(frozen=True)
class ProvedReceipt:
    receipt: Receipt
    entries: list[LedgerEntry]
    checkpoint: str | None  # the latest signed checkpoint note
    proofs: dict[int, str | None]  # tlog-proof text per entry seq; None if not yet covered


def effect_receipt(*, tenant: Tenant, effect_id: str, payload_hash: str | None) -> ProvedReceipt:
    effect = effect_get(tenant=tenant, effect_id=effect_id)
    history, lease_entries = effect_entries_for_receipt(tenant=tenant, effect=effect)
    entries = sorted([*history, *lease_entries], key=lambda e: e.seq)
    try:
        receipt = derive_receipt(entries, effect_id, payload_hash=payload_hash)
    except ReceiptError as exc:
        raise NotaryNotFound(str(exc)) from exc
    checkpoint = published_checkpoint(log=tenant.log)
    proofs: dict[int, str | None] = {}
    for entry in entries:
        covered = checkpoint is not None and entry.seq < checkpoint.size
        proofs[entry.seq] = (
            tlog_proof(log=tenant.log, index=entry.seq, size=checkpoint.size).text()
            if covered and checkpoint is not None
            else None
        )
    return ProvedReceipt(
        receipt=receipt,
        entries=entries,
        checkpoint=checkpoint.published_note if checkpoint is not None else None,
        proofs=proofs,
    )


def receipt_summary(*, tenant: Tenant, chunk_size: int = 2000) -> Summary:
    """The tenant's effects counted as an auditor's summary: by the state the effects table
    holds (which verify_ledger checks against the ledger) and the PROPOSED entry's payload."""
    summary = Summary()
    rows = Effect.objects.filter(tenant=tenant).order_by("proposed_seq")
    rows_read = rows.values_list("state", "contradicted", "proposed_seq")
    for_chunks = rows_read.iterator(chunk_size=chunk_size)
    while chunk := list(itertools.islice(for_chunks, chunk_size)):
        seqs = [seq for _, _, seq in chunk]
        proposed = {e.seq: e for e in entries_at(log=tenant.log, seqs=seqs)}
        for state, contradicted, seq in chunk:
            summary.add(state, proposed[seq], contradicted=contradicted)
    return summary


def review_queue(effects: QuerySet[Any] | None = None) -> QuerySet[Any]:
    """The effects (of `effects`, else all) waiting for a person: AMBIGUOUS, or whose evidence
    contradicts the verdict. The admin's review queue and its counts are this. Each carries
    `review_due`, when it is overdue by its target's review SLA counted from `queued_at`, and
    `assigned_to`, the username of the reviewer working it (None: nobody yet)."""
    chosen = effects if effects is not None else Effect.objects.all()
    sla = Target.objects.filter(tenant=OuterRef("tenant"), name=OuterRef("target"))
    assigned = ReviewAssignment.objects.filter(
        tenant=OuterRef("tenant"), effect_id=OuterRef("effect_id")
    )
    return chosen.filter(WAITING_FOR_A_PERSON).annotate(
        assigned_to=Subquery(assigned.values("assignee__username")[:1]),
        review_due=ExpressionWrapper(
            F("queued_at")
            + Coalesce(
                Subquery(sla.values("review_sla")[:1]),
                Value(DEFAULT_REVIEW_SLA, output_field=DurationField()),
            ),
            output_field=DateTimeField(),
        ),
    )


def review_queue_size(*, tenant: Tenant) -> int:
    return review_queue().filter(tenant=tenant).count()


def overdue_reviews(*, now: datetime) -> list[Effect]:
    """Effects in the review queue past their review SLA that have no sla_passed notice for
    their current wait yet (one is written per queued_at)."""
    overdue = list(
        review_queue()
        .select_related("tenant")
        .filter(queued_at__isnull=False, review_due__lte=now)
        .order_by("queued_at")
    )
    noticed = set(
        ReviewNotice.objects.filter(
            event=ReviewEvent.SLA_PASSED, effect_id__in={e.effect_id for e in overdue}
        ).values_list("tenant_id", "effect_id", "cause")
    )
    return [
        effect
        for effect in overdue
        if effect.queued_at is not None
        and (effect.tenant_id, effect.effect_id, effect.queued_at.isoformat()) not in noticed
    ]


def review_notice_get(*, notice_id: int) -> ReviewNotice | None:
    return ReviewNotice.objects.select_related("tenant").filter(pk=notice_id).first()


def review_notice_effect(*, notice: ReviewNotice) -> Effect | None:
    """The notice's effect as the review queue has it (with review_due), or None when it no
    longer waits as the notice says: decided meanwhile, or waiting anew since."""
    effect: Effect | None = (
        review_queue()
        .select_related("tenant__log")
        .filter(tenant_id=notice.tenant_id, effect_id=notice.effect_id)
        .first()
    )
    if effect is None or effect.queued_at is None:
        return None
    if notice.event == ReviewEvent.SLA_PASSED:
        waiting = effect.queued_at.isoformat()
    else:
        history = effect_entries(log=effect.tenant.log, effect_id=effect.effect_id)
        waiting = str(queued_by(standing(history)))
    return effect if waiting == notice.cause else None


def review_notices_unsent(*, created_before: datetime) -> list[int]:
    """Notices no run has tried yet (their sending was lost: a broker down at commit)."""
    return list(
        ReviewNotice.objects.filter(
            created_at__lt=created_before,
            email_sent_at__isnull=True,
            webhook_sent_at__isnull=True,
            email_error="",
            webhook_error="",
        )
        .order_by("pk")
        .values_list("pk", flat=True)
    )


def review_recipients(*, tenant: Tenant) -> list[str]:
    """Who is emailed of the tenant's reviews: its configured addresses, else every active
    Finance reviewer with an email address."""
    config = ReviewNotifications.objects.filter(tenant=tenant).first()
    if config is not None and config.emails:
        return list(config.emails)
    reviewers = User.objects.filter(is_active=True, groups__name=FINANCE_REVIEWERS).exclude(
        email=""
    )
    return sorted(set(reviewers.values_list("email", flat=True)))


def review_webhook(*, tenant: Tenant) -> tuple[str, str] | None:
    """The tenant's chat webhook, (URL, signing secret), or None when it has none."""
    config = ReviewNotifications.objects.filter(tenant=tenant).exclude(webhook_url="").first()
    return None if config is None else (config.webhook_url, config.webhook_secret)


def unsettled_effects(*, tenant: Tenant, limit: int) -> list[Effect]:
    """Effects proposed or dispatched with no verdict yet, oldest first: what recovery settles."""
    rows = Effect.objects.filter(tenant=tenant, settled_at__isnull=True).order_by("proposed_seq")
    return list(rows[:limit])


def holding_candidates(
    *, tenant: Tenant, scope: HoldScope, proposed: Mapping[str, Any], effect_id: str
) -> Iterator[list[LedgerEntry]]:
    """The entries of each of the tenant's effects, oldest first, that wait for a person and
    share with `proposed` the fields by which they hold it under `scope`
    (gate_client.holds.scope_fields): the candidates holds.hold_for decides on, read one at a
    time as it asks. Read under the log lock, the projection is the ledger's."""
    fields = scope_fields(scope, proposed)
    if fields is None:
        return
    waiting = (
        Effect.objects.filter(WAITING_FOR_A_PERSON, tenant=tenant, **fields)
        .exclude(effect_id=effect_id)
        .order_by("proposed_seq")
        .values_list("effect_id", flat=True)
    )
    for holder in waiting:
        yield effect_entries(log=tenant.log, effect_id=holder)


def effect_holder(*, effect: Effect) -> Effect | None:
    """The effect holding a HELD one (of its tenant), for its page's link."""
    if not effect.held_by:
        return None
    return Effect.objects.filter(tenant_id=effect.tenant_id, effect_id=effect.held_by).first()


def effects_due_for_sweep(*, now: datetime) -> list[tuple[int, str]]:
    """(tenant id, effect id) of every effect dispatched longer ago than its target's max
    in-flight with no verdict: what the notary's recovery sweep looks at."""
    windows = {
        (tenant_id, name): max_inflight
        for tenant_id, name, max_inflight in Target.objects.values_list(
            "tenant_id", "name", "max_inflight"
        )
    }
    unsettled = Effect.objects.filter(settled_at__isnull=True, dispatched_at__isnull=False)
    due = []
    rows = unsettled.values_list("tenant_id", "effect_id", "target", "dispatched_at")
    for tenant_id, effect_id, target, dispatched_at in rows.iterator():
        window = windows.get((tenant_id, target))
        if window is not None and dispatched_at is not None and dispatched_at + window <= now:
            due.append((tenant_id, effect_id))
    return due


@dataclass(frozen=True)
class Evidence:
    """What the notary's evidence says of one effect, as facts, for a gate recovering it."""

    seen: str  # "performed", "not_performed", "intent" or "nothing"
    result_ref: str = ""
    code: str = ""
    evidence_seq: int | None = None


def effect_evidence(*, tenant: Tenant, effect_id: str) -> Evidence:
    """The protocol's reading of the effect's OBSERVED entries (protocol.evidence_answer)."""
    effect_get(tenant=tenant, effect_id=effect_id)
    answer = evidence_answer(effect_entries(log=tenant.log, effect_id=effect_id))
    if isinstance(answer, Found):
        return Evidence("performed", answer.result_ref, evidence_seq=answer.evidence_seq)
    if isinstance(answer, Negative):
        return Evidence("not_performed", code=answer.code, evidence_seq=answer.evidence_seq)
    return Evidence("intent" if isinstance(answer, Intent) else "nothing")


@dataclass(frozen=True)
class Review:
    """Everything a finance reviewer reads on one effect's page."""

    receipt: Receipt
    sentence: str
    proposed: dict[str, Any]
    attempts: list[LedgerEntry]  # DISPATCHED, in order
    lease: Lease | None
    lease_entries: list[LedgerEntry]
    evidence: list[LedgerEntry]  # OBSERVED, in order
    notes: list[LedgerEntry]  # NOTED, in order: who wrote what, when
    findings: list[LedgerEntry]  # RECONCILED, in order: what the provider showed of it
    assignment: ReviewAssignment | None
    entries: list[LedgerEntry]  # the effect's own and its lease's, in seq order

    @property
    def last_resolution(self) -> LedgerEntry | None:
        """The effect's latest RESOLVED entry (who decided, when, why), if a person decided it:
        from the entries already read, never a second read of the ledger."""
        resolved = [e for e in self.entries if e.kind == EntryKind.RESOLVED]
        return resolved[-1] if resolved else None


def effect_review(*, effect: Effect) -> Review:
    tenant = effect.tenant
    history, leased = effect_entries_for_receipt(tenant=tenant, effect=effect)
    entries = sorted([*history, *leased], key=lambda e: e.seq)
    receipt = derive_receipt(entries, effect.effect_id)
    sentence = explain(receipt, history, target=effect.target)
    return Review(
        receipt=receipt,
        sentence=sentence,
        proposed=next(e for e in history if e.kind == EntryKind.PROPOSED).body_value(),
        attempts=[e for e in history if e.kind == EntryKind.DISPATCHED],
        lease=Lease.objects.filter(tenant=tenant, lease_id=effect.lease_id).first(),
        lease_entries=leased,
        evidence=[e for e in history if e.kind == EntryKind.OBSERVED],
        notes=[e for e in history if e.kind == EntryKind.NOTED],
        findings=[e for e in history if e.kind == EntryKind.RECONCILED],
        assignment=ReviewAssignment.objects.filter(tenant=tenant, effect_id=effect.effect_id)
        .select_related("assignee")
        .first(),
        entries=entries,
    )


def reviewers() -> QuerySet[User]:
    """The people an effect may be assigned to: active, and allowed to decide effects."""
    deciding = Q(groups__name=FINANCE_REVIEWERS) | Q(is_superuser=True)
    return User.objects.filter(deciding, is_active=True).distinct().order_by("username")


def effect_projection_differences(*, tenant: Tenant) -> list[str]:
    """How the tenant's Effect table differs from what its ledger entries give (the rows
    rebuild_effects would write), one line per effect; empty when the projection is the
    ledger's. Reads only: an edited row (a review queue emptied by hand) is named, not fixed."""
    expected: dict[str, dict[str, Any]] = {}
    for effect_id, history in iter_effect_histories(log=tenant.log):
        if history[0].kind == EntryKind.PROPOSED:  # not entries appended outside the protocol
            expected[effect_id] = effect_fields(history)
    fields = list(next(iter(expected.values()), {}).keys()) or ["state"]
    stored = {
        row["effect_id"]: row
        for row in Effect.objects.filter(tenant=tenant).values("effect_id", *fields)
    }
    differences = [
        _projection_difference(effect_id, expected.get(effect_id), stored.get(effect_id), fields)
        for effect_id in sorted(expected.keys() | stored.keys())
    ]
    return [line for line in differences if line]


def _projection_difference(
    effect_id: str, want: dict[str, Any] | None, have: dict[str, Any] | None, fields: list[str]
) -> str:
    if want is None:
        return f"effect {effect_id}: in the effects table, not in the ledger"
    if have is None:
        return f"effect {effect_id}: in the ledger, missing from the effects table"
    changed = [f"{n} ({have[n]!r}, ledger {want[n]!r})" for n in fields if have[n] != want[n]]
    if not changed:
        return ""
    return f"effect {effect_id}: the effects table differs from the ledger in " + ", ".join(changed)


def effect_projection_problems(*, log: Log) -> list[str]:
    """verify_ledger's check of the notary's projection (settings.LEDGER_VERIFY_CHECKS)."""
    tenant = Tenant.objects.filter(log=log).first()
    if tenant is None:
        return []
    return [f"{tenant.slug}: {line}" for line in effect_projection_differences(tenant=tenant)]


FindingKey = tuple[str, str, str]  # target, kind, subject: what a finding is once per


def finding_rows_of_ledger(*, tenant: Tenant) -> dict[FindingKey, dict[str, Any]]:
    """The ReconciliationFinding rows the tenant's RECONCILED entries give (rebuild_effects
    writes them), by target, kind and subject, each the first entry's that recorded it."""
    rows: dict[FindingKey, dict[str, Any]] = {}
    for entry in iter_entries_of_kind(log=tenant.log, kind=EntryKind.RECONCILED):
        fields = finding_fields(entry)
        rows.setdefault((fields["target"], fields["kind"], fields["subject"]), fields)
    return rows


def finding_projection_differences(*, tenant: Tenant) -> list[str]:
    """How the tenant's findings table differs from what its RECONCILED entries give, one line
    per finding; empty when the projection is the ledger's. Reads only."""
    expected = finding_rows_of_ledger(tenant=tenant)
    fields = [f.name for f in ReconciliationFinding._meta.fields if f.name not in ("id", "tenant")]
    stored = {
        (row["target"], row["kind"], row["subject"]): row
        for row in ReconciliationFinding.objects.filter(tenant=tenant).values(*fields)
    }
    lines = []
    for key in sorted(expected.keys() | stored.keys()):
        want, have = expected.get(key), stored.get(key)
        name = "finding " + " ".join(key)
        if want is None:
            lines.append(f"{name}: in the findings table, not in the ledger")
        elif have is None:
            lines.append(f"{name}: in the ledger, missing from the findings table")
        else:
            changed = [
                f"{n} ({have[n]!r}, ledger {want[n]!r})" for n in fields if have[n] != want[n]
            ]
            if changed:
                lines.append(
                    f"{name}: the findings table differs from the ledger in " + ", ".join(changed)
                )
    return lines


def finding_projection_problems(*, log: Log) -> list[str]:
    """verify_ledger's check of the findings table (settings.LEDGER_VERIFY_CHECKS)."""
    tenant = Tenant.objects.filter(log=log).first()
    if tenant is None:
        return []
    return [f"{tenant.slug}: {line}" for line in finding_projection_differences(tenant=tenant)]


def budget_spent(
    *, tenant: Tenant, lease_id: str, budget: Budget, now: datetime, spender: str
) -> Spent:
    """What the effects of the lease's budget pool hold of `budget` at `now`:
    gate_client.budgets.spent_in, as a query on the projection (which spend_of writes). The
    pool is every lease granted from the lease's mandate, if it has one (Lease.mandate_hash),
    else the lease alone. Read under the log lock, the rows are the ledger's state: they are
    written with the entries."""
    spends = Effect.objects.filter(
        tenant=tenant,
        lease_id__in=budget_pool(tenant=tenant, lease_id=lease_id),
        spent_at__gt=window_start(budget, now),
    )
    if budget.per == BudgetPer.AGENT_KEY:
        spends = spends.filter(spent_by=spender)
    totals = spends.aggregate(amount=Coalesce(Sum("spent_amount"), 0), count=Count("pk"))
    return Spent(totals["amount"], totals["count"])


def budget_pool(*, tenant: Tenant, lease_id: str) -> list[str]:
    """The leases whose spends count with `lease_id`'s (gate_client.budgets.lease_pool): every
    lease granted from its mandate, or itself alone. Listed first, each lookup by an index, so
    that the spends are read by the index on each lease id (given a subquery instead, the
    planner scans every spend of the tenant)."""
    leases = Lease.objects.filter(tenant=tenant)
    mandate = leases.filter(lease_id=lease_id).values_list("mandate_hash", flat=True).first()
    if not mandate:
        return [lease_id]
    return list(leases.filter(mandate_hash=mandate).values_list("lease_id", flat=True))


def lease_budgets_now(*, lease: Lease, now: datetime) -> list[tuple[Spent, str]]:
    """Each of the lease's budgets as a dispatch at `now` would find it: for a budget per agent
    key, that of the key that has spent most (and its key id); else ("" for the key)."""
    held = []
    for budget in map(Budget.from_body, lease.budgets):
        spender = ""
        if budget.per == BudgetPer.AGENT_KEY:
            top = (
                Effect.objects.filter(
                    tenant_id=lease.tenant_id,
                    lease_id=lease.lease_id,
                    spent_at__gt=window_start(budget, now),
                )
                .values("spent_by")
                .annotate(amount=Sum("spent_amount"), count=Count("pk"))
                .order_by("-amount", "-count", "spent_by")
                .first()
            )
            spender = top["spent_by"] if top is not None else ""
        spent = budget_spent(
            tenant=lease.tenant, lease_id=lease.lease_id, budget=budget, now=now, spender=spender
        )
        held.append((spent, spender))
    return held


# --- reconciliation with the provider (notary.reconciliation) --------------------------------


def reconciliation_admitted(
    *, tenant: Tenant, target: Target, effect_ids: Iterable[str], window: Window
) -> dict[str, AdmittedEffect]:
    """The target's effects a reconciliation compares: every one a provider object names,
    whenever it was proposed, and every one that settled in the window."""
    named = Q(effect_id__in=set(effect_ids))
    settled = Q(settled_at__gte=window.since, settled_at__lt=window.until)
    rows = Effect.objects.filter(named | settled, tenant=tenant, target=target.name)
    fields = ("effect_id", "state", "result_ref", "settled_at", "amount_minor", "currency")
    return {
        effect_id: AdmittedEffect(
            effect_id,
            state,
            result_ref,
            settled_at,
            Money(amount, currency) if amount is not None else None,
        )
        for effect_id, state, result_ref, settled_at, amount, currency in rows.values_list(*fields)
    }


def reconciliation_findings(
    *,
    tenant: Tenant,
    target: str | None = None,
    kind: str | None = None,
    effect_id: str | None = None,
    found_since: datetime | None = None,
    found_until: datetime | None = None,
    after: int | None = None,
    limit: int | None = None,
) -> list[ReconciliationFinding]:
    """The tenant's findings, oldest first (by their entries' seq), of one target, kind or
    effect when given, found in [found_since, found_until), of a seq above `after`, at most
    `limit` of them."""
    findings = ReconciliationFinding.objects.filter(tenant=tenant)
    if target is not None:
        findings = findings.filter(target=target)
    if kind is not None:
        findings = findings.filter(kind=kind)
    if effect_id is not None:
        findings = findings.filter(effect_id=effect_id)
    if found_since is not None:
        findings = findings.filter(found_at__gte=found_since)
    if found_until is not None:
        findings = findings.filter(found_at__lt=found_until)
    if after is not None:
        findings = findings.filter(seq__gt=after)
    findings = findings.order_by("seq")
    return list(findings[:limit] if limit is not None else findings)


def reconciliation_sources_enabled() -> list[int]:
    """The ids of the sources the beat reconciles."""
    return list(
        ReconciliationSource.objects.filter(enabled=True)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
