"""Reconciliation with the provider against real peers: localstripe (which does not dedupe, so
a duplicate cannot hide behind a replay), the reference service and the Resend peer."""

from __future__ import annotations

import io
import json
import urllib.request
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client
from django.utils import timezone

from gate_client.adapters.stripe_refunds import METADATA_KEY, StripeRefunds
from gate_client.http_target import HttpTarget
from gate_client.money import MoneyDeclaration
from gate_client.protocol import State, commit_body
from gate_client.targets import Found, Sent, Tier
from gate_client.verify import verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import EntryKind
from ledger.core.note import Signer
from ledger.models import Entry
from notary import selectors, services, tasks
from notary.errors import NotaryDependencyFailed
from notary.exports import export_receipts
from notary.models import Effect, ReconciliationFinding, ReconciliationSource, Target, Tenant
from notary.reconciliation import reconciliation_source_set, target_reconcile
from testkit.factories import STRIPE_MONEY, register
from testkit.peers.localstripe import paid_intent, running_localstripe, stripe_client
from testkit.peers.reference_service import RunningServer, running_server
from testkit.peers.resend_server import RunningResend, running_resend
from testkit.reconciliation import committed_as, dispatched_with, refund_through_the_gate

LIST_KEY = "ref_list_key_8c1f"


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


def reconcile(tenant: Tenant, target: Target, since: datetime) -> Any:
    return target_reconcile(tenant=tenant, target=target, since=since, until=timezone.now())


def findings_of(tenant: Tenant) -> list[tuple[str, str, str]]:
    rows = ReconciliationFinding.objects.filter(tenant=tenant).order_by("seq")
    return [(f.kind, f.provider_ref, f.effect_id) for f in rows]


def reconciled_entries(tenant: Tenant) -> list[Entry]:
    return list(Entry.objects.filter(log=tenant.log, kind=EntryKind.RECONCILED).order_by("seq"))


