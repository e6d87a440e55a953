"""A witness may cosign one checkpoint more than once (the notary asks again while a log does not
grow, so its cosignatures stay fresh): one row per witness key and cosignature time."""

from __future__ import annotations

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("ledger", "0010_log_quorum_is_configuration"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="cosignature",
            name="cosignature_once_per_witness",
        ),
        migrations.AddConstraint(
            model_name="cosignature",
            constraint=models.UniqueConstraint(
                fields=("checkpoint", "witness", "key_id", "timestamp"),
                name="cosignature_once_per_witness_time",
            ),
        ),
    ]
