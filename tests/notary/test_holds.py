"""Holds on ambiguity at the notary: while an effect of a case is AMBIGUOUS or contradicted, a
new effect of the case (on the same target, or any, by the tenant's hold_scope) is answered 409
`held`, naming the holder; its PROPOSED stands with one HELD entry, nothing is dispatched and
no verdict is written, so once a person resolves the holder the same proposal is dispatched.
A resend in recovery is never held, and another tenant's effects never hold."""

from __future__ import annotations

import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import IntegrityError, transaction
from django.test import Client
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from gate_client.verify import verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.entries import EntryKind
from ledger.core.note import Signer
from ledger.selectors import effect_entries
from notary import selectors, services
from notary.errors import NotaryConflict, NotaryInputError
from notary.exports import export_receipts
from notary.models import Effect, Tenant
from testkit.factories import client_for, dispatched, leased, register, settled

pytestmark = pytest.mark.django_db
CASE = "case-4711"
PAYLOAD = {"amount_cents": 1500, "currency": "USD"}


@pytest.fixture
def shop(acme: Tenant) -> Tenant:
    register(acme, "refunds")
    register(acme, "credits")
    return acme


def new_effect(tenant: Tenant, target: str = "refunds", *, case: str = CASE) -> Proposal:
    """A new effect of `case` (action credit), under a lease of its own."""
    lease = leased(tenant, case, "credit")
    return Proposal(case, target, "credit", dict(PAYLOAD), lease.lease_id, tenant=tenant.slug)


def agent(tenant: Tenant) -> APIClient:
    return client_for(tenant, "agent", "bot")  # the leases' requester


def propose_and_dispatch(client: APIClient, offered: Proposal) -> Any:
    body = {
        "effect_id": offered.effect_id,
        "proposal": offered.proposed_body([]),
        "dispatch": {"premises": []},
    }
    return client.post("/v1/effects", body, format="json")


def kinds(tenant: Tenant, effect_id: str) -> list[str]:
    return [e.kind for e in effect_entries(log=tenant.log, effect_id=effect_id)]


def test_the_api_answers_a_held_dispatch_409_naming_the_holder_and_records_the_hold_once(
    shop: Tenant,
) -> None:
    holder = settled(shop, CASE, "refunds", PAYLOAD, "AMBIGUOUS")
    offered = new_effect(shop)
    client = agent(shop)

    first = propose_and_dispatch(client, offered)
    again = propose_and_dispatch(client, offered)
    dispatch = client.post(
        f"/v1/effects/{offered.effect_id}/dispatch",
        {"attempt": 1, "premises": [], "recovery": False},
        format="json",
    )

    for answer in (first, again, dispatch):
        assert answer.status_code == 409, answer.content
        assert answer.json()["error"] == "held"
        assert answer.json()["held_by"] == holder
        assert "waits for a person" in answer.json()["detail"]
    assert kinds(shop, offered.effect_id) == ["PROPOSED", "HELD"]
    row = Effect.objects.get(tenant=shop, effect_id=offered.effect_id)
    assert (row.state, row.held_by, row.attempts, row.settled_at) == ("HELD", holder, 0, None)
    receipt = client.get(f"/v1/effects/{offered.effect_id}/receipt").json()["receipt"]
    assert (receipt["final_state"], receipt["held_by"]) == ("HELD", holder)
    unsettled = client.get("/v1/effects/unsettled").json()
    assert offered.effect_id in [e["effect_id"] for e in unsettled]

    services.effect_resolve(
        tenant=shop, effect_id=holder, happened=False, reason="not in the ledger", by="fiona"
    )
    released = propose_and_dispatch(client, offered)

    assert released.status_code == 200, released.content
    assert released.json()["dispatched"]["kind"] == "DISPATCHED"
    assert kinds(shop, offered.effect_id) == ["PROPOSED", "HELD", "DISPATCHED"]
    row.refresh_from_db()
    assert (row.state, row.held_by) == ("DISPATCHED", "")


