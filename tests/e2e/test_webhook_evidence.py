"""Webhook evidence end to end: a tier-3 effect whose agent was SIGKILLed after the send is
settled by the provider's webhook without a person; and webhooks that arrive while Redis is down
are all stored and answered, then ingested exactly once by a real worker once Redis is back."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest

from gate_client.faults import CrashPoint
from gate_client.receipts import derive_receipt
from ledger.core.entries import EntryKind
from ledger.selectors import iter_entries
from notary import services as notary_services
from notary.models import Effect
from testkit.agents import AGENT_PROCESS
from testkit.agents.agent_process import ACTION, TARGET, effect_id
from testkit.celery_worker import running_worker
from testkit.crash_matrix import set_refund_status
from testkit.factories import INSTANT, dispatched, leased, register
from testkit.notary_server import running_notary
from testkit.paths import REPO_ROOT, child_database_url
from testkit.peers.reference_service import read_acts, running_server
from testkit.processes import spawn_armed
from testkit.redis_server import PrivateRedis
from testkit.webhook_signing import body_of, new_secret, signed_headers, stripe_refund_event
from webhooks import services as webhook_services
from webhooks.models import Ingestion, RawEvent

pytestmark = pytest.mark.slow


def http_headers(meta: dict[str, str]) -> dict[str, str]:
    return {k[5:].replace("_", "-"): v for k, v in meta.items()}


def test_a_tier_3_effect_killed_after_the_send_is_settled_by_the_webhook(
    transactional_db: None, tmp_path: Path
) -> None:
    tenant = notary_services.tenant_create(slug="mailer", name="Mailer")
    target = register(tenant, TARGET, max_inflight=timedelta(seconds=2))
    _, agent_token = notary_services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    case_id = "case-email-1"
    lease = leased(tenant, case_id, ACTION)
    secret = new_secret("standard")
    endpoint = webhook_services.endpoint_create(
        tenant=tenant,
        target=target,
        provider="standard",
        secrets=[secret],
        effect_id_path="data.interlock_effect_id",
        positive_types=["email.sent"],
        negative_types=["email.bounced"],
    )
    world = tmp_path / "world.json"
    set_refund_status(world, "succeeded")
    with (
        running_notary(child_database_url(), tmp_path) as url,
        running_server(tmp_path / "store", dedupe=False, lookup=False) as mail_service,
    ):
        gate_args = ["notary", str(world), "--tier", "3", "--max-inflight", "2"]
        gate_args += ["--notary", url, "--notary-token", agent_token]
        gate_args += ["--tenant", tenant.slug, "--lease", lease.lease_id]
        common = ["--url", mail_service.url, "--case", case_id]
        killed = spawn_armed(
            AGENT_PROCESS,
            ["submit", *gate_args, *common, "--text", "Your refund is on the way"],
            CrashPoint.AFTER_TARGET_ACTED,
        )
        assert killed.returncode == -9, killed.stderr
        effect = effect_id(case_id, tenant.slug)
        assert len(read_acts(mail_service.store, effect)) == 1  # sent; nobody recorded it

        event = {"type": "email.sent", "data": {"interlock_effect_id": effect, "id": "m_1"}}
        body = body_of(event)
        meta = signed_headers("standard", body, secret, event_id="msg_evt_1")
        posted = httpx.post(
            f"{url}/webhooks/{endpoint.public_id}/",
            content=body,
            headers={"Content-Type": "application/json", **http_headers(meta)},
        )
        assert posted.status_code == 200, posted.text

        restarted = spawn_armed(AGENT_PROCESS, ["recover", *gate_args, *common], None)
        assert restarted.returncode == 0, restarted.stderr
        assert restarted.stdout == ""  # nothing left to recover: the webhook settled it
        receipt = httpx.get(
            f"{url}/v1/effects/{effect}/receipt", headers={"Authorization": f"Bearer {agent_token}"}
        ).json()["receipt"]
    assert receipt["final_state"] == "COMMITTED_ON_EVIDENCE"
    assert receipt["happened"] is True
    assert receipt["authorized_when_fired"] is True
    entries = {e.seq: e for e in iter_entries(log=tenant.log)}
    cited = entries[receipt["recheck_at_recovery"]["evidence_seq"]]
    assert cited.kind == EntryKind.OBSERVED
    assert cited.body_value()["event_id"] == "msg_evt_1"
    assert len(read_acts(mail_service.store, effect)) == 1
    assert derive_receipt(list(entries.values()), effect).final_state == "COMMITTED_ON_EVIDENCE"


SWEEP = "from webhooks.tasks import ingest_stranded_events as t; print(t())"


def test_webhooks_arriving_while_redis_is_down_are_all_ingested_once_after(
    transactional_db: None, tmp_path: Path
) -> None:
    tenant = notary_services.tenant_create(slug="refunds", name="Refunds")
    target = register(tenant, "stripe-refunds", evidence_window=INSTANT)
    secret = new_secret("stripe")
    endpoint = webhook_services.endpoint_create(
        tenant=tenant, target=target, provider="stripe", secrets=[secret]
    )
    effects = [dispatched(tenant, "stripe-refunds", f"case-{n}") for n in range(100)]
    redis_server = PrivateRedis(tmp_path)  # never started yet: the notary's broker is down
    broker = {"REDIS_URL": redis_server.url, "CELERY_TASK_ALWAYS_EAGER": "false"}
    with (
        running_notary(child_database_url(), tmp_path, settings=broker) as url,
        httpx.Client(base_url=url, timeout=60) as client,
        ThreadPoolExecutor(8) as pool,
    ):

        def deliver(effect: str) -> int:
            body = body_of(stripe_refund_event(effect))
            meta = signed_headers("stripe", body, secret)
            headers = {"Content-Type": "application/json", **http_headers(meta)}
            path = f"/webhooks/{endpoint.public_id}/"
            return client.post(path, content=body, headers=headers).status_code

        statuses = list(pool.map(deliver, effects))
    assert statuses == [200] * 100
    assert RawEvent.objects.filter(verified=True).count() == 100
    assert not Ingestion.objects.exists()

    redis_server.start()
    try:
        with running_worker(queue="celery", WEBHOOK_INGEST_GRACE_SECONDS="0", **broker) as (
            _,
            wait,
        ):
            # The sweep queues what the outage stranded; once all is ingested, a second sweep
            # finds nothing left to queue, so no event can be ingested twice after it.
            assert sweep(broker) == 100
            wait(lambda: Ingestion.objects.count() == 100)
            assert sweep(broker) == 0
    finally:
        redis_server.kill()
    assert Ingestion.objects.count() == 100
    observed = [e for e in iter_entries(log=tenant.log) if e.kind == EntryKind.OBSERVED]
    assert sorted(e.effect_id for e in observed) == sorted(effects)  # each exactly once
    assert set(Effect.objects.filter(tenant=tenant).values_list("state", flat=True)) == {
        "COMMITTED_ON_EVIDENCE"
    }


def sweep(broker: dict[str, str]) -> int:
    """Run the stranded-events sweep in a process of its own; how many events it queued."""
    done = subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", SWEEP],
        cwd=REPO_ROOT,
        env={
            **os.environ,
            **broker,
            "DJANGO_SETTINGS_MODULE": "notary.settings",
            "DATABASE_URL": child_database_url(),
            "WEBHOOK_INGEST_GRACE_SECONDS": "0",
        },
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    return int(done.stdout.strip().splitlines()[-1])
