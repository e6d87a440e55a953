"""One support agent of the approvals experiment: a separate process refunding the cases it is
given through the gate, with the notary as its journal and the payment service as its target.

    python -m experiments.workers.approvals_agent JOBS.json

JOBS.json: ``{"notary", "token", "tenant", "service", "jobs": [{"case_id", "case_class",
"action", "amount", "lease_id"}]}``. For each job, in order, it submits one refund (a
Proposal of `action` on the target "refunds", for `amount` cents in USD, under `lease_id`) and
prints one JSON line: ``{"case_id", "action", "effect_id", "final_state", "held_by"}``. Several of
these run at once, so the budget they share is raced for as agents in production would."""

from __future__ import annotations

import json
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from gate_client.gate import Gate
from gate_client.http_target import HttpTarget
from gate_client.money import MoneyDeclaration
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Proposal
from gate_client.targets import Tier

TARGET = "refunds"
# Tier 3: the payment service is not asked, and nothing is resent; a lost answer is AMBIGUOUS.
REFUND_MONEY = MoneyDeclaration(amount_field="amount_cents", currency_field="currency")
MAX_INFLIGHT = timedelta(seconds=10)
REQUEST_TIMEOUT_SECONDS = 5.0


def refunds_target(service: str) -> HttpTarget:
    return HttpTarget(
        name=TARGET,
        base_url=service,
        tier=Tier.NEITHER,
        queryable=False,
        key_window=None,
        max_inflight=MAX_INFLIGHT,
        timeout_seconds=REQUEST_TIMEOUT_SECONDS,
        money=REFUND_MONEY,
    )


def run(spec: dict[str, Any]) -> None:
    journal = NotaryJournal(spec["notary"], spec["token"])
    gate = Gate(journal, {TARGET: refunds_target(spec["service"])})
    for job in spec["jobs"]:
        proposal = Proposal(
            job["case_id"],
            TARGET,
            job["action"],
            {"payment": f"pay_{job['case_id']}", "amount_cents": job["amount"], "currency": "USD"},
            job["lease_id"],
            tenant=spec["tenant"],
            case_class=job["case_class"],
        )
        receipt = gate.submit(proposal)
        print(
            json.dumps(
                {
                    "case_id": job["case_id"],
                    "action": job["action"],
                    "effect_id": proposal.effect_id,
                    "final_state": receipt.final_state,
                    "held_by": receipt.held_by,
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    run(json.loads(Path(sys.argv[1]).read_text()))
