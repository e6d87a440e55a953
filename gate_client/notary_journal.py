"""The gate's journal kept by the hosted notary: the same protocol as LocalJournal, over HTTP.

Fail closed: a method returns only on the notary's durable acknowledgement, and anything else —
a refused connection, a timeout, a 5xx — raises JournalError, so the gate never dispatches on a
record it cannot prove. Requests are retried only where a retry cannot record twice: reads,
propose (idempotent on the effect id; with a dispatch, attempt 1 is recorded once, and a retry
after a lost answer comes back with nothing dispatched, which the gate recovers) and outcomes
(the standing verdict is answered again). A dispatch of attempt n is never retried: had the lost
answer been a success, the retry would look like another agent's attempt; the gate leaves the
effect to recover() instead.

History: the journal remembers the last signed checkpoint of the tenant's log it accepted (in
`checkpoint_file`, written atomically and fsync'd, so a restarted agent remembers it too). It
looks at the log's latest checkpoint when recovering (`unsettled`), when fetching a proved
receipt (`proved_receipt`) and when asked (`check_history`): each must verify with the log's
vkeys (given as `vkeys`, else those the notary publishes at /v1/logs/<origin>/vkey), carry the
cosignatures of `witness_quorum` of the `witnesses` given (C2SP tlog-cosignature: a witness
cosigns only a tree consistent with every one it cosigned before, so a notary cannot show this
agent a history it hides from the witnesses), and extend the remembered one, by a consistency
proof the notary gives. A smaller size, another root at
the same size or a proof that fails means the notary's history was rolled back or forked (a
database restored from an old backup, an insider's rewrite): HistoryRewritten, carrying both
signed checkpoints as evidence, and from then on every call raises it again."""

from __future__ import annotations

import base64
import binascii
import json
import os
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from gate_client.authorization import DispatchRequest
from gate_client.journal import (
    AttemptTaken,
    EffectHeld,
    JournalError,
    LeaseRefused,
)
from gate_client.leases import Lease, LeaseState
from gate_client.money import MoneyDeclaration
from gate_client.protocol import Answer, Intent, Negative, TargetDeclaration
from gate_client.proved import NotProved, check_inclusion, check_receipt, shown_entry
from gate_client.receipts import Receipt
from gate_client.targets import Found, NotFound, Tier
from ledger.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    Succession,
    open_checkpoint,
    parse_checkpoint_text,
    succession,
)
from ledger.core.cosignature import CosignatureError, WitnessPolicy
from ledger.core.durable import replace_durably
from ledger.core.entries import Entry, EntryKind
from ledger.core.merkle import ProofError, verify_consistency
from ledger.core.note import NoteError, Verifier, parse_vkey

STATE_FORMAT = "interlock-notary-journal-checkpoint/v1"

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


class HistoryRewritten(NotaryError):
    """The notary's log does not extend a checkpoint this journal accepted before: rolled back
    (a smaller tree), forked (the same size, another root) or rewritten (no consistency proof
    holds). `remembered` and `received` are the two signed checkpoints, the evidence: both are
    signed by the log's key, and no honest log signs both."""

    def __init__(self, reason: str, *, remembered: str, received: str) -> None:
        super().__init__(
            f"the notary's history was rewritten: {reason}\n"
            f"--- the checkpoint seen before ---\n{remembered}"
            f"--- the checkpoint the notary shows now ---\n{received}",
            code="history_rewritten",
        )
        self.reason = reason
        self.remembered = remembered
        self.received = received


