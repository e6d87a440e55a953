"""MCP tools through the gate: every tool call that may change the world is an effect with a
receipt, and the model cannot make it happen twice, outside its approval, or on stale facts.

Why. An agent that calls MCP tools directly repeats a refund when it retries after a lost answer,
acts after its approval was withdrawn, and lets the model's own words decide what it acts on.
Here each gated tool is a gate target: the call is journaled before it is made, the lease and
the premises are checked at the instant of dispatch, and a lost answer is settled by the tool's
tier instead of by calling again blindly.

What is gated. A tool whose annotations say ``read_only_hint=True`` passes straight through,
with no journal entry; every other tool is gated, since MCP says an unannotated tool may have
side effects. Annotations are the server's own hints: for a server you do not trust, name the
tools yourself with ``read_only=`` and ``gated=``.

Effect ids. A wrapper is bound to one approved case: the case and the lease come from the
approval, never from the model's arguments. A call's effect is (case, tool, action), the action
being the tool's name unless ``action_for`` says otherwise, so one tool is one effect per case:
calling it again with the same arguments returns the first outcome without calling it, and other
arguments are refused (``payload_changed``). A tool that declares an ``idempotency_key`` or
``interlock_effect_id`` argument receives the effect id there, whatever the model put in it.

Tiers. ``idempotent_hint=True``: a lost answer is resent under the same arguments and key
(tier 1). A read-only lookup tool named in ``lookups`` that answers ``{"found": bool,
"result_ref": str}`` for an effect id: look up, resend only if not found (tier 2). Otherwise a
lost answer is AMBIGUOUS and never resent (tier 3): a person decides.

    async with Client(server_url) as client:
        tools = GatedTools(
            client, journal, (await client.list_tools()).tools,
            case_id="case_42", lease_id="lease_7",
            premises={"issue_refund": lambda args: [payment_succeeded(args["payment"])]},
        )
        result = await tools.call_tool("issue_refund", {"payment": "pay_1", "amount_cents": 500})
        await tools.recover()  # at start-up: settle what a crashed process left in flight
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection, Mapping, Sequence
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from mcp import Client
from mcp_types import CallToolResult, ContentBlock, TextContent, Tool, ToolAnnotations

from gate_client.adapters.declarations import target_name
from gate_client.adapters.outcomes import (
    EffectAmbiguous,
    EffectFailed,
    EffectHeldForPerson,
    EffectInFlight,
    EffectRefused,
    committed_result_ref,
    raise_unless_committed,
)
from gate_client.gate import Gate
from gate_client.journal import Journal
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Premise, Proposal
from gate_client.protocol import standing
from gate_client.receipts import Receipt
from gate_client.targets import (
    FailedDefinitively,
    Found,
    InDoubt,
    LookupOutcome,
    NotFound,
    SendOutcome,
    Sent,
    Tier,
    Unknown,
)
from ledger.core.canonical import canonical_json

# Argument names through which a cooperating tool receives the effect id, to dedupe on or to
# be looked up by.
EFFECT_ID_ARGUMENTS = ("idempotency_key", "interlock_effect_id")

ArgumentPremises = Callable[[Mapping[str, Any]], Sequence[Premise]]

# What the tool answered to the call in progress, by effect id: set by `GatedTools.call` for the
# worker thread that runs the gate, so a concurrent call or a recovery never sees another's.
_ANSWERS: ContextVar[dict[str, CallToolResult] | None] = ContextVar("_ANSWERS", default=None)

_REFUSALS = {
    "lease_revoked": "the approval (lease) was revoked",
    "lease_expired": "the approval (lease) has expired",
    "lease_scope": "the approval (lease) does not cover this call",
    "lease_budget": "the approval's budget (lease) has no room left for this call",
    "stale_premise": "something it relies on no longer holds",
    "premise_unreadable": "something it relies on could not be read, so it was not checked",
    "payload_changed": (
        "this tool was already called for this case with other arguments, and the first call stands"
    ),
}


@dataclass(frozen=True)
class ToolCall:
    """What a call returned to the model, and the receipt the agent keeps (None: read-only)."""

    result: CallToolResult
    receipt: Receipt | None


class _Peer:
    """The connected client and the event loop it lives on, for the gate's worker thread."""

    def __init__(self, client: Client, loop: asyncio.AbstractEventLoop, timeout: float) -> None:
        self.client = client
        self.loop = loop
        self.timeout = timeout

    def call(self, name: str, arguments: dict[str, Any]) -> CallToolResult:
        """Call a tool from a worker thread; a call that outlasts the timeout is cancelled."""
        future = asyncio.run_coroutine_threadsafe(self.client.call_tool(name, arguments), self.loop)
        try:
            return future.result(self.timeout)
        except BaseException:
            future.cancel()
            raise


