"""The cosignature quorum is configuration (LEDGER_COSIGNATURE_QUORUM), not a column a plain
UPDATE could set to 0 to publish a checkpoint no witness cosigned."""

from __future__ import annotations

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0009_entry_kind_held"),
    ]

    operations = [
        migrations.RemoveField(model_name="log", name="required_cosignatures"),
    ]
