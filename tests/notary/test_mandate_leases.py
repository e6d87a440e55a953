"""Leases granted from AP2 v0.2 mandates through the API: an open Payment Mandate becomes a
standing lease that covers a refund within it and refuses one over it; a closed Checkout
Mandate a lease for exactly its checkout's payload. A mandate that does not verify, is expired,
is signed by a key the tenant does not trust (another tenant's too), is garbage, or asks for
more than the grant policy allows is a 4xx and writes nothing. The mandate, as received, is in
LEASE_GRANTED, on the receipt and the admin's lease page, and the export verifies it offline.
A mandate is spent in the ledger: a one-payment or Checkout Mandate grants one lease however
it is spelled, an open one's budget spans its leases, and an export in which a mandate was
spent twice fails the offline verifier."""

from __future__ import annotations

import importlib
import io
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps as django_apps
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.test import Client
from django.utils import timezone
from jwcrypto.jwk import JWK

from gate_client.leases import Lease as LeaseTerms
from gate_client.mandates import check_evidence, mandate_hash
from gate_client.proposal import Proposal
from gate_client.verify import Failure, verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import EntryKind
from ledger.core.note import Signer
from ledger.models import Entry as LedgerEntry
from ledger.selectors import get_entry
from notary import selectors, services
from notary.errors import NotaryConflict
from notary.exports import export_receipts
from notary.groups import FINANCE_REVIEWERS
from notary.models import ApiKey, Lease, MandateKey, Tenant
from testkit.factories import STRIPE_MONEY, client_for, register
from testkit.mandates import (
    amount_range,
    checkout_jwt,
    checkout_mandate,
    new_key,
    open_payment_mandate,
    public_jwk,
    respelled,
)

pytestmark = pytest.mark.django_db

REFUND = {"amount": 1999, "charge": "ch_1", "currency": "usd"}


def trust(tenant: Tenant, key: JWK, role: str, holder: str, tmp_path: Path) -> str:
    """The key trusted for the tenant by the operator's command; its id, the last line."""
    path = tmp_path / f"{role}-{holder}.jwk"
    path.write_text(json.dumps(public_jwk(key)))
    out = io.StringIO()
    call_command(
        "trust_mandate_key", tenant=tenant.slug, jwk=path, role=role, holder=holder, stdout=out
    )
    return out.getvalue().split()[-1]


@pytest.fixture
def user() -> JWK:
    return new_key()


@pytest.fixture
def merchant() -> JWK:
    return new_key()


@pytest.fixture
def approver(acme: Tenant, user: JWK, merchant: JWK, tmp_path: Path) -> Any:
    """acme trusts its finance lead's mandates and its shop's checkouts; refund-bot acts."""
    register(
        acme,
        "payments",
        tier=1,
        queryable=True,
        max_inflight=timedelta(seconds=5),
        money=STRIPE_MONEY,
    )
    trust(acme, user, "user", "finance lead", tmp_path)
    trust(acme, merchant, "merchant", "Acme Shop", tmp_path)
    client_for(acme, "agent", "refund-bot")
    return client_for(acme, "approver", "maria@acme.example")


def week() -> datetime:
    return (timezone.now() + timedelta(days=7)).replace(microsecond=0)


# At most $50.00 a refund, $2,000 and 100 refunds in all: AP2's own form of a standing approval.
STANDING = [
    {"type": "payment.agent_recurrence", "frequency": "ON_DEMAND", "max_occurrences": 100},
    {"type": "payment.budget", "max": 2000.00, "currency": "USD"},
]


MONTHLY = {"type": "payment.agent_recurrence", "frequency": "MONTHLY"}  # spaced: no lease says


def intent(
    user: JWK,
    maximum: int = 5000,
    *,
    expires_at: datetime | None = None,
    totals: list[dict[str, Any]] = STANDING,
) -> str:
    return open_payment_mandate(
        user, expires_at=expires_at or week(), constraints=[amount_range(maximum), *totals]
    )


