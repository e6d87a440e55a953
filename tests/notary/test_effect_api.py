"""The effect endpoints: propose, dispatch, outcome, receipt, the unsettled list — each scoped to
the caller's tenant, each refusing bad input with the error body and an unchanged ledger."""

from __future__ import annotations

import base64
import io
from datetime import timedelta
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.utils import timezone
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from gate_client.receipts import Receipt, check_chain, derive_receipt
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier, parse_tlog_proof
from ledger.core.entries import Entry, entry_from_leaf
from ledger.core.note import Signer
from ledger.models import Log
from notary import services
from notary.models import Effect, Tenant
from testkit.factories import CENTS_MONEY, client_for

pytestmark = pytest.mark.django_db


class Agent:
    """One tenant with a refund target, an approver's lease and an agent client."""

    def __init__(self, tenant: Tenant, *, amount_limit: int = 2000) -> None:
        self.tenant = tenant
        services.target_register(
            tenant=tenant,
            name="refunds",
            tier=1,
            queryable=True,
            max_inflight=timedelta(seconds=5),
            money=CENTS_MONEY,
        )
        approver = services.api_key_issue(tenant=tenant, role="approver", holder="alice")[0]
        self.client = client_for(tenant, "agent", "refund-bot")  # the requester holds a key
        self.lease = services.lease_grant(
            tenant=tenant,
            approver=approver,
            case_id="case_4711",
            action="refund",
            expires_at=timezone.now() + timedelta(hours=1),
            requested_by="refund-bot",
            limits={"amount_cents": amount_limit},
        )

    def proposal(self, amount: int = 2000) -> Proposal:
        return Proposal(
            case_id="case_4711",
            target="refunds",
            action="refund",
            payload={"payment": "pay_1", "amount_cents": amount},
            lease_id=self.lease.lease_id,
            tenant=self.tenant.slug,
        )

    def propose(self, proposal: Proposal | None = None, **changes: Any) -> Any:
        proposal = proposal or self.proposal()
        request: dict[str, Any] = {
            "effect_id": proposal.effect_id,
            "proposal": self.propose_body(proposal),
        }
        request["proposal"].update(changes)
        return self.client.post("/v1/effects", request, format="json")

    def propose_body(self, proposal: Proposal | None = None) -> dict[str, Any]:
        return (proposal or self.proposal()).proposed_body([])

    def propose_and_dispatch(self, *, holds: bool = True) -> Any:
        """The common path's first request: propose, and dispatch attempt 1 with it."""
        premises = [{"name": "payment_settled", "holds": holds, "observed": None}]
        request = {
            "effect_id": self.proposal().effect_id,
            "proposal": self.propose_body(),
            "dispatch": {"premises": premises},
        }
        return self.client.post("/v1/effects", request, format="json")

    def dispatch(self, effect_id: str, attempt: int = 1, holds: bool = True) -> Any:
        premises = [{"name": "payment_settled", "holds": holds, "observed": {"status": "paid"}}]
        body = {"attempt": attempt, "premises": premises}
        return self.client.post(f"/v1/effects/{effect_id}/dispatch", body, format="json")

    def outcome(self, effect_id: str, kind: str, **body: Any) -> Any:
        request = {"kind": kind, "body": body}
        return self.client.post(f"/v1/effects/{effect_id}/outcome", request, format="json")


def log_size(tenant: Tenant) -> int:
    return Log.objects.get(pk=tenant.log_id).size


def entries_of(response_entries: list[dict[str, Any]]) -> list[Entry]:
    return [entry_from_leaf(base64.b64decode(e["leaf"])) for e in response_entries]


@pytest.fixture
def agent(acme: Tenant) -> Agent:
    return Agent(acme)


