"""The effect outputs whose fields are built once per class (FieldsBuiltOnce) answer exactly as
DRF's serializers that build them for every instance."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework import serializers

from ledger.selectors import effect_entries
from notary import selectors
from notary.models import Tenant
from notary.projection import effect_fields
from notary.serializers import (
    EffectDetailOutput,
    EffectOutput,
    FieldsBuiltOnce,
    ProposeOutput,
    RecordedEntryOutput,
)
from testkit.factories import dispatched, register, settled

pytestmark = pytest.mark.django_db


def per_instance(serializer_class: type[Any]) -> type[Any]:
    """The same serializer with DRF's own `fields`: built for each instance."""
    return type(
        f"PerInstance{serializer_class.__name__}",
        (serializer_class,),
        {"fields": serializers.Serializer.fields},
    )


def test_effect_outputs_answer_as_serializers_building_their_fields_per_instance(
    acme: Tenant,
) -> None:
    register(acme, "refunds", tier=1)
    register(acme, "mail")
    ids = [
        settled(acme, "case_1", "refunds", {"amount_cents": 500}, "COMMITTED"),
        settled(acme, "case_2", "refunds", {"amount_cents": 700}, "AMBIGUOUS"),
        dispatched(acme, "mail", "case_3"),  # nothing settled: null datetimes, no result
    ]
    rows = [selectors.effect_get(tenant=acme, effect_id=effect_id) for effect_id in ids]
    histories = [effect_entries(log=acme.log, effect_id=effect_id) for effect_id in ids]
    for row, history in zip(rows, histories, strict=True):
        projected = {"effect_id": row.effect_id, **effect_fields(history)}
        cases: list[tuple[type[Any], Any]] = [
            (EffectOutput, row),
            (EffectOutput, projected),  # the projection a proposal answers with
            (EffectDetailOutput, {"effect": row, "entries": history, "lease_entries": []}),
            (
                ProposeOutput,
                {
                    "created": True,
                    "effect": projected,
                    "entries": history[:2],
                    "dispatched": history[1],
                    "dispatch_refused": None,
                },
            ),
            (
                RecordedEntryOutput,
                {"recorded": True, "entry": history[-1], "receipt_entries": history},
            ),
        ]
        assert all(issubclass(output, FieldsBuiltOnce) for output, _ in cases)
        for output, instance in cases:
            assert output(instance).data == per_instance(output)(instance).data, output
    assert EffectOutput(rows, many=True).data == per_instance(EffectOutput)(rows, many=True).data
    assert EffectOutput().fields is EffectOutput().fields  # built once, not per instance
    twin = per_instance(EffectOutput)
    assert twin().fields is not twin().fields
