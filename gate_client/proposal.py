"""What the agent asks for: a proposal with its premises, and the hash that pins its payload."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gate_client.ids import effect_id_for
from gate_client.protocol import TargetDeclaration
from ledger.core.canonical import canonical_json


@dataclass(frozen=True)
class PremiseResult:
    """Whether a premise holds now, and what was looked at to decide (JSON)."""

    holds: bool
    observed: Any = None


@dataclass(frozen=True)
class Premise:
    """A named, absolute predicate over the world ("the refund is succeeded or pending").

    Never "unchanged since capture": a relative premise captures whatever state it first sees,
    an already-bad one included (the seed's near-miss bug)."""

    name: str
    check: Callable[[], PremiseResult]

    def evaluate(self) -> dict[str, Any]:
        """Run the check; a check that raises does not hold, and says why."""
        try:
            result = self.check()
        except Exception as exc:  # a premise we cannot evaluate must not pass
            return {"name": self.name, "holds": False, "observed": {"error": repr(exc)}}
        if not isinstance(result, PremiseResult):
            raise TypeError(f"premise {self.name!r} returned {type(result).__name__}")
        canonical_json(result.observed)  # observations go into the journal: refuse early
        return {"name": self.name, "holds": bool(result.holds), "observed": result.observed}


@dataclass(frozen=True)
class Proposal:
    case_id: str
    target: str
    action: str
    payload: Mapping[str, Any]
    lease_id: str
    premises: Sequence[Premise] = field(default_factory=tuple)
    tenant: str = ""
    # The class the case belongs to (a queue, a tag), for a standing lease over that class; it
    # is not part of the effect's id.
    case_class: str = ""

    @property
    def effect_id(self) -> str:
        return effect_id_for(self.case_id, self.target, self.action, tenant=self.tenant)

    @property
    def payload_bytes(self) -> bytes:
        return canonical_json(dict(self.payload))

    @property
    def payload_hash(self) -> str:
        return hashlib.sha256(self.payload_bytes).hexdigest()

    def proposed_body(
        self,
        premises: Sequence[Mapping[str, Any]],
        declaration: TargetDeclaration | None = None,
    ) -> dict[str, Any]:
        """The PROPOSED entry's body: the decision, with the premises as observed, and the
        target's declaration the gate goes by, so the ledger alone says how its money reads
        (the gate always gives it; the notary writes its own record's into a proposal that
        lacks one). `case_class` only when the case has one."""
        classed = {"case_class": self.case_class} if self.case_class else {}
        declared = {"declaration": declaration.body()} if declaration is not None else {}
        return {
            **classed,
            **declared,
            "case_id": self.case_id,
            "target": self.target,
            "action": self.action,
            "tenant": self.tenant,
            "lease_id": self.lease_id,
            "payload": dict(self.payload),
            "payload_hash": self.payload_hash,
            "premises": [dict(p) for p in premises],
        }