def grant(approver: Any, mandate: Any, **terms: Any) -> Any:
    body = {"mandate": mandate, "action": "refund", "requested_by": "refund-bot"}
    return approver.post(
        "/v1/leases/from-mandate", {**body, **(terms or {"case_class": "refunds"})}, format="json"
    )


def dispatch(tenant: Tenant, lease_id: str, case_id: str, payload: dict[str, Any]) -> str:
    proposal = Proposal(
        case_id, "payments", "refund", payload, lease_id, tenant=tenant.slug, case_class="refunds"
    )
    services.effect_propose(
        tenant=tenant, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
    )
    services.effect_dispatch(
        tenant=tenant, effect_id=proposal.effect_id, attempt=1, premises=[], recovery=False
    )
    return proposal.effect_id


def written(tenant: Tenant) -> tuple[int, int]:
    return LedgerEntry.objects.filter(log=tenant.log).count(), Lease.objects.count()


def test_an_intent_is_a_standing_lease_covering_a_refund_within_it_refusing_one_over(
    acme: Tenant, approver: Any, user: JWK
) -> None:
    ends = week()
    token = intent(user, expires_at=ends)
    granted = grant(approver, token)
    after = timezone.now()
    assert granted.status_code == 201, granted.json()
    lease = granted.json()
    assert (lease["case_class"], lease["limits"], lease["currency"]) == (
        "refunds",
        {"amount": 5000},
        "USD",
    )
    assert datetime.fromisoformat(lease["expires_at"]) == ends
    [budget] = Lease.objects.get(lease_id=lease["lease_id"]).budgets
    assert (budget["per"], budget["max_amount"], budget["max_count"]) == ("tenant", 200000, 100)
    assert budget["window_seconds"] >= (ends - after).total_seconds()  # the lease's whole life
    within = dispatch(acme, lease["lease_id"], "case-1", {**REFUND, "amount": 5000})
    receipt = selectors.effect_receipt(tenant=acme, effect_id=within, payload_hash=None).receipt
    assert receipt.authorized_when_fired is True
    assert receipt.mandate is not None and receipt.mandate["token"] == token
    with pytest.raises(NotaryConflict) as over:
        dispatch(acme, lease["lease_id"], "case-2", {**REFUND, "amount": 5001})
    assert over.value.extra["reason"] == "lease_scope"
    entry = get_entry(log=acme.log, seq=lease["granted_seq"])
    assert entry.kind == EntryKind.LEASE_GRANTED
    assert entry.body_value()["mandate"]["token"] == token  # the signed form, as received
    assert entry.body_value()["mandate"]["signer"]["holder"] == "finance lead"


def test_a_mandate_without_recurrence_approves_one_refund(
    acme: Tenant, approver: Any, user: JWK
) -> None:
    lease = grant(approver, intent(user, totals=[])).json()
    dispatch(acme, lease["lease_id"], "case-1", REFUND)
    with pytest.raises(NotaryConflict) as second:
        dispatch(acme, lease["lease_id"], "case-2", REFUND)
    assert second.value.extra["reason"] == "lease_budget"


def test_the_mandate_s_budget_holds_every_refund_together(
    acme: Tenant, approver: Any, user: JWK
) -> None:
    sixty = [STANDING[0], {"type": "payment.budget", "max": 60, "currency": "USD"}]
    lease = grant(approver, intent(user, totals=sixty)).json()
    dispatch(acme, lease["lease_id"], "case-1", {**REFUND, "amount": 3000})
    dispatch(acme, lease["lease_id"], "case-2", {**REFUND, "amount": 3000})  # exactly $60.00
    with pytest.raises(NotaryConflict) as over:
        dispatch(acme, lease["lease_id"], "case-3", {**REFUND, "amount": 1})
    assert over.value.extra["reason"] == "lease_budget"


