"""A target reached over HTTP, for services that take an idempotency key and can be looked up.

The contract: ``POST {base}/effects`` with ``Idempotency-Key: <effect id>`` and a JSON body
``{"effect_id", "payload"}`` acts (2xx with ``{"result_ref"}``) or refuses for good (4xx with
``{"error"}``); ``GET {base}/effects/<effect id>`` answers 200 ``{"result_ref"}`` or 404. Which of
these the service honours is the tier it is declared at."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from gate_client.faults import CrashPoint, crash_point
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
    Unknown,
)
from ledger.core.canonical import canonical_json

# Statuses that say the service has not settled the request: it may still act, or have acted.
_IN_DOUBT_STATUSES = frozenset({408, 409, 425, 429})


@dataclass
class HttpTarget:
    name: str
    base_url: str
    tier: Tier
    queryable: bool
    key_window: timedelta | None
    max_inflight: timedelta
    timeout_seconds: float = 5.0
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False

    def __post_init__(self) -> None:
        # A request is in flight until its timeout; declaring less would let a lookup's
        # "not found" count as final while the request can still arrive, and a resend act twice.
        if self.max_inflight.total_seconds() < self.timeout_seconds:
            raise ValueError(
                f"max_inflight ({self.max_inflight.total_seconds()} s) must be at least "
                f"the request timeout ({self.timeout_seconds} s)"
            )

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        request = urllib.request.Request(
            f"{self.base_url}/effects",
            data=canonical_json({"effect_id": effect_id, "payload": dict(payload)}),
            headers={"Content-Type": "application/json", "Idempotency-Key": effect_id},
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_seconds) as response:
                crash_point(CrashPoint.AFTER_TARGET_ACTED)
                return Sent(str(json.loads(response.read())["result_ref"]))
        except urllib.error.HTTPError as error:
            crash_point(CrashPoint.AFTER_TARGET_ACTED)
            if error.code >= 500 or error.code in _IN_DOUBT_STATUSES:
                raise InDoubt(f"HTTP {error.code}") from error
            return FailedDefinitively(_error_code(error))
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            # Timeouts, resets and responses cut off: the request may have arrived.
            raise InDoubt(str(error)) from error

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        url = f"{self.base_url}/effects/{effect_id}"
        try:
            with urllib.request.urlopen(url, timeout=self.timeout_seconds) as response:
                return Found(str(json.loads(response.read())["result_ref"]))
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return NotFound()
            return Unknown(f"HTTP {error.code}")
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            return Unknown(str(error))


def _error_code(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read())["error"])
    except (ValueError, KeyError, TypeError):
        return f"http_{error.code}"
