"""Make entries, Merkle nodes and checkpoints append-only in the database itself.

The triggers refuse UPDATE and DELETE for every client, not only the ORM; only someone who can
drop a trigger can rewrite history, and verify_ledger and the signed checkpoints catch that."""

from __future__ import annotations

from typing import Any

from django.db import migrations

APPEND_ONLY_TABLES = ("ledger_entry", "ledger_merklenode", "ledger_checkpoint")

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_refuse_change() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'ledger rows are append-only: % on % refused', TG_OP, TG_TABLE_NAME
        USING ERRCODE = 'restrict_violation';
END;
$$ LANGUAGE plpgsql;
"""


def create_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        # params=None: the function body holds % placeholders of its own (RAISE formats).
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        for table in APPEND_ONLY_TABLES:
            schema_editor.execute(
                f"CREATE TRIGGER {table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION ledger_refuse_change();"
            )
    elif vendor == "sqlite":
        for table in APPEND_ONLY_TABLES:
            for operation in ("UPDATE", "DELETE"):
                schema_editor.execute(
                    f"CREATE TRIGGER {table}_no_{operation.lower()} BEFORE {operation} ON {table} "
                    f"BEGIN SELECT RAISE(ABORT, 'ledger rows are append-only: {operation} on "
                    f"{table} refused'); END;"
                )
    else:
        raise RuntimeError(f"no append-only triggers written for database vendor {vendor!r}")


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    for table in APPEND_ONLY_TABLES:
        if vendor == "postgresql":
            schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_append_only ON {table};")
        else:
            for operation in ("update", "delete"):
                schema_editor.execute(f"DROP TRIGGER IF EXISTS {table}_no_{operation};")
    if vendor == "postgresql":
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_refuse_change();")


class Migration(migrations.Migration):
    dependencies = [("ledger", "0001_initial")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
