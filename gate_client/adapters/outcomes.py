"""How an adapter hands a receipt back to code that expected a plain call: a committed effect
returns, anything else raises a typed error that carries its receipt."""

from __future__ import annotations

from gate_client.journal import Journal
from gate_client.protocol import COMMITTED_STATES, standing
from gate_client.receipts import Receipt
from ledger.core.entries import EntryKind


class EffectNotDone(Exception):
    """The effect did not (or may not have) happened; `receipt` says which and why."""

    def __init__(self, receipt: Receipt) -> None:
        super().__init__(f"{receipt.effect_id}: {receipt.final_state}")
        self.receipt = receipt


class EffectRefused(EffectNotDone):
    """REFUSED: the gate did not send it (lease, premise, changed payload). Known not done."""


class EffectFailed(EffectNotDone):
    """FAILED: the target refused it for good. Known not done."""


class EffectAmbiguous(EffectNotDone):
    """AMBIGUOUS, or resolved by a person: nothing can tell the gate whether it happened."""


class EffectHeldForPerson(EffectNotDone):
    """HELD: not sent, and no verdict, while an effect of its case (or its own evidence) waits
    for a person (`receipt.held_by`); submitted again once the person has decided, it goes."""


class EffectInFlight(EffectNotDone):
    """Dispatched and unanswered: a later `recover()` settles it. Retrying is safe."""


def raise_unless_committed(receipt: Receipt) -> None:
    state = receipt.final_state
    if state in COMMITTED_STATES:
        return
    if state.startswith("REFUSED:"):
        raise EffectRefused(receipt)
    if state.startswith("FAILED:"):
        raise EffectFailed(receipt)
    if state in ("PROPOSED", "DISPATCHED"):
        raise EffectInFlight(receipt)
    if state == "HELD":
        raise EffectHeldForPerson(receipt)
    raise EffectAmbiguous(receipt)


def committed_result_ref(journal: Journal, effect_id: str) -> str | None:
    """The target's reference for what it did, from the standing COMMITTED verdict."""
    verdict = standing(journal.history(effect_id)).verdict
    if verdict is None or verdict.kind != EntryKind.COMMITTED:
        return None
    result_ref: str = verdict.body_value()["result_ref"]
    return result_ref
