"""`@gated`: a plain Python function that acts on the world, run through the gate.

The function is the target: its bound arguments are the payload, and the case, lease and
premises are read from them by the callables given to the decorator. A call returns the
function's result once the effect committed, or raises an `EffectNotDone` carrying the receipt.
Calling again for the same case does not call the function again: it returns the first result
(its JSON form, as recorded), and other arguments for that case are refused, never sent.

A function that can dedupe declares a parameter named ``effect_id``: the gate fills it (pass it
on as the idempotency key) and the function may then be declared tier 1. A ``lookup`` makes it
tier 2. Otherwise it is tier 3: after a crash in the call, nobody resends and a person decides.
The declaration follows from the tier: only tier 1 has a key window, a tier-3 function has no
lookup, and arguments that say otherwise are a TypeError. A function with a lookup gives
``max_inflight`` (how long a call may still be running), since its "not found" counts after it.
The default target name is the function's module and qualified name in the notary's alphabet
(`default_target_name`).

    functions = GatedFunctions(LocalJournal("var/journal"))

    @functions.gated(case_id=lambda order, **_: f"order:{order}", lease_id="lease-7")
    def refund(order: str, amount_cents: int) -> dict: ...

    functions.recover()  # at start-up: settle what a crashed process left in flight"""

from __future__ import annotations

import functools
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from gate_client.adapters.declarations import target_name
from gate_client.adapters.outcomes import (
    EffectNotDone,
    committed_result_ref,
    raise_unless_committed,
)
from gate_client.gate import Gate
from gate_client.journal import Journal, utc_now
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Premise, Proposal
from gate_client.receipts import Receipt, derive_receipt
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
)
from ledger.core.canonical import canonical_json

P = ParamSpec("P")
R = TypeVar("R")
EFFECT_ID_PARAMETER = "effect_id"
FromArguments = Callable[..., str]
# How long another process waits for a call still in progress before it decides, when nothing
# counts the call's silence (no lookup): a resend under a key goes at once, tier 3 is AMBIGUOUS.
DEFAULT_MAX_INFLIGHT = timedelta(seconds=30)
# The notary's target names (notary.services._TARGET_NAME): 1-63 of a-z, 0-9, '_' and '-',
# starting and ending with a letter or digit.


