"""Unverified requests leave the append-only table for a bounded quarantine: a table that is
pruned (newest WEBHOOK_QUARANTINE_KEEP per endpoint, none past WEBHOOK_QUARANTINE_SECONDS) and a
count on each endpoint. Raw events take verified events only from here on: a CHECK constraint
that PostgreSQL enforces on new rows only (NOT VALID: the unverified rows stored before stay, as
the append-only triggers require), an insert trigger on SQLite (where adding a constraint would
rebuild the table and lose its append-only triggers)."""

from __future__ import annotations

from typing import Any

import django.db.models.deletion
from django.db import migrations, models

CONSTRAINT = "rawevent_verified_only"
SQLITE_TRIGGER = "webhooks_rawevent_verified_only"


def add_verified_only(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(
            f'ALTER TABLE webhooks_rawevent ADD CONSTRAINT {CONSTRAINT} CHECK ("verified") '
            "NOT VALID;"
        )
    elif vendor == "sqlite":
        schema_editor.execute(
            f"CREATE TRIGGER {SQLITE_TRIGGER} BEFORE INSERT ON webhooks_rawevent "
            "WHEN NOT NEW.verified BEGIN SELECT RAISE(ABORT, 'CHECK constraint failed: "
            f"{CONSTRAINT}'); END;"
        )
    else:
        raise RuntimeError(f"no verified-only check written for database vendor {vendor!r}")


def drop_verified_only(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"ALTER TABLE webhooks_rawevent DROP CONSTRAINT {CONSTRAINT};")
    else:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {SQLITE_TRIGGER};")


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0002_append_only")]

    operations = [
        migrations.CreateModel(
            name="UnverifiedRequest",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("received_at", models.DateTimeField(auto_now_add=True)),
                (
                    "reason",
                    models.CharField(
                        choices=[("signature", "Signature"), ("invalid_event", "Event")],
                        max_length=16,
                    ),
                ),
                ("body_sha256", models.CharField(max_length=64)),
                ("body_size", models.PositiveIntegerField()),
                ("headers", models.JSONField()),
                ("error", models.TextField()),
                (
                    "endpoint",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="unverified",
                        to="webhooks.endpoint",
                    ),
                ),
            ],
            options={
                "constraints": [
                    models.CheckConstraint(
                        condition=models.Q(("reason__in", ["signature", "invalid_event"])),
                        name="unverified_reason_valid",
                    )
                ],
                "indexes": [
                    models.Index(fields=["endpoint", "id"], name="unverified_endpoint"),
                    models.Index(fields=["received_at"], name="unverified_received"),
                ],
            },
        ),
        migrations.AddField(
            model_name="endpoint",
            name="unverified_count",
            field=models.PositiveBigIntegerField(default=0),
        ),
        migrations.AddField(
            model_name="endpoint",
            name="last_unverified_at",
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AddConstraint(
                    model_name="rawevent",
                    constraint=models.CheckConstraint(
                        condition=models.Q(("verified", True)), name=CONSTRAINT
                    ),
                )
            ],
            database_operations=[migrations.RunPython(add_verified_only, drop_verified_only)],
        ),
    ]
