"""The Resend email target, driven by the official SDK against the local Resend; the ground truth
is that server's own store of the emails it really sent."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import resend

from gate_client.adapters.resend_email import TAG, ResendEmail
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.targets import FailedDefinitively, Found, NotFound, Sent, Unknown
from testkit.agents import email_agent
from testkit.crash_matrix import set_refund_status
from testkit.peers.resend_server import RunningResend, running_resend
from testkit.processes import spawn_armed

AGENT = "testkit.agents.email_agent"


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
