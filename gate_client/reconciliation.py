"""Reconciliation with the provider: what a target's provider shows it did in a time window,
against the effects the tenant's ledger admitted. The one rule; the notary's reconciliation
(notary.reconciliation) fetches both sides and records what this module finds.

A provider object names its effect the way its adapter put it there: a Stripe refund's
``metadata.interlock_effect_id``, a Resend email's ``interlock_effect_id`` tag, the reference
service's ``effect_id``. What the comparison finds:

- ``not_admitted``: the provider did something no admitted effect of the target asked for, an
  object that names no effect or an effect the tenant never proposed there ("done around the
  gate": a refund made by hand in the provider's dashboard during an outage);
- ``not_shown``: an effect the ledger has as happened (committed, or resolved as happened) that
  the provider's list does not show;
- ``shown_not_committed``: the provider shows an object for an effect the ledger has as
  AMBIGUOUS, FAILED, REFUSED or resolved as not happened: what its reviewer needs to see;
- ``duplicate``: the provider shows an object for a happened effect other than the one its
  commit recorded (a second refund a peer that does not dedupe let through, or a hand refund
  made again with the effect's metadata);
- ``amount_differs``: the provider shows an object for an effect that moved another amount, or
  another currency, than the effect's payload says (gate_client.money, by its declaration): a refund
  made by hand with the effect's metadata for another sum, which a lookup by metadata alone
  would take as the effect's own. Each such object is one, whatever else it is (the effect's
  own object, a duplicate, an object of an effect not committed).

A finding is evidence for a person, never a verdict: it settles nothing and changes no state.
In particular "not shown" is not "did not happen" (DESIGN §3: silence proves nothing): a list can
lag, a key can see less than everything, an object can be archived.

Windows: an effect belongs to the window its verdict was recorded in (it settled in [since,
until)), and a provider object to the window it was created in. The object of an effect that
settled in the window may have been made before it, by up to the time from the effect's first
dispatch to its verdict (a resend under the same key replays the first object), so the provider
is listed from `lookback` before the window (the caller's: a target's key window or in-flight
time) to `CLOCK_SKEW` after it; only objects created in the window itself are findings."""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gate_client.money import Money
from gate_client.protocol import FinalState, State
from ledger.core.entries import format_timestamp

# How far the provider's clock and the notary's may disagree: objects are listed this much past
# the window's end, so an effect that settled just before `until` finds its object.
CLOCK_SKEW = timedelta(minutes=5)


class FindingKind(enum.StrEnum):
    NOT_ADMITTED = "not_admitted"
    NOT_SHOWN = "not_shown"
    SHOWN_NOT_COMMITTED = "shown_not_committed"
    DUPLICATE = "duplicate"
    AMOUNT_DIFFERS = "amount_differs"


class ReconciliationError(ValueError):
    """The provider's answer cannot be compared: nothing is found and nothing recorded."""


@dataclass(frozen=True)
class Window:
    """[since, until), both timezone-aware."""

    since: datetime
    until: datetime

    def __post_init__(self) -> None:
        if self.since.tzinfo is None or self.until.tzinfo is None:
            raise ReconciliationError("a reconciliation window's ends must be timezone-aware")
        if self.since >= self.until:
            raise ReconciliationError("a reconciliation window's since must be before its until")

    def __contains__(self, moment: datetime) -> bool:
        return self.since <= moment < self.until

    def listed(self, lookback: timedelta) -> Window:
        """The window the provider is listed over: `lookback` before, CLOCK_SKEW after."""
        return Window(self.since - lookback, self.until + CLOCK_SKEW)


@dataclass(frozen=True)
class ProviderRecord:
    """One object the provider shows, as far as the comparison and its reviewer need it."""

    ref: str  # the provider's id for it: re_..., an email id, a result_ref
    created_at: datetime
    effect_id: str | None  # the effect id it carries, None if it carries none
    evidence: Mapping[str, Any]  # the fields that matter, as the provider shows them (JSON)
    money: Money | None = None  # what it moved, as the provider shows it; None: no amount


@dataclass(frozen=True)
class AdmittedEffect:
    """An effect of the target as the tenant's ledger has it."""

    effect_id: str
    state: str  # its receipt's final state
    result_ref: str  # what its commit recorded the provider called it ("" none)
    settled_at: datetime | None
    money: Money | None = None  # what its PROPOSED says it moves (proposed_money); None: none

    @property
    def happened(self) -> bool:
        return FinalState.parse(self.state).happened is True

    @property
    def in_flight(self) -> bool:
        return FinalState.parse(self.state).state in (State.PROPOSED, State.DISPATCHED)


