"""POST /webhooks/<endpoint id>/: store fast, answer fast; ingestion happens in Celery."""

from __future__ import annotations

from django.conf import settings
from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from webhooks import selectors, services


@csrf_exempt  # providers sign their requests; there is no browser session to protect
@require_POST
def receive(request: HttpRequest, endpoint_id: str) -> JsonResponse:
    endpoint = selectors.endpoint_for_url(public_id=endpoint_id)
    if endpoint is None:
        return _error(404, "not_found", "no such webhook endpoint")
    length = request.META.get("CONTENT_LENGTH") or "0"
    if not length.isdigit() or int(length) > settings.WEBHOOK_MAX_BODY_BYTES:
        return _error(413, "too_large", f"at most {settings.WEBHOOK_MAX_BODY_BYTES} bytes")
    body = request.body  # the raw bytes: signatures cover exactly these, never re-serialized JSON
    headers = {name.lower(): value for name, value in request.headers.items()}
    event, new = services.event_receive(endpoint=endpoint, body=body, headers=headers)
    if not event.verified:
        return _error(400, "signature", event.verification_error)
    return JsonResponse({"received": event.provider_event_id, "duplicate": not new}, status=200)


def _error(status: int, code: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": code, "detail": detail}, status=status)