def test_propose_dispatch_commit_and_a_proved_receipt(agent: Agent, signer: Signer) -> None:
    effect_id = agent.proposal().effect_id
    proposed = agent.propose()
    assert proposed.status_code == 201, proposed.json()
    assert proposed.json()["created"] is True
    assert proposed.json()["effect"]["state"] == "PROPOSED"
    again = agent.propose()
    assert again.status_code == 200
    assert again.json()["entries"] == proposed.json()["entries"]

    dispatched = agent.dispatch(effect_id)
    assert dispatched.status_code == 201, dispatched.json()
    assert dispatched.json()["kind"] == "DISPATCHED"
    committed = agent.outcome(
        effect_id, "COMMITTED", state="COMMITTED", attempt=1, result_ref="re_1", recheck=None
    )
    assert committed.status_code == 201, committed.json()

    ledger_services.sign_checkpoint(log=agent.tenant.log, signer=signer)
    shown = agent.client.get(f"/v1/effects/{effect_id}/receipt").json()
    receipt = shown["receipt"]
    assert receipt["final_state"] == "COMMITTED"
    assert receipt["authorized_when_fired"] is True
    assert receipt["assumptions_held"] is True
    assert receipt["happened"] is True
    entries = entries_of(shown["entries"])
    assert derive_receipt(entries, effect_id) == Receipt.from_dict(receipt)
    verifier = log_verifier(agent.tenant.log.origin, signer)
    for entry in entries:
        proof = parse_tlog_proof(shown["proofs"][str(entry.seq)])
        proof.verify(entry.leaf_bytes(), [verifier], origin=agent.tenant.log.origin)
    assert Effect.objects.get(effect_id=effect_id).state == "COMMITTED"


def test_receipt_entries_are_the_logs_own_bytes(agent: Agent) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    agent.dispatch(effect_id)
    detail = agent.client.get(f"/v1/effects/{effect_id}").json()
    history = entries_of(detail["entries"])
    lease = entries_of(detail["lease_entries"])
    assert [e.kind for e in lease] == ["LEASE_GRANTED"]
    assert [e.kind for e in history] == ["PROPOSED", "DISPATCHED"]
    log_entries = list(ledger_services_entries(agent.tenant))
    check_chain(log_entries, origin=agent.tenant.log.origin)
    assert {e.seq: e for e in log_entries} | {e.seq: e for e in history + lease} == {
        e.seq: e for e in log_entries
    }


def ledger_services_entries(tenant: Tenant) -> list[Entry]:
    from ledger.selectors import iter_entries

    return list(iter_entries(log=tenant.log))


def test_a_changed_payload_is_refused_and_has_its_own_receipt(agent: Agent) -> None:
    first = agent.proposal(2000)
    agent.propose(first)
    changed = agent.proposal(3000)
    answer = agent.propose(changed)
    assert answer.status_code == 200
    standing = answer.json()["entries"][0]["body"]
    assert standing["payload_hash"] == first.payload_hash
    refused = agent.outcome(
        first.effect_id,
        "REFUSED",
        reason="payload_changed",
        payload_hash=changed.payload_hash,
        standing_payload_hash=first.payload_hash,
    )
    assert refused.status_code == 201
    shown = agent.client.get(
        f"/v1/effects/{first.effect_id}/receipt", {"payload_hash": changed.payload_hash}
    ).json()
    assert shown["receipt"]["final_state"] == "REFUSED:payload_changed"
    assert Effect.objects.get(effect_id=first.effect_id).state == "PROPOSED"


def test_a_revoked_lease_refuses_the_dispatch_and_records_nothing(agent: Agent) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    services.lease_revoke(
        tenant=agent.tenant, lease_id=agent.lease.lease_id, by="alice", reason="disputed"
    )
    size = log_size(agent.tenant)
    refused = agent.dispatch(effect_id)
    assert refused.status_code == 409
    assert refused.json()["error"] == "lease_refused"
    assert refused.json()["reason"] == "lease_revoked"
    assert log_size(agent.tenant) == size


def test_over_the_limit_is_out_of_scope(acme: Tenant) -> None:
    agent = Agent(acme, amount_limit=1000)
    effect_id = agent.proposal(2000).effect_id
    agent.propose(agent.proposal(2000))
    refused = agent.dispatch(effect_id)
    assert refused.status_code == 409
    assert refused.json()["reason"] == "lease_scope"


def test_attempts_are_compare_and_set(agent: Agent) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    assert agent.dispatch(effect_id, attempt=2).status_code == 409
    assert agent.dispatch(effect_id, attempt=1).status_code == 201
    taken = agent.dispatch(effect_id, attempt=1)
    assert taken.status_code == 409
    assert taken.json() == {
        "error": "attempt_taken",
        "detail": "attempt 1 asked, 1 recorded",
        "current": 1,
    }
    assert agent.dispatch(effect_id, attempt=2).status_code == 201


