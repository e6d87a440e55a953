"""API-key authentication: `Authorization: Bearer ik_<key id>_<secret>`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from ledger.models import Log
from notary import counters
from notary.client_address import client_throttle_key
from notary.models import ApiKey, Tenant
from notary.selectors import api_key_for_token


class ApiKeyPrincipal:
    """Who is calling: one key of one tenant, with one role."""

    is_authenticated = True
    is_anonymous = False

    def __init__(self, api_key: ApiKey) -> None:
        self.api_key = api_key
        self.tenant: Tenant = api_key.tenant
        self.role = api_key.role


def auth_failures_key(*, client: str) -> str:
    """The counter (notary.counters) of a client's failed bearer tokens this minute."""
    return f"notary:auth-failures:{client}"


class BearerApiKeyAuthentication(BaseAuthentication):
    """Bearer API keys, with failures counted per client address (notary.client_address):
    past NOTARY_AUTH_FAILURES_PER_MINUTE a client's bad tokens are refused (429) for the rest
    of the minute. The token is looked up first (one indexed row and a SHA-256), so a valid key
    always gets through, whatever others at its address got wrong. Past the limit a guess is
    still checked, only answered 429; guessing stays hopeless because a secret is 256 random
    bits, and the throttle keeps bounding how many failures a client gets told per minute."""

    def authenticate(self, request: Request) -> tuple[ApiKeyPrincipal, ApiKey] | None:
        header = get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        api_key = api_key_for_token(token=token.strip())
        if api_key is not None:
            return ApiKeyPrincipal(api_key), api_key
        client = client_throttle_key(meta=request.META)
        failures = counters.count(auth_failures_key(client=client), window_seconds=60)
        if failures > settings.NOTARY_AUTH_FAILURES_PER_MINUTE:
            raise Throttled(wait=60, detail="too many failed authentications from this address")
        raise AuthenticationFailed("invalid or revoked API key")

    def authenticate_header(self, request: Request) -> str:
        return 'Bearer realm="notary"'


def role_required(*roles: str) -> type[BasePermission]:
    """A permission class admitting only keys with one of these roles."""

    class HasRole(BasePermission):
        message = f"this endpoint needs an API key with role {' or '.join(roles)}"

        def has_permission(self, request: Request, view: Any) -> bool:
            return isinstance(request.user, ApiKeyPrincipal) and request.user.role in roles

    return HasRole


def caller_log(request: Request) -> Log:
    """The log a caller reads through the ledger's API (settings.LEDGER_API_CALLER_LOG): its
    tenant's own."""
    principal = request.user
    assert isinstance(principal, ApiKeyPrincipal)  # IsAuthenticated, and keys are the only auth
    return principal.tenant.log
