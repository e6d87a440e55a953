"""A service key speaks for the targets it names: an attestation about another target's
effect is a 403 that records nothing, however real the effect."""

from __future__ import annotations

import io
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from rest_framework.test import APIClient

from notary import services
from notary.errors import NotaryInputError
from notary.models import ApiKey, Effect, Tenant
from notary.selectors import api_key_for_token
from testkit.factories import client_for, dispatched, register

pytestmark = pytest.mark.django_db


def attest(client: APIClient, effect_id: str) -> tuple[int, dict[str, object]]:
    reply = client.post(
        "/v1/attestations",
        {"effect_id": effect_id, "performed": True, "reference": "doc_1"},
        format="json",
    )
    return reply.status_code, reply.json()


def test_a_service_key_attests_only_for_its_targets(acme: Tenant) -> None:
    register(acme, "erp")
    register(acme, "payroll")
    erp_effect = dispatched(acme, "erp", "case-1")
    payroll_effect = dispatched(acme, "payroll", "case-2")
    erp = client_for(acme, "service", "erp-service", targets=["erp"])

    status, body = attest(erp, payroll_effect)
    assert status == 403
    assert body["error"] == "permission_denied"
    assert set(body) == {"error", "detail"}
    assert "'payroll'" in str(body["detail"])
    size = acme.log.size
    acme.log.refresh_from_db()
    assert acme.log.size == size, "a refused attestation records nothing"
    assert Effect.objects.get(effect_id=payroll_effect).state == "DISPATCHED"

    status, body = attest(erp, erp_effect)
    assert status == 201, body
    assert body["settled"] == "committed_on_evidence"

    unscoped = client_for(acme, "service", "old-service")  # names no target: attests nothing
    assert attest(unscoped, erp_effect)[0] == 403
    both = client_for(acme, "service", "ops", targets=["erp", "payroll"])
    assert attest(both, payroll_effect)[0] == 201


def test_a_write_ahead_attestation_is_scoped_too(acme: Tenant) -> None:
    services.target_register(
        tenant=acme,
        name="erp",
        tier=3,
        queryable=False,
        max_inflight=timedelta(seconds=30),
        attests_before_acting=True,
    )
    register(acme, "mail")
    effect_id = dispatched(acme, "erp", "case-1")
    mailer = client_for(acme, "service", "mailer", targets=["mail"])
    refused = mailer.post(
        "/v1/attestations", {"effect_id": effect_id, "stage": "before_acting"}, format="json"
    )
    assert refused.status_code == 403
    assert refused.json()["error"] == "permission_denied"
    erp = client_for(acme, "service", "erp-service", targets=["erp"])
    acknowledged = erp.post(
        "/v1/attestations", {"effect_id": effect_id, "stage": "before_acting"}, format="json"
    )
    assert acknowledged.status_code == 201
    assert acknowledged.json()["settled"] == "acknowledged"


def test_issue_api_key_takes_repeatable_targets(acme: Tenant) -> None:
    register(acme, "erp")
    register(acme, "mail")
    out = io.StringIO()
    call_command(
        "issue_api_key",
        *("--tenant", "acme", "--role", "service", "--holder", "ops"),
        *("--target", "erp", "--target", "mail"),
        stdout=out,
    )
    api_key = api_key_for_token(token=out.getvalue().strip())
    assert api_key is not None
    assert sorted(api_key.targets.values_list("name", flat=True)) == ["erp", "mail"]

    with pytest.raises(CommandError, match="--target"):
        call_command("issue_api_key", "--tenant", "acme", "--role", "service", "--holder", "x")
    with pytest.raises(CommandError, match="no target 'nope'"):
        call_command(
            "issue_api_key",
            *("--tenant", "acme", "--role", "service", "--holder", "x", "--target", "nope"),
        )
    with pytest.raises(CommandError, match="only a service key"):
        call_command(
            "issue_api_key",
            *("--tenant", "acme", "--role", "agent", "--holder", "x", "--target", "erp"),
        )
    assert ApiKey.objects.count() == 1


def test_a_key_names_only_its_own_tenants_targets(acme: Tenant, globex: Tenant) -> None:
    register(globex, "erp")
    with pytest.raises(NotaryInputError, match="no target 'erp'"):
        services.api_key_issue(tenant=acme, role="service", holder="erp", targets=["erp"])
    assert not ApiKey.objects.exists()


def test_the_admin_issues_a_scoped_key_and_shows_its_targets(
    acme: Tenant, globex: Tenant, admin_client: Client
) -> None:
    erp = register(acme, "erp")
    theirs = register(globex, "erp")
    added = admin_client.post(
        "/admin/notary/apikey/add/",
        {"tenant": acme.pk, "role": "service", "holder": "ERP", "label": "", "targets": [erp.pk]},
    )
    assert added.status_code == 302
    api_key = ApiKey.objects.get()
    assert api_key.holder == "erp"
    assert list(api_key.targets.all()) == [erp]
    listing = admin_client.get("/admin/notary/apikey/").content.decode()
    assert "Attests for" in listing
    assert '<td class="field-scope">erp</td>' in listing

    refused = admin_client.post(
        "/admin/notary/apikey/add/",
        {"tenant": acme.pk, "role": "service", "holder": "x", "label": "", "targets": [theirs.pk]},
    )
    assert refused.status_code == 200  # the form again, with the error
    assert "only for targets of its own tenant" in refused.content.decode()
    assert ApiKey.objects.count() == 1