@dataclass
class McpToolTarget:
    """One gated MCP tool as the gate's Target: `name` is the target's (the tool's name as the
    notary takes one, declarations.target_name), `tool` the tool called. `key_argument`
    receives the effect id; `lookup_tool` is (read-only tool, its effect-id argument), for
    tier 2."""

    name: str
    tool: str
    tier: Tier
    max_inflight: timedelta
    peer: _Peer
    key_argument: str | None
    lookup_tool: tuple[str, str] | None
    queryable: bool
    key_window: timedelta | None = None  # a tier-1 tool is idempotent for good
    evidence_window: timedelta | None = None
    attests_before_acting: bool = False
    lookup_needs_key: bool = False
    money: MoneyDeclaration | None = None  # which arguments hold the money it moves, if any

    def send(self, effect_id: str, payload: Mapping[str, Any]) -> SendOutcome:
        arguments = dict(payload)
        if self.key_argument is not None:
            arguments[self.key_argument] = effect_id
        try:
            result = self.peer.call(self.tool, arguments)
        except Exception as error:
            # A timeout, a lost connection, an unreadable answer: the tool may have run.
            raise InDoubt(f"{self.tool}: {type(error).__name__}: {error}") from error
        answers = _ANSWERS.get()
        if answers is not None:
            answers[effect_id] = result
        if result.is_error:
            return FailedDefinitively("tool_error")  # it ran and said it did not do it
        return Sent(_result_ref(result))

    def lookup(self, effect_id: str, payload: Mapping[str, Any]) -> LookupOutcome:
        if self.lookup_tool is None:
            raise TypeError(f"{self.tool} has no lookup tool")
        tool, argument = self.lookup_tool
        try:
            result = self.peer.call(tool, {argument: effect_id})
        except Exception as error:
            return Unknown(f"{tool}: {type(error).__name__}: {error}")
        answer = result.structured_content
        if result.is_error or not isinstance(answer, dict):
            return Unknown(f"{tool} gave no answer: {_text(result.content)}")
        if answer.get("found") is True:
            return Found(str(answer.get("result_ref") or effect_id))
        if answer.get("found") is False:
            return NotFound()
        return Unknown(f"{tool} did not say found or not: {answer!r}")


