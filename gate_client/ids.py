"""Effect identities, fixed from the approved case and never from the model's words."""

from __future__ import annotations

import base64
import hashlib

from ledger.core.canonical import canonical_json

EFFECT_ID_PREFIX = "eff_"
_ID_VERSION = "interlock-effect-id/v1"
_ID_BYTES = 20  # 160 bits


def effect_id_for(case_id: str, target: str, action: str, *, tenant: str = "") -> str:
    """The one id of "do `action` on `target` for `case_id`": the same inputs give the same id
    forever, so a crash, a retry or a re-decided payload all land on the same effect.

    At least 128 bits, only [A-Za-z0-9_-]: it fits provider idempotency keys and email tags."""
    for name, value in (("case_id", case_id), ("target", target), ("action", action)):
        if not isinstance(value, str) or not value:
            raise ValueError(f"{name} must be a non-empty string")
    if not isinstance(tenant, str):
        raise ValueError("tenant must be a string")
    digest = hashlib.sha256(canonical_json([_ID_VERSION, tenant, case_id, target, action]))
    encoded = base64.urlsafe_b64encode(digest.digest()[:_ID_BYTES]).decode().rstrip("=")
    return EFFECT_ID_PREFIX + encoded
