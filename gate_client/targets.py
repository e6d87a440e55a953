"""What a target allows decides what the gate can promise (DESIGN §3: tiers)."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Protocol

from gate_client.money import MoneyDeclaration


class Tier(enum.IntEnum):
    DEDUPES = 1  # replays on an idempotency key: resend under the same key
    LOOKUP = 2  # can be asked whether it acted: look up, then resend only if not found
    NEITHER = 3  # never resend; ambiguity goes to a person


@dataclass(frozen=True)
class Sent:
    result_ref: str


@dataclass(frozen=True)
class FailedDefinitively:
    """The target refused and will not act on this request (a 4xx it means, a declined card)."""

    code: str


class InDoubt(Exception):
    """A timeout or lost response: the target may or may not have acted."""


@dataclass(frozen=True)
class Found:
    result_ref: str
    evidence_seq: int | None = None  # the notary's OBSERVED entry, when evidence answered


@dataclass(frozen=True)
class NotFound:
    pass


@dataclass(frozen=True)
class Unknown:
    reason: str
    # When asking again may answer: the end of an evidence window still open. None: no telling.
    until: datetime | None = None


SendOutcome = Sent | FailedDefinitively
LookupOutcome = Found | NotFound | Unknown


class Target(Protocol):
    """A service the gate sends effects to. `send` raises InDoubt when it cannot tell."""

    name: str
    tier: Tier
    queryable: bool
    key_window: timedelta | None  # how long the target dedupes on a key; None: not at all
    max_inflight: timedelta  # the longest a request may still be in flight
    # Set when the notary holds this target's evidence (its delivery webhooks, a service's
    # attestations): recovery asks the journal instead of giving up at tier 3. The notary's own
    # declaration of the window decides when "not seen" means "not sent".
    evidence_window: timedelta | None
    # The target's service attests every request to the notary before acting on it and refuses
    # to act unacknowledged (write-ahead attestation), so no attestation by max_inflight after
    # the last dispatch means it never acted: the notary is its lookup (a true tier 2).
    attests_before_acting: bool
    # The lookup answers only while the target remembers the key (Resend's key probe): past
    # the key window its "not found" means nothing, so the target is not tier 2 then.
    lookup_needs_key: bool

    @property
    def money(self) -> MoneyDeclaration | None:
        """Which payload fields hold the money an effect moves (gate_client.money): lease
        limits, budgets and the adapter's send read only these. None: it moves no money."""
        ...

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome: ...

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        """Did the target act on this effect? `payload` is the one proposed: some targets can
        only be searched where it points (a Stripe refund, among its payment's refunds)."""
        ...