def test_the_approver_may_end_the_lease_before_the_mandate(approver: Any, user: JWK) -> None:
    sooner = timezone.now() + timedelta(days=1)
    granted = grant(approver, intent(user), case_pattern="RF-*", expires_at=sooner.isoformat())
    assert granted.status_code == 201, granted.json()
    assert datetime.fromisoformat(granted.json()["expires_at"]) == sooner


def test_a_cart_mandate_binds_exactly_its_payload(
    acme: Tenant, approver: Any, user: JWK, merchant: JWK
) -> None:
    token = checkout_mandate(user, checkout_jwt(merchant, REFUND))
    granted = grant(approver, token, case_class="refunds", expires_at=week().isoformat())
    assert granted.status_code == 201, granted.json()
    lease = granted.json()
    assert lease["limits"] == {"amount": 1999}  # the checkout's amount: the grant policy's
    assert lease["payload_hash"] == Proposal("case-1", "", "", REFUND, "").payload_hash
    effect_id = dispatch(acme, lease["lease_id"], "case-1", REFUND)
    receipt = selectors.effect_receipt(tenant=acme, effect_id=effect_id, payload_hash=None).receipt
    assert receipt.authorized_when_fired is True
    with pytest.raises(NotaryConflict) as other:
        dispatch(acme, lease["lease_id"], "case-2", {**REFUND, "charge": "ch_2"})  # one byte
    assert (other.value.extra["reason"], other.value.detail) == (
        "lease_scope",
        "lease approves another payload",
    )
    with pytest.raises(NotaryConflict) as again:
        dispatch(acme, lease["lease_id"], "case-3", REFUND)  # the same checkout, twice
    assert again.value.extra["reason"] == "lease_budget"


def test_a_cart_mandate_with_no_end_needs_the_approver_s(
    approver: Any, user: JWK, merchant: JWK
) -> None:
    token = checkout_mandate(user, checkout_jwt(merchant, REFUND))
    refused = grant(approver, token, case_id="case-1")
    assert refused.status_code == 400
    assert refused.json()["detail"] == "the mandate states no end: give the lease an expires_at"


def forged_signature(token: str) -> str:
    jwt, rest = token.split("~", 1)
    head, payload, signature = jwt.split(".")
    flipped = ("B" if signature[5] == "A" else "A").join([signature[:5], signature[6:]])
    return f"{head}.{payload}.{flipped}~{rest}"


@pytest.mark.parametrize(
    ("make", "status", "error"),
    [
        (lambda u, m, g: forged_signature(intent(u)), 403, "untrusted_signature"),
        (lambda u, m, g: intent(new_key()), 403, "untrusted_signature"),
        (lambda u, m, g: intent(g), 403, "untrusted_signature"),  # globex's key, not acme's
        (
            lambda u, m, g: intent(u, expires_at=timezone.now() - timedelta(seconds=1)),
            403,
            "mandate_expired",
        ),
        (lambda u, m, g: intent(u, totals=[MONTHLY]), 403, "unresolved_constraint"),
        (lambda u, m, g: checkout_mandate(u, checkout_jwt(g, REFUND)), 403, "untrusted_signature"),
        (
            lambda u, m, g: checkout_mandate(u, checkout_jwt(m, REFUND), stated_hash="x"),
            403,
            "mandate_binding",
        ),
        (lambda u, m, g: "garbage", 400, "invalid"),
        (lambda u, m, g: 12, 400, "invalid"),
        (lambda u, m, g: "", 400, "invalid"),
        (lambda u, m, g: intent(u, maximum=2_000_000), 403, "beyond_policy"),
        (
            lambda u, m, g: intent(u, expires_at=timezone.now() + timedelta(days=60)),
            403,
            "beyond_policy",
        ),
    ],
)
def test_a_mandate_that_cannot_be_the_evidence_is_a_4xx_and_writes_nothing(
    acme: Tenant,
    globex: Tenant,
    approver: Any,
    user: JWK,
    merchant: JWK,
    tmp_path: Path,
    make: Any,
    status: int,
    error: str,
) -> None:
    theirs = new_key()
    trust(globex, theirs, "user", "Globex Lead", tmp_path)
    token = make(user, merchant, theirs)
    before = written(acme)
    refused = grant(approver, token)
    assert (refused.status_code, refused.json()["error"]) == (status, error), refused.json()
    assert set(refused.json()) == {"error", "detail"}
    assert written(acme) == before


