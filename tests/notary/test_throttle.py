"""The failed-authentication throttle and the counters under it: failures count per client
address (through trusted proxies only), a valid key always gets through, and a counter's window
ends on time."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time

import pytest
from django.conf import LazySettings
from django.core.cache import cache
from rest_framework.test import APIClient

from notary import counters, services
from notary.authentication import auth_failures_key
from notary.client_address import client_address, client_throttle_key
from notary.models import Tenant
from testkit.paths import REPO_ROOT

pytestmark = pytest.mark.django_db

PROXY = "192.0.2.10"  # TEST-NET-1: the trusted proxies' network below
TRUSTED = ["192.0.2.0/24", "2001:db8:ffff::/48"]


def random_address() -> str:
    """An address no other test (nor an earlier run within the minute) counted failures for."""
    return f"10.{secrets.randbelow(256)}.{secrets.randbelow(256)}.{secrets.randbelow(256)}"


def whoami(token: str, remote_addr: str, forwarded_for: str | None = None) -> int:
    client = APIClient(REMOTE_ADDR=remote_addr)
    if forwarded_for is not None:
        client.defaults["HTTP_X_FORWARDED_FOR"] = forwarded_for
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client.get("/v1/whoami").status_code


BAD = "ik_0000000000000000_guess"


def test_an_address_that_keeps_failing_is_throttled_then_let_back(
    acme: Tenant, settings: LazySettings
) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 3
    address = random_address()
    guesser = APIClient(REMOTE_ADDR=address)
    guesser.credentials(HTTP_AUTHORIZATION=f"Bearer {BAD}")
    assert [guesser.get("/v1/whoami").status_code for _ in range(3)] == [401, 401, 401]
    throttled = guesser.get("/v1/whoami")
    assert throttled.status_code == 429
    assert throttled.json()["error"] == "throttled"
    assert throttled.json()["detail"].startswith("too many failed authentications")
    assert throttled["Retry-After"] == "60"
    assert whoami(BAD, "10.255.255.254") == 401  # another address is not throttled
    cache.delete(auth_failures_key(client=address))  # the minute passes
    assert guesser.get("/v1/whoami").status_code == 401


def test_a_valid_key_gets_through_from_an_address_with_many_failures(
    acme: Tenant, settings: LazySettings
) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 20
    _, token = services.api_key_issue(tenant=acme, role="agent", holder="bot")
    address = random_address()
    statuses = [whoami(f"ik_{secrets.token_hex(8)}_guess", address) for _ in range(25)]
    assert statuses == [401] * 20 + [429] * 5
    assert whoami(token, address) == 200  # the key's holder is not refused for the guesser
    # ...and the guesser stays throttled: the valid key reset nothing.
    assert whoami(BAD, address) == 429
    assert counters.current(auth_failures_key(client=address)) == 26


def test_a_wrong_secret_for_a_real_key_is_a_failure_like_any_other(
    acme: Tenant, settings: LazySettings
) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 2
    api_key, token = services.api_key_issue(tenant=acme, role="agent", holder="bot")
    address = random_address()
    wrong = f"ik_{api_key.key_id}_{'0' * 43}"
    assert [whoami(wrong, address) for _ in range(3)] == [401, 401, 429]
    assert whoami(token, address) == 200


def test_failures_behind_a_trusted_proxy_count_per_client_address(
    acme: Tenant, settings: LazySettings
) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 3
    settings.NOTARY_TRUSTED_PROXIES = TRUSTED
    _, token = services.api_key_issue(tenant=acme, role="agent", holder="bot")
    proxy = f"192.0.2.{secrets.randbelow(256)}"
    alice, bob = random_address(), random_address()
    # Alice forges a new leftmost hop each time, and goes through two proxies: the hop the
    # second proxy saw is hers whatever she wrote before it.
    forged = [f"{random_address()}, {alice}, 192.0.2.11" for _ in range(5)]
    assert [whoami(BAD, proxy, hops) for hops in forged] == [401, 401, 401, 429, 429]
    assert counters.current(auth_failures_key(client=alice)) == 5
    assert counters.current(auth_failures_key(client=proxy)) == 0
    assert whoami(BAD, proxy, bob) == 401  # the same proxy, another client
    assert whoami(token, proxy, bob) == 200
    assert whoami(token, proxy, alice) == 200


def test_an_untrusted_peers_forwarded_for_is_ignored(acme: Tenant, settings: LazySettings) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 3
    settings.NOTARY_TRUSTED_PROXIES = TRUSTED
    peer = random_address()
    rotating = [whoami(BAD, peer, random_address()) for _ in range(5)]
    assert rotating == [401, 401, 401, 429, 429]
    assert counters.current(auth_failures_key(client=peer)) == 5


def test_with_no_trusted_proxies_the_header_is_never_read(
    acme: Tenant, settings: LazySettings
) -> None:
    settings.NOTARY_AUTH_FAILURES_PER_MINUTE = 3
    settings.NOTARY_TRUSTED_PROXIES = []
    proxy = random_address()
    assert [whoami(BAD, proxy, random_address()) for _ in range(4)] == [401, 401, 401, 429]


@pytest.mark.parametrize(
    ("remote_addr", "forwarded_for", "client"),
    [
        ("198.51.100.7", None, "198.51.100.7"),
        ("198.51.100.7", "203.0.113.9", "198.51.100.7"),  # not a proxy: the header is ignored
        (PROXY, None, PROXY),  # a proxy that names no one is the client
        (PROXY, "203.0.113.9", "203.0.113.9"),
        (PROXY, " 1.1.1.1 ,203.0.113.9 , 192.0.2.99", "203.0.113.9"),  # right to left
        (PROXY, "192.0.2.1, 192.0.2.2", "192.0.2.1"),  # proxies all the way: the leftmost
        (PROXY, "203.0.113.9, not-an-address", PROXY),  # nothing left of garbage is trusted
        (PROXY, "203.0.113.9, 192.0.2.3, ", PROXY),  # an empty hop is garbage too
        ("::ffff:192.0.2.10", "203.0.113.9", "203.0.113.9"),  # IPv4-mapped peer
        ("2001:db8:ffff::1", "2001:db8:1:2::5", "2001:db8:1:2::5"),
        ("", "203.0.113.9", ""),
        ("unix:/run/gunicorn.sock", "203.0.113.9", "unix:/run/gunicorn.sock"),
    ],
)
def test_the_client_address(
    settings: LazySettings, remote_addr: str, forwarded_for: str | None, client: str
) -> None:
    settings.NOTARY_TRUSTED_PROXIES = TRUSTED
    meta = {"REMOTE_ADDR": remote_addr}
    if forwarded_for is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded_for
    assert client_address(meta=meta) == client


def test_an_ipv6_client_is_counted_by_its_slash_64() -> None:
    one = client_throttle_key(meta={"REMOTE_ADDR": "2001:db8:1:2::5"})
    other = client_throttle_key(meta={"REMOTE_ADDR": "2001:db8:1:2:aaaa:bbbb:cccc:dddd"})
    assert one == other == "2001:db8:1:2::/64"
    assert client_throttle_key(meta={"REMOTE_ADDR": "2001:db8:1:3::5"}) != one
    assert client_throttle_key(meta={"REMOTE_ADDR": "198.51.100.7"}) == "198.51.100.7"


def test_a_bad_trusted_proxies_setting_stops_the_notary_from_starting() -> None:
    started = subprocess.run(
        [sys.executable, "-c", "import notary.settings"],
        cwd=REPO_ROOT,
        env={**os.environ, "NOTARY_TRUSTED_PROXIES": "10.0.0.0/8, proxy.internal"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert started.returncode != 0
    assert "NOTARY_TRUSTED_PROXIES: 'proxy.internal' is not a CIDR" in started.stderr


def test_a_counter_counts_in_its_window_and_starts_again_after_it() -> None:
    key = f"test:counter:{secrets.token_hex(8)}"
    assert counters.current(key) == 0
    assert [counters.count(key, window_seconds=1) for _ in range(3)] == [1, 2, 3]
    assert counters.current(key) == 3
    deadline = time.monotonic() + 30
    while counters.current(key) != 0:
        assert time.monotonic() < deadline, "the window did not end"
        time.sleep(0.05)
    assert counters.count(key, window_seconds=1) == 1