def test_a_refund_made_around_the_gate_is_found_and_a_gated_one_matched(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    gated, gated_refund = refund_through_the_gate(acme, client, intent, "case-1", 2_500)
    # Support refunds by hand in the dashboard during an outage: no effect id on it.
    by_hand = client.v1.refunds.create(params={"payment_intent": intent, "amount": 1_200})

    done = reconcile(acme, stripe_target, start)

    assert done.listed == 2
    assert findings_of(acme) == [("not_admitted", by_hand.id, "")]
    [entry] = reconciled_entries(acme)
    body = entry.as_ledger_entry().body_value()
    assert entry.effect_id == ""
    assert body["target"] == "stripe_refunds"
    assert body["finding"] == "not_admitted"
    assert body["provider_ref"] == by_hand.id
    assert body["evidence"]["amount"] == 1_200
    assert body["evidence"]["payment_intent"] == intent
    assert set(body["window"]) == {"since", "until"}
    assert "sk_test_reconcile" not in json.dumps(body)
    assert Effect.objects.get(tenant=acme, effect_id=gated).state == "COMMITTED"
    assert gated_refund != by_hand.id


def test_a_committed_effect_the_provider_does_not_show_is_reported_and_keeps_its_state(
    acme: Tenant, stripe_target: Target
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    effect_id = dispatched_with(
        acme, "stripe_refunds", "case-2", {"payment_intent": "pi_x", "amount": 1}
    )
    committed_as(acme, effect_id, "re_never_made")

    reconcile(acme, stripe_target, start)

    assert findings_of(acme) == [("not_shown", "", effect_id)]
    [entry] = reconciled_entries(acme)
    assert entry.effect_id == effect_id  # one of the effect's entries, on its receipt
    effect = Effect.objects.get(tenant=acme, effect_id=effect_id)
    assert (effect.state, effect.last_seq) == ("COMMITTED", entry.seq)  # no verdict changed
    assert selectors.effect_projection_differences(tenant=acme) == []


def test_a_duplicate_the_peer_let_through_and_a_refund_of_an_ambiguous_effect_are_reported(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    effect_id, first = refund_through_the_gate(acme, client, intent, "case-3", 1_000)
    # localstripe ignores Idempotency-Key: a resend under the same key refunds again.
    again = StripeRefunds(client, tier=Tier.LOOKUP).send(
        effect_id, {"payment_intent": intent, "amount": 1_000}
    )
    assert isinstance(again, Sent) and again.result_ref != first
    payload = {"payment_intent": intent, "amount": 700}
    lost = dispatched_with(acme, "stripe_refunds", "case-4", payload)
    made = StripeRefunds(client, tier=Tier.LOOKUP).send(lost, payload)  # the answer was lost
    assert isinstance(made, Sent)
    services.effect_record_outcome(tenant=acme, effect_id=lost, kind="AMBIGUOUS", body={})

    reconcile(acme, stripe_target, start)

    assert sorted(findings_of(acme)) == sorted(
        [("duplicate", again.result_ref, effect_id), ("shown_not_committed", made.result_ref, lost)]
    )
    assert Effect.objects.get(tenant=acme, effect_id=lost).state == "AMBIGUOUS"


def test_a_refund_at_the_peer_for_another_amount_with_the_effect_s_metadata_is_reported(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    """Through the gate 25.00; then a second, partial refund of the same payment made at the
    peer by hand with the effect's metadata: a duplicate, and an amount that differs."""
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    effect_id, gated = refund_through_the_gate(acme, client, intent, "case-7", 2_500)
    by_hand = client.v1.refunds.create(
        params={"payment_intent": intent, "amount": 1_000, "metadata": {METADATA_KEY: effect_id}}
    )

    reconcile(acme, stripe_target, start)

    assert sorted(findings_of(acme)) == [
        ("amount_differs", by_hand.id, effect_id),
        ("duplicate", by_hand.id, effect_id),
    ]
    differs = ReconciliationFinding.objects.get(tenant=acme, kind="amount_differs")
    assert differs.body["amounts"] == {
        "admitted": {"amount_minor": 2_500, "currency": ""},
        "provider": {"amount_minor": 1_000, "currency": "USD"},
    }
    assert differs.body["evidence"]["amount"] == 1_000
    assert gated not in {f.provider_ref for f in ReconciliationFinding.objects.all()}


def test_a_hand_refund_for_another_amount_a_lookup_committed_as_the_effect_s_is_reported(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    """The gate's request never reached the peer; support refunded 10.00 by hand with the
    effect's metadata, and the recovery's lookup (which matches on the metadata alone) found it
    and committed it as the effect's 25.00: only its amount shows what happened."""
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 10_000)
    payload = {"payment_intent": intent, "amount": 2_500}
    effect_id = dispatched_with(acme, "stripe_refunds", "case-8", payload)
    by_hand = client.v1.refunds.create(
        params={"payment_intent": intent, "amount": 1_000, "metadata": {METADATA_KEY: effect_id}}
    )
    found = StripeRefunds(client, tier=Tier.LOOKUP).lookup(effect_id, payload)
    assert found == Found(by_hand.id)
    body = commit_body(State.COMMITTED_ON_QUERY, 1, by_hand.id, {"lookup": "found"})
    services.effect_record_outcome(tenant=acme, effect_id=effect_id, kind="COMMITTED", body=body)

    reconcile(acme, stripe_target, start)

    assert findings_of(acme) == [("amount_differs", by_hand.id, effect_id)]
    effect = Effect.objects.get(tenant=acme, effect_id=effect_id)
    assert effect.state == "COMMITTED_ON_QUERY"  # evidence for a person, no verdict changed


def test_reconciling_again_writes_nothing_new(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    client.v1.refunds.create(params={"payment_intent": intent, "amount": 100})
    first = reconcile(acme, stripe_target, start)
    size = acme.log.size

    again = reconcile(acme, stripe_target, start - timedelta(minutes=5))  # overlapping, wider

    assert len(first.written) == 1
    assert (len(again.findings), again.written) == (1, [])
    acme.log.refresh_from_db()
    assert acme.log.size == size
    assert len(reconciled_entries(acme)) == 1


def test_a_second_tenant_sees_none_of_it_and_its_effect_ids_match_nothing_of_the_first(
    acme: Tenant, globex: Tenant, stripe_target: Target, localstripe: str
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    register(
        globex, "stripe_refunds", tier=2, max_inflight=timedelta(seconds=30), money=STRIPE_MONEY
    )
    theirs = dispatched_with(
        globex, "stripe_refunds", "case-1", {"payment_intent": intent, "amount": 1}
    )
    # A refund in acme's account naming globex's effect: not an effect acme admitted.
    refund = client.v1.refunds.create(
        params={"payment_intent": intent, "amount": 300, "metadata": {METADATA_KEY: theirs}}
    )

    reconcile(acme, stripe_target, start)

    assert findings_of(acme) == [("not_admitted", refund.id, "")]
    assert ReconciliationFinding.objects.get(tenant=acme).body["claimed_effect_id"] == theirs
    assert findings_of(globex) == []
    assert reconciled_entries(globex) == []
    assert Entry.objects.filter(log=globex.log, effect_id=theirs).count() == 2  # untouched


@pytest.fixture
def reference(tmp_path: Path) -> Iterator[RunningServer]:
    with running_server(tmp_path / "acts.jsonl", dedupe=False, lookup=True, list_key=LIST_KEY) as s:
        yield s


def test_the_reference_service_list_finds_an_act_around_the_gate(
    acme: Tenant, reference: RunningServer
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    target = register(
        acme, "ledger_svc", tier=2, max_inflight=timedelta(seconds=10), money=STRIPE_MONEY
    )
    reconciliation_source_set(
        target=target, provider="reference", base_url=reference.url, api_key=LIST_KEY
    )
    service = HttpTarget(
        "ledger_svc",
        reference.url,
        Tier.LOOKUP,
        True,
        None,
        timedelta(seconds=10),
        money=MoneyDeclaration(**STRIPE_MONEY),
    )
    payload = {"amount": 400, "currency": "USD"}
    effect_id = dispatched_with(acme, "ledger_svc", "case-9", payload)
    sent = service.send(effect_id, payload)
    assert isinstance(sent, Sent)
    committed_as(acme, effect_id, sent.result_ref)
    # Someone posts to the service directly, with an id the gate never gave out.
    request = urllib.request.Request(
        f"{reference.url}/effects",
        data=json.dumps({"effect_id": "by-hand-1", "payload": {"amount": 900}}).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        by_hand = json.loads(response.read())["result_ref"]

    reconcile(acme, target, start)

    [finding] = ReconciliationFinding.objects.filter(tenant=acme)
    assert (finding.kind, finding.provider_ref) == ("not_admitted", by_hand)
    assert finding.body["claimed_effect_id"] == "by-hand-1"
    assert finding.body["evidence"]["payload"] == {"amount": 900}


def test_a_provider_that_refuses_the_key_records_nothing(
    acme: Tenant, reference: RunningServer
) -> None:
    target = register(
        acme, "ledger_svc", tier=2, max_inflight=timedelta(seconds=10), money=STRIPE_MONEY
    )
    reconciliation_source_set(
        target=target, provider="reference", base_url=reference.url, api_key="wrong"
    )
    with pytest.raises(NotaryDependencyFailed) as refused:
        reconcile(acme, target, timezone.now() - timedelta(hours=1))
    assert refused.value.code == "provider_unavailable"
    assert "HTTP 401" in refused.value.detail and "wrong" not in refused.value.detail
    assert reconciled_entries(acme) == []


@pytest.fixture
def resend_peer(tmp_path: Path) -> Iterator[RunningResend]:
    with running_resend(tmp_path / "emails.jsonl") as peer:
        yield peer


def test_resend_emails_are_reconciled_where_the_key_allows(
    acme: Tenant, resend_peer: RunningResend
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    target = register(acme, "resend_email", tier=3)
    reconciliation_source_set(
        target=target, provider="resend", base_url=resend_peer.url, api_key="re_send_only"
    )
    with pytest.raises(NotaryDependencyFailed, match="restricted_api_key"):
        reconcile(acme, target, start)
    reconciliation_source_set(
        target=target, provider="resend", base_url=resend_peer.url, api_key="re_full_access"
    )
    request = urllib.request.Request(
        f"{resend_peer.url}/emails",
        data=json.dumps(
            {
                "from": "support@example.com",
                "to": ["c@example.org"],
                "subject": "Sorry",
                "text": ".",
            }
        ).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer re_dashboard"},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        sent = json.loads(response.read())["id"]

    reconcile(acme, target, start)

    [finding] = ReconciliationFinding.objects.filter(tenant=acme)
    assert (finding.kind, finding.provider_ref) == ("not_admitted", sent)
    assert finding.body["evidence"]["subject"] == "Sorry"


def test_the_command_prints_the_findings_and_totals(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    since = (timezone.now() - timedelta(seconds=2)).isoformat()
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    refund = client.v1.refunds.create(params={"payment_intent": intent, "amount": 250})
    out = io.StringIO()

    call_command(
        "reconcile", "--tenant", "acme", "--target", "stripe_refunds", "--since", since, stdout=out
    )
    again = io.StringIO()
    call_command(
        "reconcile",
        "--tenant",
        "acme",
        "--target",
        "stripe_refunds",
        "--since",
        since,
        stdout=again,
    )

    lines = out.getvalue().splitlines()
    assert lines[0].startswith("acme/stripe_refunds from ") and lines[0].endswith("listed 1")
    assert lines[1].split() == [
        "finding",
        "provider_ref",
        "effect_id",
        "state",
        "created",
        "amount",
        "recorded",
    ]
    assert lines[2].split()[:3] == ["not_admitted", refund.id, "-"]
    assert "250 usd" in lines[2] and lines[2].endswith("now")
    assert lines[3] == (
        "findings: 1 (1 not_admitted, 0 not_shown, 0 shown_not_committed, 0 duplicate, "
        "0 amount_differs); written now: 1, recorded before: 0"
    )
    assert again.getvalue().splitlines()[2].endswith("before")
    with pytest.raises(CommandError, match="ISO 8601"):
        call_command(
            "reconcile", "--tenant", "acme", "--target", "stripe_refunds", "--since", "yesterday"
        )
    register(acme, "other", tier=3)
    with pytest.raises(CommandError, match="no reconciliation source"):
        call_command("reconcile", "--tenant", "acme", "--target", "other")


def test_the_beat_task_reconciles_each_source_once_per_window(
    acme: Tenant, stripe_target: Target, localstripe: str, settings: Any
) -> None:
    settings.NOTARY_RECONCILE_LAG_SECONDS = 0
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    client.v1.refunds.create(params={"payment_intent": intent, "amount": 100})
    source = ReconciliationSource.objects.get(target=stripe_target)

    first = tasks.reconcile_target.apply(args=[source.pk]).get()
    again = tasks.reconcile_target.apply(args=[source.pk]).get()

    assert (first["written"], again["written"]) == (1, 0)
    source.refresh_from_db()
    assert source.reconciled_until is not None
    assert tasks.reconcile_with_providers.apply().get() == 1


def test_the_admin_lists_findings_with_evidence_and_the_effect_page_shows_them(
    acme: Tenant, stripe_target: Target, localstripe: str
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    by_hand = client.v1.refunds.create(params={"payment_intent": intent, "amount": 640})
    effect_id = dispatched_with(
        acme, "stripe_refunds", "case-5", {"payment_intent": intent, "amount": 5}
    )
    committed_as(acme, effect_id, "re_missing")
    reconcile(acme, stripe_target, start)
    browser = Client()
    browser.force_login(User.objects.create_superuser("olga", "olga@example.com", "pw-olga-1"))

    listing = browser.get("/admin/notary/reconciliationfinding/", {"kind": "not_admitted"})
    finding = ReconciliationFinding.objects.get(provider_ref=by_hand.id)
    page = browser.get(f"/admin/notary/reconciliationfinding/{finding.pk}/change/")
    effect = Effect.objects.get(tenant=acme, effect_id=effect_id)
    effect_page = browser.get(f"/admin/notary/effect/{effect.pk}/change/")
    source_page = browser.get("/admin/notary/reconciliationsource/")

    assert listing.status_code == 200
    assert by_hand.id in listing.content.decode() and "re_missing" not in listing.content.decode()
    assert page.status_code == 200
    assert "&quot;amount&quot;: 640" in page.content.decode()
    assert effect_page.status_code == 200
    shown = effect_page.content.decode()
    assert 'id="findings"' in shown and "not_shown" in shown and "no findings" not in shown
    assert source_page.status_code == 200
    assert "sk_test_reconcile" not in source_page.content.decode()


def test_findings_are_exported_and_the_offline_verifier_passes(
    acme: Tenant, stripe_target: Target, localstripe: str, signer: Signer
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    client.v1.refunds.create(params={"payment_intent": intent, "amount": 100})
    effect_id = dispatched_with(
        acme, "stripe_refunds", "case-6", {"payment_intent": intent, "amount": 5}
    )
    committed_as(acme, effect_id, "re_missing")
    reconcile(acme, stripe_target, start)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)

    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    report = verify_export(lines, [log_verifier(acme.log.origin, signer)])

    assert dict(report.findings) == {"not_admitted": 1, "not_shown": 1}
    assert report.outcomes["COMMITTED"] == 1
    receipt = next(json.loads(x) for x in lines if json.loads(x).get("effect_id") == effect_id)
    assert receipt["receipt"]["final_state"] == "COMMITTED"


def test_the_findings_table_is_rebuilt_from_the_ledger_and_checked_against_it(
    acme: Tenant, stripe_target: Target, localstripe: str, signer: Signer
) -> None:
    start = timezone.now() - timedelta(seconds=2)
    client = stripe_client(localstripe)
    intent = paid_intent(client, 5_000)
    by_hand = client.v1.refunds.create(params={"payment_intent": intent, "amount": 300})
    effect_id = dispatched_with(
        acme, "stripe_refunds", "case-10", {"payment_intent": intent, "amount": 5}
    )
    committed_as(acme, effect_id, "re_missing")
    reconcile(acme, stripe_target, start)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    live = finding_rows(acme)
    assert len(live) == 2
    assert "acme: the findings table is the ledger's" in run_command(
        "rebuild_effects", tenant="acme", check=True
    )

    ReconciliationFinding.objects.filter(provider_ref=by_hand.id).delete()
    ReconciliationFinding.objects.filter(effect_id=effect_id).update(seq=999, kind="duplicate")

    with pytest.raises(CommandError, match="findings table differs from the ledger for acme"):
        run_command("rebuild_effects", tenant="acme", check=True)
    with pytest.raises(CommandError) as failed:
        run_command("verify_ledger", log=acme.log.origin, no_progress=True)
    problems = str(failed.value)
    assert f"finding stripe_refunds not_admitted {by_hand.id}: in the ledger, missing" in problems
    assert f"finding stripe_refunds not_shown {effect_id}: in the ledger, missing" in problems
    assert (
        f"finding stripe_refunds duplicate {effect_id}: in the findings table, not in" in problems
    )
    assert len(finding_rows(acme)) == 1  # --check and verify_ledger wrote nothing

    out = run_command("rebuild_effects", tenant="acme")

    assert "acme: 2 findings rebuilt from the ledger; 3 differed" in out
    assert finding_rows(acme) == live
    assert run_command("verify_ledger", log=acme.log.origin, no_progress=True).startswith("OK ")


def finding_rows(tenant: Tenant) -> list[dict[str, Any]]:
    rows = ReconciliationFinding.objects.filter(tenant=tenant).order_by("seq").values()
    return [{k: v for k, v in row.items() if k != "id"} for row in rows]


def run_command(command: str, **options: object) -> str:
    out = io.StringIO()
    call_command(command, stdout=out, **options)
    return out.getvalue()
