"""The Celery app: broker and schedule come from the Django settings (CELERY_* names)."""

from __future__ import annotations

import os
from typing import Any

from celery import Celery, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notary.settings")

app = Celery("notary")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


def drop_broken_connections(sender: Any = None, **kwargs: Any) -> None:
    """What Django does before each request: a connection that broke (a database restart) or
    outlived CONN_MAX_AGE is closed, so a worker that reuses connections (CELERY_DB_REUSE_MAX)
    never runs a task on a dead one. An eager task runs inside its caller's connection and
    transaction, which are not the worker's to close."""
    if sender is None or getattr(sender.request, "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()


signals.task_prerun.connect(drop_broken_connections)
