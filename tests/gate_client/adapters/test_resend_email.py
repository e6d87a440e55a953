"""The Resend email target, driven by the official SDK against the local Resend; the ground truth
is that server's own store of the emails it really sent."""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import resend

from gate_client.adapters.declarations import INFLIGHT_MARGIN
from gate_client.adapters.resend_email import (
    RESEND_KEY_WINDOW,
    TAG,
    ResendEmail,
    client_request_bound,
)
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.protocol import Mode, TargetDeclaration, asking_mode
from gate_client.targets import FailedDefinitively, Found, InDoubt, NotFound, Sent, Tier, Unknown
from testkit.agents import email_agent
from testkit.crash_matrix import set_refund_status
from testkit.peers.resend_server import RunningResend, running_resend
from testkit.processes import spawn_armed

AGENT = "testkit.agents.email_agent"
SilentPeer = tuple[str, list[socket.socket]]  # conftest's silent_peer: its URL, its connections


@pytest.fixture
def sdk() -> Iterator[None]:
    """The SDK's module globals, restored after the test."""
    saved = (resend.api_key, resend.api_url, resend.default_http_client)
    yield
    resend.api_key, resend.api_url, resend.default_http_client = saved


@pytest.fixture
def server(tmp_path: Path) -> Iterator[RunningResend]:
    with running_resend(tmp_path / "emails.jsonl") as running:
        yield running


def target(server: RunningResend, **declared: Any) -> ResendEmail:
    return ResendEmail(api_key="re_test", api_url=server.url, **declared)


def test_send_keys_and_tags_the_email_and_a_resend_replays_it(
    sdk: None, server: RunningResend
) -> None:
    email = target(server)
    first = email.send("eff_a", email_agent.message("case-a"))
    again = email.send("eff_a", email_agent.message("case-a"))
    assert isinstance(first, Sent) and again == first
    [sent] = server.emails()
    assert sent["id"] == first.result_ref
    assert sent["idempotency_key"] == "eff_a"
    assert {"name": TAG, "value": "eff_a"} in sent["tags"]


def test_the_probe_answers_without_sending(sdk: None, server: RunningResend) -> None:
    email = target(server, probe_from=email_agent.PROBE_FROM)
    assert email.queryable
    payload = email_agent.message("case-p")
    assert email.lookup("eff_p", payload) == NotFound()
    assert server.emails() == []
    email.send("eff_p", payload)
    assert email.lookup("eff_p", payload) == Found("idempotency-key:eff_p")
    assert len(server.emails()) == 1


def test_a_probe_sender_resend_would_send_from_is_given_up(
    sdk: None, server: RunningResend
) -> None:
    email = target(server, probe_from="support@example.com")  # a verified domain
    answer = email.lookup("eff_q", email_agent.message("case-q"))
    assert isinstance(answer, Unknown) and "verified" in answer.reason
    assert not email.queryable and email.probe_from is None
    assert isinstance(email.lookup("eff_q", email_agent.message("case-q")), Unknown)


def test_refusals_resend_keeps_are_definitive(sdk: None, server: RunningResend) -> None:
    email = target(server)
    email.send("eff_b", email_agent.message("case-b"))
    reused = email.send("eff_b", {**email_agent.message("case-b"), "subject": "Another"})
    assert reused == FailedDefinitively("invalid_idempotent_request")
    unverified = {**email_agent.message("case-c"), "from": "a@elsewhere.example"}
    assert email.send("eff_c", unverified) == FailedDefinitively("validation_error")
    assert len(server.emails()) == 1


# The seed's email table (seeds/001), in CI size: what each declaration of Resend answers.
SEED_TABLE = {
    "interlock": {
        "crash_after_send": "COMMITTED_BY_RETRY",
        "refused_before_send": "REFUSED:stale_premise_at_recovery",
        "refused_after_send": "COMMITTED_ON_QUERY",
    },
    "interlock_noprobe": {
        "crash_after_send": "COMMITTED_BY_RETRY",
        "refused_before_send": "AMBIGUOUS",
        "refused_after_send": "AMBIGUOUS",
    },
    "interlock_tier3": {
        "crash_after_send": "AMBIGUOUS",
        "refused_before_send": "AMBIGUOUS",
        "refused_after_send": "AMBIGUOUS",
    },
}
FAULTS = {  # crash point, the refund's status during the outage, emails wanted
    "crash_after_send": (CrashPoint.AFTER_TARGET_ACTED, "succeeded", 1),
    "refused_before_send": (CrashPoint.AFTER_DISPATCHED, "failed", 0),
    "refused_after_send": (CrashPoint.AFTER_TARGET_ACTED, "failed", 1),
}


