"""Periodic checkpoint signing and witnessing (Celery beat runs them; see CELERY_BEAT_SCHEDULE),
and witnessing of each new checkpoint once it is committed."""

from __future__ import annotations

from celery import shared_task
from django.conf import settings
from django.db.models import F, Max
from django.db.models.functions import Coalesce

from ledger import selectors, services, witnessing
from ledger.keys import load_signing_key
from ledger.models import Checkpoint, Log
from ledger.selectors import TreeHeadRefused


@shared_task  # type: ignore[untyped-decorator]
def sign_due_checkpoints() -> list[int]:
    """Sign a checkpoint for every log that grew since its last one; rerunning signs nothing new.
    A log whose stored tree is refused (TreeHeadRefused) is skipped and stays unsigned.

    The key file is read on every run, so a rotated key signs from the next run on."""
    signer = load_signing_key()
    due = Log.objects.annotate(signed=Coalesce(Max("checkpoints__size"), -1)).filter(
        size__gt=F("signed")
    )
    signed = []
    for log in due:
        try:
            signed.append(services.sign_checkpoint(log=log, signer=signer).pk)
        except TreeHeadRefused:
            continue  # alerted by sign_checkpoint; one rewritten log stops no other log's signing
    return signed


@shared_task  # type: ignore[untyped-decorator]
def witness_checkpoint(checkpoint_id: int) -> dict[str, str]:
    """Send one signed checkpoint to the configured witnesses; a witness that cosigned it
    within LEDGER_COSIGNATURE_REFRESH_SECONDS is not asked again, so rerunning is safe."""
    checkpoint = Checkpoint.objects.select_related("log").filter(pk=checkpoint_id).first()
    if checkpoint is None:
        return {}
    return _values(witnessing.send_to_witnesses(checkpoint=checkpoint))


@shared_task  # type: ignore[untyped-decorator]
def witness_latest_checkpoints() -> dict[str, dict[str, str]]:
    """Send each log's latest checkpoint to the witnesses that have not cosigned it (one was
    down, or the notary stopped before the first try), or whose newest cosignature of it is
    LEDGER_COSIGNATURE_REFRESH_SECONDS old (the log has not grown)."""
    if not settings.LEDGER_WITNESSES:
        return {}
    sent = {}
    for log in Log.objects.all():
        checkpoint = selectors.latest_checkpoint(log=log)
        if checkpoint is not None:
            sent[log.origin] = _values(witnessing.send_to_witnesses(checkpoint=checkpoint))
    return sent


def _values(outcomes: dict[str, witnessing.Outcome]) -> dict[str, str]:
    return {name: outcome.value for name, outcome in outcomes.items()}
