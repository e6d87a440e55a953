"""Resend past its key window is tier 3; its delivery webhooks, posted to the notary, lift it.

An agent on the notary sends through the Resend SDK to the local Resend and is SIGKILLed before
anyone recorded the answer. The local Resend posts Svix-signed email.sent / email.delivered to
the notary's endpoint, and the effect settles without a person. With the webhooks withheld, the
same crash stays in flight while the evidence window is open; past it, "not seen" counts as not
sent and the gate resends, the assumption stated on the receipt."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from gate_client.adapters.resend_email import TAG
from gate_client.faults import CrashPoint
from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries
from notary import services as notary_services
from notary.models import WAITING_FOR_A_PERSON, Effect
from testkit.agents import email_agent
from testkit.crash_matrix import set_refund_status
from testkit.factories import leased, register
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.peers.resend_server import running_resend
from testkit.processes import spawn_armed
from testkit.webhook_signing import new_secret
from webhooks import services as webhook_services

pytestmark = pytest.mark.slow
AGENT = "testkit.agents.email_agent"


def receipt_of(url: str, token: str, effect_id: str) -> dict[str, Any]:
    reply = httpx.get(
        f"{url}/v1/effects/{effect_id}/receipt", headers={"Authorization": f"Bearer {token}"}
    )
    reply.raise_for_status()
    receipt: dict[str, Any] = reply.json()["receipt"]
    return receipt


@pytest.mark.parametrize("webhooks_arrive", [True, False])
def test_a_killed_sender_is_settled_by_resends_webhooks_alone(
    transactional_db: None, tmp_path: Path, webhooks_arrive: bool
) -> None:
    tenant = notary_services.tenant_create(slug="shop", name="Shop")
    target = register(
        tenant,
        email_agent.TARGET,
        max_inflight=email_agent.TIMEOUT,
        evidence_window=email_agent.EVIDENCE_WINDOW,
    )
    _, token = notary_services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    case_id = "case-email-9"
    lease = leased(tenant, case_id, email_agent.ACTION)
    secret = new_secret("resend")
    endpoint = webhook_services.endpoint_create(
        tenant=tenant, target=target, provider="resend", secrets=[secret]
    )
    world = tmp_path / "world.json"
    set_refund_status(world, "succeeded")
    effect_id = email_agent.effect_id(case_id, tenant.slug)
    with running_notary(child_database_url(), tmp_path) as url:
        hook = f"{url}/webhooks/{endpoint.public_id}/"
        store = tmp_path / "emails.jsonl"
        with running_resend(store, webhook_url=hook, webhook_secret=secret) as resend_server:
            resend_server.set_webhooks(webhooks_arrive)
            args = ["--resend", resend_server.url, "--case", case_id, "--world", str(world)]
            args += ["--system", "interlock_notary", "--notary", url, "--notary-token", token]
            args += ["--tenant", tenant.slug, "--lease", lease.lease_id]
            killed = spawn_armed(AGENT, ["submit", *args], CrashPoint.AFTER_TARGET_ACTED)
            assert killed.returncode == -9, killed.stderr
            assert len(resend_server.emails(tag=(TAG, effect_id))) == 1

            deadline = time.monotonic() + 15
            while webhooks_arrive and time.monotonic() < deadline:
                if receipt_of(url, token, effect_id)["final_state"] != "DISPATCHED":
                    break
                time.sleep(0.2)
            # Without webhooks, recover() waits out the window (shorter than its patience).
            recovered = recover(args)
            receipt = receipt_of(url, token, effect_id)
            assert len(resend_server.emails(tag=(TAG, effect_id))) == 1  # never sent twice

    if webhooks_arrive:
        assert recovered == []  # the webhook settled it before anyone recovered
        assert receipt["final_state"] == "COMMITTED_ON_EVIDENCE"
        assert receipt["authorized_when_fired"] is True
        entries = {e.seq: e for e in iter_entries(log=tenant.log)}
        cited = entries[receipt["recheck_at_recovery"]["evidence_seq"]].body_value()
        assert cited["event_id"].startswith("msg_")
        observed = [e for e in entries.values() if e.kind == EntryKind.OBSERVED]
        assert {e.body_value()["type"] for e in observed} >= {"email.sent"}
    else:
        # It was sent, and no webhook said so: silence proves nothing. AMBIGUOUS, and nothing
        # resent (a second attempt would have rested on Resend's key alone).
        assert [r["final_state"] for r in recovered] == ["AMBIGUOUS"]
        assert receipt["final_state"] == "AMBIGUOUS"
        assert receipt["recheck_at_recovery"]["evidence"] == (
            "none within the evidence window; silence proves nothing"
        )
        kinds = [e.kind for e in iter_entries(log=tenant.log) if e.effect_id == effect_id]
        assert kinds.count(EntryKind.DISPATCHED) == 1


def test_an_email_sent_by_hand_before_the_first_dispatch_holds_the_effect_no_second_email(
    transactional_db: None, tmp_path: Path
) -> None:
    """The agent is SIGKILLed after PROPOSED; while it is down a person sends the email by hand
    with the effect's tag. Resend's Svix-signed webhooks say it was sent before anything was
    dispatched: the effect is contradicted and held, the restarted agent's recover() sends
    nothing, and a person's decision settles it. One email, never two."""
    tenant = notary_services.tenant_create(slug="shop", name="Shop")
    target = register(
        tenant,
        email_agent.TARGET,
        max_inflight=email_agent.TIMEOUT,
        evidence_window=email_agent.EVIDENCE_WINDOW,
    )
    _, token = notary_services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    case_id = "case-email-by-hand"
    lease = leased(tenant, case_id, email_agent.ACTION)
    secret = new_secret("resend")
    endpoint = webhook_services.endpoint_create(
        tenant=tenant, target=target, provider="resend", secrets=[secret]
    )
    world = tmp_path / "world.json"
    set_refund_status(world, "succeeded")
    effect_id = email_agent.effect_id(case_id, tenant.slug)
    with running_notary(child_database_url(), tmp_path) as url:
        hook = f"{url}/webhooks/{endpoint.public_id}/"
        store = tmp_path / "emails.jsonl"
        with running_resend(store, webhook_url=hook, webhook_secret=secret) as resend_server:
            args = ["--resend", resend_server.url, "--case", case_id, "--world", str(world)]
            args += ["--system", "interlock_notary", "--notary", url, "--notary-token", token]
            args += ["--tenant", tenant.slug, "--lease", lease.lease_id, "--separate-steps"]
            killed = spawn_armed(AGENT, ["submit", *args], CrashPoint.AFTER_PROPOSED)
            assert killed.returncode == -9, killed.stderr
            assert receipt_of(url, token, effect_id)["final_state"] == "PROPOSED"

            by_hand = httpx.post(
                f"{resend_server.url}/emails",
                json={
                    **email_agent.message(case_id),
                    "tags": [{"name": TAG, "value": effect_id}],
                },
                headers={"Authorization": "Bearer re_interlock_test"},
                timeout=30,
            )
            assert by_hand.status_code == 200, by_hand.text
            deadline = time.monotonic() + 60
            while not receipt_of(url, token, effect_id)["contradicted"]:
                assert time.monotonic() < deadline, "the webhooks never reached the effect"
                time.sleep(0.2)

            [held] = recover(args)
            assert len(resend_server.emails(tag=(TAG, effect_id))) == 1, "never sent twice"
            assert (held["final_state"], held.get("held_by")) == ("HELD", effect_id)
            assert (held["happened"], held["contradicted"]) == ("unknown", True)
            assert held["contradictions"][0]["kind"] == "happened_never_dispatched"
            kinds = [e.kind for e in iter_entries(log=tenant.log) if e.effect_id == effect_id]
            assert EntryKind.DISPATCHED not in kinds
            assert Effect.objects.filter(
                WAITING_FOR_A_PERSON, tenant=tenant, effect_id=effect_id
            ).exists(), "queued for a person"

            notary_services.effect_resolve(
                tenant=tenant,
                effect_id=effect_id,
                happened=True,
                reason="sent by hand during the outage; Resend shows it delivered",
                by="support lead",
            )
            assert recover(args) == []  # settled: nothing left to recover
            receipt = receipt_of(url, token, effect_id)
            assert len(resend_server.emails(tag=(TAG, effect_id))) == 1
    assert (receipt["final_state"], receipt["happened"]) == ("RESOLVED_HAPPENED", True)
    assert not receipt["contradicted"] and receipt["authorized_when_fired"] is None


def recover(args: list[str]) -> list[dict[str, Any]]:
    """A new agent process runs recover(); the receipts it printed."""
    restarted = spawn_armed(AGENT, ["recover", *args], None)
    assert restarted.returncode == 0, restarted.stderr
    return [json.loads(line) for line in restarted.stdout.splitlines()]
