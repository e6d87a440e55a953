"""The notary's recovery sweep (Celery beat runs sweep_in_flight; see CELERY_BEAT_SCHEDULE).

Tasks take ids, load state and call a service, so a task run twice or late does no harm."""

from __future__ import annotations

from celery import shared_task
from django.utils import timezone

from notary import selectors, services
from notary.models import Tenant


@shared_task  # type: ignore[untyped-decorator]
def sweep_in_flight() -> int:
    """Queue a settle task for every effect in flight past its target's window."""
    due = selectors.effects_due_for_sweep(now=timezone.now())
    for tenant_id, effect_id in due:
        settle_in_flight_effect.delay(tenant_id, effect_id)
    return len(due)


@shared_task  # type: ignore[untyped-decorator]
def settle_in_flight_effect(tenant_id: int, effect_id: str) -> str:
    return services.effect_sweep(tenant=Tenant.objects.get(pk=tenant_id), effect_id=effect_id)
