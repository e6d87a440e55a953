"""The Temporal adapter, run under ActivityEnvironment against the reference service process and
a LocalJournal file.

Attempt 1 runs the activity in a child process that SIGKILLs itself at a crash point: a worker
that died mid-activity. Attempts 2 and 3 run it again as Temporal would once that attempt timed
out: the same workflow and activity, the next attempt number, a fresh worker (a new Gate over
the journal file opened anew). What the service did is read from its own store, never from the
journal. ActivityEnvironment supplies the activity's context (info, heartbeat, cancellation) but
no server: what Temporal then does with a result or an error (retry or not, the workflow's
ActivityError) is checked only as far as its converters, which the tests run.
The child is testkit.agents.temporal_worker."""

from __future__ import annotations

import dataclasses
import itertools
import json
import secrets
import socket
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack, closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from temporalio.api.failure.v1 import Failure
from temporalio.converter import DataConverter
from temporalio.exceptions import ApplicationError, CancelledError
from temporalio.testing import ActivityEnvironment

from gate_client.adapters.temporal import (
    activity_case_id,
    heartbeating_sleep,
)
from gate_client.faults import CrashPoint
from gate_client.http_target import HttpTarget
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.receipts import Receipt, derive_receipt, verify_receipt
from gate_client.targets import SendOutcome, Tier
from testkit.agents.temporal_worker import (
    ACTION,
    LEASE_ID,
    MAX_INFLIGHT_SECONDS,
    ORIGIN,
    SERVICES,
    TARGET,
    TEXT,
    RefundActivities,
    activity_env,
)
from testkit.peers.reference_service import RunningServer, running_server
from testkit.processes import spawn_armed


@dataclasses.dataclass
class Case:
    """One workflow's refund email: its journal, its service, its lease."""

    tier: Tier
    server: RunningServer
    journal_path: Path
    workflow_id: str

    @property
    def effect_id(self) -> str:
        return Proposal(self.workflow_id, TARGET, ACTION, {}, LEASE_ID).effect_id

    def crash_first_attempt(self, crash: CrashPoint) -> str:
        """Attempt 1 in a worker process that dies at `crash`; the effect id it proposed."""
        worker = spawn_armed(
            "testkit.agents.temporal_worker",
            [
                str(self.journal_path),
                self.server.url,
                "--tier",
                str(self.tier.value),
                "--workflow-id",
                self.workflow_id,
                "--attempt",
                "1",
                "--text",
                TEXT,
            ],
            crash,
        )
        assert worker.returncode == -9, worker.stderr
        [line] = [json.loads(line) for line in worker.stdout.splitlines()]
        effect_id: str = line["effect_id"]
        return effect_id

    def attempt(
        self,
        attempt: int,
        *,
        url: str | None = None,
        heartbeats: list[float] | None = None,
        env: ActivityEnvironment | None = None,
    ) -> tuple[dict[str, Any], str]:
        """Run attempt `attempt` in this process on a freshly started worker: (result, effect
        id proposed). An ApplicationError is what the activity raised."""
        proposed: list[str] = []
        env = env or activity_env(self.workflow_id, attempt)
        if heartbeats is not None:
            env.on_heartbeat = lambda *details: heartbeats.append(time.monotonic())
        worker = RefundActivities(self.journal_path, url or self.server.url, self.tier)
        worker.on_proposal = lambda proposal: proposed.append(proposal.effect_id)
        with closing(worker):
            result = env.run(worker.send_refund_email, TEXT)
        return result, proposed[0]

    def acts(self) -> list[dict[str, Any]]:
        return self.server.acts(self.effect_id)

    def entries(self) -> int:
        journal = LocalJournal(self.journal_path)
        with closing(journal):
            return len(journal.entries())

    def receipt(self) -> Receipt:
        journal = LocalJournal(self.journal_path)
        with closing(journal):
            return derive_receipt(journal.entries(), self.effect_id)

    def verify(self, data: dict[str, Any]) -> None:
        receipt = Receipt(**{**data, "entry_seqs": tuple(data["entry_seqs"])})
        journal = LocalJournal(self.journal_path)
        with closing(journal):
            verify_receipt(receipt, journal.entries(), origin=ORIGIN)


