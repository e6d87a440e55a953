"""The Celery app: broker and schedule come from the Django settings (CELERY_* names)."""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "notary.settings")

app = Celery("notary")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
