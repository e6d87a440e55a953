"""The scenarios, each declared as data (systems x faults, the world a cell runs in, the judge
that scores it, the findings written from the cells) and run by experiments.kit.cells.run."""

from __future__ import annotations

from experiments.kit.cells import Declared


def _declared() -> dict[str, Declared]:
    from experiments.scenarios import coding, email, refund

    return {"refund": refund.SCENARIO, "email": email.SCENARIO, "coding": coding.SCENARIO}


def __getattr__(name: str) -> dict[str, Declared]:
    """SCENARIOS, imported on first use: a test of one scenario imports only that one."""
    if name == "SCENARIOS":
        return _declared()
    raise AttributeError(name)