class GatedTools:
    """A connected MCP client whose side-effecting tools go through the gate, for one case.

    Construct it inside the event loop that runs `client`: the gate is synchronous and runs in a
    worker thread, which calls the tools back on that loop; the model's parallel calls run in
    parallel threads, which the journal serializes.

    `tools` is the server's tool listing (every page). `lease_id` is the approval's lease, or
    a lease id per action, since a lease covers one action; an action without one is refused.
    `premises` gives, per tool, the premises a call's arguments must satisfy when it is sent
    and again before any resend. `lookups` names, per gated tool, a read-only tool that says
    whether an effect happened. `action_for(tool, arguments)` tells apart the calls of a tool
    that is legitimately called several times per case; derive it from what the approval fixes,
    since each action is a separate effect. `max_inflight` (default: `call_timeout`) is how long
    a timed-out call may still act: raise it for a server that keeps running a call after the
    client gives up, since MCP cancellation is only a request."""

    def __init__(
        self,
        client: Client,
        journal: Journal,
        tools: Sequence[Tool],
        *,
        case_id: str,
        lease_id: str | Mapping[str, str],
        tenant: str = "",
        premises: Mapping[str, ArgumentPremises] | None = None,
        lookups: Mapping[str, str] | None = None,
        read_only: Collection[str] = (),
        gated: Collection[str] = (),
        action_for: Callable[[str, Mapping[str, Any]], str] = lambda tool, arguments: tool,
        call_timeout: float = 30.0,
        max_inflight: timedelta | None = None,
        key_arguments: Sequence[str] = EFFECT_ID_ARGUMENTS,
        money: Mapping[str, MoneyDeclaration] | None = None,
    ) -> None:
        self.client = client
        self.journal = journal
        self.case_id = case_id
        self.lease_id = lease_id
        self.tenant = tenant
        self.action_for = action_for
        self._premises = dict(premises or {})
        lookups = dict(lookups or {})
        by_name = {tool.name: tool for tool in tools}
        _check_names(by_name, read_only, gated, self._premises, lookups)
        self._listed = frozenset(by_name)
        self._gated = frozenset(
            name
            for name, tool in by_name.items()
            if name in gated or (name not in read_only and _hints(tool).read_only_hint is not True)
        )
        for name in (self._premises.keys() | lookups.keys()) - self._gated:
            raise ValueError(f"{name!r} is not gated: its premises or lookup would never be used")
        inflight = timedelta(seconds=call_timeout) if max_inflight is None else max_inflight
        if inflight.total_seconds() < call_timeout:
            # Less would let a lookup's "not found" count while the call can still act.
            raise ValueError("max_inflight must be at least call_timeout")
        peer = _Peer(client, asyncio.get_running_loop(), call_timeout)
        self._targets: dict[str, McpToolTarget] = {}  # by tool
        for name in sorted(self._gated):
            key = _key_argument(by_name[name], key_arguments)
            lookup_tool = None
            if name in lookups:
                lookup = lookups[name]
                lookup_key = _key_argument(by_name[lookup], key_arguments)
                if key is None or lookup_key is None or lookup in self._gated:
                    raise ValueError(
                        f"{name!r} and its lookup {lookup!r} both need an effect-id argument "
                        f"({', '.join(key_arguments)}), and the lookup must be read-only"
                    )
                lookup_tool = (lookup, lookup_key)
            idempotent = _hints(by_name[name]).idempotent_hint is True
            self._targets[name] = McpToolTarget(
                name=target_name(name),
                tool=name,
                tier=Tier.DEDUPES if idempotent else Tier.LOOKUP if lookup_tool else Tier.NEITHER,
                max_inflight=inflight,
                peer=peer,
                key_argument=key,
                lookup_tool=lookup_tool,
                queryable=lookup_tool is not None,
                money=(money or {}).get(name),
            )
        named = {target.name: target for target in self._targets.values()}
        if len(named) != len(self._targets):
            raise ValueError("two gated tools have names that make the same target name")
        self._tool_of = {target.name: target.tool for target in named.values()}
        self.gate = Gate(journal, named, premises_for=self._premises_for)

    def is_gated(self, name: str) -> bool:
        return name in self._gated

    async def call_tool(
        self, name: str, arguments: Mapping[str, Any] | None = None
    ) -> CallToolResult:
        """`Client.call_tool`, gated: what to hand the model."""
        return (await self.call(name, arguments)).result

    async def call(self, name: str, arguments: Mapping[str, Any] | None = None) -> ToolCall:
        """Call a tool: straight through if read-only, else through the gate, with a receipt.

        Committed by this call: the tool's own result. Committed earlier or settled without an
        answer (a lookup found it): a result saying so. Refused, failed, in doubt or ambiguous:
        ``is_error=True`` with a sentence the model can read. Every gate result carries the
        receipt as ``structured_content["receipt"]`` (the tool's own result aside)."""
        arguments = dict(arguments or {})
        if name not in self._listed:
            return ToolCall(_error(f"Unknown tool {name!r}: the server did not list it."), None)
        target = self._targets.get(name)
        if target is None:
            return ToolCall(await self.client.call_tool(name, arguments), None)
        # The model never chooses the key: its value, if any, is not part of the decision.
        payload = {k: v for k, v in arguments.items() if k != target.key_argument}
        action = self.action_for(name, payload)
        proposal = Proposal(
            case_id=self.case_id,
            target=target.name,
            action=action,
            payload=payload,
            lease_id=self._lease_for(action),
            premises=self._premises_of(name, payload),
            tenant=self.tenant,
        )
        answers: dict[str, CallToolResult] = {}
        token = _ANSWERS.set(answers)
        try:
            receipt = await asyncio.to_thread(self.gate.submit, proposal)
        finally:
            _ANSWERS.reset(token)
        return ToolCall(self._result(name, receipt, answers.get(receipt.effect_id)), receipt)

    async def recover(self) -> list[Receipt]:
        """Settle every effect the journal holds unfinished, by its tool's tier. The gate knows
        only these tools as targets, so give this session a journal of its own."""
        return await asyncio.to_thread(self.gate.recover)

    def _lease_for(self, action: str) -> str:
        if isinstance(self.lease_id, str):
            return self.lease_id
        return self.lease_id.get(action, "")  # no lease: the journal refuses it (lease_scope)

    def _premises_of(self, name: str, payload: Mapping[str, Any]) -> tuple[Premise, ...]:
        premises = self._premises.get(name)
        return tuple(premises(payload)) if premises else ()

    def _premises_for(self, proposed: Mapping[str, Any]) -> Sequence[Premise]:
        """The premises again at recovery, from the arguments as proposed."""
        return self._premises_of(self._tool_of[proposed["target"]], proposed["payload"])

    def _result(self, name: str, receipt: Receipt, answer: CallToolResult | None) -> CallToolResult:
        structured: dict[str, Any] = {"receipt": receipt.to_dict()}
        try:
            raise_unless_committed(receipt)
        except EffectRefused:
            return _error(f"Refused, not done: {self._refusal(receipt)}.", structured)
        except EffectFailed:
            if answer is None:
                said = f"{name} reported an error for this case earlier; it was not run again."
                return _error(f"Failed, not done: {said}", structured)
            return _error(
                f"Failed, not done: {name} reported an error.", structured, answer.content
            )
        except EffectHeldForPerson:
            return _error(
                f"Not done yet: {name} is held, not sent, while {receipt.held_by} waits for a "
                "person's decision. Do not say it happened; call it again once a person has "
                "decided.",
                structured,
            )
        except EffectInFlight:
            return _error(
                f"Not settled: {name} was called and has not answered; the gate settles it on "
                "recovery. Do not call it again, and do not say it happened.",
                structured,
            )
        except EffectAmbiguous:
            if receipt.happened is True:
                text = f"Done: a person confirmed that {name} happened for this case."
                return CallToolResult(
                    content=[TextContent(text=text)], structured_content=structured
                )
            if receipt.happened is False:
                return _error(
                    f"Not done: a person confirmed that {name} did not happen.", structured
                )
            return _error(
                f"Unknown whether it happened: {name} was called and its answer was lost, and "
                "calling it again could do it twice. A person must check.",
                structured,
            )
        if answer is not None:
            return answer
        result_ref = committed_result_ref(self.journal, receipt.effect_id)
        text = (
            f"Done: {name} is committed for this case ({receipt.final_state}); its result: "
            f"{result_ref}. It was not run again."
        )
        return CallToolResult(
            content=[TextContent(text=text)],
            structured_content={**structured, "result_ref": result_ref},
        )

    def _refusal(self, receipt: Receipt) -> str:
        reason = receipt.final_state.removeprefix("REFUSED:")
        base = reason.removesuffix("_at_recovery")
        words = _REFUSALS.get(base, base.replace("_", " "))
        verdict = standing(self.journal.history(receipt.effect_id)).verdict
        body = verdict.body_value() if verdict is not None and base != "payload_changed" else {}
        detail = body.get("detail") or ", ".join(body.get("failed", []))
        when = " when checked again after an interruption" if base != reason else ""
        return f"{words}{when}" + (f" ({detail})" if detail else "")


