"""Authority as a lease: who may do what, for which case, up to which limits, until when.

Whether a lease covers a dispatch is decided by gate_client.authorization, at the instant of
dispatch, atomically with recording DISPATCHED, so the journal's order alone shows it."""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gate_client.budgets import Budget
from ledger.core.entries import Entry, EntryKind, format_timestamp


@dataclass(frozen=True)
class Lease:
    lease_id: str
    case_id: str
    action: str
    expires_at: datetime
    granted_by: str
    # The most each effect may move, by the target's declared amount field, e.g.
    # {"amount": 2000}: a limit naming any other field refuses every dispatch.
    limits: Mapping[str, int] = field(default_factory=dict)
    # When set, the lease approves exactly this payload (sha256 hex of its canonical bytes).
    payload_hash: str | None = None
    # When set (ISO 4217, upper case), the lease approves only payloads in this currency, and its
    # amount limits count in it: 2000 is $20.00, not ¥2,000. None: any currency (older leases).
    currency: str | None = None
    # A standing lease covers a class of cases instead of one `case_id` (then ""): every case
    # the proposal says is of this class (a queue, a tag), or every case id matching this
    # pattern (shell-style, case-sensitive: "RF-*").
    case_class: str | None = None
    case_pattern: str | None = None
    # Rolling budgets (gate_client.budgets): spent at each effect's first dispatch.
    budgets: tuple[Budget, ...] = ()

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "lease_id": self.lease_id,
            "case_id": self.case_id,
            "action": self.action,
            "expires_at": format_timestamp(self.expires_at),
            "granted_by": self.granted_by,
            "limits": dict(self.limits),
            "payload_hash": self.payload_hash,
        }
        # Each named only when set, so a lease without them keeps the body it always had.
        optional = {
            "currency": self.currency,
            "case_class": self.case_class,
            "case_pattern": self.case_pattern,
            "budgets": [b.body() for b in self.budgets] or None,
        }
        return {**body, **{name: value for name, value in optional.items() if value is not None}}

    def covers_case(self, case_id: str, case_class: str | None) -> bool:
        if self.case_class is not None:
            return case_class == self.case_class
        if self.case_pattern is not None:
            return fnmatch.fnmatchcase(case_id, self.case_pattern)
        return case_id == self.case_id

    @property
    def standing(self) -> bool:
        """Over a class of cases, not one: a person no longer approves each effect."""
        return self.case_class is not None or self.case_pattern is not None

    @property
    def bounds_amount(self) -> bool:
        """Some budget counts money, which only a target declaring money can say."""
        return any(b.max_amount is not None for b in self.budgets)

    @property
    def cases(self) -> str:
        return cases_in_words(self.case_id, self.case_class, self.case_pattern)

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Lease:
        return cls(
            lease_id=body["lease_id"],
            case_id=body["case_id"],
            action=body["action"],
            expires_at=datetime.fromisoformat(body["expires_at"].replace("Z", "+00:00")),
            granted_by=body["granted_by"],
            limits=dict(body["limits"]),
            payload_hash=body["payload_hash"],
            currency=body.get("currency"),
            case_class=body.get("case_class"),
            case_pattern=body.get("case_pattern"),
            budgets=tuple(Budget.from_body(b) for b in body.get("budgets", ())),
        )


def cases_in_words(case_id: str, case_class: str | None, case_pattern: str | None) -> str:
    """The cases a lease covers, as a person reads them."""
    if case_class:
        return f"cases of class {case_class}"
    if case_pattern:
        return f"cases matching {case_pattern}"
    return case_id


@dataclass(frozen=True)
class LeaseState:
    lease: Lease
    revoked_at: datetime | None = None
    revoked_by: str | None = None


def lease_states(entries: Iterable[Entry]) -> dict[str, LeaseState]:
    """Every lease as the journal's LEASE_GRANTED / LEASE_REVOKED entries leave it."""
    states: dict[str, LeaseState] = {}
    for entry in entries:
        if entry.kind == EntryKind.LEASE_GRANTED:
            lease = Lease.from_body(entry.body_value())
            states.setdefault(lease.lease_id, LeaseState(lease))
        elif entry.kind == EntryKind.LEASE_REVOKED:
            body = entry.body_value()
            state = states.get(body["lease_id"])
            if state is not None and state.revoked_at is None:
                states[body["lease_id"]] = LeaseState(state.lease, entry.created_at, body["by"])
    return states
