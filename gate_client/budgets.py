"""Rolling budgets on a lease: at most so much money and so many effects per window, for every
agent key together (`tenant`) or for each agent key alone (`agent_key`).

The rules every journal and every reader apply, so the notary's check at dispatch, the receipt
and the auditor's offline re-derivation never disagree:
- an effect spends from a budget at its first dispatch under a budgeted lease, atomically with
  recording that DISPATCHED, whose body states the budget as it stood (`BudgetStatement`):
  spent before, this effect, the limits;
- the spend counts while its dispatch lies inside the window (`window_start`);
- an effect known not to have happened (FAILED, REFUSED, resolved as not happened, and no
  evidence says otherwise) gives its spend back; one that may have happened (in flight,
  AMBIGUOUS, contradicted) holds it, because silence is not a refund;
- spends count by pool: the leases granted from one AP2 mandate share one (the mandate's hash,
  gate_client.mandates), so its budget spans them; any other lease is a pool of its own."""

from __future__ import annotations

import bisect
import enum
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from gate_client.protocol import standing
from ledger.core.entries import Entry, EntryKind

MAX_WINDOW_SECONDS = 366 * 24 * 3600


class BudgetPer(enum.StrEnum):
    TENANT = "tenant"  # every agent key of the tenant together, under this lease
    AGENT_KEY = "agent_key"  # each agent key on its own