def _check_names(
    listed: Mapping[str, Tool],
    read_only: Collection[str],
    gated: Collection[str],
    premises: Mapping[str, ArgumentPremises],
    lookups: Mapping[str, str],
) -> None:
    """A misspelt tool name in the policy would silently leave a tool ungated or unchecked."""
    both = set(read_only) & set(gated)
    if both:
        raise ValueError(f"both read-only and gated: {sorted(both)}")
    named = {*read_only, *gated, *premises, *lookups, *lookups.values()}
    unknown = named - listed.keys()
    if unknown:
        raise ValueError(f"the server lists no tool named {sorted(unknown)}")


def _hints(tool: Tool) -> ToolAnnotations:
    return tool.annotations or ToolAnnotations()


def _key_argument(tool: Tool, names: Sequence[str]) -> str | None:
    properties = tool.input_schema.get("properties") or {}
    return next((name for name in names if name in properties), None)


def _text(content: Sequence[ContentBlock]) -> str:
    return "\n".join(block.text for block in content if isinstance(block, TextContent))


def _result_ref(result: CallToolResult) -> str:
    """The tool's answer as recorded: its text, else its structured content as JSON. Never
    raises: the tool has already acted."""
    text = _text(result.content)
    if text or result.structured_content is None:
        return text
    try:
        return canonical_json(result.structured_content).decode()
    except ValueError:
        return repr(result.structured_content)


def _error(text: str, structured: Any = None, more: Sequence[ContentBlock] = ()) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(text=text), *more], structured_content=structured, is_error=True
    )


__all__ = ["EFFECT_ID_ARGUMENTS", "GatedTools", "McpToolTarget", "ToolCall"]