def as_the_workflow_receives(value: Any) -> Any:
    """An activity result through Temporal's default payload converter and back."""
    converter = DataConverter.default.payload_converter
    [decoded] = converter.from_payloads(converter.to_payloads([value]))
    return decoded


def as_the_workflow_sees(error: ApplicationError) -> BaseException:
    """An activity's error through Temporal's default failure converter and back."""
    converter = DataConverter.default
    failure = Failure()
    converter.failure_converter.to_failure(error, converter.payload_converter, failure)
    return converter.failure_converter.from_failure(failure, converter.payload_converter)


def closed_port_url() -> str:
    """A URL nothing listens on: every request is refused, so the gate cannot tell."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[Tier, RunningServer]]:
    directory = tmp_path_factory.mktemp("temporal_services")
    with ExitStack() as stack:
        yield {
            tier: stack.enter_context(
                running_server(
                    directory / f"tier{tier.value}.store",
                    dedupe=kind["dedupe"],
                    lookup=kind["lookup"],
                )
            )
            for tier, kind in SERVICES.items()
        }


@pytest.fixture
def make_case(
    services: dict[Tier, RunningServer], tmp_path: Path, request: pytest.FixtureRequest
) -> Callable[[Tier], Case]:
    def make(tier: Tier) -> Case:
        # The services outlive the test: a workflow id of its own keeps its effect its own.
        workflow_id = f"refund-{secrets.token_hex(4)}-{request.node.name}"
        journal_path = tmp_path / f"tier{tier.value}.journal"
        journal = LocalJournal(journal_path)
        with closing(journal):
            expires = datetime.now(UTC) + timedelta(hours=1)
            journal.grant_lease(Lease(LEASE_ID, workflow_id, ACTION, expires, "support"))
        return Case(tier, services[tier], journal_path, workflow_id)

    return make


# --- the case id and the heartbeating sleep, no processes -----------------------------------------


def test_every_attempt_of_an_activity_proposes_the_same_effect() -> None:
    def effect_id() -> str:
        return Proposal(activity_case_id(), TARGET, ACTION, {}, LEASE_ID).effect_id

    ids = {activity_env("refund-42", attempt).run(effect_id) for attempt in (1, 2, 7)}
    assert len(ids) == 1
    # A new run of the same workflow id (continue-as-new, a reset) is still the same case.
    assert activity_env("refund-42", 1, run_id="run-2").run(effect_id) in ids
    assert activity_env("refund-43", 1).run(effect_id) not in ids

    standalone = ActivityEnvironment()
    standalone.info = dataclasses.replace(standalone.info, activity_id="act-9", workflow_id=None)
    assert standalone.run(activity_case_id) == "act-9"
    with pytest.raises(RuntimeError, match="inside a Temporal activity"):
        activity_case_id()


def test_heartbeating_sleep_beats_within_the_timeout_and_outside_an_activity_only_sleeps() -> None:
    beats: list[float] = []
    env = activity_env("refund-44", 1, heartbeat_timeout=1.0)  # a beat every 0.5 s at most
    env.on_heartbeat = lambda *details: beats.append(time.monotonic())
    started = time.monotonic()
    env.run(heartbeating_sleep, 1.2)
    assert time.monotonic() - started >= 1.2
    gaps = [b - a for a, b in itertools.pairwise([started, *beats])]
    assert len(beats) >= 3 and max(gaps) < 1.0  # never a heartbeat timeout's silence

    started = time.monotonic()
    heartbeating_sleep(0.05)
    assert time.monotonic() - started >= 0.05


# --- attempts after a worker died, against the service process ------------------------------------

RECOVERED_AFTER_IT_ACTED = {
    Tier.DEDUPES: "COMMITTED_BY_RETRY",  # resent under the same key; the service replayed
    Tier.LOOKUP: "COMMITTED_ON_QUERY",  # looked up and found; not resent
}


@pytest.mark.slow
@pytest.mark.parametrize("tier", list(RECOVERED_AFTER_IT_ACTED), ids=lambda t: f"tier{t.value}")
def test_the_retry_of_an_attempt_killed_after_the_service_acted_commits_and_it_acted_once(
    make_case: Callable[[Tier], Case], tier: Tier
) -> None:
    case = make_case(tier)
    first = case.crash_first_attempt(CrashPoint.AFTER_TARGET_ACTED)
    assert len(case.acts()) == 1  # it acted; the worker died before recording it

    result, second = case.attempt(2)
    assert second == first == case.effect_id
    assert result["receipt"]["final_state"] == RECOVERED_AFTER_IT_ACTED[tier]
    assert result["receipt"]["happened"] is True
    [act] = case.acts()
    assert result["result_ref"] == act["result_ref"]
    assert act["idempotency_key"] == first
    case.verify(result["receipt"])
    assert as_the_workflow_receives(result) == json.loads(json.dumps(result))

    # Attempt 3 (the workflow lost attempt 2's answer): the same receipt, and nothing is sent.
    entries = case.entries()
    third, effect = case.attempt(3)
    assert (third, effect) == (result, first)
    assert len(case.acts()) == 1 and case.entries() == entries


@pytest.mark.slow
def test_tier3_the_retry_is_ambiguous_not_retryable_and_never_resends(
    make_case: Callable[[Tier], Case],
) -> None:
    case = make_case(Tier.NEITHER)
    first = case.crash_first_attempt(CrashPoint.AFTER_TARGET_ACTED)

    with pytest.raises(ApplicationError) as raised:
        case.attempt(2)
    error = raised.value
    assert (error.type, error.non_retryable) == ("AMBIGUOUS", True)
    [receipt] = error.details
    assert receipt["effect_id"] == first
    assert (receipt["final_state"], receipt["happened"]) == ("AMBIGUOUS", "unknown")
    assert len(case.acts()) == 1
    case.verify(receipt)
    seen = as_the_workflow_sees(error)
    assert isinstance(seen, ApplicationError)
    assert (seen.type, seen.non_retryable) == ("AMBIGUOUS", True)
    assert list(seen.details) == [json.loads(json.dumps(receipt))]

    # Should a retry policy run it again anyway: the same verdict, still never resent.
    entries = case.entries()
    with pytest.raises(ApplicationError) as again:
        case.attempt(3)
    assert (again.value.type, again.value.non_retryable) == ("AMBIGUOUS", True)
    assert again.value.details == error.details
    assert len(case.acts()) == 1 and case.entries() == entries


@pytest.mark.slow
def test_a_lease_revoked_between_attempts_is_refused_at_recovery_and_nothing_is_sent(
    make_case: Callable[[Tier], Case],
) -> None:
    case = make_case(Tier.LOOKUP)
    first = case.crash_first_attempt(CrashPoint.AFTER_DISPATCHED)  # the request never left
    journal = LocalJournal(case.journal_path)
    with closing(journal):
        journal.revoke_lease(LEASE_ID, by="support", reason="customer cancelled")

    beats: list[float] = []
    with pytest.raises(ApplicationError) as raised:
        case.attempt(2, heartbeats=beats)
    error = raised.value
    assert (error.type, error.non_retryable) == ("REFUSED", True)
    [receipt] = error.details
    assert receipt["effect_id"] == first
    assert receipt["final_state"] == "REFUSED:lease_revoked_at_recovery"
    assert receipt["happened"] is False
    assert case.acts() == []
    assert beats  # "not found" was trusted only after max_inflight, heartbeating meanwhile
    case.verify(receipt)


@pytest.mark.slow
def test_a_recovery_that_waits_out_max_inflight_keeps_heartbeating(
    make_case: Callable[[Tier], Case],
) -> None:
    case = make_case(Tier.LOOKUP)
    case.crash_first_attempt(CrashPoint.AFTER_DISPATCHED)
    killed = time.monotonic()

    beats: list[float] = []
    env = activity_env(case.workflow_id, 2, heartbeat_timeout=0.4)
    result, _ = case.attempt(2, heartbeats=beats, env=env)
    finished = time.monotonic()
    # Not found, and conclusive only once max_inflight had passed: then resent, once.
    assert result["receipt"]["final_state"] == "COMMITTED_BY_RETRY"
    assert len(case.acts()) == 1
    assert finished - killed >= MAX_INFLIGHT_SECONDS * 0.9
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert len(beats) >= 3 and max(gaps) < 0.4  # never a heartbeat timeout's silence


@pytest.mark.slow
def test_a_target_still_in_doubt_is_a_retryable_error_and_the_next_attempt_recovers_it(
    make_case: Callable[[Tier], Case],
) -> None:
    case = make_case(Tier.DEDUPES)
    with pytest.raises(ApplicationError) as raised:
        case.attempt(1, url=closed_port_url())  # the service is down: sent, resent, no answer
    error = raised.value
    assert (error.type, error.non_retryable) == ("DISPATCHED", False)
    [receipt] = error.details
    assert receipt["happened"] == "unknown"
    seen = as_the_workflow_sees(error)
    assert isinstance(seen, ApplicationError) and seen.non_retryable is False

    result, effect = case.attempt(2)  # the service is back
    assert effect == receipt["effect_id"]
    assert result["receipt"]["final_state"] == "COMMITTED_BY_RETRY"
    assert len(case.acts()) == 1


@pytest.mark.slow
def test_a_cancel_heard_during_the_recovery_wait_stops_it_there_and_a_later_attempt_finishes(
    make_case: Callable[[Tier], Case],
) -> None:
    case = make_case(Tier.LOOKUP)
    case.crash_first_attempt(CrashPoint.AFTER_DISPATCHED)

    # A sync activity hears of its cancellation in a heartbeat's response, as here.
    env = activity_env(case.workflow_id, 2)
    env.on_heartbeat = lambda *details: env.cancel()
    worker = RefundActivities(case.journal_path, case.server.url, case.tier)
    with closing(worker), pytest.raises(CancelledError):
        env.run(worker.send_refund_email, TEXT)
    # Stopped while waiting: nothing resent, nothing half-written; the effect is still in flight.
    assert case.receipt().final_state == "DISPATCHED"
    assert case.acts() == []

    result, _ = case.attempt(3)
    assert result["receipt"]["final_state"] == "COMMITTED_BY_RETRY"
    assert len(case.acts()) == 1


@dataclasses.dataclass
class CancelledOnTheWire(HttpTarget):
    """The service acts, and the activity's cancel arrives while its answer is on the way."""

    env: ActivityEnvironment | None = None

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        outcome = super().send(effect_id, payload)
        assert self.env is not None
        self.env.cancel()  # raises in this thread at once, unless the thread is shielded
        return outcome


@pytest.mark.slow
def test_a_cancel_that_arrives_mid_request_lands_after_the_answer_is_recorded(
    make_case: Callable[[Tier], Case],
) -> None:
    case = make_case(Tier.LOOKUP)
    env = activity_env(case.workflow_id, 1)
    worker = RefundActivities(case.journal_path, case.server.url, case.tier)
    [target] = worker.gate.targets.values()
    fields = {f.name: getattr(target, f.name) for f in dataclasses.fields(HttpTarget)}
    worker.gate.targets = {TARGET: CancelledOnTheWire(**fields, env=env)}
    with closing(worker), pytest.raises(CancelledError):
        env.run(worker.send_refund_email, TEXT)
    # Cancelled, and yet no "did it happen?" left behind: the journal recorded the answer.
    assert case.receipt().final_state == "COMMITTED"
    assert len(case.acts()) == 1

    result, _ = case.attempt(2)
    assert result["receipt"]["final_state"] == "COMMITTED"
    assert len(case.acts()) == 1
