"""A target reached over HTTP, for services that take an idempotency key and can be looked up.

The contract: ``POST {base}/effects`` with ``Idempotency-Key: <effect id>`` and a JSON body
``{"effect_id", "payload"}`` acts (2xx with ``{"result_ref"}``) or refuses for good (4xx with
``{"error"}``); ``GET {base}/effects/<effect id>`` answers 200 ``{"result_ref"}`` or 404. Which of
these the service honours is the tier it is declared at. A service reconciled with the notary
lists what it did: ``GET {base}/effects?created_gte=T&created_lt=T&limit=N[&starting_after=REF]``
(T in Unix seconds) answers ``{"data": [{"effect_id", "result_ref", "at", ...}], "has_more"}``
in the order it acted (`effects_created`)."""

from __future__ import annotations

import http.client
import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from gate_client.faults import CrashPoint, crash_point
from gate_client.money import Money, MoneyDeclaration, MoneyError, read_money
from gate_client.reconciliation import ProviderRecord, ReconciliationError, Window
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
    money: MoneyDeclaration | None = None  # where its payloads hold money, if they do

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


def effects_created(
    base_url: str,
    window: Window,
    *,
    api_key: str = "",
    timeout_seconds: float = 5.0,
    money: MoneyDeclaration | None = None,
) -> Iterator[ProviderRecord]:
    """Everything the service lists as done in `window`, a page at a time, with `api_key` as
    its bearer key when given. An error or an answer that is not the contract's is a
    ReconciliationError (naming the status, never the key)."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    after: str | None = None
    while True:
        query = {
            "created_gte": repr(window.since.timestamp()),
            "created_lt": repr(window.until.timestamp()),
            "limit": "100",
            **({"starting_after": after} if after else {}),
        }
        url = f"{base_url}/effects?{urllib.parse.urlencode(query)}"
        try:
            request = urllib.request.Request(url, headers=headers)
            with urllib.request.urlopen(request, timeout=timeout_seconds) as response:
                page = json.loads(response.read())
            acts = page["data"]
            for act in acts:
                yield ProviderRecord(
                    ref=str(act["result_ref"]),
                    created_at=datetime.fromtimestamp(float(act["at"]), UTC),
                    effect_id=act.get("effect_id")
                    if isinstance(act.get("effect_id"), str)
                    else None,
                    evidence={
                        k: act[k] for k in ("effect_id", "result_ref", "at", "payload") if k in act
                    },
                    money=_money(act.get("payload"), money),
                )
        except urllib.error.HTTPError as error:
            raise ReconciliationError(f"the service refused its list: HTTP {error.code}") from error
        except (urllib.error.URLError, http.client.HTTPException, OSError) as error:
            raise ReconciliationError(f"the service's list did not answer: {error}") from error
        except (KeyError, TypeError, ValueError) as error:
            raise ReconciliationError(
                f"the service's list is not the contract's: {error!r}"
            ) from error
        if not page.get("has_more") or not acts:
            return
        after = str(acts[-1]["result_ref"])


def _error_code(error: urllib.error.HTTPError) -> str:
    try:
        return str(json.loads(error.read())["error"])
    except (ValueError, KeyError, TypeError):
        return f"http_{error.code}"


def _money(payload: object, declared: MoneyDeclaration | None) -> Money | None:
    """What the service says it moved, read as its target declares money; None when it
    declares none or the payload does not read one way (then no amount is compared)."""
    if declared is None or not isinstance(payload, Mapping):
        return None
    try:
        return read_money(payload, declared)
    except MoneyError:
        return None