def test_a_contradicted_effect_holds_until_a_person_settles_it(shop: Tenant) -> None:
    holder = settled(shop, CASE, "refunds", PAYLOAD, "COMMITTED")
    evidence = {"source": "webhook", "outcome": "performed", "result_ref": "re_twice"}
    services.effect_observe(tenant=shop, effect_id=holder, evidence=evidence)  # a duplicate
    offered = new_effect(shop)

    with pytest.raises(NotaryConflict) as refused:
        services.effect_propose(
            tenant=shop,
            effect_id=offered.effect_id,
            proposal=offered.proposed_body([]),
            dispatch_premises=[],
        )

    assert (refused.value.code, refused.value.extra) == ("held", {"held_by": holder})
    [hold] = [
        e for e in effect_entries(log=shop.log, effect_id=offered.effect_id) if e.kind == "HELD"
    ]
    assert hold.body_value()["holder"] == "contradicted"
    services.effect_resolve(
        tenant=shop, effect_id=holder, happened=True, reason="refunded twice", by="fiona"
    )
    entry = services.effect_dispatch(
        tenant=shop, effect_id=offered.effect_id, attempt=1, premises=[], recovery=False
    )
    assert entry.kind == EntryKind.DISPATCHED


@pytest.mark.parametrize("waits", ["another effect of its case", "its own evidence"])
def test_an_effect_waiting_for_a_person_is_held_not_refused_when_its_lease_lapsed(
    shop: Tenant, waits: str
) -> None:
    """A hold is not a verdict and a lease refusal is: while a person has yet to decide, a
    lapsed lease must not let the agent record "not done" beside evidence that it was done."""
    offered = new_effect(shop)
    client = agent(shop)
    if waits == "another effect of its case":
        holder = settled(shop, CASE, "refunds", PAYLOAD, "AMBIGUOUS")
        proposal = {"effect_id": offered.effect_id, "proposal": offered.proposed_body([])}
        assert client.post("/v1/effects", proposal, format="json").status_code == 201
    else:
        holder = offered.effect_id
        services.effect_propose(tenant=shop, effect_id=holder, proposal=offered.proposed_body([]))
        done = {"source": "webhook", "outcome": "performed", "result_ref": "re_by_hand"}
        services.effect_observe(tenant=shop, effect_id=holder, evidence=done)
    services.lease_revoke(tenant=shop, lease_id=offered.lease_id, by="maria", reason="ended")

    dispatch = client.post(
        f"/v1/effects/{offered.effect_id}/dispatch",
        {"attempt": 1, "premises": [], "recovery": False},
        format="json",
    )

    assert dispatch.status_code == 409, dispatch.content
    assert (dispatch.json()["error"], dispatch.json()["held_by"]) == ("held", holder)
    assert "DISPATCHED" not in kinds(shop, offered.effect_id)
    if waits == "another effect of its case":  # once the person decided, the lease counts
        services.effect_resolve(
            tenant=shop, effect_id=holder, happened=False, reason="not sent", by="fiona"
        )
        refused = propose_and_dispatch(client, offered)
        assert refused.status_code == 200 and refused.json()["dispatched"] is None
        assert refused.json()["dispatch_refused"]["reason"] == "lease_revoked"


@pytest.mark.parametrize(
    ("scope", "other_target_held", "same_target_held"),
    [("case_target", False, True), ("case", True, True), ("off", False, False)],
)
def test_the_tenants_hold_scope_says_which_new_effects_are_held(
    shop: Tenant, scope: str, other_target_held: bool, same_target_held: bool
) -> None:
    services.tenant_policy_set(
        tenant=shop,
        max_lease_amount_cents=shop.max_lease_amount_cents,
        max_lease_duration=shop.max_lease_duration,
        hold_scope=scope,
    )
    settled(shop, CASE, "refunds", PAYLOAD, "AMBIGUOUS")
    client = agent(shop)

    elsewhere = propose_and_dispatch(client, new_effect(shop, "credits"))
    same = propose_and_dispatch(client, new_effect(shop, "refunds"))
    other_case = propose_and_dispatch(client, new_effect(shop, "refunds", case="case-1"))

    assert elsewhere.status_code == (409 if other_target_held else 201)
    assert same.status_code == (409 if same_target_held else 201)
    assert other_case.status_code == 201


def test_another_tenants_ambiguity_never_holds(shop: Tenant, globex: Tenant) -> None:
    register(globex, "refunds")
    settled(globex, CASE, "refunds", PAYLOAD, "AMBIGUOUS")  # the same case id and target name

    answer = propose_and_dispatch(agent(shop), new_effect(shop))

    assert answer.status_code == 201, answer.content
    assert selectors.review_queue_size(tenant=shop) == 0