def test_only_an_approver_grants_from_a_mandate(acme: Tenant, approver: Any, user: JWK) -> None:
    agent = client_for(acme, "agent", "other-bot")
    before = written(acme)
    refused = grant(agent, intent(user))
    assert refused.status_code == 403
    assert written(acme) == before


def test_a_revoked_key_verifies_no_new_grant(
    acme: Tenant, approver: Any, user: JWK, tmp_path: Path
) -> None:
    key_id = MandateKey.objects.get(tenant=acme, role="user").key_id
    call_command("trust_mandate_key", tenant=acme.slug, revoke=key_id, stdout=io.StringIO())
    assert grant(approver, intent(user)).json()["error"] == "untrusted_signature"


def test_the_receipt_api_and_the_admin_show_the_mandate(
    acme: Tenant, approver: Any, user: JWK
) -> None:
    lease = grant(approver, intent(user)).json()
    effect_id = dispatch(acme, lease["lease_id"], "case-1", REFUND)
    auditor = client_for(acme, "auditor", "audrey")
    shown = auditor.get(f"/v1/effects/{effect_id}/receipt").json()
    assert shown["receipt"]["mandate"]["vct"] == "mandate.payment.open.1"
    reviewer = User.objects.create_user("fiona", password="pw", is_staff=True)
    reviewer.groups.add(Group.objects.get(name=FINANCE_REVIEWERS))
    browser = Client()
    browser.force_login(reviewer)
    pk = Lease.objects.get(lease_id=lease["lease_id"]).pk
    page = browser.get(f"/admin/notary/lease/{pk}/change/").content.decode()
    assert "open Payment Mandate signed by finance lead" in page
    assert "each payment from 0 up to 5000 (minor units of USD)" in page


def test_the_export_verifies_the_mandate_offline(
    acme: Tenant, approver: Any, user: JWK, merchant: JWK, signer: Signer
) -> None:
    lease = grant(approver, intent(user)).json()
    dispatch(acme, lease["lease_id"], "case-1", REFUND)
    cart = grant(
        approver,
        checkout_mandate(user, checkout_jwt(merchant, REFUND)),
        case_id="case-2",
        expires_at=week().isoformat(),
    ).json()
    dispatch(acme, cart["lease_id"], "case-2", REFUND)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    report = verify_export(lines, [log_verifier(acme.log.origin, signer)])
    assert report.receipts == 2


def test_a_recorded_mandate_that_does_not_verify_fails_the_export(
    acme: Tenant, approver: Any, user: JWK, signer: Signer
) -> None:
    """A notary that wrote a lease beyond its mandate into its own ledger is caught offline."""
    evidence = get_entry(log=acme.log, seq=grant(approver, intent(user)).json()["granted_seq"])
    body = evidence.body_value()
    assert check_evidence(body, granted_at=evidence.created_at) is not None
    beyond = LeaseTerms.from_body({**body, "lease_id": "lease_beyond", "limits": {"amount": 9000}})
    ledger_services.append_entry(
        log=acme.log,
        kind=EntryKind.LEASE_GRANTED,
        body={**beyond.body(), "requested_by": "refund-bot", "mandate": body["mandate"]},
    )
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    with pytest.raises(Failure) as failed:
        verify_export(lines, [log_verifier(acme.log.origin, signer)])
    assert failed.value.verdict == "integrity"
    assert "its mandate: beyond_mandate" in failed.value.detail


