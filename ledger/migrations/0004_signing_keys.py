"""The registry of checkpoint-signing keys, append-only in the database itself.

A row is never deleted and never changed, except once: the current key's period is closed
(valid_until set, nothing else) when the next key signs its first checkpoint. What a key was and
when it was in use, once published, cannot be rewritten by the ORM or a stray SQL session."""

from __future__ import annotations

from typing import Any

import django.db.models.lookups
from django.db import migrations, models

TABLE = "ledger_signingkey"
COLUMNS = ("id", "name", "key_id", "public_key", "vkey", "valid_from")

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_signingkey_guard() RETURNS trigger AS $$
DECLARE
    closed ledger_signingkey;
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.valid_until IS NULL AND NEW.valid_until IS NOT NULL THEN
        closed := OLD;
        closed.valid_until := NEW.valid_until;
        IF NEW IS NOT DISTINCT FROM closed THEN
            RETURN NEW;
        END IF;
    END IF;
    RAISE EXCEPTION 'signing keys are append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation',
              HINT = 'Only closing the current key''s period (setting valid_until) is allowed.';
END;
$$ LANGUAGE plpgsql;
"""


def sqlite_refusal(operation: str) -> str:
    message = f"signing keys are append-only: {operation} on {TABLE} refused"
    return f"BEGIN SELECT RAISE(ABORT, '{message}'); END;"


def create_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_append_only BEFORE UPDATE OR DELETE ON {TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION ledger_signingkey_guard();"
        )
        # The function of migration 0003: TRUNCATE refused unless the session allows it.
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_truncate();"
        )
    elif vendor == "sqlite":
        changed = " OR ".join(f"NEW.{column} IS NOT OLD.{column}" for column in COLUMNS)
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_no_update BEFORE UPDATE ON {TABLE} "
            f"WHEN OLD.valid_until IS NOT NULL OR NEW.valid_until IS NULL OR {changed} "
            + sqlite_refusal("UPDATE")
        )
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_no_delete BEFORE DELETE ON {TABLE} " + sqlite_refusal("DELETE")
        )
    else:
        raise RuntimeError(f"no append-only triggers written for database vendor {vendor!r}")


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_append_only ON {TABLE};")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};")
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_signingkey_guard();")
    else:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_update;")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_delete;")


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0003_refuse_truncate"),
    ]

    operations = [
        migrations.CreateModel(
            name="SigningKey",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("name", models.TextField()),
                ("key_id", models.CharField(max_length=8)),
                ("public_key", models.BinaryField(max_length=32, unique=True)),
                ("vkey", models.TextField()),
                ("valid_from", models.DateTimeField()),
                ("valid_until", models.DateTimeField(blank=True, null=True)),
            ],
            options={
                "constraints": [
                    models.UniqueConstraint(
                        django.db.models.lookups.IsNull(models.F("valid_until"), True),
                        condition=models.Q(("valid_until__isnull", True)),
                        name="signingkey_one_current",
                    ),
                    models.CheckConstraint(
                        condition=models.Q(
                            ("valid_until__isnull", True),
                            ("valid_until__gte", models.F("valid_from")),
                            _connector="OR",
                        ),
                        name="signingkey_period_ordered",
                    ),
                ],
            },
        ),
        migrations.RunPython(create_triggers, drop_triggers),
    ]