@dataclass(frozen=True)
class ProvedReceipt:
    """A receipt fetched from the notary: re-derived from its entries, each proved included in
    `checkpoint` (None until a checkpoint covers them all), which extends every one seen."""

    receipt: Receipt
    entries: list[Entry]
    checkpoint: Checkpoint | None
    note: str | None


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
        vkeys: Sequence[str] | None = None,
        checkpoint_file: str | os.PathLike[str] | None = None,
        witnesses: Sequence[str] = (),
        witness_quorum: int | None = None,
    ) -> None:
        """`one_round_trip=False` sends PROPOSED and DISPATCHED as two requests: slower, and
        only useful to stop a process between the two (the crash matrix does). `vkeys`: the
        log's trusted verifier keys, named after its origin (default: the notary's published
        ones); `checkpoint_file`: where the last accepted checkpoint is kept across restarts
        (default: in memory only); `witnesses`: the cosignature/v1 vkeys of the witnesses
        trusted, of which `witness_quorum` (default: all) must have cosigned a checkpoint."""
        try:
            self._witnessing = WitnessPolicy.of(witnesses, witness_quorum)
        except CosignatureError as exc:
            raise JournalError(f"witnesses: {exc}") from exc
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
        self._vkeys = None if vkeys is None else _verifiers(vkeys)
        self._published: dict[str, list[Verifier]] = {}
        self._state = None if checkpoint_file is None else Path(checkpoint_file)
        self._seen = _load_state(self._state)
        self._rewritten: HistoryRewritten | None = None

    @property
    def seen_checkpoint(self) -> str | None:
        """The last signed checkpoint accepted, as its note."""
        return self._seen

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
        try:
            answer = self._call(
                "POST",
                "/v1/effects",
                json={
                    "effect_id": effect_id,
                    "proposal": dict(body),
                    "dispatch": {"premises": [dict(p) for p in request.premises]},
                },
            )
        except NotaryError as error:
            if error.status == 409 and error.code == "held":
                raise _held(error) from error
            raise
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
            if refused.code == "held":
                raise _held(refused) from refused
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
        """The effects to recover, once the log is known to extend what was seen before."""
        self.check_history()
        return [e["effect_id"] for e in self._call("GET", "/v1/effects/unsettled")]

    # --- history ---------------------------------------------------------------------------

    def check_history(self) -> Checkpoint | None:
        """The log's latest signed checkpoint, verified and proved to extend the last one seen
        (then remembered in its place); None while the log has none. HistoryRewritten if not."""
        try:
            shown = self._call("GET", "/v1/checkpoints/latest")
        except NotaryError as missing:
            if missing.status == 404 and self._seen is None:
                return None
            if missing.status == 404 and self._seen is not None:
                self._refuse("the log has no checkpoint now", self._seen, "(none)\n")
            raise
        return self._observe(str(shown["note"]))

    def proved_receipt(self, effect_id: str, *, payload_hash: str | None = None) -> ProvedReceipt:
        """The notary's receipt, checked: its checkpoint extends the last one seen, every entry
        is proved in it, and every field re-derives from the entries."""
        query = "" if payload_hash is None else f"?payload_hash={payload_hash}"
        shown = self._call("GET", f"/v1/effects/{effect_id}/receipt{query}")
        entries = _entries(shown["entries"])
        note = shown["checkpoint"]
        checkpoint = None if note is None else self._observe(str(note))
        try:
            if checkpoint is not None:
                check_inclusion(entries, shown["proofs"], note, checkpoint)
            receipt = check_receipt(shown, entries, effect_id=effect_id, payload_hash=payload_hash)
        except NotProved as exc:
            raise NotaryError(f"receipt {effect_id}: {exc}") from exc
        return ProvedReceipt(receipt, entries, checkpoint, note)

    def _observe(self, note: str) -> Checkpoint:
        """Accept `note` if it verifies and extends the remembered checkpoint; remember it."""
        origin = note.split("\n", 1)[0]
        try:
            checkpoint = open_checkpoint(note, self._log_verifiers(origin), origin=origin)
        except CheckpointError as exc:
            raise NotaryError(f"the notary's checkpoint does not verify: {exc}") from exc
        try:
            self._witnessing.check(note)
        except CosignatureError as exc:
            raise NotaryError(
                f"the notary's checkpoint is not witnessed as required: {exc}", code="not_witnessed"
            ) from exc
        seen = self._seen
        if seen is None:
            self._remember(note)
            return checkpoint
        before = _unsigned(seen)
        if before.origin != checkpoint.origin:
            raise NotaryError(
                f"the checkpoint remembered is of {before.origin}, the notary's of {origin}"
            )
        step = succession(
            held_size=before.size, held_root=before.root, size=checkpoint.size, root=checkpoint.root
        )
        if step is Succession.ROLLBACK:
            self._refuse(f"rolled back from size {before.size} to {checkpoint.size}", seen, note)
        if step is Succession.FORK:
            self._refuse(f"forked: two roots at size {before.size}", seen, note)
        if step is Succession.SAME:
            return checkpoint
        if before.size > 0:
            self._consistent(before, checkpoint, seen, note)
        self._remember(note)
        return checkpoint

    def _consistent(self, before: Checkpoint, after: Checkpoint, seen: str, note: str) -> None:
        shown = self._call("GET", f"/v1/proofs/consistency?old={before.size}&new={after.size}")
        try:
            proof = [base64.b64decode(h, validate=True) for h in shown["hashes"]]
            verify_consistency(
                old_size=before.size,
                new_size=after.size,
                old_root=before.root,
                new_root=after.root,
                proof=proof,
            )
        except (ProofError, binascii.Error, KeyError, TypeError) as exc:
            self._refuse(
                f"size {after.size} is not consistent with size {before.size}: {exc}", seen, note
            )

    def _refuse(self, reason: str, seen: str, note: str) -> None:
        self._rewritten = HistoryRewritten(reason, remembered=seen, received=note)
        raise self._rewritten

    def _log_verifiers(self, origin: str) -> list[Verifier]:
        if self._vkeys is not None:
            keys = [key for key in self._vkeys if key.name == origin]
            if not keys:
                raise NotaryError(f"no trusted vkey is named {origin!r}, the log's origin")
            return keys
        if origin not in self._published:
            shown = self._call("GET", f"/v1/logs/{origin}/vkey")
            keys = _verifiers([item["vkey"] for item in shown["vkeys"]])
            self._published[origin] = [key for key in keys if key.name == origin]
        return self._published[origin]

    def _remember(self, note: str) -> None:
        self._seen = note
        if self._state is not None:
            _write_state(self._state, note)

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
            money=MoneyDeclaration.from_body(shown["money"]) if shown["money"] else None,
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
            currency=shown.get("currency") or None,
            case_class=shown.get("case_class") or None,
            case_pattern=shown.get("case_pattern") or None,
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
        if self._rewritten is not None:
            raise self._rewritten  # nothing this notary says is taken as valid any more
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