def dispatched(tenant: Tenant) -> int:
    """The payments made: DISPATCHED entries, each a request the target acts on."""
    return LedgerEntry.objects.filter(log=tenant.log, kind=EntryKind.DISPATCHED).count()


def test_a_one_payment_mandate_grants_one_lease_however_it_is_spelled(
    acme: Tenant, approver: Any, user: JWK
) -> None:
    """Granted three times, it made three leases and three payments: one of each now."""
    token = intent(user, totals=[])
    answers = [grant(approver, t) for t in (token, respelled(token), token)]
    assert [a.status_code for a in answers] == [201, 409, 409], [a.json() for a in answers]
    lease_id = answers[0].json()["lease_id"]
    for refused in answers[1:]:
        assert refused.json()["error"] == "mandate_spent"
        assert refused.json()["lease_id"] == lease_id
    assert list(Lease.objects.filter(tenant=acme).values_list("lease_id", flat=True)) == [lease_id]
    dispatch(acme, lease_id, "case-1", REFUND)
    with pytest.raises(NotaryConflict):
        dispatch(acme, lease_id, "case-2", REFUND)
    assert dispatched(acme) == 1


def test_a_checkout_mandate_grants_one_lease_whatever_cases_the_second_names(
    acme: Tenant, approver: Any, user: JWK, merchant: JWK
) -> None:
    """Granted twice, for two cases, it paid the one cart twice: once now."""
    token = checkout_mandate(user, checkout_jwt(merchant, REFUND), expires_at=week())
    first = grant(approver, token, case_id="case-1")
    second = grant(approver, respelled(token), case_id="case-2")
    assert first.status_code == 201, first.json()
    assert (second.status_code, second.json()["error"]) == (409, "mandate_spent")
    dispatch(acme, first.json()["lease_id"], "case-1", REFUND)
    assert Lease.objects.filter(tenant=acme).count() == 1
    assert dispatched(acme) == 1


def test_an_open_mandate_s_budget_spans_its_leases(
    acme: Tenant, approver: Any, user: JWK, signer: Signer
) -> None:
    sixty = [STANDING[0], {"type": "payment.budget", "max": 60, "currency": "USD"}]
    token = intent(user, totals=sixty)
    first = grant(approver, token).json()
    second = grant(approver, respelled(token), case_pattern="RF-*").json()
    assert first["lease_id"] != second["lease_id"]
    dispatch(acme, first["lease_id"], "case-1", {**REFUND, "amount": 3000})
    dispatch(acme, second["lease_id"], "RF-2", {**REFUND, "amount": 3000})  # $60.00 in all
    for lease_id, case_id in ((second["lease_id"], "RF-3"), (first["lease_id"], "case-3")):
        with pytest.raises(NotaryConflict) as over:
            dispatch(acme, lease_id, case_id, {**REFUND, "amount": 1})
        assert over.value.extra["reason"] == "lease_budget"
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    report = verify_export(lines, [log_verifier(acme.log.origin, signer)])
    assert (report.receipts, report.budgets) == (4, 2)  # the two spends re-derive, pooled
    reviewer = User.objects.create_user("fiona", password="pw", is_staff=True)
    reviewer.groups.add(Group.objects.get(name=FINANCE_REVIEWERS))
    browser = Client()
    browser.force_login(reviewer)
    pk = Lease.objects.get(lease_id=second["lease_id"]).pk
    page = browser.get(f"/admin/notary/lease/{pk}/change/").content.decode()
    assert f"also granted as {first['lease_id']}: one budget counts them all" in page
    assert "$60.00 in 2 effects" in page


