"""What the OpenAPI schema says beyond each view's own annotations: the bearer API key scheme,
the refusals every operation of a kind can answer (so no view copies them), and the webhook
receiver, a plain Django view that drf-spectacular does not see.

Every refusal is the one error shape (ledger.api.schema.ErrorOutput). Which ones an operation
gets here, from what it is:

- authenticated (has a security requirement): 401 (no key, or an invalid or revoked one), 429
  (too many failed authentications from the client's address this minute);
- with a permission beyond "authenticated" (a role): 403, its message saying which roles;
- with a request body: 400 (not JSON, nested too deep, a lone surrogate, or refused as given),
  413 (over DATA_UPLOAD_MAX_MEMORY_SIZE), 415 (not application/json);
- with query parameters: 400 (refused as given); with path parameters: 404.

A view's own annotation of a status (`extend_schema(responses={409: ...})`) wins over these."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from drf_spectacular.utils import OpenApiResponse
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.serializers import ListSerializer

from ledger.api.schema import ErrorOutput
from webhooks.views import OPENAPI_PATH, openapi_path_item


class BearerApiKeyScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "notary.authentication.BearerApiKeyAuthentication"
    name = "apiKey"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "ik_<key id>_<secret>"}


UNAUTHENTICATED = (
    "`not_authenticated` (no bearer key) or `authentication_failed` (an invalid or revoked key)"
)
THROTTLED = (
    "`throttled`: too many failed authentications from this client address this minute; a "
    "valid key still gets through"
)
BODY_REFUSED = (
    "`parse_error` (not JSON, nested deeper than 64 arrays and objects, or holding a lone "
    "surrogate) or `invalid` (refused as given; `detail` says why, by field for a body the "
    "serializer refused); nothing was written"
)
QUERY_REFUSED = "`invalid`: a query parameter refused as given; `detail` says which and why"
NOT_FOUND = "`not_found`: no such record for this key's tenant (another tenant's do not exist)"
UNSUPPORTED_MEDIA_TYPE = "`unsupported_media_type`: the body must be application/json"


def _too_large() -> str:
    limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
    return f"`too_large`: the body is larger than {limit} bytes"


class AutoSchema(SpectacularAutoSchema):
    """The project's schema class (REST_FRAMEWORK's DEFAULT_SCHEMA_CLASS): drf-spectacular's,
    with the refusals an operation answers by its kind added to what its view declares."""

    def get_operation(
        self,
        path: str,
        path_regex: str,
        path_prefix: str,
        method: str,
        registry: Any,
    ) -> dict[str, Any] | None:
        operation = super().get_operation(path, path_regex, path_prefix, method, registry)
        if operation is None:
            return None
        responses: dict[str, Any] = operation["responses"]
        for status, description in self._refusals(operation):
            if str(status) not in responses:
                answer = OpenApiResponse(response=ErrorOutput, description=description)
                responses[str(status)] = self._get_response_for_code(  # type: ignore[no-untyped-call]
                    answer, str(status)
                )
        if "401" in responses:
            responses["401"].setdefault("headers", {})["WWW-Authenticate"] = {
                "schema": {"type": "string"},
                "description": 'Bearer realm="notary"',
            }
        if "429" in responses and "security" in operation:
            responses["429"].setdefault("headers", {})["Retry-After"] = {
                "schema": {"type": "integer"},
                "description": "seconds until the address may try again",
            }
        operation["responses"] = dict(sorted(responses.items()))
        return operation

    def _map_serializer_field(
        self, field: Any, direction: str, bypass_extensions: bool = False
    ) -> dict[str, Any]:
        """Also a nested list's bounds (drf-spectacular renders a ListField's, not a
        ListSerializer's)."""
        schema: dict[str, Any] = super()._map_serializer_field(  # type: ignore[no-untyped-call]
            field, direction, bypass_extensions
        )
        if isinstance(field, ListSerializer) and schema.get("type") == "array":
            bounds = {"maxItems": getattr(field, "max_length", None)}
            bounds["minItems"] = getattr(field, "min_length", None)
            schema.update({key: n for key, n in bounds.items() if n is not None})
        return schema

    def _map_basic_serializer(self, serializer: Any, direction: str) -> dict[str, Any]:
        """A serializer whose Meta says `closed = True` takes exactly its fields: the schema
        says so (additionalProperties: false)."""
        schema: dict[str, Any] = super()._map_basic_serializer(  # type: ignore[no-untyped-call]
            serializer, direction
        )
        if getattr(getattr(serializer, "Meta", None), "closed", False):
            schema["additionalProperties"] = False
        return schema

    def _refusals(self, operation: dict[str, Any]) -> list[tuple[int, str]]:
        refusals: list[tuple[int, str]] = []
        if any(requirement for requirement in operation.get("security", [])):
            refusals += [(401, UNAUTHENTICATED), (429, THROTTLED)]
        roles = [
            permission
            for permission in self.view.get_permissions()
            if not isinstance(permission, (AllowAny, IsAuthenticated))
        ]
        if roles:
            why = "; ".join(str(getattr(p, "message", "not permitted")) for p in roles)
            refusals.append((403, f"`permission_denied`: {why}"))
        if "requestBody" in operation:
            refusals += [(400, BODY_REFUSED), (413, _too_large()), (415, UNSUPPORTED_MEDIA_TYPE)]
        where = {parameter["in"] for parameter in operation.get("parameters", [])}
        if "query" in where:
            refusals.append((400, QUERY_REFUSED))
        if "path" in where:
            refusals.append((404, NOT_FOUND))
        return refusals


def add_webhook_receiver(result: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
    """A drf-spectacular postprocessing hook (SPECTACULAR_SETTINGS' POSTPROCESSING_HOOKS):
    the webhook receiver's path, as webhooks.views describes it. Its errors name the
    ErrorOutput component, which every authenticated operation's refusals register."""
    result.setdefault("paths", {})[OPENAPI_PATH] = openapi_path_item()
    return result


__all__ = ["AutoSchema", "BearerApiKeyScheme", "add_webhook_receiver"]
