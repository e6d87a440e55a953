from __future__ import annotations

from django.apps import AppConfig


class NotaryConfig(AppConfig):
    name = "notary"
    verbose_name = "Notary"

    def ready(self) -> None:
        from notary import schema  # noqa: F401  registers the bearer scheme with drf-spectacular
