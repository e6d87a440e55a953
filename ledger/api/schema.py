"""The error shape's OpenAPI pieces, here so that the ledger's API can name its refusals without
importing the notary: every error is `{"error": code, "detail": ...}` (the project's exception
handler writes it), `detail` a sentence, or, for a body a serializer refused, the reasons by
field.

A refusal is documented as what the code raises: `refusal(exc, meaning)` is an example answer
whose body and status are those the project's exception handler (REST_FRAMEWORK's
EXCEPTION_HANDLER) writes for `exc`, so the code and status documented are the ones sent.
`error_responses(...)` groups refusals into the responses of an operation by that status, each
described by its refusals' codes and meanings."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, cast

from drf_spectacular.utils import OpenApiExample, OpenApiResponse, extend_schema_field
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.settings import api_settings


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


def refusal(exc: Exception, meaning: str, *, name: str = "") -> OpenApiExample:
    """The answer to `exc` as an example: its body and status are what the project's exception
    handler writes for it; named by its error code unless `name` says otherwise (two refusals
    of one code in one response need two names); `meaning` says when it is answered."""
    handler = cast(Callable[[Exception, dict[str, Any]], Any], api_settings.EXCEPTION_HANDLER)
    response = handler(exc, {})
    if response is None:
        raise TypeError(f"{exc!r} is not answered by the exception handler")
    value = json.loads(json.dumps(response.data))  # ErrorDetail strings as plain JSON
    return OpenApiExample(
        name or value["error"],
        value=value,
        summary=meaning,
        status_codes=[str(response.status_code)],
        response_only=True,
    )


def status_of(example: OpenApiExample) -> str:
    """The one status a refusal is answered with."""
    [status] = example.status_codes or [""]
    return str(status)


def input_refusal(
    serializer_class: Any, data: Mapping[str, Any], meaning: str, *, name: str = ""
) -> OpenApiExample:
    """The 400 `invalid` a serializer answers for `data`, exactly as it words it."""
    given = serializer_class(data=dict(data))
    if given.is_valid():
        raise ValueError(f"{serializer_class.__name__} takes {data!r}: no refusal")
    return refusal(ValidationError(given.errors), meaning, name=name)


def refusal_lines(examples: Mapping[str, Mapping[str, Any]]) -> str:
    """A response's description from its refusals (an OpenAPI `examples` map): one line each."""
    lines = []
    for example in examples.values():
        code, meaning = example["value"]["error"], example.get("summary")
        lines.append(f"- `{code}`: {meaning}" if meaning else f"- `{code}`")
    return "\n".join(lines)


def error_responses(
    *refusals: OpenApiExample, schemas: Mapping[int, Any] | None = None
) -> dict[int, OpenApiResponse]:
    """The responses these refusals make, by status: in the one error shape (or `schemas`' for
    that status, such as a 409's fuller shape), described by their codes and meanings."""
    by_status: dict[int, list[OpenApiExample]] = {}
    for example in refusals:
        by_status.setdefault(int(status_of(example)), []).append(example)
    responses = {}
    for status, examples in by_status.items():
        listed = {e.name: {"value": e.value, "summary": e.summary} for e in examples}
        responses[status] = OpenApiResponse(
            response=(schemas or {}).get(status, ErrorOutput),
            description=refusal_lines(listed),
            examples=examples,
        )
    return responses
