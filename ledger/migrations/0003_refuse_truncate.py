"""Refuse TRUNCATE of ledger tables on PostgreSQL (row triggers do not see it).

The one way past it is a session that sets ``ledger.allow_truncate = on``: the test database's
teardown truncates every table. Like dropping a trigger, that takes a deliberate act by a role
that owns the tables, and verify_ledger and held checkpoints expose what it removed."""

from __future__ import annotations

from typing import Any

from django.db import migrations

TABLES = ("ledger_entry", "ledger_merklenode", "ledger_checkpoint")

FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_refuse_truncate() RETURNS trigger AS $$
BEGIN
    IF current_setting('ledger.allow_truncate', true) = 'on' THEN
        RETURN NULL;
    END IF;
    RAISE EXCEPTION 'ledger rows are append-only: TRUNCATE on % refused', TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
"""


def create_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(FUNCTION, params=None)
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
    schema_editor.execute("DROP FUNCTION IF EXISTS ledger_refuse_truncate();")


class Migration(migrations.Migration):
    dependencies = [("ledger", "0002_append_only_triggers")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
