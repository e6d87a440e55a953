"""A process that refunds through a @gated function, SIGKILLed at a crash point and restarted.

    python -m testkit.agents.gated_agent submit|recover JOURNAL STORE [--lookup]

`submit` refunds order A1 once; `recover` runs the functions' recover() in a new process and
prints the final states. The payment service is a file of acts (STORE): the ground truth."""

from __future__ import annotations

import argparse
import json
from datetime import timedelta
from pathlib import Path
from typing import Any

from gate_client.adapters.decorator import GatedFunctions
from gate_client.journal import LocalJournal
from gate_client.money import MoneyDeclaration
from gate_client.targets import Tier

# The refund function's money: its amount_cents argument, as the leases' limits name it.
REFUND_MONEY = MoneyDeclaration(amount_field="amount_cents")


class Payments:
    """A payment service whose every act is a line in a file: what really happened."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.fail_after_acting: type[Exception] | None = None

    def refund(self, order: str, amount_cents: int, key: str | None = None) -> dict[str, Any]:
        if key is not None and (done := self.find(key)) is not None:
            return done
        act = {"id": f"re_{len(self.acts()) + 1}", "order": order, "amount": amount_cents}
        with self.path.open("a") as file:
            file.write(json.dumps({**act, "key": key}) + "\n")
        if self.fail_after_acting is not None:
            error, self.fail_after_acting = self.fail_after_acting, None
            raise error("the connection dropped after the refund")
        return act

    def find(self, key: str) -> dict[str, Any] | None:
        found = [a for a in self.acts() if a["key"] == key]
        return {k: found[0][k] for k in ("id", "order", "amount")} if found else None

    def acts(self) -> list[dict[str, Any]]:
        if not self.path.exists():
            return []
        return [json.loads(line) for line in self.path.read_text().splitlines()]


def case(order: str, **_: Any) -> str:
    return f"order:{order}"


def lease(order: str, **_: Any) -> str:
    return f"lease-{order}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["submit", "recover"])
    parser.add_argument("journal", type=Path)
    parser.add_argument("store", type=Path)
    parser.add_argument("--lookup", action="store_true")
    args = parser.parse_args()
    payments = Payments(args.store)
    functions = GatedFunctions(LocalJournal(args.journal))

    def find(order: str, amount_cents: int, effect_id: str) -> dict[str, Any] | None:
        return payments.find(effect_id)

    @functions.gated(
        case_id=case,
        lease_id=lease,
        money=REFUND_MONEY,
        target="payments.refund",
        lookup=find if args.lookup else None,
        tier=Tier.LOOKUP if args.lookup else Tier.NEITHER,
        max_inflight=timedelta(seconds=1),
    )
    def refund(order: str, amount_cents: int, effect_id: str) -> dict[str, Any]:
        return payments.refund(order, amount_cents, key=effect_id)

    if args.role == "submit":
        print(json.dumps(refund("A1", 2_000)))
    else:
        print(json.dumps([receipt.final_state for receipt in functions.recover()]))


if __name__ == "__main__":
    main()
