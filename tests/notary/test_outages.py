"""Redis going away under a serving notary: its cache and its Celery broker are a private
redis-server, SIGKILLed mid-test. Authenticated calls keep answering, bad tokens keep being
counted (per process) and throttled, and once Redis is back the counting is Redis's again."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
from django.conf import LazySettings
from django.core.cache import cache
from rest_framework.test import APIClient

from gate_client.proposal import Proposal
from notary import counters, services
from notary.authentication import auth_failures_key
from notary.models import Effect, Tenant
from testkit.factories import leased, register
from testkit.notary_server import running_notary
from testkit.paths import child_database_url
from testkit.redis_server import PrivateRedis, private_redis

BAD = "ik_0000000000000000_guess"


def eventually(condition: Callable[[], bool], what: str, *, within: float = 30) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, f"{what} within {within} s"
        time.sleep(0.05)


def redis_count(server: PrivateRedis, key: str) -> int | None:
    """What the private Redis holds for a counter, or None."""
    value = server.client().get(cache.make_key(key))
    return None if value is None else int(value)


def cache_on(url: str) -> dict[str, dict[str, object]]:
    return {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": url,
            "OPTIONS": {"socket_connect_timeout": 1, "socket_timeout": 1},
        }
    }


def outage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "notary.counters"]


@pytest.mark.django_db
def test_the_api_keeps_answering_and_throttling_while_the_cache_is_killed(
    acme: Tenant, settings: LazySettings, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 3
    _, token = services.api_key_issue(tenant=acme, role="agent", holder="bot")
    address = f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{secrets.randbelow(256)}"
    holder, guesser = APIClient(REMOTE_ADDR=address), APIClient(REMOTE_ADDR=address)
    holder.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    guesser.credentials(HTTP_AUTHORIZATION=f"Bearer {BAD}")
    key = auth_failures_key(client=address)
    with private_redis(tmp_path) as server:
        settings.CACHES = cache_on(server.url)
        assert holder.get("/v1/whoami").status_code == 200
        assert guesser.get("/v1/whoami").status_code == 401
        assert redis_count(server, key) == 1  # counted in Redis

        server.kill()
        with caplog.at_level(logging.WARNING, logger="notary.counters"):
            statuses = [guesser.get("/v1/whoami").status_code for _ in range(5)]
            answered = [holder.get("/v1/whoami").status_code for _ in range(20)]
        assert statuses == [401, 401, 401, 429, 429]  # the per-process counter throttles
        assert answered == [200] * 20
        assert counters.current(key) == 5
        warnings = outage_warnings(caplog)
        assert len(warnings) == 1, warnings  # once for the outage, not once per request
        assert "unreachable" in warnings[0]

        caplog.clear()
        server.start()  # a fresh, empty Redis on the same port
        with caplog.at_level(logging.WARNING, logger="notary.counters"):
            eventually(
                lambda: (
                    guesser.get("/v1/whoami").status_code in {401, 429}
                    and redis_count(server, key) is not None
                ),
                "the throttle counting in Redis again",
            )
            before = redis_count(server, key)
            assert before is not None
            assert guesser.get("/v1/whoami").status_code in {401, 429}
            assert redis_count(server, key) == before + 1
        assert any("reachable again" in message for message in outage_warnings(caplog))


@pytest.mark.parametrize("outage", [False, True], ids=["in Redis", "Redis killed"])
def test_counters_keep_their_windows_and_their_counts(
    settings: LazySettings, tmp_path: Path, outage: bool
) -> None:
    key = f"test:counter:{secrets.token_hex(8)}"
    with private_redis(tmp_path) as server:
        settings.CACHES = cache_on(server.url)
        if outage:
            server.kill()
        with ThreadPoolExecutor(8) as pool:
            counted = list(pool.map(lambda _: counters.count(key, window_seconds=60), range(400)))
        assert sorted(counted) == list(range(1, 401))  # no count lost or given twice
        assert counters.current(key) == 400
        if not outage:
            assert redis_count(server, key) == 400

        short = f"{key}:short"
        assert [counters.count(short, window_seconds=1) for _ in range(2)] == [1, 2]
        eventually(lambda: counters.current(short) == 0, "the 1 s window ending")
        assert counters.count(short, window_seconds=1) == 1
        if outage:
            server.start()
            eventually(lambda: counters.current(key) == 0, "the cache (empty again) answering")


@pytest.mark.slow
def test_a_live_notary_with_its_redis_killed_serves_an_effect_round_trip(
    transactional_db: None, tmp_path: Path
) -> None:
    """gunicorn with Redis as cache and Celery broker (tasks not eager), Redis SIGKILLed: the
    whole propose, dispatch, outcome, receipt round trip answers 2xx (it enqueues no task), and
    bad tokens are refused, then throttled, by the worker's own counter."""
    tenant = services.tenant_create(slug="outage", name="Outage")
    register(tenant, "refunds", tier=1, queryable=True, max_inflight=timedelta(seconds=30))
    _, token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    lease = leased(tenant, "case_1", "refund")
    proposal = Proposal(
        case_id="case_1",
        target="refunds",
        action="refund",
        payload={"amount_cents": 100},
        lease_id=lease.lease_id,
        tenant=tenant.slug,
    )
    effect_id = proposal.effect_id
    with private_redis(tmp_path) as server:
        env = {
            "REDIS_URL": server.url,
            "CELERY_TASK_ALWAYS_EAGER": "false",
            "NOTARY_AUTH_FAILURES_PER_MINUTE": "3",
        }
        with (
            running_notary(child_database_url(), tmp_path, workers=1, settings=env) as url,
            httpx.Client(base_url=url, timeout=30) as client,
        ):
            agent = {"Authorization": f"Bearer {token}"}
            bad = {"Authorization": f"Bearer {BAD}"}
            assert client.get("/v1/whoami", headers=bad).status_code == 401
            key = auth_failures_key(client="127.0.0.1")
            assert redis_count(server, key) == 1

            server.kill()
            assert client.get("/v1/whoami", headers=agent).status_code == 200
            proposed = client.post(
                "/v1/effects",
                json={"effect_id": effect_id, "proposal": proposal.proposed_body([])},
                headers=agent,
            )
            assert proposed.status_code == 201, proposed.text
            dispatched = client.post(
                f"/v1/effects/{effect_id}/dispatch",
                json={"attempt": 1, "premises": []},
                headers=agent,
            )
            assert dispatched.status_code == 201, dispatched.text
            outcome = {"state": "COMMITTED", "attempt": 1, "result_ref": "re_1", "recheck": None}
            committed = client.post(
                f"/v1/effects/{effect_id}/outcome",
                json={"kind": "COMMITTED", "body": outcome},
                headers=agent,
            )
            assert committed.status_code == 201, committed.text
            receipt = client.get(f"/v1/effects/{effect_id}/receipt", headers=agent)
            assert receipt.status_code == 200, receipt.text
            assert receipt.json()["receipt"]["final_state"] == "COMMITTED"
            statuses = [client.get("/v1/whoami", headers=bad).status_code for _ in range(5)]
            assert statuses == [401, 401, 401, 429, 429]

            server.start()
            eventually(
                lambda: (
                    client.get("/v1/whoami", headers=bad).status_code in {401, 429}
                    and redis_count(server, key) is not None
                ),
                "the live notary counting in Redis again",
            )
    assert Effect.objects.get(effect_id=effect_id).state == "COMMITTED"
    log = (tmp_path / "gunicorn.log").read_text()
    assert log.count("cache unreachable") == 1, log
    assert "Internal Server Error" not in log
