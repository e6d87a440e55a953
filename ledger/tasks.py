"""Periodic checkpoint signing (Celery beat runs it; see CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task
from django.db.models import F, Max
from django.db.models.functions import Coalesce

from ledger import services
from ledger.keys import load_signing_key
from ledger.models import Log
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
