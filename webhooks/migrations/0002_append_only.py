"""Raw events are kept exactly as they arrived, and an ingestion is written once: the database
refuses UPDATE and DELETE on both, with the ledger's own trigger function on PostgreSQL."""

from __future__ import annotations

from typing import Any

from django.db import migrations

TABLES = ("webhooks_rawevent", "webhooks_ingestion")


def create_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for table in TABLES:
        if vendor == "postgresql":
            schema_editor.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();"
            )
        elif vendor == "sqlite":
            for operation in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'webhook rows are append-only: {operation} on "
                    f"{table} refused'); END;"
                )
        else:
            raise RuntimeError(f"no append-only triggers written for database vendor {vendor!r}")


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    for table in TABLES:
        if schema_editor.connection.vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};")
        else:
            for operation in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{operation};")


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0001_initial"), ("ledger", "0002_append_only_triggers")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
