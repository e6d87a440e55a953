"""One error shape for the whole API: `{"error": code, "detail": ...}`."""

from __future__ import annotations

from typing import Any

from rest_framework.response import Response
from rest_framework.views import exception_handler

from ledger.services import LedgerInputError
from notary.errors import NotaryConflict, NotaryInputError, NotaryNotFound


def api_exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, NotaryInputError | LedgerInputError):
        return Response({"error": "invalid", "detail": str(exc)}, status=400)
    if isinstance(exc, NotaryNotFound):
        return Response({"error": "not_found", "detail": str(exc)}, status=404)
    if isinstance(exc, NotaryConflict):
        return Response({"error": exc.code, "detail": exc.detail, **exc.extra}, status=409)
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
