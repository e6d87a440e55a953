"""localstripe, a fake Stripe API server from PyPI, as the Stripe refund adapter's peer.

It speaks enough of Stripe's API for the official SDK to create payments and refunds and list
refunds with their metadata, a payment's or (testkit.peers.localstripe_server adds the filter)
those created in a time window. It does NOT honour Idempotency-Key and does not check
that refunds stay within the payment, so against it the refund target is tier 2: the lookup is
all that keeps a resend from refunding twice. Its own refund list is the ground truth."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import stripe

from testkit.notary_server import free_port, wait_until_answering
from testkit.paths import REPO_ROOT

TEST_CARD: stripe.params.PaymentMethodCreateParamsCard = {
    "number": "4242424242424242",
    "exp_month": 12,
    "exp_year": 2040,
    "cvc": "123",
}


def stripe_client(url: str, *, timeout_seconds: float = 5.0) -> stripe.StripeClient:
    """The official SDK pointed at `url`, without its own retries: against a peer that ignores
    Idempotency-Key, an SDK retry would be a second refund nobody decided."""
    return stripe.StripeClient(
        "sk_test_interlock",
        base_addresses={"api": url},
        max_network_retries=0,
        http_client=stripe.RequestsClient(timeout=timeout_seconds),
    )


@contextmanager
def running_localstripe(work_dir: Path) -> Iterator[str]:
    """Start localstripe on a free port with an empty store; yield its URL; stop it."""
    port = free_port()
    log = work_dir / "localstripe.log"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "testkit.peers.localstripe_server",
            "--port",
            str(port),
            "--from-scratch",
        ],
        cwd=work_dir,
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )
    url = f"http://127.0.0.1:{port}"
    try:
        refunds = stripe_client(url, timeout_seconds=2).v1.refunds
        wait_until_answering(
            lambda: refunds.list(params={"limit": 1}),
            process,
            log,
            "localstripe",
            stripe.APIConnectionError,
        )
        yield url
    finally:
        process.terminate()
        process.wait(timeout=10)


def paid_intent(client: stripe.StripeClient, amount: int) -> str:
    """A confirmed card payment of `amount` cents: what a refund refunds."""
    method = client.v1.payment_methods.create(params={"type": "card", "card": TEST_CARD})
    intent = client.v1.payment_intents.create(
        params={"amount": amount, "currency": "usd", "payment_method": method.id, "confirm": True}
    )
    assert intent.status == "succeeded", intent.status
    return intent.id


def refunds_of(client: stripe.StripeClient, payment_intent: str) -> list[stripe.Refund]:
    """The ground truth: every refund localstripe holds for the payment."""
    page = client.v1.refunds.list(params={"payment_intent": payment_intent, "limit": 100})
    return list(page.auto_paging_iter())