@dataclass(frozen=True)
class Budget:
    per: BudgetPer
    window_seconds: int
    # In minor units of the lease's currency (a lease with an amount budget names one).
    max_amount: int | None = None
    max_count: int | None = None

    @property
    def window(self) -> timedelta:
        return timedelta(seconds=self.window_seconds)

    def body(self) -> dict[str, Any]:
        return {
            "per": str(self.per),
            "window_seconds": self.window_seconds,
            "max_amount": self.max_amount,
            "max_count": self.max_count,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Budget:
        return cls(
            per=BudgetPer(body["per"]),
            window_seconds=body["window_seconds"],
            max_amount=body.get("max_amount"),
            max_count=body.get("max_count"),
        )


_BUDGET_KEYS = {"per", "window_seconds", "max_amount", "max_count"}


def parse_budgets(items: object) -> tuple[Budget, ...]:
    """Budgets from their JSON form (as a grant or a request gives them); ValueError saying
    what is wrong. Whether they make sense as a lease's terms: `budget_problem`."""
    if not isinstance(items, list):
        raise ValueError("budgets: a list of {per, window_seconds, max_amount, max_count}")
    budgets = []
    for item in items:
        if not isinstance(item, dict) or not {"per", "window_seconds"} <= item.keys() <= (
            _BUDGET_KEYS
        ):
            raise ValueError(
                "a budget is {per, window_seconds, max_amount, max_count}: per and "
                "window_seconds required, nothing else"
            )
        if item["per"] not in BudgetPer.__members__.values():
            raise ValueError(f"a budget's per is one of {', '.join(BudgetPer)}")
        budgets.append(Budget.from_body(item))
    return tuple(budgets)


def budget_problem(budgets: Sequence[Budget], *, currency: str | None) -> str | None:
    """Why these budgets cannot be granted as terms of one lease; None if they can."""
    seen: set[BudgetPer] = set()
    for budget in budgets:
        if budget.per in seen:
            return f"two budgets per {budget.per}: one each at most"
        seen.add(budget.per)
        if not _whole(budget.window_seconds) or budget.window_seconds < 1:
            return "a budget's window_seconds must be a whole number of seconds, at least 1"
        if budget.window_seconds > MAX_WINDOW_SECONDS:
            return f"a budget's window is at most {MAX_WINDOW_SECONDS} seconds (366 days)"
        if budget.max_amount is None and budget.max_count is None:
            return "a budget bounds max_amount, max_count or both"
        for name, value in (("max_amount", budget.max_amount), ("max_count", budget.max_count)):
            if value is not None and (not _whole(value) or value < 1):
                return f"a budget's {name} must be a whole number, at least 1"
        if budget.max_amount is not None and currency is None:
            # Summing $ and ¥ is not a budget: the amounts count in the lease's currency.
            return "a budget with max_amount needs the lease to name its currency"
    return None


def _whole(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Spent:
    amount: int = 0
    count: int = 0


@dataclass(frozen=True)
class Total:
    """What every spend of a pool together may come to, whenever made: an open mandate's
    budget and occurrences, over all the leases granted from it."""

    max_amount: int | None
    max_count: int | None

    def refusal(self, held: Spent, amount: int) -> str | None:
        if self.max_count is not None and held.count + 1 > self.max_count:
            return f"the mandate allows {self.max_count} effects in all; {held.count} hold spends"
        if self.max_amount is not None and held.amount + amount > self.max_amount:
            return (
                f"the mandate allows {self.max_amount} in all; {held.amount} is held and this "
                f"is {amount}"
            )
        return None


def lease_pool(body: Mapping[str, Any]) -> str:
    """The pool a LEASE_GRANTED body's lease spends from: the hash of the mandate it was
    granted from, as the entry states it; else the lease's own id."""
    mandate = body.get("mandate")
    stated = mandate.get("mandate_hash") if isinstance(mandate, Mapping) else None
    return stated if isinstance(stated, str) and stated else str(body["lease_id"])


def lease_pools(entries: Iterable[Entry]) -> dict[str, str]:
    """Each lease's pool (`lease_pool`), from the LEASE_GRANTED entries among `entries`."""
    pools: dict[str, str] = {}
    for entry in entries:
        if entry.kind == EntryKind.LEASE_GRANTED:
            body = entry.body_value()
            pools.setdefault(body["lease_id"], lease_pool(body))
    return pools


@dataclass(frozen=True)
class Spend:
    """What one effect holds of its lease's budgets: from its first dispatch, by its key."""

    effect_id: str
    lease_id: str
    at: datetime
    amount: int
    spender: str


def window_start(budget: Budget, now: datetime) -> datetime:
    """A spend counts at `now` when its dispatch is after this instant."""
    return now - budget.window


def spend_of(history: Sequence[Entry]) -> Spend | None:
    """The spend the effect whose entries are `history` holds now; None if it never spent or
    gave its spend back."""
    spent = _first_spend(history)
    if spent is None:
        return None
    stood = standing(history)
    if stood.state is not None and stood.state.happened is False and not stood.contradictions:
        return None
    return spent[1]


def _first_spend(history: Sequence[Entry]) -> tuple[Entry, Spend, BudgetStatement] | None:
    """The effect's spending DISPATCHED, what it spent, and the statement it made."""
    for entry in history:
        body = entry.body_value() if entry.kind == EntryKind.DISPATCHED else {}
        if "budget" in body:
            statement = BudgetStatement.from_body(body["budget"])
            spend = Spend(
                effect_id=entry.effect_id,
                lease_id=body["lease_id"],
                at=entry.created_at,
                amount=statement.amount,
                spender=statement.spender,
            )
            return entry, spend, statement
    return None


def spent_in(spends: Iterable[Spend], budget: Budget, *, now: datetime, spender: str) -> Spent:
    """What `spends` (one pool's) count against `budget` at `now` for `spender`."""
    start = window_start(budget, now)
    counted = [
        s
        for s in spends
        if s.at > start and (budget.per == BudgetPer.TENANT or s.spender == spender)
    ]
    return Spent(sum(s.amount for s in counted), len(counted))


def spends_before(entries: Sequence[Entry], *, lease_id: str, seq: int) -> list[Spend]:
    """Every spend in `lease_id`'s pool as the entries before `seq` leave them: what a journal
    held when it checked a dispatch recorded at `seq`."""
    by_effect: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.seq < seq and entry.effect_id:
            by_effect.setdefault(entry.effect_id, []).append(entry)
    pools = lease_pools(e for e in entries if e.seq < seq and not e.effect_id)
    pool = pools.get(lease_id, lease_id)
    spends = (spend_of(history) for history in by_effect.values())
    return [s for s in spends if s is not None and pools.get(s.lease_id, s.lease_id) == pool]


@dataclass(frozen=True)
class BudgetStanding:
    """One budget as it stood at a dispatch: what was spent in its window before, and its
    limits. With this effect's amount, the receipt shows whether the dispatch fit."""

    budget: Budget
    spent_before: Spent

    def body(self) -> dict[str, Any]:
        return {
            **self.budget.body(),
            "spent_before": self.spent_before.amount,
            "count_before": self.spent_before.count,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> BudgetStanding:
        return cls(Budget.from_body(body), Spent(body["spent_before"], body["count_before"]))

    def refusal(self, amount: int) -> str | None:
        budget, spent = self.budget, self.spent_before
        if budget.max_amount is not None and amount < 1:
            # A negative "refund" would make room in the budget instead of using it.
            return f"the budget per {budget.per} counts amounts: {amount} is not one"
        if budget.max_count is not None and spent.count + 1 > budget.max_count:
            return (
                f"the budget per {budget.per} allows {budget.max_count} effects per "
                f"{budget.window_seconds} s and {spent.count} were dispatched"
            )
        if budget.max_amount is not None and spent.amount + amount > budget.max_amount:
            return (
                f"the budget per {budget.per} allows {budget.max_amount} per "
                f"{budget.window_seconds} s, {spent.amount} is spent and this is {amount}"
            )
        return None


@dataclass(frozen=True)
class BudgetStatement:
    """What a DISPATCHED body says of its budgets: who spends, how much, and each budget as it
    stood. Written only on an effect's first dispatch under a budgeted lease."""

    spender: str
    amount: int
    standings: tuple[BudgetStanding, ...]

    def body(self) -> dict[str, Any]:
        return {
            "spender": self.spender,
            "amount": self.amount,
            "standings": [s.body() for s in self.standings],
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> BudgetStatement:
        standings = tuple(BudgetStanding.from_body(s) for s in body["standings"])
        return cls(body["spender"], body["amount"], standings)

    def refusal(self) -> str | None:
        return next((r for s in self.standings if (r := s.refusal(self.amount)) is not None), None)


SpentFor = Callable[[Budget], Spent]


def budget_statement(
    budgets: Sequence[Budget], *, spender: str, amount: int, spent_for: SpentFor
) -> BudgetStatement:
    """The statement of a dispatch spending `amount`: each budget's standing as `spent_for`
    (the journal's own count of the lease's spends, at the dispatch instant) gives it."""
    return BudgetStatement(spender, amount, tuple(BudgetStanding(b, spent_for(b)) for b in budgets))


def statement_of(history: Sequence[Entry]) -> BudgetStatement | None:
    """The budget statement of an effect's spending dispatch, if it has one."""
    spent = _first_spend(history)
    return spent[2] if spent is not None else None


@dataclass(frozen=True)
class _SpendingEffect:
    """One effect that spent, with whether it held its spend after each of its entries."""

    spend: Spend
    seq: int  # of its spending DISPATCHED
    statement: BudgetStatement
    held_after: tuple[tuple[int, bool], ...]  # (entry seq, holds its spend once it is in)

    def holds_before(self, seq: int) -> bool:
        position = bisect.bisect_left(self.held_after, (seq, False)) - 1
        return position >= 0 and self.held_after[position][1]


def budget_problems(
    entries: Iterable[Entry],
    *,
    pools: Mapping[str, str] | None = None,
    totals: Mapping[str, Total] | None = None,
) -> tuple[list[str], int]:
    """Every budget statement in the log re-derived from the entries before it, the spends of
    each lease's pool counted together (`pools`: lease id to pool, a lease not named being its
    own), and each spend within its pool's total, if `totals` names one: the problems, and how
    many statements were checked. `entries` must hold every entry of the log's effects (an
    export holds them all), or the spends it lacks are not counted."""
    pools, totals = pools or {}, totals or {}
    histories: dict[str, list[Entry]] = {}
    for entry in entries:
        if entry.effect_id:
            histories.setdefault(entry.effect_id, []).append(entry)
    by_pool: dict[str, list[_SpendingEffect]] = {}
    for history in histories.values():
        spending = _spending(history)
        if spending is not None:
            lease_id = spending.spend.lease_id
            by_pool.setdefault(pools.get(lease_id, lease_id), []).append(spending)
    problems: list[str] = []
    checked = 0
    for pool, effects in by_pool.items():
        effects.sort(key=lambda e: e.seq)
        total = totals.get(pool)
        for position, effect in enumerate(effects):
            earlier = [e.spend for e in effects[:position] if e.holds_before(effect.seq)]
            checked += 1
            beyond = total.refusal(_held(earlier), effect.spend.amount) if total else None
            if beyond is not None:
                problems.append(
                    f"{effect.spend.effect_id}: entry {effect.seq} is beyond its pool: {beyond}"
                )
            for stated in effect.statement.standings:
                held = spent_in(
                    earlier, stated.budget, now=effect.spend.at, spender=effect.spend.spender
                )
                if held != stated.spent_before:
                    said = stated.spent_before
                    problems.append(
                        f"{effect.spend.effect_id}: entry {effect.seq} states {said.amount} spent"
                        f" in {said.count} effects per {stated.budget.per} before it; the ledger"
                        f" holds {held.amount} in {held.count}"
                    )
    return problems, checked


def _held(spends: Sequence[Spend]) -> Spent:
    return Spent(sum(s.amount for s in spends), len(spends))


def _spending(history: Sequence[Entry]) -> _SpendingEffect | None:
    spent = _first_spend(history)
    if spent is None:
        return None
    dispatched, spend, statement = spent
    held_after = tuple(
        (entry.seq, spend_of(history[: position + 1]) is not None)
        for position, entry in enumerate(history)
        if entry.seq >= dispatched.seq
    )
    return _SpendingEffect(spend, dispatched.seq, statement, held_after)
