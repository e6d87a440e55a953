"""One attempt of a Temporal refund activity in its own worker process, for the Temporal
adapter's tests: a worker that dies mid-activity at INTERLOCK_CRASH_AT.

    python -m testkit.agents.temporal_worker JOURNAL URL --tier N --workflow-id ID --attempt N
        --text TEXT

prints the effect id it proposes and then its outcome, one JSON line each. `RefundActivities`
and `activity_env` are what the tests run in process for the later attempts."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from gate_client.adapters.temporal import activity_case_id, heartbeating_sleep, submit_in_activity
from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.journal import LocalJournal
from gate_client.proposal import Proposal
from gate_client.targets import Tier

ORIGIN = "gate.local/journal"
TARGET = "email"
ACTION = "refund_email"
LEASE_ID = "lease_1"
TEXT = "Your refund of $20 is on the way"
MAX_INFLIGHT_SECONDS = 1.0
# What each tier's service really does, and whether the gate is told it can be asked.
SERVICES = {
    Tier.DEDUPES: {"dedupe": True, "lookup": False},
    Tier.LOOKUP: {"dedupe": False, "lookup": True},
    Tier.NEITHER: {"dedupe": False, "lookup": False},
}


class RefundActivities:
    """What a worker registers: its gate is built once, when the worker starts."""

    def __init__(self, journal_path: Path, url: str, tier: Tier) -> None:
        self.journal = LocalJournal(journal_path)
        target = HttpTarget(
            name=TARGET,
            base_url=url,
            tier=tier,
            queryable=tier == Tier.LOOKUP,
            key_window=timedelta(hours=24) if tier == Tier.DEDUPES else None,
            max_inflight=timedelta(seconds=MAX_INFLIGHT_SECONDS),
            timeout_seconds=MAX_INFLIGHT_SECONDS,
        )
        self.gate = Gate(self.journal, {TARGET: target}, sleep=heartbeating_sleep)
        self.on_proposal: Callable[[Proposal], None] = lambda proposal: None

    @activity.defn
    def send_refund_email(self, text: str) -> dict[str, Any]:
        proposal = Proposal(
            case_id=activity_case_id(),
            target=TARGET,
            action=ACTION,
            payload={"to": "customer@example.com", "text": text},
            lease_id=LEASE_ID,
        )
        self.on_proposal(proposal)
        return submit_in_activity(self.gate, proposal)

    def close(self) -> None:
        self.journal.close()


def activity_env(
    workflow_id: str, attempt: int, *, heartbeat_timeout: float = 10.0, run_id: str = "run-1"
) -> ActivityEnvironment:
    """The context Temporal gives attempt `attempt` of the workflow run's first activity."""
    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info,
        activity_id="1",
        activity_type="send_refund_email",
        attempt=attempt,
        heartbeat_timeout=timedelta(seconds=heartbeat_timeout),
        workflow_id=workflow_id,
        workflow_run_id=run_id,
        workflow_type="RefundWorkflow",
    )
    return env


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Run one attempt of the refund activity.")
    parser.add_argument("journal", type=Path)
    parser.add_argument("url")
    parser.add_argument("--tier", type=int, choices=[t.value for t in Tier], required=True)
    parser.add_argument("--workflow-id", required=True)
    parser.add_argument("--attempt", type=int, required=True)
    parser.add_argument("--text", required=True)
    args = parser.parse_args(argv)
    worker = RefundActivities(args.journal, args.url, Tier(args.tier))
    worker.on_proposal = lambda proposal: print(
        json.dumps({"effect_id": proposal.effect_id}), flush=True
    )
    try:
        result = activity_env(args.workflow_id, args.attempt).run(
            worker.send_refund_email, args.text
        )
    except ApplicationError as error:
        print(json.dumps({"error": error.type, "details": list(error.details)}), flush=True)
    else:
        print(json.dumps({"result": result}), flush=True)


if __name__ == "__main__":
    main()
