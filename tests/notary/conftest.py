"""Two tenants, and API clients holding keys of theirs."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from rest_framework.test import APIClient

from notary import services
from notary.models import Tenant

ClientFor = Callable[[Tenant, str, str], APIClient]


@pytest.fixture
def acme(db: None) -> Tenant:
    return services.tenant_create(slug="acme", name="Acme Refunds")


@pytest.fixture
def globex(db: None) -> Tenant:
    return services.tenant_create(slug="globex", name="Globex")


def client_for(tenant: Tenant, role: str, holder: str) -> APIClient:
    """An API client authenticated with a new key of `role` held by `holder`."""
    _, token = services.api_key_issue(tenant=tenant, role=role, holder=holder)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client
