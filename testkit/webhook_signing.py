"""Webhook requests signed the way each provider signs them, by the providers' own libraries."""

from __future__ import annotations

import base64
import json
import secrets
import time
from datetime import UTC, datetime
from typing import Any

import standardwebhooks
import stripe
import svix.webhooks


def new_secret(provider: str) -> str:
    return "whsec_" + (
        secrets.token_hex(16)
        if provider == "stripe"
        else base64.b64encode(secrets.token_bytes(24)).decode()
    )


def body_of(event: dict[str, Any]) -> bytes:
    return json.dumps(event, indent=1).encode()  # not canonical: signatures cover these bytes


def signed_headers(
    provider: str, body: bytes, secret: str, *, event_id: str = "", at: float | None = None
) -> dict[str, str]:
    """HTTP headers (as the Django test client takes them) that sign `body`."""
    moment = time.time() if at is None else at
    if provider == "stripe":
        header = stripe.WebhookSignature.generate_signature_header(
            body.decode(), secret, timestamp=int(moment)
        )
        return {"HTTP_STRIPE_SIGNATURE": header}
    when = datetime.fromtimestamp(moment, UTC)
    prefix = "svix" if provider == "resend" else "webhook"
    signer = (
        svix.webhooks.Webhook(secret) if provider == "resend" else standardwebhooks.Webhook(secret)
    )
    signature = signer.sign(event_id, when, body.decode())
    return {
        f"HTTP_{prefix.upper()}_ID": event_id,
        f"HTTP_{prefix.upper()}_TIMESTAMP": str(int(moment)),
        f"HTTP_{prefix.upper()}_SIGNATURE": signature,
    }


def as_headers(meta: dict[str, str]) -> dict[str, str]:
    """The same headers as a server reads them: lower-case names with dashes."""
    return {k[5:].lower().replace("_", "-"): v for k, v in meta.items()}


def stripe_refund_event(
    effect_id: str | None, *, status: str = "succeeded", event_type: str = "refund.created"
) -> dict[str, Any]:
    metadata = {"interlock_effect_id": effect_id} if effect_id else {}
    return {
        "id": f"evt_{secrets.token_hex(8)}",
        "object": "event",
        "type": event_type,
        "created": int(time.time()),
        "data": {
            "object": {
                "id": f"re_{secrets.token_hex(8)}",
                "object": "refund",
                "amount": 2000,
                "status": status,
                "metadata": metadata,
            }
        },
    }


def resend_event(
    event_type: str, *, effect_id: str | None = None, email_id: str | None = None
) -> dict[str, Any]:
    data: dict[str, Any] = {"email_id": email_id or f"em_{secrets.token_hex(8)}"}
    if effect_id:
        data["tags"] = {"interlock_effect_id": effect_id}
    return {"type": event_type, "created_at": "2026-11-29T23:30:00.000Z", "data": data}
