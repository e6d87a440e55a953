"""The API's views: validate, call a service or selector, serialize."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notary.authentication import ApiKeyPrincipal


class WhoAmIView(APIView):
    """Which tenant and role a key acts as: how a client checks its credentials."""

    def get(self, request: Request) -> Response:
        principal = request.user
        assert isinstance(principal, ApiKeyPrincipal)
        return Response(
            {
                "tenant": principal.tenant.slug,
                "role": principal.role,
                "key_id": principal.api_key.key_id,
                "log": principal.tenant.log.origin,
            }
        )
