"""Stripe's refund webhooks for the reference payment service, which sends none of its own.

The relay tails the service's store (one fsync'd line each time it refunded) and, for every
refund, posts a ``refund.created`` event to a notary's Stripe endpoint, signed with the endpoint's
secret by Stripe's own library, carrying the request's effect id in
``data.object.metadata.interlock_effect_id`` as Stripe echoes the metadata a refund was created
with. The refund's id is the service's result_ref, its amount the payload's ``amount_cents``.
Events leave `delay_seconds` after the refund, as a provider's delivery lags its API answer.

This is the one emulated part of the notary row: the service is real, its store is its own, the
notary and its signature check are the production code; only the sender of the webhooks is this
relay, not Stripe.

    with running_relay(store, endpoint_url, secret, delay_seconds=1.0) as relay:
        ...
        relay.drain(timeout=10)   # every refund in the store delivered
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from testkit.peers.reference_service import read_acts
from testkit.webhook_signing import as_headers, body_of, signed_headers, stripe_refund_event

POLL_SECONDS = 0.02


@dataclass
class Delivery:
    event_id: str
    effect_id: str
    result_ref: str
    acted_at: float  # when the service refunded (its store's clock)
    posted_at: float  # when the notary answered
    status: int


@dataclass
class WebhookRelay:
    store: Path
    endpoint_url: str
    secret: str
    delay_seconds: float = 1.0
    deliveries: list[Delivery] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    _seen: int = field(default=0, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def run(self) -> None:
        pending: list[dict[str, Any]] = []
        with httpx.Client(timeout=10) as client:
            while True:
                acts = read_acts(self.store)
                pending += acts[self._seen :]
                self._seen = len(acts)
                now = time.time()
                due = [act for act in pending if act["at"] + self.delay_seconds <= now]
                for act in due:
                    pending.remove(act)
                    self._deliver(client, act)
                if self._stop.is_set() and not pending:
                    return
                time.sleep(POLL_SECONDS)

    def drain(self, *, timeout: float) -> None:
        """Return once every refund now in the store has been delivered."""
        wanted = len(read_acts(self.store))
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                done = len(self.deliveries) + len(self.errors)
            if done >= wanted:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"relay delivered {done} of {wanted} refunds in {timeout} s")
            time.sleep(POLL_SECONDS)

    def stop(self) -> None:
        self._stop.set()

    def _deliver(self, client: httpx.Client, act: dict[str, Any]) -> None:
        event = stripe_refund_event(act["effect_id"])
        refund = event["data"]["object"]
        refund["id"] = act["result_ref"]
        refund["amount"] = act["payload"].get("amount_cents")
        refund["created"] = int(act["at"])
        body = body_of(event)
        headers = as_headers(signed_headers("stripe", body, self.secret))
        try:
            answer = client.post(
                self.endpoint_url,
                content=body,
                headers={"Content-Type": "application/json", **headers},
            )
        except httpx.HTTPError as error:
            with self._lock:
                self.errors.append(f"{event['id']}: {error}")
            return
        delivery = Delivery(
            event["id"],
            act["effect_id"],
            act["result_ref"],
            act["at"],
            time.time(),
            answer.status_code,
        )
        with self._lock:
            self.deliveries.append(delivery)
            if answer.status_code != 200:
                self.errors.append(f"{event['id']}: HTTP {answer.status_code} {answer.text[:200]}")


@contextmanager
def running_relay(
    store: Path, endpoint_url: str, secret: str, *, delay_seconds: float = 1.0
) -> Iterator[WebhookRelay]:
    """Relay the store's refunds to the endpoint from a thread; on exit, deliver what is left."""
    relay = WebhookRelay(store, endpoint_url, secret, delay_seconds)
    thread = threading.Thread(target=relay.run, name="webhook-relay", daemon=True)
    thread.start()
    try:
        yield relay
    finally:
        relay.stop()
        thread.join(timeout=delay_seconds + 15)
