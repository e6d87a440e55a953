"""Targets declared once, at the notary: approvers register them (API or command), agents and
auditors read them, and the gate checks its adapters against the record."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from notary.models import Target, Tenant
from testkit.factories import client_for

pytestmark = pytest.mark.django_db


def resend_body(**changes: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "name": "resend_email",  # the adapter's default name
        "tier": 1,
        "queryable": True,
        "max_inflight_seconds": 30,
        "key_window_seconds": 86400,
        "evidence_window_seconds": 3600,
        "lookup_needs_key": True,
    }
    body.update(changes)
    return body


def test_an_approver_registers_a_target_that_agents_and_auditors_read(acme: Tenant) -> None:
    approver = client_for(acme, "approver", "alice")
    made = approver.post("/v1/targets", resend_body(), format="json")
    assert made.status_code == 201, made.json()
    assert made.json()["key_window_seconds"] == 86400
    assert made.json()["attests_before_acting"] is False
    for role in ("agent", "auditor"):
        reader = client_for(acme, role, f"{role}-key")
        shown = reader.get("/v1/targets/resend_email")
        assert shown.status_code == 200
        assert shown.json() == made.json()
        assert [t["name"] for t in reader.get("/v1/targets").json()] == ["resend_email"]


def test_only_approvers_register_and_another_tenant_sees_nothing(
    acme: Tenant, globex: Tenant
) -> None:
    for role in ("agent", "auditor", "service"):
        refused = client_for(acme, role, "k").post("/v1/targets", resend_body(), format="json")
        assert refused.status_code == 403
    client_for(acme, "approver", "alice").post("/v1/targets", resend_body(), format="json")
    other = client_for(globex, "agent", "bot")
    assert other.get("/v1/targets/resend_email").status_code == 404
    assert other.get("/v1/targets").json() == []


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"tier": 2, "queryable": False}, "queryable must be true"),
        ({"tier": 3}, "only a tier-1 target"),
        ({"max_inflight_seconds": 0}, "max_inflight must be positive"),
        ({"max_inflight_seconds": 1e300}, "at most 10 years"),
        ({"name": "Resend Email"}, "target name"),
        ({"queryable": False}, "lookup_needs_key"),
        ({"tier": "one"}, "tier"),
    ],
)
def test_contradictory_declarations_are_a_400_and_store_nothing(
    acme: Tenant, changes: dict[str, Any], error: str
) -> None:
    approver = client_for(acme, "approver", "alice")
    refused = approver.post("/v1/targets", resend_body(**changes), format="json")
    assert refused.status_code == 400, refused.json()
    assert error in str(refused.json()["detail"])
    assert not Target.objects.exists()


def test_the_commands_register_and_list_targets(acme: Tenant) -> None:
    out = io.StringIO()
    call_command(
        "create_target",
        "--tenant=acme",
        "--name=erp",
        "--tier=3",
        "--max-inflight=20",
        "--attests-before-acting",
        stdout=out,
    )
    assert out.getvalue().strip() == "acme/erp tier 3"
    listed = io.StringIO()
    call_command("list_targets", "--tenant=acme", stdout=listed)
    rows = [line.split("\t") for line in listed.getvalue().splitlines()]
    assert rows[1] == ["erp", "3", "no", "20 s", "-", "-", "yes", "-", "-"]
    call_command(
        "create_target",
        "--tenant=acme",
        "--name=payouts",
        "--tier=3",
        "--max-inflight=20",
        "--amount-field=amount",
        "--currency-field=currency",
        stdout=io.StringIO(),
    )
    listed = io.StringIO()
    call_command("list_targets", "--tenant=acme", stdout=listed)
    assert listed.getvalue().splitlines()[2].split("\t")[-1] == "amount/currency"
    with pytest.raises(CommandError, match="go with --amount-field"):
        call_command(
            "create_target",
            "--tenant=acme",
            "--name=x",
            "--tier=3",
            "--max-inflight=1",
            "--currency=USD",
        )
    with pytest.raises(CommandError, match="exists already"):
        call_command(
            "create_target", "--tenant=acme", "--name=erp", "--tier=3", "--max-inflight=20"
        )
    with pytest.raises(CommandError, match="no tenant"):
        call_command("list_targets", "--tenant=nobody", stdout=io.StringIO())
