"""Reconciliation through the API: an approver runs one over a window and gets what it wrote,
auditors and approvers list the findings; against localstripe and the reference service, with
a tenant that sees none of another's and refusals that write nothing."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from gate_client.adapters.stripe_refunds import METADATA_KEY
from ledger.core.entries import format_timestamp
from ledger.models import Entry
from notary.models import ReconciliationFinding, Target, Tenant
from notary.reconciliation import reconciliation_source_set
from notary.schema import RECONCILE_DAY
from testkit.factories import STRIPE_MONEY, client_for, register
from testkit.peers.localstripe import paid_intent, running_localstripe, stripe_client
from testkit.peers.reference_service import RunningServer, running_server
from testkit.reconciliation import refund_through_the_gate

RECONCILE = "/v1/targets/stripe_refunds/reconcile"
FINDINGS = "/v1/reconciliation/findings"


@pytest.fixture
def localstripe(tmp_path: Path) -> Iterator[str]:
    with running_localstripe(tmp_path) as url:
        yield url


@pytest.fixture
def stripe_target(acme: Tenant, localstripe: str) -> Target:
    target = register(
        acme, "stripe_refunds", tier=2, max_inflight=timedelta(seconds=30), money=STRIPE_MONEY
    )
    reconciliation_source_set(
        target=target, provider="stripe", base_url=localstripe, api_key="sk_test_reconcile"
    )
    return target


@pytest.fixture
def approver(acme: Tenant) -> APIClient:
    return client_for(acme, "approver", "maria@acme.example")


@pytest.fixture
def auditor(acme: Tenant) -> APIClient:
    return client_for(acme, "auditor", "audit@acme.example")


def window_from(seconds_ago: float = 2) -> dict[str, str]:
    return {"since": format_timestamp(timezone.now() - timedelta(seconds=seconds_ago))}


def ledger_size(tenant: Tenant) -> int:
    return Entry.objects.filter(log=tenant.log).count()


def test_an_approver_reconciles_a_target_and_gets_what_it_wrote_and_the_totals(
    acme: Tenant, stripe_target: Target, localstripe: str, approver: APIClient
) -> None:
    window = window_from()
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    refund_through_the_gate(acme, client, intent, "case-1", 2_500)
    by_hand = client.v1.refunds.create(params={"payment_intent": intent, "amount": 1_200})

    answer = approver.post(RECONCILE, window, format="json")

    assert answer.status_code == 201, answer.json()
    shown = answer.json()
    assert (shown["target"], shown["listed"]) == ("stripe_refunds", 2)
    assert datetime.fromisoformat(shown["window"]["since"]) == datetime.fromisoformat(
        window["since"]
    )
    assert shown["totals"] == {
        "found": 1,
        "written": 1,
        "recorded_before": 0,
        "by_kind": {
            "not_admitted": 1,
            "not_shown": 0,
            "shown_not_committed": 0,
            "duplicate": 0,
            "amount_differs": 0,
        },
    }
    [finding] = shown["findings"]
    row = ReconciliationFinding.objects.get(tenant=acme)
    assert finding["seq"] == row.seq
    assert Entry.objects.get(log=acme.log, seq=row.seq).kind == "RECONCILED"
    assert (finding["kind"], finding["provider_ref"], finding["effect_id"]) == (
        "not_admitted",
        by_hand.id,
        "",
    )
    assert finding["evidence"]["amount"] == 1_200
    assert finding["amounts"] is None and finding["claimed_effect_id"] is None
    assert "sk_test_reconcile" not in answer.content.decode()

    size = ledger_size(acme)
    again = approver.post(RECONCILE, window, format="json")

    assert again.status_code == 200, again.json()
    assert again.json()["findings"] == []
    assert again.json()["totals"]["recorded_before"] == 1
    assert ledger_size(acme) == size


def test_the_window_defaults_to_the_last_day_as_the_command_s(
    stripe_target: Target, approver: APIClient
) -> None:
    before = timezone.now()
    answer = approver.post(RECONCILE, {}, format="json")
    after = timezone.now()

    assert answer.status_code == 200, answer.json()  # nothing found: nothing written
    window = answer.json()["window"]
    until = datetime.fromisoformat(window["until"])
    since = datetime.fromisoformat(window["since"])
    assert before <= until <= after
    assert until - since == timedelta(days=1)


def test_the_request_example_is_accepted_as_it_stands(
    stripe_target: Target, approver: APIClient
) -> None:
    answer = approver.post(RECONCILE, RECONCILE_DAY, format="json")
    assert answer.status_code == 200, answer.json()
    shown = answer.json()["window"]
    assert {k: datetime.fromisoformat(v) for k, v in shown.items()} == {
        k: datetime.fromisoformat(v) for k, v in RECONCILE_DAY.items()
    }


def test_a_refund_for_another_amount_shows_both_amounts(
    acme: Tenant, stripe_target: Target, localstripe: str, approver: APIClient
) -> None:
    window = window_from()
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    effect_id, _ = refund_through_the_gate(acme, client, intent, "case-2", 2_500)
    again = client.v1.refunds.create(
        params={"payment_intent": intent, "amount": 900, "metadata": {METADATA_KEY: effect_id}}
    )

    answer = approver.post(RECONCILE, window, format="json")

    assert answer.status_code == 201, answer.json()
    by_kind = {f["kind"]: f for f in answer.json()["findings"]}
    assert set(by_kind) == {"amount_differs", "duplicate"}
    differs = by_kind["amount_differs"]
    assert (differs["provider_ref"], differs["effect_id"], differs["state"]) == (
        again.id,
        effect_id,
        "COMMITTED",
    )
    assert differs["amounts"] == {
        "admitted": {"amount_minor": 2_500, "currency": ""},
        "provider": {"amount_minor": 900, "currency": "USD"},
    }


def _reconciled_twice(acme: Tenant, localstripe: str, approver: APIClient) -> list[str]:
    """Two runs: a hand refund found in the first, two more in the second; their refund ids in
    the order the ledger has them (one run's findings by kind, then provider ref)."""
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    window = window_from()
    first = client.v1.refunds.create(params={"payment_intent": intent, "amount": 100})
    assert approver.post(RECONCILE, window, format="json").status_code == 201
    later = [
        client.v1.refunds.create(params={"payment_intent": intent, "amount": n}).id
        for n in (200, 300)
    ]
    assert approver.post(RECONCILE, window, format="json").status_code == 201
    return [first.id, *sorted(later)]


def test_auditors_and_approvers_list_the_findings_filtered_and_paged(
    acme: Tenant,
    stripe_target: Target,
    localstripe: str,
    approver: APIClient,
    auditor: APIClient,
) -> None:
    refunds = _reconciled_twice(acme, localstripe, approver)
    first_found = ReconciliationFinding.objects.get(provider_ref=refunds[0]).found_at
    later_found = ReconciliationFinding.objects.get(provider_ref=refunds[1]).found_at
    assert first_found < later_found

    listed = auditor.get(FINDINGS)

    assert listed.status_code == 200, listed.json()
    assert [f["provider_ref"] for f in listed.json()] == refunds
    seqs = [f["seq"] for f in listed.json()]
    assert seqs == sorted(seqs)
    assert all(f["evidence"]["id"] == f["provider_ref"] for f in listed.json())
    assert approver.get(FINDINGS).json() == listed.json()

    page = auditor.get(FINDINGS, {"limit": 2}).json()
    rest = auditor.get(FINDINGS, {"limit": 2, "after": page[-1]["seq"]}).json()
    assert [f["provider_ref"] for f in page + rest] == refunds
    assert auditor.get(FINDINGS, {"after": seqs[-1]}).json() == []

    found_later = {"found_since": format_timestamp(later_found)}
    assert [f["provider_ref"] for f in auditor.get(FINDINGS, found_later).json()] == refunds[1:]
    found_first = {"found_until": format_timestamp(later_found)}
    assert [f["provider_ref"] for f in auditor.get(FINDINGS, found_first).json()] == refunds[:1]
    assert len(auditor.get(FINDINGS, {"kind": "not_admitted"}).json()) == 3
    assert auditor.get(FINDINGS, {"kind": "duplicate"}).json() == []
    assert len(auditor.get(FINDINGS, {"target": "stripe_refunds"}).json()) == 3
    assert auditor.get(FINDINGS, {"target": "other"}).json() == []


def test_a_finding_about_an_effect_is_found_by_its_effect_id(
    acme: Tenant, stripe_target: Target, localstripe: str, approver: APIClient, auditor: APIClient
) -> None:
    window = window_from()
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    effect_id, _ = refund_through_the_gate(acme, client, intent, "case-3", 1_000)
    client.v1.refunds.create(params={"payment_intent": intent, "amount": 50})
    client.v1.refunds.create(
        params={"payment_intent": intent, "amount": 1_000, "metadata": {METADATA_KEY: effect_id}}
    )
    assert approver.post(RECONCILE, window, format="json").status_code == 201

    [duplicate] = auditor.get(FINDINGS, {"effect_id": effect_id}).json()

    assert (duplicate["kind"], duplicate["state"]) == ("duplicate", "COMMITTED")
    assert len(auditor.get(FINDINGS).json()) == 2


@pytest.mark.parametrize("role", ["agent", "service"])
def test_other_roles_may_neither_list_nor_reconcile(
    acme: Tenant, stripe_target: Target, role: str
) -> None:
    scope = ["stripe_refunds"] if role == "service" else []
    client = client_for(acme, role, f"{role}-holder", targets=scope)
    size = ledger_size(acme)
    for answer in (client.get(FINDINGS), client.post(RECONCILE, {}, format="json")):
        assert answer.status_code == 403
        assert answer.json()["error"] == "permission_denied"
    assert ledger_size(acme) == size
    assert client_for(acme, "auditor", "a").post(RECONCILE, {}, format="json").status_code == 403


def test_another_tenant_sees_none_of_it_and_cannot_run_it(
    acme: Tenant, globex: Tenant, stripe_target: Target, localstripe: str, approver: APIClient
) -> None:
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    window = window_from()
    client.v1.refunds.create(params={"payment_intent": intent, "amount": 100})
    assert approver.post(RECONCILE, window, format="json").status_code == 201
    theirs = client_for(globex, "approver", "olga@globex.example")
    size = ledger_size(acme)

    refused = theirs.post(RECONCILE, window, format="json")
    assert refused.status_code == 404
    assert refused.json()["error"] == "not_found"
    register(
        globex, "stripe_refunds", tier=2, max_inflight=timedelta(seconds=30), money=STRIPE_MONEY
    )
    no_source = theirs.post(RECONCILE, window, format="json")  # its own, never acme's source
    assert no_source.status_code == 409
    assert no_source.json()["error"] == "no_reconciliation_source"
    assert theirs.get(FINDINGS).json() == []
    assert client_for(globex, "auditor", "audit@globex.example").get(FINDINGS).json() == []
    assert ledger_size(acme) == size
    assert ledger_size(globex) == 0
    assert not ReconciliationFinding.objects.filter(tenant=globex).exists()


@pytest.mark.parametrize(
    ("body", "says"),
    [
        ({"since": "2026-11-02T09:30:00"}, "offset"),
        ({"since": "yesterday"}, "RFC 3339"),
        ({"since": 1767225600}, "RFC 3339"),
        ({"since": "later", "until": None}, "null"),
        ("later", "Expected a dictionary"),
    ],
)
def test_a_body_refused_as_given_writes_nothing(
    acme: Tenant, stripe_target: Target, approver: APIClient, body: Any, says: str
) -> None:
    size = ledger_size(acme)
    answer = approver.post(RECONCILE, body, format="json")
    assert answer.status_code == 400, answer.json()
    assert set(answer.json()) == {"error", "detail"}
    assert says in str(answer.json()["detail"])
    assert ledger_size(acme) == size


def test_a_window_the_provider_cannot_answer_is_refused_and_writes_nothing(
    acme: Tenant, stripe_target: Target, approver: APIClient
) -> None:
    now = timezone.now()
    refusals = {
        "before its until": {"since": now - timedelta(hours=1), "until": now - timedelta(hours=2)},
        "at most 31 days": {"since": now - timedelta(days=40), "until": now},
        "the provider has no future": {"since": now, "until": now + timedelta(hours=1)},
    }
    size = ledger_size(acme)
    for says, window in refusals.items():
        body = {name: format_timestamp(moment) for name, moment in window.items()}
        answer = approver.post(RECONCILE, body, format="json")
        assert answer.status_code == 400, (says, answer.json())
        assert answer.json()["error"] == "invalid"
        assert says in answer.json()["detail"]
    assert ledger_size(acme) == size


def test_a_target_with_no_source_or_none_at_all_is_refused(
    acme: Tenant, approver: APIClient
) -> None:
    register(acme, "mail", tier=3)
    no_source = approver.post("/v1/targets/mail/reconcile", {}, format="json")
    assert no_source.status_code == 409
    assert no_source.json()["error"] == "no_reconciliation_source"
    assert "manage.py reconciliation_source" in no_source.json()["detail"]
    missing = approver.post("/v1/targets/nowhere/reconcile", {}, format="json")
    assert missing.status_code == 404
    assert ledger_size(acme) == 0


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(tmp_path / "acts.jsonl", dedupe=False, lookup=True, list_key="k1") as s:
        yield s


def test_a_provider_that_cannot_be_listed_is_a_424_and_records_nothing(
    acme: Tenant, reference: RunningServer, approver: APIClient
) -> None:
    target = register(
        acme, "ledger_svc", tier=2, max_inflight=timedelta(seconds=10), money=STRIPE_MONEY
    )
    reconciliation_source_set(
        target=target, provider="reference", base_url=reference.url, api_key="wrong-key-9f2"
    )
    down = register(
        acme, "down_svc", tier=2, max_inflight=timedelta(seconds=10), money=STRIPE_MONEY
    )
    reconciliation_source_set(target=down, provider="reference", base_url="http://127.0.0.1:9")

    for name, says in (("ledger_svc", "HTTP 401"), ("down_svc", "did not answer")):
        answer = approver.post(f"/v1/targets/{name}/reconcile", {}, format="json")
        assert answer.status_code == 424, answer.json()
        assert answer.json()["error"] == "provider_unavailable"
        assert says in answer.json()["detail"]
        assert "wrong-key-9f2" not in answer.content.decode()
    assert ledger_size(acme) == 0


@pytest.mark.parametrize(
    "query",
    [
        {"kind": "missing"},
        {"after": "-1"},
        {"limit": "0"},
        {"found_since": "2026-11-02T09:30:00"},
        {"found_until": "soon"},
        {"target": "Not A Name"},
        {"effect_id": "eff\x01"},
        {"effect_id": "eff\x0b"},  # white space too: refused, not trimmed to another id
        {"effect_id": "\teff"},
    ],
)
def test_a_query_refused_as_given_is_a_400(auditor: APIClient, query: dict[str, str]) -> None:
    answer = auditor.get(FINDINGS, query)
    assert answer.status_code == 400, answer.json()
    assert answer.json()["error"] == "invalid"
    assert set(answer.json()["detail"]) == set(query)
