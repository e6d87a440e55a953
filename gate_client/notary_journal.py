"""The gate's journal kept by the hosted notary: the same protocol as LocalJournal, over HTTP.

Fail closed: a method returns only on the notary's durable acknowledgement, and anything else —
a refused connection, a timeout, a 5xx — raises JournalError, so the gate never dispatches on a
record it cannot prove. Requests are retried only where a retry cannot record twice: reads,
propose (idempotent on the effect id; with a dispatch, attempt 1 is recorded once, and a retry
after a lost answer comes back with nothing dispatched, which the gate recovers) and outcomes
(the standing verdict is answered again). A dispatch of attempt n is never retried: had the lost
answer been a success, the retry would look like another agent's attempt; the gate leaves the
effect to recover() instead."""

from __future__ import annotations

import base64
import time
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import httpx

from gate_client.journal import AttemptTaken, DispatchRequest, JournalError, LeaseRefused
from gate_client.leases import Lease, LeaseState
from gate_client.protocol import Answer, Intent, Negative, TargetDeclaration
from gate_client.targets import Found, NotFound, Tier
from ledger.core.entries import Entry, EntryError, EntryKind, entry_from_leaf

_RETRY_STATUSES = frozenset({502, 503, 504})


class NotaryError(JournalError):
    """The notary refused a request or could not be reached."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        code: str = "",
        body: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.body = dict(body or {})


class NotaryJournal:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout: float = 10.0,
        retries: int = 3,
        backoff: float = 0.2,
        transport: httpx.BaseTransport | None = None,
        one_round_trip: bool = True,
    ) -> None:
        """`one_round_trip=False` sends PROPOSED and DISPATCHED as two requests: slower, and
        only useful to stop a process between the two (the crash matrix does)."""
        self._client = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
        )
        self._retries = retries
        self._backoff = backoff
        self._one_round_trip = one_round_trip
        # The entries an outcome's answer carried, good for the very next call only.
        self._fresh: tuple[str, list[Entry]] | None = None

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> NotaryJournal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- writing ---------------------------------------------------------------------------

    def propose(self, *, effect_id: str, body: Mapping[str, Any]) -> Entry:
        answer = self._call(
            "POST", "/v1/effects", json={"effect_id": effect_id, "proposal": dict(body)}
        )
        entries = _entries(answer["entries"])
        return next(e for e in entries if e.kind == EntryKind.PROPOSED)

    def propose_and_dispatch(
        self, *, effect_id: str, body: Mapping[str, Any], request: DispatchRequest
    ) -> tuple[list[Entry], Entry | None] | None:
        if not self._one_round_trip:
            return None
        answer = self._call(
            "POST",
            "/v1/effects",
            json={
                "effect_id": effect_id,
                "proposal": dict(body),
                "dispatch": {"premises": [dict(p) for p in request.premises]},
            },
        )
        refused = answer["dispatch_refused"]
        if refused is not None:
            raise LeaseRefused(refused["reason"], refused["detail"])
        dispatched = answer["dispatched"]
        return _entries(answer["entries"]), _entry(dispatched) if dispatched else None

    def dispatch(self, request: DispatchRequest) -> Entry:
        body = {
            "attempt": request.attempt,
            "premises": [dict(p) for p in request.premises],
            "recovery": request.recovery,
        }
        try:
            answer = self._call(
                "POST", f"/v1/effects/{request.effect_id}/dispatch", json=body, retry=False
            )
        except NotaryError as refused:
            if refused.status != 409:
                raise
            if refused.code == "lease_refused":
                raise LeaseRefused(refused.body["reason"], refused.body["detail"]) from refused
            current = refused.body.get("current", -1)
            raise AttemptTaken(request.effect_id, request.attempt, current) from refused
        return _entry(answer)

    def record(self, *, kind: EntryKind, effect_id: str, body: Mapping[str, Any]) -> Entry:
        answer = self._call(
            "POST",
            f"/v1/effects/{effect_id}/outcome",
            json={"kind": str(kind), "body": dict(body)},
        )
        self._fresh = (effect_id, _entries(answer["receipt_entries"]))
        return _entry(answer["entry"])

    # --- reading ---------------------------------------------------------------------------

    def history(self, effect_id: str) -> list[Entry]:
        detail = self._effect(effect_id)
        return [] if detail is None else _entries(detail["entries"])

    def receipt_entries(self, effect_id: str) -> list[Entry]:
        fresh, self._fresh = self._fresh, None
        if fresh is not None and fresh[0] == effect_id:
            return fresh[1]  # as of the outcome just recorded: no second round trip
        detail = self._effect(effect_id)
        if detail is None:
            return []
        entries = _entries(detail["entries"]) + _entries(detail["lease_entries"])
        return sorted(entries, key=lambda e: e.seq)

    def unsettled(self) -> list[str]:
        return [e["effect_id"] for e in self._call("GET", "/v1/effects/unsettled")]

    def target_declaration(self, name: str) -> TargetDeclaration:
        """The notary's record of the target: the declaration recovery goes by."""
        try:
            shown = self._call("GET", f"/v1/targets/{name}")
        except NotaryError as missing:
            if missing.status == 404:
                raise NotaryError(
                    f"target {name!r} is not registered at the notary: register it first",
                    status=404,
                ) from missing
            raise
        return TargetDeclaration(
            tier=Tier(shown["tier"]),
            queryable=shown["queryable"],
            max_inflight=timedelta(seconds=shown["max_inflight_seconds"]),
            key_window=_duration(shown["key_window_seconds"]),
            evidence_window=_duration(shown["evidence_window_seconds"]),
            attests_before_acting=shown["attests_before_acting"],
            lookup_needs_key=shown["lookup_needs_key"],
        )

    def lease_state(self, lease_id: str) -> LeaseState | None:
        try:
            shown = self._call("GET", f"/v1/leases/{lease_id}")
        except NotaryError as missing:
            if missing.status == 404:
                return None
            raise
        lease = Lease(
            lease_id=shown["lease_id"],
            case_id=shown["case_id"],
            action=shown["action"],
            expires_at=_timestamp(shown["expires_at"]),
            granted_by=shown["granted_by"],
            limits=shown["limits"],
            payload_hash=shown["payload_hash"] or None,
        )
        revoked_at = shown["revoked_at"]
        if revoked_at is None:
            return LeaseState(lease)
        return LeaseState(lease, _timestamp(revoked_at), shown["revoked_by"])

    def evidence(self, effect_id: str) -> Answer:
        shown = self._call("GET", f"/v1/effects/{effect_id}/evidence")
        seen = shown["seen"]
        if seen == "performed":
            return Found(shown["result_ref"], shown["evidence_seq"])
        if seen == "not_performed":
            return Negative(shown["code"], shown["evidence_seq"])
        return Intent() if seen == "intent" else NotFound()

    def _effect(self, effect_id: str) -> dict[str, Any] | None:
        try:
            detail: dict[str, Any] = self._call("GET", f"/v1/effects/{effect_id}")
        except NotaryError as missing:
            if missing.status == 404:
                return None
            raise
        return detail

    # --- the wire --------------------------------------------------------------------------

    def _call(self, method: str, path: str, *, json: Any = None, retry: bool = True) -> Any:
        self._fresh = None
        attempts = 1 + (self._retries if retry else 0)
        for attempt in range(attempts):
            last = attempt == attempts - 1
            try:
                response = self._client.request(method, path, json=json)
            except httpx.HTTPError as exc:
                if last:
                    raise NotaryError(f"{method} {path}: notary unreachable: {exc}") from exc
            else:
                if response.status_code not in _RETRY_STATUSES or last:
                    return _answer(method, path, response)
            time.sleep(self._backoff * 2**attempt)
        raise AssertionError("unreachable: the last attempt returns or raises")


def _answer(method: str, path: str, response: httpx.Response) -> Any:
    try:
        body = response.json()
    except ValueError:
        body = None
    if response.is_success and body is not None:
        return body
    code = body.get("error", "") if isinstance(body, dict) else ""
    detail = body.get("detail", response.text[:200]) if isinstance(body, dict) else response.text
    raise NotaryError(
        f"{method} {path}: {response.status_code} {code}: {detail}",
        status=response.status_code,
        code=code,
        body=body if isinstance(body, dict) else None,
    )


def _entry(shown: Mapping[str, Any]) -> Entry:
    """An entry from its exact leaf bytes; the hash the notary states must be their hash."""
    try:
        entry = entry_from_leaf(base64.b64decode(shown["leaf"], validate=True))
    except (EntryError, ValueError, KeyError) as exc:
        raise NotaryError(f"the notary sent an unreadable entry: {exc}") from exc
    if entry.entry_hash.hex() != shown["entry_hash"] or entry.seq != shown["seq"]:
        raise NotaryError(f"entry {shown.get('seq')}: stated hash or seq does not match its bytes")
    return entry


def _entries(shown: list[Mapping[str, Any]]) -> list[Entry]:
    return [_entry(e) for e in shown]


def _duration(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))
