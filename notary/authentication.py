"""API-key authentication: `Authorization: Bearer ik_<key id>_<secret>`."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.cache import cache
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.exceptions import AuthenticationFailed, Throttled
from rest_framework.permissions import BasePermission
from rest_framework.request import Request

from ledger.models import Log
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


class BearerApiKeyAuthentication(BaseAuthentication):
    """Bearer API keys, with failures counted per client address: an address that keeps
    guessing is refused for the rest of the minute before any token of it is looked at."""

    def authenticate(self, request: Request) -> tuple[ApiKeyPrincipal, ApiKey] | None:
        header = get_authorization_header(request).decode("latin-1")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer":
            return None
        failures_key = f"notary:auth-failures:{request.META.get('REMOTE_ADDR', '')}"
        if cache.get(failures_key, 0) >= settings.NOTARY_AUTH_FAILURES_PER_MINUTE:
            raise Throttled(wait=60, detail="too many failed authentications from this address")
        api_key = api_key_for_token(token=token.strip())
        if api_key is None:
            cache.add(failures_key, 0, timeout=60)
            cache.incr(failures_key)
            raise AuthenticationFailed("invalid or revoked API key")
        return ApiKeyPrincipal(api_key), api_key

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
