from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.test import APIClient

from notary import services
from notary.errors import NotaryInputError
from notary.models import ApiKey, Tenant
from notary.selectors import api_key_for_token

pytestmark = pytest.mark.django_db


def test_a_tenant_owns_a_log_named_after_it(acme: Tenant) -> None:
    assert acme.log.origin == "notary.interlock.example/acme"
    assert acme.log.size == 0


@pytest.mark.parametrize("slug", ["", "Acme", "-acme", "acme-", "a" * 64, "ac me", "acme/x"])
def test_bad_tenant_slugs_are_refused_and_create_nothing(slug: str) -> None:
    with pytest.raises(NotaryInputError):
        services.tenant_create(slug=slug, name="x")
    assert not Tenant.objects.exists()


def test_a_duplicate_tenant_is_refused(acme: Tenant) -> None:
    with pytest.raises(NotaryInputError, match="exists already"):
        services.tenant_create(slug="acme", name="again")


def test_a_key_secret_is_shown_once_and_stored_only_as_a_digest(acme: Tenant) -> None:
    api_key, token = services.api_key_issue(
        tenant=acme, role="agent", holder="refund-bot", label="refund bot"
    )
    prefix, key_id, secret = token.split("_", 2)
    assert (prefix, key_id) == ("ik", api_key.key_id)
    assert len(secret) >= 43  # 256 bits
    with connection.cursor() as cursor:
        cursor.execute("SELECT * FROM notary_apikey")
        stored = repr(cursor.fetchall())
    assert secret not in stored
    assert api_key_for_token(token=token) == api_key


def test_a_token_loads_its_key_tenant_and_log_as_the_orm_does(acme: Tenant) -> None:
    """The lookup is one written-out statement: every field of the key, its tenant and their
    log must be what the ORM loads, converted alike, and reading them asks nothing more."""
    _, token = services.api_key_issue(tenant=acme, role="agent", holder="refund-bot")
    services.lease_grant(
        tenant=acme,
        approver=services.api_key_issue(tenant=acme, role="approver", holder="alice")[0],
        case_id="case_1",
        action="refund",
        expires_at=timezone.now() + timedelta(hours=1),
        requested_by="refund-bot",
    )  # the log has entries: its head and frontier are bytes worth comparing
    with CaptureQueriesContext(connection) as queries:
        loaded = api_key_for_token(token=token)
        assert loaded is not None
        log = loaded.tenant.log
    assert len(queries) == 1
    orm = ApiKey.objects.select_related("tenant__log").get(pk=loaded.pk)

    def values(instance: Model) -> dict[str, Any]:
        return {f.attname: getattr(instance, f.attname) for f in instance._meta.concrete_fields}

    assert values(loaded) == values(orm)
    assert values(loaded.tenant) == values(orm.tenant)
    assert values(log) == values(orm.tenant.log)
    assert log.size > 0


def test_wrong_unknown_malformed_and_revoked_tokens_authenticate_nothing(acme: Tenant) -> None:
    api_key, token = services.api_key_issue(tenant=acme, role="agent", holder="bot")
    _, key_id, secret = token.split("_", 2)
    for bad in [
        f"ik_{key_id}_{secret[:-1]}x",
        f"ik_{'0' * 16}_{secret}",
        f"xx_{key_id}_{secret}",
        f"ik_{key_id}",
        "",
        "ik__",
    ]:
        assert api_key_for_token(token=bad) is None, bad
    assert services.api_key_revoke(api_key=api_key)
    first_revocation = ApiKey.objects.get(pk=api_key.pk).revoked_at
    assert api_key_for_token(token=token) is None
    assert not services.api_key_revoke(api_key=api_key)
    assert api_key.revoked_at == first_revocation


def test_an_unknown_role_or_a_missing_holder_is_refused(acme: Tenant) -> None:
    with pytest.raises(NotaryInputError, match="role"):
        services.api_key_issue(tenant=acme, role="root", holder="bot")
    with pytest.raises(NotaryInputError, match="holder"):
        services.api_key_issue(tenant=acme, role="agent", holder="  ")
    assert not ApiKey.objects.exists()


def test_whoami_answers_for_the_key_and_only_with_a_valid_one(acme: Tenant, globex: Tenant) -> None:
    _, acme_token = services.api_key_issue(tenant=acme, role="agent", holder="bot")
    globex_key, globex_token = services.api_key_issue(
        tenant=globex, role="auditor", holder="carol@globex.example"
    )
    client = APIClient()

    reply = client.get("/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {acme_token}")
    assert reply.status_code == 200
    assert reply.json()["tenant"] == "acme"
    assert reply.json()["role"] == "agent"
    assert reply.json()["log"] == "notary.interlock.example/acme"
    assert (
        client.get("/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {globex_token}").json()["tenant"]
        == "globex"
    )

    missing = client.get("/v1/whoami")
    assert missing.status_code == 401
    assert missing.json() == {
        "error": "not_authenticated",
        "detail": "Authentication credentials were not provided.",
    }
    assert missing["WWW-Authenticate"] == 'Bearer realm="notary"'
    services.api_key_revoke(api_key=globex_key)
    revoked = client.get("/v1/whoami", HTTP_AUTHORIZATION=f"Bearer {globex_token}")
    assert revoked.status_code == 401
    assert revoked.json() == {
        "error": "authentication_failed",
        "detail": "invalid or revoked API key",
    }


def test_the_commands_create_a_tenant_and_print_a_working_token() -> None:
    out = io.StringIO()
    call_command("create_tenant", "--slug", "initech", "--name", "Initech", stdout=out)
    assert out.getvalue().strip() == "initech notary.interlock.example/initech"
    out = io.StringIO()
    call_command(
        "issue_api_key",
        "--tenant",
        "initech",
        "--role",
        "approver",
        "--holder",
        "dana@initech.example",
        stdout=out,
    )
    api_key = api_key_for_token(token=out.getvalue().strip())
    assert api_key is not None and api_key.role == "approver"
    with pytest.raises(CommandError, match="no tenant"):
        call_command("issue_api_key", "--tenant", "nope", "--role", "agent", "--holder", "x")
    with pytest.raises(CommandError, match="slug"):
        call_command("create_tenant", "--slug", "Bad Slug", "--name", "x")