@dataclass
class FunctionTarget:
    """A decorated function as the gate's Target. `send` calls it with the payload."""

    name: str
    function: Callable[..., Any]
    tier: Tier
    key_window: timedelta | None
    max_inflight: timedelta
    fails_on: tuple[type[BaseException], ...]
    find: Callable[..., Any] | None
    takes_effect_id: bool  # it dedupes on the effect id, passed as `effect_id`
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False
    money: MoneyDeclaration | None = None  # which arguments hold the money it moves, if any
    queryable: bool = field(init=False)
    # What the function returned or raised in this process, by effect id, for the caller.
    results: dict[str, Any] = field(default_factory=dict)
    errors: dict[str, BaseException] = field(default_factory=dict)

    def __post_init__(self) -> None:
        """The declaration follows from the tier: what contradicts it is a TypeError."""
        called = getattr(self.function, "__name__", self.name)
        if self.tier == Tier.DEDUPES and not self.takes_effect_id:
            raise TypeError(f"tier 1 needs {called}({EFFECT_ID_PARAMETER}=...)")
        if self.tier == Tier.LOOKUP and self.find is None:
            raise TypeError("tier 2 needs a lookup")
        if self.tier == Tier.NEITHER and self.find is not None:
            raise TypeError(
                f"tier 3 is a target that cannot be looked up: {called} cannot have a lookup "
                "(a lookup makes it tier 2)"
            )
        if self.key_window is not None and self.tier != Tier.DEDUPES:
            raise TypeError(
                f"only a tier-1 target dedupes on a key, so only it has a key window: tier "
                f"{int(self.tier)} cannot have key_window={self.key_window}"
            )
        if self.max_inflight <= timedelta(0):
            raise ValueError("max_inflight must be positive")
        self.queryable = self.find is not None

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        try:
            result = self.function(**self._arguments(effect_id, payload))
        except self.fails_on as error:
            self.errors[effect_id] = error
            return FailedDefinitively(type(error).__name__)
        except Exception as error:
            # It may have acted before it raised: only the tier may decide what comes next.
            self.errors[effect_id] = error
            raise InDoubt(f"{type(error).__name__}: {error}") from error
        self.results[effect_id] = result
        return Sent(_as_result_ref(result))

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        if self.find is None:
            raise TypeError(f"{self.name} has no lookup")
        found = self.find(**self._arguments(effect_id, payload))
        return NotFound() if found is None else Found(_as_result_ref(found))

    def _arguments(self, effect_id: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        if self.takes_effect_id:
            return {**payload, EFFECT_ID_PARAMETER: effect_id}
        return dict(payload)


@dataclass(frozen=True)
class _Spec:
    signature: inspect.Signature
    action: str
    case_id: FromArguments
    lease_id: FromArguments
    premises: Callable[..., Sequence[Premise]]


class GatedFunctions:
    """One gate over every decorated function, so one `recover()` settles them all."""

    def __init__(
        self,
        journal: Journal,
        *,
        clock: Callable[[], datetime] = utc_now,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.journal = journal
        self._targets: dict[str, FunctionTarget] = {}
        self._specs: dict[str, _Spec] = {}
        self._names: dict[Callable[..., Any], str] = {}
        self.gate = Gate(
            journal, self._targets, premises_for=self._premises_for, clock=clock, sleep=sleep
        )

    def gated(
        self,
        *,
        case_id: FromArguments,
        lease_id: FromArguments | str,
        premises: Callable[..., Sequence[Premise]] = lambda **_: (),
        target: str | None = None,
        action: str | None = None,
        tier: Tier | None = None,
        lookup: Callable[..., Any] | None = None,
        key_window: timedelta | None = None,
        max_inflight: timedelta | None = None,
        fails_on: tuple[type[BaseException], ...] = (),
        money: MoneyDeclaration | None = None,
    ) -> Callable[[Callable[P, R]], Callable[..., R]]:
        """`case_id`, `lease_id` and `premises` take the call's arguments by name. `lookup`
        takes them too and returns what the function would have returned, or None if it never
        acted. Exceptions in `fails_on` mean it refused for good (FAILED); any other means it
        may have acted. `tier` defaults to what the function offers: 1 if it takes an
        ``effect_id``, else 2 with a lookup, else 3; a `key_window` is tier 1's alone, and a
        tier-3 function has no lookup. `max_inflight` is how long a call may still be running:
        required with a lookup, whose "not found" counts only after it (nothing else can tell
        how long a plain function runs); else `DEFAULT_MAX_INFLIGHT`. `target` defaults to
        `default_target_name(function)`. `money` declares which arguments hold the amount
        and currency it moves (gate_client.money), if it moves any. The gated function is
        called without its ``effect_id`` (the gate passes it), which no ParamSpec can say: it
        takes ``...``."""

        def decorate(function: Callable[P, R]) -> Callable[..., R]:
            signature = inspect.signature(function)
            takes_id = EFFECT_ID_PARAMETER in signature.parameters
            chosen = tier or (Tier.DEDUPES if takes_id else Tier.LOOKUP if lookup else Tier.NEITHER)
            if lookup is not None and max_inflight is None:
                raise TypeError(
                    f'{function.__name__} has a lookup, whose "not found" counts once '
                    "max_inflight has passed: give max_inflight=, the longest a call may run"
                )
            name = target or default_target_name(function)
            if name in self._targets:
                raise ValueError(f"a gated function is already named {name!r}")
            self._targets[name] = FunctionTarget(
                name=name,
                function=function,
                tier=Tier(chosen),
                key_window=key_window,
                max_inflight=DEFAULT_MAX_INFLIGHT if max_inflight is None else max_inflight,
                fails_on=fails_on,
                find=lookup,
                takes_effect_id=takes_id,
                money=money,
            )
            self._specs[name] = _Spec(
                signature=signature.replace(
                    parameters=[
                        p for p in signature.parameters.values() if p.name != EFFECT_ID_PARAMETER
                    ]
                ),
                action=action or function.__name__,
                case_id=case_id,
                lease_id=(lambda **_: lease_id) if isinstance(lease_id, str) else lease_id,
                premises=premises,
            )

            @functools.wraps(function)
            def call(*args: Any, **kwargs: Any) -> R:
                return self._call(name, args, kwargs)  # type: ignore[no-any-return]

            self._names[call] = name
            return call

        return decorate

    def effect_id_of(self, gated: Callable[..., Any], /, *args: Any, **kwargs: Any) -> str:
        """The effect a call with these arguments is, to find its receipt."""
        return self._proposal(self._names[gated], args, kwargs).effect_id

    def recover(self) -> list[Receipt]:
        return self.gate.recover()

    def receipt(self, effect_id: str) -> Receipt:
        return derive_receipt(self.journal.receipt_entries(effect_id), effect_id)

    def _proposal(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Proposal:
        spec = self._specs[name]
        bound = spec.signature.bind(*args, **kwargs)
        bound.apply_defaults()
        arguments = dict(bound.arguments)
        return Proposal(
            case_id=spec.case_id(**arguments),
            target=name,
            action=spec.action,
            payload=arguments,
            lease_id=spec.lease_id(**arguments),
            premises=tuple(spec.premises(**arguments)),
        )

    def _call(self, name: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> Any:
        proposal = self._proposal(name, args, kwargs)
        effect_id = proposal.effect_id
        target = self._targets[name]
        try:
            receipt = self.gate.submit(proposal)
            try:
                raise_unless_committed(receipt)
            except EffectNotDone as not_done:
                raise not_done from target.errors.get(effect_id)
            if effect_id in target.results:
                return target.results[effect_id]
            result_ref = committed_result_ref(self.journal, effect_id)
            return None if result_ref is None else json.loads(result_ref)
        finally:
            target.results.pop(effect_id, None)
            target.errors.pop(effect_id, None)

    def _premises_for(self, proposed: Mapping[str, Any]) -> Sequence[Premise]:
        spec = self._specs[proposed["target"]]
        return tuple(spec.premises(**proposed["payload"]))


def default_target_name(function: Callable[..., Any]) -> str:
    """``module-qualname`` as a name the notary takes (declarations.target_name)."""
    return target_name(f"{function.__module__}.{function.__qualname__}")


def _as_result_ref(result: Any) -> str:
    """The result as recorded: its canonical JSON, or, for a value JSON cannot hold, its repr
    as a JSON string. Never raises: the function has already acted."""
    try:
        return canonical_json(result).decode()
    except (TypeError, ValueError):
        return canonical_json(repr(result)).decode()
