"""Refuse TRUNCATE of raw events and ingestions on PostgreSQL (the row triggers of 0002 do not
see it), with the ledger's function: only a session that sets ``ledger.allow_truncate = on``
(the test database's teardown) gets past it. A TRUNCATE of a table they reference with CASCADE
reaches them too, and is refused the same way. What is left to a superuser who drops the
triggers, verify_ledger reports: every OBSERVED entry's raw event is checked against the digest
the entry records."""

from __future__ import annotations

from typing import Any

from django.db import migrations

TABLES = ("webhooks_rawevent", "webhooks_ingestion")


def create_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(
            f"CREATE TRIGGER {table}_no_truncate BEFORE TRUNCATE ON {table} "
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_truncate();"
        )


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in TABLES:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_truncate ON {table};")


class Migration(migrations.Migration):
    dependencies = [("webhooks", "0003_quarantine"), ("ledger", "0003_refuse_truncate")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
