"""POST /webhooks/<endpoint id>/: store fast, answer fast; ingestion happens in Celery. Every
answer but the 200 is the API's error shape, {"error": code, "detail": text}."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt

from webhooks import providers, selectors, services
from webhooks.models import Refusal

# How long a rate-limited sender should wait: the counter's window.
RETRY_AFTER_SECONDS = 60
# A body refused as too large is read and thrown away up to this much before the 413, so that
# the sender sees the answer: a server closing on unread data makes the client see a reset.
DRAIN_BYTES = 16 * 1024 * 1024


class _BodyRefused(Exception):
    def __init__(self, status: int, code: str, detail: str) -> None:
        super().__init__(detail)
        self.status, self.code, self.detail = status, code, detail


@csrf_exempt  # providers sign their requests; there is no browser session to protect
def receive(request: HttpRequest, endpoint_id: str) -> JsonResponse:
    if request.method != "POST":
        response = _error(405, "method_not_allowed", f"{request.method}: providers POST here")
        response["Allow"] = "POST"
        return response
    found = selectors.endpoint_remembered(public_id=endpoint_id)
    if found is None:
        return _error(404, "not_found", "no such webhook endpoint")
    endpoint, secrets = found
    try:
        body = _read_body(request, settings.WEBHOOK_MAX_BODY_BYTES)
    except _BodyRefused as refused:
        return _error(refused.status, refused.code, refused.detail)
    headers = {name.lower(): value for name, value in request.headers.items()}
    try:
        event, new = services.event_receive(
            endpoint=endpoint, secrets=secrets, body=body, headers=headers
        )
    except services.WebhookRefused as refused:
        if refused.code == services.GONE:
            return _error(404, refused.code, refused.detail)
        if refused.code != services.RATE_LIMITED:
            return _error(400, refused.code, refused.detail)
        response = _error(429, refused.code, refused.detail)
        response["Retry-After"] = str(RETRY_AFTER_SECONDS)
        return response
    return JsonResponse({"received": event.provider_event_id, "duplicate": not new}, status=200)


def _read_body(request: HttpRequest, limit: int) -> bytes:
    """The raw bytes (signatures cover exactly these, never re-serialized JSON), at most `limit`
    of them: refused, never kept, when Content-Length says more, and as soon as reading passes
    the limit whatever it says. A body with no Content-Length (chunked) is read from the
    server's stream when the server ends it (wsgi.input_terminated, as gunicorn does). Read
    here, not through request.body, so that this is the one limit (not
    DATA_UPLOAD_MAX_MEMORY_SIZE, whose refusal is an HTML 400)."""
    declared = request.META.get("CONTENT_LENGTH") or ""
    if declared and not declared.isdigit():
        raise _BodyRefused(400, "invalid", f"Content-Length {declared[:40]!r} is not a length")
    if declared:
        stream: Any = request  # Django's stream, which ends at Content-Length
    elif request.META.get("wsgi.input_terminated"):  # META is the WSGI environ
        stream = request.META["wsgi.input"]
    else:
        return b""
    try:
        body = _read_at_most(stream, 0 if int(declared or 0) > limit else limit + 1)
        if len(body) > limit or int(declared or 0) > limit:
            _read_at_most(stream, DRAIN_BYTES, keep=False)
            raise _BodyRefused(413, "too_large", f"a webhook body is at most {limit} bytes")
    except OSError as exc:  # the client went away mid-body (UnreadablePostError is an OSError)
        raise _BodyRefused(400, "invalid", f"the body could not be read: {exc}") from exc
    return body


def _read_at_most(stream: Any, size: int, *, keep: bool = True) -> bytes:
    """Up to `size` bytes of `stream` (fewer at its end); thrown away unless `keep`."""
    chunks: list[bytes] = []
    while size > 0:
        chunk = stream.read(min(size, 64 * 1024))
        if not chunk:
            break
        size -= len(chunk)
        if keep:
            chunks.append(chunk)
    return b"".join(chunks)


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail}, status=status)


# The receiver in the API's OpenAPI schema (added by notary.schema.add_webhook_receiver: this is
# a plain Django view, which drf-spectacular does not see). Other methods are a 405.
OPENAPI_PATH = "/webhooks/{endpoint_id}/"
_ERROR = {"$ref": "#/components/schemas/ErrorOutput"}


def openapi_path_item() -> dict[str, Any]:
    limit = settings.WEBHOOK_MAX_BODY_BYTES

    def error(status: int, *refusals: tuple[str, str, str, str], **extra: Any) -> dict[str, Any]:
        """A refusal's answer, with an example of each way to it: (name, code, detail as the
        receiver words it, when). The description is made from them (notary.schema)."""
        examples = {
            name: {"value": json.loads(_error(status, code, detail).content), "summary": when}
            for name, code, detail, when in refusals
        }
        return {
            "description": "; ".join(f"`{code}`: {when}" for _, code, _, when in refusals),
            "content": {"application/json": {"schema": _ERROR, "examples": examples}},
            **extra,
        }

    not_an_object = providers.EventUnreadable("the event is a JSON list, not an object")
    unverified = settings.WEBHOOK_UNVERIFIED_PER_MINUTE
    return {
        "post": {
            "operationId": "webhooks_receive",
            "summary": "A provider's signed webhook delivery",
            "description": (
                "The raw body, signed the provider's way over its exact bytes: Stripe's "
                "`Stripe-Signature`; Resend's `svix-id`, `svix-timestamp`, `svix-signature`; "
                "Standard Webhooks' `webhook-id`, `webhook-timestamp`, `webhook-signature`. A "
                "verified event is stored as it came and ingested as evidence afterwards; a "
                "replayed event id is a 200 that adds nothing. The event id is the body's "
                "`id` for Stripe, the id header for the others."
            ),
            "tags": ["webhooks"],
            "security": [],
            "parameters": [
                {
                    "name": "endpoint_id",
                    "in": "path",
                    "required": True,
                    "schema": {"type": "string", "format": "uuid"},
                    "description": "the endpoint's public id, as the provider was given it",
                }
            ],
            "requestBody": {
                "required": True,
                "content": {
                    "application/json": {
                        "schema": {
                            "type": "object",
                            "additionalProperties": {},
                            "description": (
                                f"the provider's event, a JSON object of at most {limit} bytes "
                                "nested no deeper than 64 arrays and objects"
                            ),
                        }
                    }
                },
            },
            "responses": {
                "200": {
                    "description": "a verified event, stored (or a replay of one)",
                    "content": {
                        "application/json": {
                            "schema": {
                                "type": "object",
                                "properties": {
                                    "received": {
                                        "type": "string",
                                        "description": "the provider's event id",
                                    },
                                    "duplicate": {
                                        "type": "boolean",
                                        "description": "true: this event was stored before",
                                    },
                                },
                                "required": ["received", "duplicate"],
                            }
                        }
                    },
                },
                "400": error(
                    400,
                    (
                        "signature",
                        Refusal.SIGNATURE.value,
                        "SignatureVerificationError: No signatures found matching the expected "
                        "signature for payload",
                        "no active secret verifies the signature; quarantined, never evidence",
                    ),
                    (
                        "invalid_event",
                        Refusal.EVENT.value,
                        str(not_an_object),
                        "signed, but not a JSON object with a usable event id, or nested too "
                        "deep; quarantined, never evidence",
                    ),
                    (
                        "invalid",
                        "invalid",
                        "Content-Length 'ten' is not a length",
                        "an unreadable body or Content-Length",
                    ),
                ),
                "404": error(
                    404,
                    ("not_found", "not_found", "no such webhook endpoint", "no such endpoint"),
                ),
                "413": error(
                    413,
                    (
                        "too_large",
                        "too_large",
                        f"a webhook body is at most {limit} bytes",
                        f"the body is over {limit} bytes; not kept",
                    ),
                ),
                "429": error(
                    429,
                    (
                        "rate_limited",
                        services.RATE_LIMITED,
                        f"more than {unverified} requests to this endpoint in a minute were "
                        "not verified events; the rest of the minute's are refused and not kept",
                        "too many requests to this endpoint this minute were not verified "
                        "events; the rest of the minute's are refused and not kept",
                    ),
                    headers={
                        "Retry-After": {
                            "schema": {"type": "integer"},
                            "description": "seconds until the endpoint takes them again",
                        }
                    },
                ),
            },
        }
    }
