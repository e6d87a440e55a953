from __future__ import annotations

from django.apps import AppConfig


class NotaryConfig(AppConfig):
    name = "notary"
    verbose_name = "Notary"
