"""The error shape's OpenAPI pieces, here so that the ledger's API can name its refusals without
importing the notary: every error is `{"error": code, "detail": ...}` (the project's exception
handler writes it), `detail` a sentence, or, for a body a serializer refused, the reasons by
field."""

from __future__ import annotations

from typing import Any

from drf_spectacular.utils import OpenApiResponse, extend_schema_field
from rest_framework import serializers


@extend_schema_field(
    {
        "oneOf": [
            {"type": "string"},
            {"type": "object", "additionalProperties": {}},
            {"type": "array", "items": {}},
        ],
        "description": "why: a sentence, or the reasons by field of a body refused as given",
    }
)
class ErrorDetailField(serializers.JSONField):
    pass


class ErrorOutput(serializers.Serializer):  # type: ignore[type-arg]
    """Every refusal: a stable code, and why."""

    error = serializers.CharField(help_text="a stable code: invalid, not_found, attempt_taken, ...")
    detail = ErrorDetailField()


def error_response(description: str, serializer: Any = ErrorOutput) -> OpenApiResponse:
    """An error answer, in the one error shape, described."""
    return OpenApiResponse(response=serializer, description=description)