def test_the_agents_late_answer_settles_ambiguous_and_then_the_first_final_verdict_stands(
    agent: Agent,
) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    agent.dispatch(effect_id)
    first = agent.outcome(effect_id, "AMBIGUOUS", recheck={"reason": "tier 3"})
    assert first.status_code == 201
    late = agent.outcome(
        effect_id, "COMMITTED", state="COMMITTED", attempt=1, result_ref="x", recheck=None
    )
    assert late.status_code == 201, "AMBIGUOUS is not final: the sender's own answer settles it"
    assert Effect.objects.get(effect_id=effect_id).state == "COMMITTED"
    size = log_size(agent.tenant)
    again = agent.outcome(effect_id, "FAILED", attempt=1, code="card_declined")
    assert again.status_code == 200
    assert again.json()["recorded"] is False
    assert again.json()["entry"] == late.json()["entry"]
    assert log_size(agent.tenant) == size
    settled = agent.dispatch(effect_id, attempt=2)
    assert settled.status_code == 409
    assert settled.json()["error"] == "already_settled"


def test_a_second_result_for_one_effect_is_kept_and_shown_as_a_duplicate(agent: Agent) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    agent.dispatch(effect_id)
    agent.outcome(
        effect_id, "COMMITTED", state="COMMITTED", attempt=1, result_ref="x", recheck=None
    )
    size = log_size(agent.tenant)
    other = agent.outcome(
        effect_id, "COMMITTED", state="COMMITTED", attempt=1, result_ref="y", recheck=None
    )
    assert other.json()["recorded"] is False
    assert log_size(agent.tenant) == size + 1, "the second result is kept, as evidence"
    receipt = agent.client.get(f"/v1/effects/{effect_id}/receipt").json()["receipt"]
    assert receipt["final_state"] == "COMMITTED"
    assert receipt["contradicted"] is True and receipt["recorded"] is False
    assert [c["kind"] for c in receipt["contradictions"]] == ["duplicate_at_target"]
    assert Effect.objects.get(effect_id=effect_id).contradicted


def test_the_unsettled_list_is_what_recovery_must_settle(agent: Agent) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    listed = agent.client.get("/v1/effects/unsettled").json()
    assert [e["effect_id"] for e in listed] == [effect_id]
    agent.dispatch(effect_id)
    assert agent.client.get("/v1/effects/unsettled").json()[0]["state"] == "DISPATCHED"
    agent.outcome(effect_id, "FAILED", attempt=1, code="card_declined")
    assert agent.client.get("/v1/effects/unsettled").json() == []
    assert Effect.objects.get(effect_id=effect_id).state == "FAILED:card_declined"


BAD_PROPOSALS: list[tuple[str, dict[str, Any]]] = [
    ("another tenant", {"tenant": "globex"}),
    ("payload hash of another payload", {"payload_hash": "0" * 64}),
    ("unregistered target", {"target": "emails"}),
    ("payload not an object", {"payload": [1, 2]}),
    ("premises not a list", {"premises": {"a": 1}}),
    ("premise without holds", {"premises": [{"name": "x", "observed": None}]}),
    ("empty lease", {"lease_id": ""}),
    ("an extra key", {"extra": 1}),
]


@pytest.mark.parametrize(("why", "changes"), BAD_PROPOSALS, ids=[b[0] for b in BAD_PROPOSALS])
def test_bad_proposals_are_400_and_write_nothing(
    agent: Agent, why: str, changes: dict[str, Any]
) -> None:
    size = log_size(agent.tenant)
    answer = agent.propose(**changes)
    assert answer.status_code == 400, why
    assert set(answer.json()) == {"error", "detail"}
    assert log_size(agent.tenant) == size
    assert not Effect.objects.exists()


