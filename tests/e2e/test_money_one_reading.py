"""One reading of an effect's money, end to end: a notary server, eight agent processes refunding
through the Stripe adapter, and localstripe, which does not dedupe, as the ground truth.

The attack this stops: a standing lease limited to {"amount": 2000} with a $50 budget, and eight
agents proposing {"amount": 2000, "amount_cents": 1}. The limit read `amount`, the budget charged
`amount_cents`, the adapter refunded `amount`: eight refunds, $160 against $50, each budget
statement saying 1 cent, and the verifier agreeing. Now the target declares its money (`amount`)
and a payload with a second amount is refused before anything is written."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import stripe
from django.utils import timezone

from ledger import selectors as ledger_selectors
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from notary import services
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.agents import refund_agent
from testkit.factories import STRIPE_MONEY
from testkit.notary_server import running_notary
from testkit.paths import REPO_ROOT, child_database_url
from testkit.peers.localstripe import paid_intent, refunds_of, running_localstripe, stripe_client

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

AGENTS = 8
BUDGET = 5000  # $50.00 a day, every agent key together
LIMIT = 2000  # $20.00 each


@pytest.fixture
def localstripe(tmp_path: Path) -> Iterator[str]:
    with running_localstripe(tmp_path) as url:
        yield url


@pytest.fixture
def shop(localstripe: str) -> tuple[Tenant, str, str]:
    """Acme, its Stripe refunds target (tier 2: localstripe ignores Idempotency-Key) declaring
    its money in `amount`, the refund agent's key, and a standing lease of at most $20.00 a
    refund and $50.00 a day over the refunds queue."""
    acme = services.tenant_create(slug="acme", name="Acme Refunds")
    services.target_register(
        tenant=acme,
        name=refund_agent.TARGET,
        tier=2,
        queryable=True,
        max_inflight=refund_agent.TIMEOUT,
        money=STRIPE_MONEY,
    )
    approver, _ = services.api_key_issue(tenant=acme, role="approver", holder="maria")
    _, agent = services.api_key_issue(tenant=acme, role="agent", holder="refund-bot")
    lease = services.lease_grant(
        tenant=acme,
        approver=approver,
        case_class="refunds-queue",
        action=refund_agent.ACTION,
        expires_at=timezone.now() + timedelta(days=1),
        requested_by="refund-bot",
        limits={"amount": LIMIT},
        currency="USD",
        budgets=[{"per": "tenant", "window_seconds": 86400, "max_amount": BUDGET}],
    )
    return acme, agent, lease.lease_id


def run_agents(
    url: str, stripe_url: str, agent: str, lease_id: str, payments: list[str], extra: Any
) -> list[dict[str, Any]]:
    """Eight agent processes at once, one refund of $20.00 each (plus `extra` payload fields);
    what each printed."""
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "testkit.agents.refund_agent",
                "submit",
                "--stripe",
                stripe_url,
                "--payment",
                payment,
                "--case",
                f"RF-{n}",
                "--amount",
                str(LIMIT),
                "--notary",
                url,
                "--token",
                agent,
                "--tenant",
                "acme",
                "--lease",
                lease_id,
                "--case-class",
                "refunds-queue",
                "--extra",
                json.dumps(extra),
            ],
            cwd=REPO_ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n, payment in enumerate(payments)
    ]
    printed = []
    for child in children:
        out, err = child.communicate(timeout=180)
        assert child.returncode == 0, err
        printed.append(json.loads(out.strip().splitlines()[-1]))
    return printed


def refunded(client: stripe.StripeClient, payments: list[str]) -> int:
    return sum(r.amount for p in payments for r in refunds_of(client, p) if r.status != "failed")


def test_eight_agents_sending_a_second_amount_refund_nothing_and_honest_ones_stay_in_budget(
    shop: tuple[Tenant, str, str], localstripe: str, tmp_path: Path, signer: Signer
) -> None:
    acme, agent, lease_id = shop
    client = stripe_client(localstripe)
    payments = [paid_intent(client, 10_000) for _ in range(AGENTS)]
    (tmp_path / "notary").mkdir()
    with running_notary(child_database_url(), tmp_path / "notary") as url:
        attack = {"amount_cents": 1, "currency": "USD"}
        tried = run_agents(url, localstripe, agent, lease_id, payments, attack)
        assert [sorted(t) for t in tried] == [["ambiguous_money"]] * AGENTS, tried
        assert refunded(client, payments) == 0
        assert list(ledger_selectors.iter_entries(log=acme.log))[-1].kind == "LEASE_GRANTED"

        honest = run_agents(url, localstripe, agent, lease_id, payments, {"currency": "USD"})
    states = sorted(r["final_state"] for r in honest)
    assert states == ["COMMITTED"] * 2 + ["REFUSED:lease_budget"] * 6, honest
    assert refunded(client, payments) == 2 * LIMIT <= BUDGET  # localstripe's own count
    stated = [r["budget"]["amount"] for r in honest if r["final_state"] == "COMMITTED"]
    assert stated == [LIMIT, LIMIT]  # each statement spends what was refunded

    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    export = tmp_path / "export.jsonl"
    export.write_text("".join(export_receipts(tenant=acme)))
    vkey = log_verifier(acme.log.origin, signer).vkey
    verified = subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(export), "--vkey", vkey, "--no-witnesses"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "8 budget statements re-derived" not in verified.stdout
    assert "2 budget statements re-derived" in verified.stdout, verified.stdout