def granted_again(tenant: Tenant, approver_holder: str, lease_id: str) -> Lease:
    """A second lease from the mandate of `lease_id`, with its terms, written as a notary that
    does not spend mandates wrote it: LEASE_GRANTED with the same mandate, its own pool."""
    approver = ApiKey.objects.get(tenant=tenant, holder=approver_holder)
    body = get_entry(log=tenant.log, seq=Lease.objects.get(lease_id=lease_id).granted_seq)
    terms = LeaseTerms.from_body(body.body_value())
    mandate = {k: v for k, v in body.body_value()["mandate"].items() if k != "mandate_hash"}
    checked = services.lease_terms(
        case_id=terms.case_id,
        action=terms.action,
        expires_at=terms.expires_at,
        limits=terms.limits,
        payload_hash=terms.payload_hash,
        currency=terms.currency,
        case_class=terms.case_class,
        case_pattern=terms.case_pattern,
        budgets=[b.body() for b in terms.budgets],
    )
    return services.lease_grant_named(
        tenant=tenant,
        approver=approver,
        terms=checked,
        requested_by="refund-bot",
        provenance={"mandate": mandate},
    )


def verified_by_cli(
    tenant: Tenant, signer: Signer, tmp_path: Path
) -> subprocess.CompletedProcess[str]:
    out = tmp_path / "receipts.jsonl"
    call_command(
        "export_receipts", tenant=tenant.slug, out=out, no_progress=True, stdout=io.StringIO()
    )
    vkey = log_verifier(tenant.log.origin, signer).vkey
    return subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(out), "--vkey", vkey, "--no-witnesses"],
        capture_output=True,
        text=True,
    )


def test_a_one_payment_mandate_granted_twice_fails_the_verifier(
    acme: Tenant, approver: Any, user: JWK, signer: Signer, tmp_path: Path
) -> None:
    lease_id = grant(approver, intent(user, totals=[])).json()["lease_id"]
    dispatch(acme, lease_id, "case-1", REFUND)
    assert verified_by_cli(acme, signer, tmp_path).returncode == 0
    again = granted_again(acme, "maria@acme.example", lease_id)
    dispatch(acme, again.lease_id, "case-2", REFUND)  # the payment no one approved
    refused = verified_by_cli(acme, signer, tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "integrity: FAIL" in refused.stdout
    assert f"approves one payment and was granted already, to {lease_id}" in refused.stdout


def test_an_open_mandate_spent_past_its_budget_over_two_leases_fails_the_verifier(
    acme: Tenant, approver: Any, user: JWK, signer: Signer
) -> None:
    sixty = [STANDING[0], {"type": "payment.budget", "max": 60, "currency": "USD"}]
    lease_id = grant(approver, intent(user, totals=sixty)).json()["lease_id"]
    dispatch(acme, lease_id, "case-1", {**REFUND, "amount": 3000})
    again = granted_again(acme, "maria@acme.example", lease_id)
    dispatch(acme, again.lease_id, "case-2", {**REFUND, "amount": 3000})
    dispatch(acme, again.lease_id, "case-3", {**REFUND, "amount": 3000})  # $90.00 of $60.00
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    with pytest.raises(Failure) as failed:
        verify_export(lines, [log_verifier(acme.log.origin, signer)])
    assert (failed.value.verdict, failed.value.where) == ("integrity", "budget statements")


def test_a_mandate_granted_before_leases_named_it_is_named_and_spent(
    acme: Tenant, approver: Any, user: JWK
) -> None:
    """The migration names the mandate of every lease granted before Lease.mandate_hash, from
    its LEASE_GRANTED entry, so it is not granted again."""
    token = intent(user, totals=[])
    granted = grant(approver, token).json()
    grant(approver, intent(user))  # another mandate's lease, named as well
    Lease.objects.update(mandate_hash="", mandate_once=False)  # as before the migration
    migration = importlib.import_module("notary.migrations.0021_lease_mandate")
    migration.name_granted_mandates(django_apps, None)
    assert Lease.objects.get(lease_id=granted["lease_id"]).mandate_hash == mandate_hash(token)
    assert Lease.objects.filter(mandate_hash="").count() == 0
    again = grant(approver, respelled(token))
    assert (again.status_code, again.json()["lease_id"]) == (409, granted["lease_id"])
