from __future__ import annotations

from django.apps import AppConfig


class NotaryConfig(AppConfig):
    name = "notary"
    verbose_name = "Notary"

    def ready(self) -> None:
        from django.db.models.signals import post_migrate

        from notary import schema  # noqa: F401  registers the bearer scheme with drf-spectacular
        from notary.groups import ensure_review_groups

        # After the last app's permissions exist: webhooks migrates after notary.
        post_migrate.connect(ensure_review_groups, dispatch_uid="notary.review_groups")
