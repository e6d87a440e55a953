"""The log head (ledger_log) only moves forward, in the database itself.

An append is the one change a head row sees: its size grows, and its last hash and frontier
change with it. The trigger refuses a smaller size (a rollback), a changed hash or frontier at
the same size (item 2 of issue 16: a rewritten frontier would have the next checkpoint sign a
root no earlier checkpoint is consistent with), a changed origin, and a head whose last hash is
not the stored entry at size - 1. Deleting a log is refused; TRUNCATE is refused as for the
ledger's other tables (migration 0003). Only someone who drops the trigger gets past it, and
sign_checkpoint and verify_ledger --checkpoint catch what they do then."""

from __future__ import annotations

from typing import Any

from django.db import migrations

TABLE = "ledger_log"

POSTGRES_FUNCTION = """
CREATE OR REPLACE FUNCTION ledger_log_forward_only() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        RAISE EXCEPTION 'ledger log heads only move forward: DELETE on % refused', TG_TABLE_NAME
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.origin IS DISTINCT FROM OLD.origin OR NEW.id IS DISTINCT FROM OLD.id
       OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'ledger log heads only move forward: a log''s identity never changes'
            USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.size < OLD.size THEN
        RAISE EXCEPTION 'ledger log heads only move forward: size % to % refused',
            OLD.size, NEW.size USING ERRCODE = 'restrict_violation';
    END IF;
    IF NEW.size = OLD.size THEN
        IF NEW.head_hash IS DISTINCT FROM OLD.head_hash
           OR NEW.frontier IS DISTINCT FROM OLD.frontier THEN
            RAISE EXCEPTION 'ledger log heads only move forward: head changed at size %',
                OLD.size USING ERRCODE = 'restrict_violation';
        END IF;
        RETURN NEW;
    END IF;
    IF NOT EXISTS (
        SELECT 1 FROM ledger_entry
        WHERE log_id = NEW.id AND seq = NEW.size - 1 AND entry_hash = NEW.head_hash
    ) THEN
        RAISE EXCEPTION 'ledger log heads only move forward: size % names no stored entry',
            NEW.size USING ERRCODE = 'restrict_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;
"""

SQLITE_REFUSED_UPDATE = (
    "NEW.size < OLD.size OR NEW.origin IS NOT OLD.origin OR NEW.id IS NOT OLD.id "
    "OR NEW.created_at IS NOT OLD.created_at "
    "OR (NEW.size = OLD.size AND (NEW.head_hash IS NOT OLD.head_hash "
    "OR NEW.frontier IS NOT OLD.frontier)) "
    "OR (NEW.size > OLD.size AND NOT EXISTS (SELECT 1 FROM ledger_entry WHERE "
    "log_id = NEW.id AND seq = NEW.size - 1 AND entry_hash = NEW.head_hash))"
)


def sqlite_refusal(operation: str) -> str:
    message = f"ledger log heads only move forward: {operation} on {TABLE} refused"
    return f"BEGIN SELECT RAISE(ABORT, '{message}'); END;"


def create_triggers(apps: Any, schema_editor: Any) -> None:
    vendor = schema_editor.connection.vendor
    if vendor == "postgresql":
        schema_editor.execute(POSTGRES_FUNCTION, params=None)
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_forward_only BEFORE UPDATE OR DELETE ON {TABLE} "
            "FOR EACH ROW EXECUTE FUNCTION ledger_log_forward_only();"
        )
        # The function of migration 0003: TRUNCATE refused unless the session allows it.
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_no_truncate BEFORE TRUNCATE ON {TABLE} "
            "FOR EACH STATEMENT EXECUTE FUNCTION ledger_refuse_truncate();"
        )
    elif vendor == "sqlite":
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_forward_only BEFORE UPDATE ON {TABLE} "
            f"WHEN {SQLITE_REFUSED_UPDATE} " + sqlite_refusal("UPDATE")
        )
        schema_editor.execute(
            f"CREATE TRIGGER {TABLE}_no_delete BEFORE DELETE ON {TABLE} " + sqlite_refusal("DELETE")
        )
    else:
        raise RuntimeError(f"no forward-only trigger written for database vendor {vendor!r}")


def drop_triggers(apps: Any, schema_editor: Any) -> None:
    if schema_editor.connection.vendor == "postgresql":
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_forward_only ON {TABLE};")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_truncate ON {TABLE};")
        schema_editor.execute("DROP FUNCTION IF EXISTS ledger_log_forward_only();")
    else:
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_forward_only;")
        schema_editor.execute(f"DROP TRIGGER IF EXISTS {TABLE}_no_delete;")


class Migration(migrations.Migration):
    dependencies = [("ledger", "0004_signing_keys")]

    operations = [migrations.RunPython(create_triggers, drop_triggers)]