def _held(refused: NotaryError) -> EffectHeld:
    """The notary's 409 `held`, as the journals say it."""
    return EffectHeld(str(refused.body["held_by"]), str(refused.body["detail"]))


def _entry(shown: Mapping[str, Any]) -> Entry:
    """An entry from its exact leaf bytes; the hash the notary states must be their hash."""
    try:
        return shown_entry(shown)
    except NotProved as exc:
        raise NotaryError(f"the notary sent {exc}") from exc


def _entries(shown: list[Mapping[str, Any]]) -> list[Entry]:
    return [_entry(e) for e in shown]


def _duration(seconds: float | None) -> timedelta | None:
    return None if seconds is None else timedelta(seconds=seconds)


def _timestamp(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _verifiers(vkeys: Sequence[str]) -> list[Verifier]:
    try:
        return [parse_vkey(vkey) for vkey in vkeys]
    except NoteError as exc:
        raise NotaryError(f"unreadable vkey: {exc}") from exc


def _unsigned(note: str) -> Checkpoint:
    """A remembered note's checkpoint (it was verified when it was accepted)."""
    return parse_checkpoint_text(note[: note.rindex("\n\n") + 1])


def _load_state(path: Path | None) -> str | None:
    """The remembered checkpoint note, if the state file holds one."""
    if path is None or not path.exists():
        return None
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
        if state.get("format") != STATE_FORMAT or not isinstance(state.get("note"), str):
            raise ValueError(f"not an {STATE_FORMAT} file")
        note = str(state["note"])
        _unsigned(note)
    except (OSError, ValueError, AttributeError, CheckpointError) as exc:
        raise JournalError(f"checkpoint file {path}: {exc}") from exc
    return note


def _write_state(path: Path, note: str) -> None:
    """Replace the state file atomically: a crash leaves the old note or the new, never half."""
    data = json.dumps({"format": STATE_FORMAT, "note": note}).encode("utf-8")
    try:
        replace_durably(path, data)
    except OSError as exc:
        raise JournalError(f"checkpoint file {path}: cannot write: {exc}") from exc