def prepare(tmp_path: Path, case_id: str) -> tuple[Path, Path]:
    """The case's world (its refund succeeded) and a journal holding its approved lease."""
    world, journal = tmp_path / f"{case_id}.world", tmp_path / f"{case_id}.journal"
    set_refund_status(world, "succeeded")
    expires = datetime.now(UTC) + timedelta(hours=1)
    lease = Lease(email_agent.LEASE_ID, case_id, email_agent.ACTION, expires, "support")
    LocalJournal(journal).grant_lease(lease)
    return world, journal


def gate_args(server: RunningResend, tmp_path: Path, case_id: str, system: str) -> list[str]:
    world, journal = prepare(tmp_path, case_id)
    args = ["--resend", server.url, "--case", case_id, "--world", str(world)]
    return [*args, "--system", system, "--journal", str(journal)]


def recovered(args: list[str]) -> list[str]:
    """A new process recovers; the final states it reports."""
    restarted = spawn_armed(AGENT, ["recover", *args], None)
    assert restarted.returncode == 0, restarted.stderr
    return [json.loads(line)["final_state"] for line in restarted.stdout.splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize("fault", list(FAULTS))
@pytest.mark.parametrize("system", list(SEED_TABLE))
def test_the_seed_email_table(
    server: RunningResend, tmp_path: Path, system: str, fault: str
) -> None:
    case_id = f"case-{system}-{fault}"
    crash, status_during_outage, _ = FAULTS[fault]
    args = gate_args(server, tmp_path, case_id, system)
    assert spawn_armed(AGENT, ["submit", *args], crash).returncode == -9
    set_refund_status(tmp_path / f"{case_id}.world", status_during_outage)
    assert recovered(args) == [SEED_TABLE[system][fault]]
    sent = server.emails(tag=(TAG, email_agent.effect_id(case_id)))
    assert len(sent) == FAULTS[fault][2], "Resend holds what the fault wants, whatever we answer"


@pytest.mark.slow
def test_past_the_key_window_the_gate_stops_resending_and_a_plain_retry_does_not(
    tmp_path: Path,
) -> None:
    """The key is forgotten after its window (shortened to 1 s here): the plain retry under the
    same key then sends a second email, while the gate counts Resend as tier 3 and asks a person."""
    with running_resend(tmp_path / "emails.jsonl", key_window_seconds=1) as server:
        plain = ["plain", "--resend", server.url, "--case", "case-plain"]
        assert spawn_armed(AGENT, plain, CrashPoint.AFTER_TARGET_ACTED).returncode == -9
        time.sleep(1.2)
        assert spawn_armed(AGENT, plain, None).returncode == 0
        assert (
            len(server.emails(tag=None, idempotency_key=email_agent.effect_id("case-plain"))) == 2
        )

        args = [*gate_args(server, tmp_path, "case-gate", "interlock"), "--key-window", "1"]
        assert spawn_armed(AGENT, ["submit", *args], CrashPoint.AFTER_TARGET_ACTED).returncode == -9
        time.sleep(1.2)
        assert recovered(args) == ["AMBIGUOUS"]
        assert len(server.emails(tag=(TAG, email_agent.effect_id("case-gate")))) == 1


# --- its own configuration, and a declaration that follows from its client and its tier ---------


def test_two_targets_with_different_keys_and_urls_each_use_their_own(
    sdk: None, server: RunningResend, tmp_path: Path
) -> None:
    """The local Resend does not store the key a request came with, but it refuses one that is
    not a Resend key (403 invalid_api_key): one target with a valid key and one with such a key,
    used in turn in one process, show each request carries its own target's key. The SDK's
    globals point nowhere and stay as they were."""
    resend.api_key, resend.api_url = "re_global", "http://127.0.0.1:9"  # nothing listens there
    with running_resend(tmp_path / "other.jsonl") as other:
        first = ResendEmail(api_key="re_first", api_url=server.url)
        second = ResendEmail(api_key="re_second", api_url=other.url)
        refused = ResendEmail(api_key="sk_not_a_resend_key", api_url=server.url)
        assert isinstance(first.send("eff_1", email_agent.message("case-1")), Sent)
        assert refused.send("eff_2", email_agent.message("case-2")) == FailedDefinitively(
            "invalid_api_key"
        )
        assert isinstance(second.send("eff_3", email_agent.message("case-3")), Sent)
        assert isinstance(first.send("eff_4", email_agent.message("case-4")), Sent)
        assert [e["idempotency_key"] for e in server.emails()] == ["eff_1", "eff_4"]
        assert [e["idempotency_key"] for e in other.emails()] == ["eff_3"]
    assert (resend.api_key, resend.api_url) == ("re_global", "http://127.0.0.1:9")


def test_what_it_is_not_given_it_takes_from_the_sdk_once(sdk: None, server: RunningResend) -> None:
    """As the agents configure it: the SDK's globals, read when the target is made."""
    resend.api_key, resend.api_url = "re_from_the_sdk", server.url
    resend.default_http_client = resend.RequestsClient(timeout=2)
    email = ResendEmail()
    assert email.max_inflight == timedelta(seconds=2 + 2) + INFLIGHT_MARGIN
    resend.api_key, resend.api_url = "sk_changed_later", "http://127.0.0.1:9"
    assert isinstance(email.send("eff_sdk", email_agent.message("case-sdk")), Sent)
    resend.api_key = None
    with pytest.raises(TypeError, match="api_key"):
        ResendEmail()


def test_max_inflight_follows_the_http_clients_timeout(sdk: None) -> None:
    """The SDK sends once; requests takes the timeout as both connect and read timeout."""

    def with_client(client: resend.HTTPClient) -> ResendEmail:
        return ResendEmail(api_key="re_test", http_client=client)

    assert with_client(resend.RequestsClient()).max_inflight == timedelta(seconds=65)
    assert with_client(resend.RequestsClient(timeout=7)).max_inflight == timedelta(seconds=19)
    slow = with_client(resend.RequestsClient(timeout=45))
    assert slow.max_inflight > timedelta(seconds=90), "a fixed 30 s would end mid-request"
    assert TargetDeclaration.of(slow).max_inflight == slow.max_inflight


class Hushed(resend.HTTPClient):
    """An HTTP client of one's own: the SDK knows nothing of its timeout."""

    def request(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        json: dict[str, object] | list[object] | None = None,
        files: dict[str, Any] | None = None,
        data: dict[str, str] | None = None,
    ) -> tuple[bytes, int, Mapping[str, str]]:
        raise ConnectionError("unreachable")


def test_an_http_client_whose_timeout_the_sdk_does_not_expose_needs_max_inflight(
    sdk: None,
) -> None:
    with pytest.raises(TypeError, match=r"Hushed.*give max_inflight="):
        ResendEmail(api_key="re_test", http_client=Hushed())
    email = ResendEmail(api_key="re_test", http_client=Hushed(), max_inflight=timedelta(seconds=9))
    assert email.max_inflight == timedelta(seconds=9)
    with pytest.raises(InDoubt, match="HttpClientError"):  # its failure: the SDK's safety net
        email.send("eff_h", email_agent.message("case-h"))


def test_the_derived_bound_covers_a_request_that_never_answers(
    sdk: None, silent_peer: SilentPeer
) -> None:
    url, connections = silent_peer
    email = ResendEmail(api_key="re_test", api_url=url, http_client=resend.RequestsClient(1))
    started = time.monotonic()
    with pytest.raises(InDoubt):
        email.send("eff_hang", email_agent.message("case-hang"))
    took = timedelta(seconds=time.monotonic() - started)
    assert len(connections) == 1, "the SDK never retries"
    assert took <= client_request_bound(email.http_client) == email.max_inflight - INFLIGHT_MARGIN


def test_the_declaration_follows_from_the_tier(sdk: None, server: RunningResend) -> None:
    probing = target(server, probe_from=email_agent.PROBE_FROM, queryable=True)
    assert (probing.queryable, probing.lookup_needs_key) == (True, True)
    assert probing.key_window == RESEND_KEY_WINDOW
    keyed = target(server, queryable=False)
    assert (keyed.queryable, keyed.lookup_needs_key, keyed.key_window) == (
        False,
        False,
        RESEND_KEY_WINDOW,
    )
    tier3 = target(server, tier=Tier.NEITHER)
    assert (tier3.queryable, tier3.key_window, tier3.lookup_needs_key) == (False, None, False)
    assert asking_mode(TargetDeclaration.of(tier3)) == Mode.NOTHING_TO_ASK
    evidence = target(server, tier=Tier.NEITHER, evidence_window=timedelta(minutes=5))
    assert asking_mode(TargetDeclaration.of(evidence)) == Mode.EVIDENCE


@pytest.mark.parametrize(
    ("declared", "contradiction"),
    [
        ({"tier": Tier.NEITHER, "key_window": RESEND_KEY_WINDOW}, "tier 3 cannot have key_win"),
        ({"tier": Tier.NEITHER, "probe_from": email_agent.PROBE_FROM}, "tier 3 .* probe_from="),
        ({"tier": Tier.NEITHER, "queryable": True}, "tier 3 .* queryable=True"),
        ({"tier": Tier.LOOKUP, "probe_from": email_agent.PROBE_FROM}, "cannot be tier 2"),
        ({"queryable": True}, "queryable=True with probe_from=None"),
        ({"queryable": False, "probe_from": email_agent.PROBE_FROM}, "queryable=False with"),
        ({"key_window": None}, "key_window=None .* forgets a key"),
    ],
)
def test_arguments_that_contradict_the_tier_are_refused(
    sdk: None, server: RunningResend, declared: dict[str, Any], contradiction: str
) -> None:
    with pytest.raises(TypeError, match=contradiction):
        target(server, **declared)