@dataclass(frozen=True)
class Finding:
    kind: FindingKind
    effect_id: str  # the admitted effect it is about; "" for an object no effect asked for
    record: ProviderRecord | None  # None for not_shown
    state: str = ""  # the effect's final state, when there is an effect
    admitted_money: Money | None = None  # amount_differs: what the effect's payload says

    @property
    def subject(self) -> str:
        """What makes a finding once per target and kind: the provider's object, or for an
        effect the provider does not show, the effect."""
        return self.record.ref if self.record is not None else self.effect_id

    def body(self, *, target: str, window: Window) -> dict[str, Any]:
        """The ledger entry's body: the target, the window, what was found, and the provider's
        record as the evidence. An object claiming an effect the tenant never admitted keeps
        the claim in `claimed_effect_id` (the entry's effect id is only ever an admitted one).
        An amount_differs finding states both sides in `amounts`: what the effect's payload
        says (`admitted`) and what the provider's object moved (`provider`)."""
        body: dict[str, Any] = {
            "target": target,
            "window": {
                "since": format_timestamp(window.since),
                "until": format_timestamp(window.until),
            },
            "finding": str(self.kind),
        }
        if self.effect_id:
            body["effect_id"] = self.effect_id
            body["state"] = self.state
        if self.record is not None:
            body["provider_ref"] = self.record.ref
            body["provider_created_at"] = format_timestamp(self.record.created_at)
            body["evidence"] = dict(self.record.evidence)
            if self.record.effect_id is not None and self.record.effect_id != self.effect_id:
                body["claimed_effect_id"] = self.record.effect_id
        shown = self.record.money if self.record is not None else None
        if self.admitted_money is not None and shown is not None:  # amount_differs
            body["amounts"] = {
                "admitted": _money_body(self.admitted_money),
                "provider": _money_body(shown),
            }
        return body


def _money_body(money: Money) -> dict[str, Any]:
    return {"amount_minor": money.amount_minor, "currency": money.currency}


def compare(
    records: Iterable[ProviderRecord],
    admitted: Mapping[str, AdmittedEffect],
    window: Window,
) -> list[Finding]:
    """The findings of one target over `window`.

    `records`: what the provider lists over `window.listed(lookback)`. `admitted`: the target's
    effects by id, every one a record names (whenever it was proposed) and every one that settled
    in the window. Findings come in a stable order: by kind, then subject."""
    by_effect: dict[str, list[ProviderRecord]] = {}
    findings: list[Finding] = []
    for record in sorted(records, key=lambda r: (r.created_at, r.ref)):
        effect = admitted.get(record.effect_id) if record.effect_id is not None else None
        if effect is not None:
            by_effect.setdefault(effect.effect_id, []).append(record)
        elif record.created_at in window:
            findings.append(Finding(FindingKind.NOT_ADMITTED, "", record))
    for effect in admitted.values():
        findings += _effect_findings(effect, by_effect.get(effect.effect_id, []), window)
    return sorted(findings, key=lambda f: (str(f.kind), f.subject))


def _effect_findings(
    effect: AdmittedEffect, shown: Sequence[ProviderRecord], window: Window
) -> list[Finding]:
    in_window = [r for r in shown if r.created_at in window]
    if effect.in_flight:
        return []  # its verdict is still to come, from the agent or the notary's sweep
    findings = [
        Finding(FindingKind.AMOUNT_DIFFERS, effect.effect_id, r, effect.state, effect.money)
        for r in in_window
        if money_differs(effect.money, r.money)
    ]
    if not effect.happened:
        return findings + [
            Finding(FindingKind.SHOWN_NOT_COMMITTED, effect.effect_id, r, effect.state)
            for r in in_window
        ]
    own = _own_record(effect, shown)
    findings += [
        Finding(FindingKind.DUPLICATE, effect.effect_id, r, effect.state)
        for r in in_window
        if r is not own
    ]
    settled_here = effect.settled_at is not None and effect.settled_at in window
    if own is None and settled_here:
        findings.append(Finding(FindingKind.NOT_SHOWN, effect.effect_id, None, effect.state))
    return findings


def money_differs(admitted: Money | None, shown: Money | None) -> bool:
    """Whether the provider's object moved other money than the effect's payload says: another
    amount, or another currency where both name one (a payload naming none leaves it to the
    provider: a Stripe refund is in its charge's currency). Nothing to compare when either
    names no amount (an email; a refund of the whole charge)."""
    if admitted is None or shown is None:
        return False
    if admitted.amount_minor != shown.amount_minor:
        return True
    return bool(admitted.currency and shown.currency) and admitted.currency != shown.currency


def _own_record(effect: AdmittedEffect, shown: Sequence[ProviderRecord]) -> ProviderRecord | None:
    """The object the effect's commit recorded: the one of its result_ref, or, for a verdict
    that recorded none (a person's), the first the provider made for it."""
    if effect.result_ref:
        return next((r for r in shown if r.ref == effect.result_ref), None)
    return shown[0] if shown else None