def test_bad_requests_at_every_effect_endpoint_are_4xx_and_write_nothing(agent: Agent) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    client = agent.client
    wrong_id = client.post("/v1/effects", {"effect_id": "eff_other", "proposal": {}}, format="json")
    size = log_size(agent.tenant)
    answers = [
        wrong_id,
        client.post("/v1/effects", {"effect_id": effect_id}, format="json"),
        client.post("/v1/effects", "not json", content_type="application/json"),
        agent.dispatch(effect_id, holds=False),
        agent.dispatch(effect_id, attempt=0),
        client.post(f"/v1/effects/{effect_id}/dispatch", {"attempt": 1}, format="json"),
        agent.dispatch("eff_nope"),
        agent.outcome(effect_id, "RESOLVED", happened=True),
        agent.outcome(effect_id, "OBSERVED"),
        agent.outcome(effect_id, "COMMITTED", state="COMMITTED", attempt=1, result_ref="r"),
        agent.outcome(
            effect_id, "COMMITTED", state="COMMITTED_ON_EVIDENCE", attempt=1, result_ref="r"
        ),
        agent.outcome(effect_id, "FAILED", attempt="1", code="x"),
        agent.outcome(effect_id, "REFUSED"),
        agent.outcome("eff_nope", "AMBIGUOUS"),
        client.get("/v1/effects/eff_nope"),
        client.get("/v1/effects/eff_nope/receipt"),
        client.get(f"/v1/effects/{effect_id}/receipt", {"payload_hash": "xyz"}),
        client.get(f"/v1/effects/{effect_id}/receipt", {"payload_hash": "a" * 64}),
        client.get("/v1/effects/unsettled", {"limit": 0}),
    ]
    for answer in answers:
        assert 400 <= answer.status_code < 500, (answer.status_code, answer.content)
        assert set(answer.json()) >= {"error", "detail"}, answer.content
    assert log_size(agent.tenant) == size


def test_another_tenants_effects_do_not_exist_for_you(agent: Agent, globex: Tenant) -> None:
    effect_id = agent.proposal().effect_id
    agent.propose()
    agent.dispatch(effect_id)
    other = client_for(globex, "agent", "globex-bot")
    size = log_size(agent.tenant)
    answers = [
        other.get(f"/v1/effects/{effect_id}"),
        other.get(f"/v1/effects/{effect_id}/receipt"),
        other.post(f"/v1/effects/{effect_id}/dispatch", {"attempt": 2, "premises": []}, "json"),
        other.post(
            f"/v1/effects/{effect_id}/outcome", {"kind": "AMBIGUOUS", "body": {}}, format="json"
        ),
    ]
    assert [a.status_code for a in answers] == [404, 404, 404, 404]
    assert other.get("/v1/effects/unsettled").json() == []
    assert log_size(agent.tenant) == size


def test_roles_are_enforced_on_effects(agent: Agent) -> None:
    approver = client_for(agent.tenant, "approver", "carol")
    auditor = client_for(agent.tenant, "auditor", "dave")
    assert approver.post("/v1/effects", {}, format="json").status_code == 403
    assert auditor.post("/v1/effects", {}, format="json").status_code == 403
    assert auditor.get("/v1/effects/unsettled").status_code == 200
    assert APIClient().get("/v1/effects/unsettled").status_code == 401


def test_rebuilding_the_projection_from_the_ledger_gives_the_live_table(agent: Agent) -> None:
    for amount in (100, 200, 300, 400):
        proposal = Proposal(
            case_id="case_4711",
            target="refunds",
            action="refund",
            payload={"amount_cents": amount},
            lease_id=agent.lease.lease_id,
            tenant=agent.tenant.slug,
        )
        agent.propose(proposal)
        if amount >= 200:
            agent.dispatch(proposal.effect_id)
        if amount >= 300:
            agent.outcome(
                proposal.effect_id,
                "COMMITTED",
                state="COMMITTED",
                attempt=1,
                result_ref=f"re_{amount}",
                recheck=None,
            )
    services.lease_revoke(
        tenant=agent.tenant, lease_id=agent.lease.lease_id, by="alice", reason="done"
    )
    live = list(Effect.objects.order_by("effect_id").values())
    out = io.StringIO()
    call_command("rebuild_effects", tenant=agent.tenant.slug, stdout=out)
    assert out.getvalue() == (
        f"acme: {len(live)} effects rebuilt from the ledger; no differences\n"
        "acme: 0 findings rebuilt from the ledger; no differences\n"
    )
    rebuilt = list(Effect.objects.order_by("effect_id").values())
    assert [dict(r, id=None) for r in rebuilt] == [dict(r, id=None) for r in live]

    Effect.objects.filter(effect_id=live[0]["effect_id"]).update(state="COMMITTED", attempts=7)
    call_command("rebuild_effects", tenant=agent.tenant.slug, stdout=out)
    assert "1 differed" in out.getvalue()
    assert list(Effect.objects.order_by("effect_id").values("state")) == [
        {"state": r["state"]} for r in live
    ]
    with pytest.raises(CommandError, match="no tenant 'nope'"):
        call_command("rebuild_effects", tenant="nope")


