"""The API's views: validate, call a service or selector, serialize."""

from __future__ import annotations

from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from notary import selectors, services
from notary.authentication import ApiKeyPrincipal, role_required
from notary.models import Role
from notary.serializers import LeaseGrantInput, LeaseOutput, LeaseRevokeInput


def _principal(request: Request) -> ApiKeyPrincipal:
    principal = request.user
    assert isinstance(principal, ApiKeyPrincipal)  # the authentication class guarantees it
    return principal


class WhoAmIView(APIView):
    """Which tenant and role a key acts as: how a client checks its credentials."""

    def get(self, request: Request) -> Response:
        principal = _principal(request)
        return Response(
            {
                "tenant": principal.tenant.slug,
                "role": principal.role,
                "key_id": principal.api_key.key_id,
                "log": principal.tenant.log.origin,
            }
        )


class LeaseGrantView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    def post(self, request: Request) -> Response:
        given = LeaseGrantInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        lease = services.lease_grant(
            tenant=principal.tenant, approver=principal.api_key, **given.validated_data
        )
        return Response(LeaseOutput(lease).data, status=201)


class LeaseDetailView(APIView):
    permission_classes = [role_required(Role.APPROVER, Role.AGENT, Role.AUDITOR)]

    def get(self, request: Request, lease_id: str) -> Response:
        lease = selectors.lease_get(tenant=_principal(request).tenant, lease_id=lease_id)
        return Response(LeaseOutput(lease).data)


class LeaseRevokeView(APIView):
    permission_classes = [role_required(Role.APPROVER)]

    def post(self, request: Request, lease_id: str) -> Response:
        given = LeaseRevokeInput(data=request.data)
        given.is_valid(raise_exception=True)
        principal = _principal(request)
        selectors.lease_get(tenant=principal.tenant, lease_id=lease_id)
        lease = services.lease_revoke(
            tenant=principal.tenant,
            lease_id=lease_id,
            by=principal.api_key.holder,
            reason=given.validated_data["reason"],
        )
        return Response(LeaseOutput(lease).data)