def test_a_resend_in_recovery_is_never_held(shop: Tenant) -> None:
    """Dispatched before the case's other effect became AMBIGUOUS: its recovery's attempt 2
    finishes what was started, while a new effect of the case is held."""
    services.tenant_policy_set(
        tenant=shop,
        max_lease_amount_cents=shop.max_lease_amount_cents,
        max_lease_duration=shop.max_lease_duration,
        hold_scope="case",
    )
    started = dispatched(shop, "credits", CASE)
    settled(shop, CASE, "refunds", PAYLOAD, "AMBIGUOUS")

    resent = services.effect_dispatch(
        tenant=shop, effect_id=started, attempt=2, premises=[], recovery=True
    )

    assert resent.body_value()["attempt"] == 2
    assert EntryKind.HELD not in kinds(shop, started)


def test_the_hold_scope_is_set_with_the_policy_refused_when_unknown_and_guarded_by_the_database(
    shop: Tenant,
) -> None:
    assert shop.hold_scope == "case_target"  # the default
    with pytest.raises(NotaryInputError, match="hold_scope 'tenant': one of case_target, case"):
        services.tenant_policy_set(
            tenant=shop,
            max_lease_amount_cents=9000,
            max_lease_duration=timedelta(hours=2),
            hold_scope="tenant",
        )
    shop.refresh_from_db()
    assert (shop.hold_scope, shop.max_lease_amount_cents) == ("case_target", 1_000_000)

    kept = services.tenant_policy_set(
        tenant=shop, max_lease_amount_cents=9000, max_lease_duration=timedelta(hours=2)
    )
    assert kept.hold_scope == "case_target"  # None keeps it

    with pytest.raises(IntegrityError), transaction.atomic():
        Tenant.objects.filter(pk=shop.pk).update(hold_scope="tenant")

    call_command(
        "create_tenant", "--slug", "loose", "--name", "Loose", "--hold-scope", "off",
        stdout=io.StringIO(),
    )  # fmt: skip
    assert Tenant.objects.get(slug="loose").hold_scope == "off"
    with pytest.raises(CommandError, match="invalid choice"):
        call_command("create_tenant", "--slug", "bad", "--name", "Bad", "--hold-scope", "all")


def test_the_admin_shows_a_held_effect_and_links_its_holder(
    shop: Tenant, admin_client: Client
) -> None:
    holder = settled(shop, CASE, "refunds", PAYLOAD, "AMBIGUOUS")
    offered = new_effect(shop)
    propose_and_dispatch(agent(shop), offered)
    held = Effect.objects.get(tenant=shop, effect_id=offered.effect_id)
    holder_row = Effect.objects.get(tenant=shop, effect_id=holder)
    link = f'<a href="/admin/notary/effect/{holder_row.pk}/change/">{holder}</a>'

    listing = admin_client.get("/admin/notary/effect/?state=HELD").content.decode()
    page = admin_client.get(f"/admin/notary/effect/{held.pk}/change/").content.decode()

    assert link in listing
    assert 'id="final-state">HELD<' in page
    assert f'id="holder">{holder}</a>' in page and f"/admin/notary/effect/{holder_row.pk}/" in page
    assert "Held, not sent: another effect of the same case on refunds" in page
    assert "until a person resolves that effect" in page
    tenant_page = admin_client.get(f"/admin/notary/tenant/{shop.pk}/change/").content.decode()
    assert 'name="hold_scope"' in tenant_page


def test_the_projection_rebuilds_the_hold_and_the_export_verifies_offline(
    shop: Tenant, signer: Signer
) -> None:
    holder = settled(shop, CASE, "refunds", PAYLOAD, "AMBIGUOUS")
    offered = new_effect(shop)
    propose_and_dispatch(agent(shop), offered)

    assert services.effects_rebuild(tenant=shop) == 2
    assert Effect.objects.get(tenant=shop, effect_id=offered.effect_id).held_by == holder
    assert selectors.effect_projection_differences(tenant=shop) == []
    ledger_services.sign_checkpoint(log=shop.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=shop)]
    report = verify_export(lines, [log_verifier(shop.log.origin, signer)])
    assert report.outcomes["HELD"] == 1
    held_only = [line.rstrip("\n").encode() for line in export_receipts(tenant=shop, state="HELD")]
    assert verify_export(held_only, [log_verifier(shop.log.origin, signer)]).receipts == 1