def test_one_request_proposes_and_dispatches_attempt_one(agent: Agent) -> None:
    both = agent.propose_and_dispatch()
    assert both.status_code == 201, both.json()
    assert [e["kind"] for e in both.json()["entries"]] == ["PROPOSED", "DISPATCHED"]
    assert both.json()["dispatched"]["body"]["attempt"] == 1
    assert both.json()["dispatch_refused"] is None
    proposed, dispatched = entries_of(both.json()["entries"])
    assert proposed.created_at == dispatched.created_at  # one transaction, one instant
    again = agent.propose_and_dispatch()
    assert again.status_code == 200
    assert again.json()["dispatched"] is None  # attempt 1 exists: recovery decides the rest
    assert len(again.json()["entries"]) == 2


def test_a_lease_refusal_in_the_one_request_keeps_the_proposal_and_dispatches_nothing(
    agent: Agent,
) -> None:
    services.lease_revoke(
        tenant=agent.tenant, lease_id=agent.lease.lease_id, by="alice", reason="disputed"
    )
    answer = agent.propose_and_dispatch()
    assert answer.status_code == 201
    assert answer.json()["dispatched"] is None
    assert answer.json()["dispatch_refused"] == {
        "reason": "lease_revoked",
        "detail": "revoked by alice",
    }
    assert [e["kind"] for e in answer.json()["entries"]] == ["PROPOSED"]
    size = log_size(agent.tenant)
    assert agent.propose_and_dispatch(holds=False).status_code == 400
    assert log_size(agent.tenant) == size


def test_the_effect_a_propose_answers_with_is_the_row_it_committed(
    agent: Agent, globex: Tenant
) -> None:
    """Propose answers with the projection of the entries in hand, not a read after commit:
    whatever the request did (created, dispatched, nothing, a refused dispatch), that is the
    row GET /v1/effects/{id} reads."""

    def answered_as_stored(answer: Any) -> None:
        effect_id = answer.json()["effect"]["effect_id"]
        stored = agent.client.get(f"/v1/effects/{effect_id}").json()["effect"]
        assert answer.json()["effect"] == stored

    answered_as_stored(agent.propose())  # PROPOSED recorded
    answered_as_stored(agent.propose())  # a retry: nothing written
    answered_as_stored(agent.propose_and_dispatch())  # standing, DISPATCHED recorded now
    answered_as_stored(agent.propose_and_dispatch())  # nothing written
    answered_as_stored(agent.propose(agent.proposal(1500)))  # a changed payload: it stands
    revoked = Agent(globex)  # a lease revoked before its effect's one request
    services.lease_revoke(
        tenant=revoked.tenant, lease_id=revoked.lease.lease_id, by="alice", reason="disputed"
    )
    refused = revoked.propose_and_dispatch()
    assert refused.json()["dispatch_refused"]["reason"] == "lease_revoked"
    stored = revoked.client.get(f"/v1/effects/{revoked.proposal().effect_id}").json()
    assert refused.json()["effect"] == stored["effect"]


def test_an_outcome_answers_with_the_entries_the_receipt_derives_from(agent: Agent) -> None:
    """The outcome's receipt entries are the effect's and its lease's, revocation included:
    what GET /v1/effects/{id} gives, in seq order."""
    effect_id = agent.proposal().effect_id
    agent.propose_and_dispatch()
    services.lease_revoke(
        tenant=agent.tenant, lease_id=agent.lease.lease_id, by="alice", reason="disputed"
    )
    answer = agent.outcome(
        effect_id, "COMMITTED", state="COMMITTED", attempt=1, result_ref="re_1", recheck=None
    )
    assert answer.status_code == 201, answer.json()
    detail = agent.client.get(f"/v1/effects/{effect_id}").json()
    expected = sorted([*detail["entries"], *detail["lease_entries"]], key=lambda e: e["seq"])
    assert answer.json()["receipt_entries"] == expected
    kinds = [e["kind"] for e in answer.json()["receipt_entries"]]
    assert kinds == ["LEASE_GRANTED", "PROPOSED", "DISPATCHED", "LEASE_REVOKED", "COMMITTED"]
