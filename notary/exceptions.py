"""One error shape for the whole API: `{"error": code, "detail": ...}`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent
from rest_framework.response import Response
from rest_framework.views import exception_handler

from ledger.services import LedgerInputError
from notary.errors import (
    NotaryConflict,
    NotaryDependencyFailed,
    NotaryForbidden,
    NotaryInputError,
    NotaryNotFound,
)


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    unread = _unreadable_body(exc)
    if unread is not None:
        return unread
    if isinstance(exc, NotaryInputError | LedgerInputError):
        return Response({"error": "invalid", "detail": str(exc)}, status=400)
    if isinstance(exc, NotaryNotFound):
        return Response({"error": "not_found", "detail": str(exc)}, status=404)
    if isinstance(exc, NotaryForbidden):
        return Response({"error": exc.code, "detail": exc.detail}, status=403)
    if isinstance(exc, NotaryConflict):
        return Response({"error": exc.code, "detail": exc.detail, **exc.extra}, status=409)
    if isinstance(exc, NotaryDependencyFailed):
        # 424 Failed Dependency: not a 5xx, the notary itself did what it should; not a 409,
        # the ledger's state does not refuse it, and the same request may succeed later.
        return Response({"error": exc.code, "detail": exc.detail}, status=424)
    response = exception_handler(exc, context)
    if response is None:
        return None
    codes = exc.get_codes() if hasattr(exc, "get_codes") else "error"
    code = codes if isinstance(codes, str) else "invalid"
    detail = (
        response.data.get("detail", response.data)
        if isinstance(response.data, dict)
        else response.data
    )
    response.data = {"error": code, "detail": detail}
    return response


def _unreadable_body(exc: Exception) -> Response | None:
    """Django's refusals of a body it will not read, which would otherwise be its HTML 400: a
    body over DATA_UPLOAD_MAX_MEMORY_SIZE is a 413, too many form fields or files a 400."""
    if isinstance(exc, RequestDataTooBig):
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        detail = f"the request body is larger than the API accepts ({limit} bytes)"
        return Response({"error": "too_large", "detail": detail}, status=413)
    if isinstance(exc, TooManyFieldsSent | TooManyFilesSent):
        return Response({"error": "invalid", "detail": str(exc)}, status=400)
    return None
