"""The MCP adapter against a real MCP server in process: the SDK's own MCPServer and Client.

The server's tools keep their own ground truth (every refund, email and ticket they really
made), so each test checks what happened against the receipt, not against the adapter's say-so.
A lost answer is a tool that stalls past the client's call timeout, before or after it acts."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult, TextContent, ToolAnnotations

from gate_client.adapters.mcp_tools import GatedTools
from gate_client.ids import effect_id_for
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.money import MoneyDeclaration
from gate_client.proposal import Premise, PremiseResult
from gate_client.receipts import Receipt, verify_receipt
from ledger.core.entries import EntryKind

pytestmark = pytest.mark.anyio

CASE = "case_1"
CALL_TIMEOUT = 1.5  # a busy machine runs a healthy in-process call well inside this
STALL_SECONDS = 5.0  # far past the call timeout; the client's cancellation ends it sooner
REFUND = {"payment": "pay_1", "amount_cents": 1500}
EMAIL = {"to": "customer@example.com", "text": "Your refund is on the way"}
ACTIONS = ("issue_refund", "send_email", "close_account", "create_ticket")


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class Shop:
    """An MCP server and its ground truth."""

    def __init__(self) -> None:
        self.refunds: list[tuple[str, int]] = []
        self.emails: dict[str, str] = {}  # idempotency key -> message id
        self.emails_sent: list[str] = []  # every email that really went out, by key
        self.tickets: list[str] = []  # every ticket opened, by effect id
        self.closing_attempts = 0
        self.payment_status = {"pay_1": "succeeded"}
        # Per tool, the moments ("before" / "after" acting) at which its next calls stall.
        self.stalls: dict[str, list[str]] = {}
        self.server = self._serve()

    async def _stall(self, tool: str, moment: str) -> None:
        queue = self.stalls.get(tool)
        if queue and queue[0] == moment:
            queue.pop(0)
            await anyio.sleep(STALL_SECONDS)

    def _serve(self) -> MCPServer:
        server = MCPServer("shop")

        @server.tool()
        async def issue_refund(payment: str, amount_cents: int) -> str:
            await self._stall("issue_refund", "before")
            self.refunds.append((payment, amount_cents))
            await self._stall("issue_refund", "after")
            return f"re_{len(self.refunds)}"

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def get_payment(payment: str) -> dict[str, str]:
            return {"payment": payment, "status": self.payment_status[payment]}

        @server.tool(annotations=ToolAnnotations(idempotent_hint=True))
        async def send_email(to: str, text: str, idempotency_key: str) -> str:
            await self._stall("send_email", "before")
            if idempotency_key not in self.emails:
                self.emails_sent.append(idempotency_key)
                self.emails[idempotency_key] = f"msg_{len(self.emails_sent)}"
            await self._stall("send_email", "after")
            return self.emails[idempotency_key]

        @server.tool()
        def close_account(account: str) -> str:
            self.closing_attempts += 1
            raise ToolError(f"{account} has an open balance")

        @server.tool()
        async def create_ticket(subject: str, interlock_effect_id: str) -> str:
            await self._stall("create_ticket", "before")
            self.tickets.append(interlock_effect_id)
            await self._stall("create_ticket", "after")
            return f"tk_{len(self.tickets)}"

        @server.tool(name="Shop.IssueVoucher")  # MCP takes it; the notary's names do not
        def issue_voucher(payment: str) -> str:
            self.refunds.append((payment, 0))
            return f"vo_{len(self.refunds)}"

        @server.tool(annotations=ToolAnnotations(read_only_hint=True))
        def find_ticket(interlock_effect_id: str) -> dict[str, Any]:
            if interlock_effect_id not in self.tickets:
                return {"found": False}
            return {
                "found": True,
                "result_ref": f"tk_{self.tickets.index(interlock_effect_id) + 1}",
            }

        return server


class World:
    """The shop, the journal file and one live lease per action, for the one approved case."""

    def __init__(self, tmp_path: Path) -> None:
        self.shop = Shop()
        self.path = tmp_path / "journal"
        self.journal = LocalJournal(self.path)
        self.leases = {action: self.grant(action) for action in ACTIONS}

    def grant(self, action: str, *, expires_in: timedelta = timedelta(hours=1)) -> str:
        lease_id = f"lease_{action}_{len(self.journal.entries())}"
        limits = {"amount_cents": 2000} if action == "issue_refund" else {}
        expires = datetime.now(UTC) + expires_in
        self.journal.grant_lease(Lease(lease_id, CASE, action, expires, "support", limits))
        return lease_id

    def payment_succeeded(self, arguments: Mapping[str, Any]) -> list[Premise]:
        payment = arguments["payment"]
        return [
            Premise(
                "payment_succeeded",
                lambda: PremiseResult(
                    self.shop.payment_status[payment] == "succeeded",
                    {"status": self.shop.payment_status[payment]},
                ),
            )
        ]

    @asynccontextmanager
    async def tools(self, **policy: Any) -> AsyncIterator[GatedTools]:
        """A connected session wrapped for the case, as a (re)started agent process has it."""
        options: dict[str, Any] = {
            "lease_id": self.leases,
            "premises": {"issue_refund": self.payment_succeeded},
            "lookups": {"create_ticket": "find_ticket"},
            "money": {"issue_refund": MoneyDeclaration("amount_cents")},
            **policy,
        }
        self.journal = LocalJournal(self.path)
        async with Client(self.shop.server) as client:
            listing = await client.list_tools()
            yield GatedTools(
                client,
                self.journal,
                listing.tools,
                case_id=CASE,
                call_timeout=CALL_TIMEOUT,
                **options,
            )

    def kinds(self, effect_id: str) -> list[str]:
        return [e.kind for e in LocalJournal(self.path).history(effect_id)]

    def verify(self, receipt: Receipt | None) -> Receipt:
        assert receipt is not None
        verify_receipt(receipt, LocalJournal(self.path).entries(), origin=self.journal.origin)
        return receipt


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def text(result: CallToolResult) -> str:
    return "\n".join(b.text for b in result.content if isinstance(b, TextContent))


async def test_a_gated_call_runs_once_and_a_repeat_is_answered_from_the_journal(
    world: World,
) -> None:
    async with world.tools() as tools:
        first = await tools.call("issue_refund", REFUND)
        again = await tools.call("issue_refund", REFUND)
        changed = await tools.call("issue_refund", {**REFUND, "amount_cents": 1000})

    receipt = world.verify(first.receipt)
    assert receipt.final_state == "COMMITTED"
    assert (receipt.authorized_when_fired, receipt.assumptions_held) == (True, True)
    assert (first.result.is_error, text(first.result)) == (False, "re_1")  # the tool's own
    assert world.shop.refunds == [("pay_1", 1500)]

    assert again.receipt == receipt  # not called again: the first outcome
    assert not again.result.is_error
    assert "not run again" in text(again.result)
    assert again.result.structured_content == {"receipt": receipt.to_dict(), "result_ref": "re_1"}

    refused = world.verify(changed.receipt)
    assert refused.final_state == "REFUSED:payload_changed"
    assert refused.effect_id == receipt.effect_id
    assert changed.result.is_error
    assert "the first call stands" in text(changed.result)
    assert changed.result.structured_content == {"receipt": refused.to_dict()}
    assert world.shop.refunds == [("pay_1", 1500)]
    kinds = world.kinds(receipt.effect_id)
    assert kinds == ["PROPOSED", "DISPATCHED", "COMMITTED", "REFUSED"]


async def test_a_read_only_tool_passes_straight_through_and_is_not_journaled(
    world: World,
) -> None:
    async with world.tools() as tools:
        looked = await tools.call("get_payment", {"payment": "pay_1"})
        unknown = await tools.call("delete_everything", {})
        assert not tools.is_gated("get_payment") and not tools.is_gated("find_ticket")
        assert tools.is_gated("issue_refund") and tools.is_gated("close_account")
    assert looked.receipt is None
    assert looked.result.structured_content == {"payment": "pay_1", "status": "succeeded"}
    assert (unknown.receipt, unknown.result.is_error) == (None, True)
    assert [e for e in LocalJournal(world.path).entries() if e.effect_id] == []

    # Named gated, a read-only tool goes through the gate, and no lease covers it.
    async with world.tools(gated={"get_payment"}) as tools:
        forced = await tools.call("get_payment", {"payment": "pay_1"})
    assert world.verify(forced.receipt).final_state == "REFUSED:lease_scope"
    assert "does not cover this call" in text(forced.result)


def _revoke(world: World) -> dict[str, Any]:
    world.journal.revoke_lease(world.leases["issue_refund"], by="finance", reason="disputed")
    return {}


def _expired(world: World) -> dict[str, Any]:
    return {"lease_id": world.grant("issue_refund", expires_in=timedelta(minutes=-1))}


def _payment_failed(world: World) -> dict[str, Any]:
    world.shop.payment_status["pay_1"] = "failed"
    return {}


REFUSALS: dict[str, tuple[Callable[[World], dict[str, Any]], int, str, str]] = {
    "revoked": (_revoke, 1500, "REFUSED:lease_revoked", "lease) was revoked (revoked by finance)"),
    "expired": (_expired, 1500, "REFUSED:lease_expired", "lease) has expired (expired at"),
    "stale_premise": (_payment_failed, 1500, "REFUSED:stale_premise", "(payment_succeeded)"),
    "over_limit": (
        lambda world: {},
        5000,
        "REFUSED:lease_scope",
        "(amount_cents=5000 exceeds the limit 2000)",
    ),
}


@pytest.mark.parametrize("case", list(REFUSALS))
async def test_a_dead_lease_a_broken_premise_or_an_amount_over_the_limit_is_refused_unrun(
    world: World, case: str
) -> None:
    arrange, amount, state, why = REFUSALS[case]
    policy = arrange(world)
    async with world.tools(**policy) as tools:
        refused = await tools.call("issue_refund", {**REFUND, "amount_cents": amount})
    receipt = world.verify(refused.receipt)
    assert receipt.final_state == state
    assert (receipt.happened, receipt.authorized_when_fired) == (False, None)
    assert refused.result.is_error
    assert text(refused.result).startswith("Refused, not done: ")
    assert why in text(refused.result)
    assert world.shop.refunds == []
    assert "DISPATCHED" not in world.kinds(receipt.effect_id)


async def test_the_model_chooses_neither_the_effect_nor_its_key(world: World) -> None:
    async with world.tools() as tools:
        words = {**EMAIL, "idempotency_key": "model-chosen", "case_id": "case_2"}
        sent = await tools.call("send_email", words)
        other_key = await tools.call("send_email", {**words, "idempotency_key": "another"})

    receipt = world.verify(sent.receipt)
    effect_id = effect_id_for(CASE, "send_email", "send_email")
    assert receipt.effect_id == effect_id
    assert receipt.proposed["case_id"] == CASE
    assert world.shop.emails_sent == [effect_id]  # the server got the effect id as the key
    [proposed] = [e for e in LocalJournal(world.path).history(effect_id) if e.kind == "PROPOSED"]
    assert "idempotency_key" not in proposed.body_value()["payload"]
    # Another key in the model's words is not another decision: the first outcome, unsent.
    assert other_key.receipt == receipt
    assert world.shop.emails_sent == [effect_id]


async def test_action_for_lets_a_tool_act_once_per_action_in_a_case(world: World) -> None:
    leases = {f"send_email:{kind}": world.grant(f"send_email:{kind}") for kind in ("a", "b")}

    def template(tool: str, arguments: Mapping[str, Any]) -> str:
        return f"{tool}:{arguments['text'][0]}"

    async with world.tools(lease_id=leases, action_for=template) as tools:
        calls = [
            await tools.call("send_email", {**EMAIL, "text": "a: your refund"}),
            await tools.call("send_email", {**EMAIL, "text": "b: your receipt"}),
        ]
    receipts = [world.verify(call.receipt) for call in calls]
    assert [r.final_state for r in receipts] == ["COMMITTED", "COMMITTED"]
    assert world.shop.emails_sent == [r.effect_id for r in receipts]  # two effects, one each


async def test_parallel_tool_calls_from_the_model_each_get_their_receipt(world: World) -> None:
    async with world.tools() as tools:
        calls = await asyncio.gather(
            tools.call("issue_refund", REFUND),
            tools.call("send_email", EMAIL),
            tools.call("create_ticket", {"subject": "Refund for pay_1"}),
            tools.call("get_payment", {"payment": "pay_1"}),
        )
    *gated, looked = calls
    assert [world.verify(call.receipt).final_state for call in gated] == ["COMMITTED"] * 3
    assert [text(call.result) for call in gated] == ["re_1", "msg_1", "tk_1"]
    assert looked.receipt is None


async def test_a_tool_that_reports_an_error_leaves_a_failed_receipt(world: World) -> None:
    async with world.tools() as tools:
        failed = await tools.call("close_account", {"account": "acc_1"})
        again = await tools.call("close_account", {"account": "acc_1"})
    receipt = world.verify(failed.receipt)
    assert (receipt.final_state, receipt.happened) == ("FAILED:tool_error", False)
    assert failed.result.is_error
    assert "Failed, not done: close_account reported an error." in text(failed.result)
    assert "acc_1 has an open balance" in text(failed.result)  # the tool's own words follow
    assert again.receipt == receipt
    assert "earlier; it was not run again" in text(again.result)
    assert world.shop.closing_attempts == 1


async def test_a_lost_answer_at_tier_3_is_ambiguous_and_never_resent(world: World) -> None:
    world.shop.stalls["issue_refund"] = ["after"]
    async with world.tools() as tools:
        lost = await tools.call("issue_refund", REFUND)
        receipt = world.verify(lost.receipt)
        assert (receipt.final_state, receipt.happened) == ("AMBIGUOUS", "unknown")
        assert lost.result.is_error
        assert text(lost.result).startswith("Unknown whether it happened")
        assert world.shop.refunds == [("pay_1", 1500)]  # it acted, once

        # A person checks the payment provider and records what they found.
        body = {"happened": True, "reason": "re_1 is in the dashboard", "by": "finance"}
        world.journal.record(kind=EntryKind.RESOLVED, effect_id=receipt.effect_id, body=body)
        settled = await tools.call("issue_refund", REFUND)
    assert world.verify(settled.receipt).final_state == "RESOLVED_HAPPENED"
    assert not settled.result.is_error
    assert world.shop.refunds == [("pay_1", 1500)]


async def test_a_call_held_while_another_of_its_case_waits_for_a_person_is_told_so(
    world: World,
) -> None:
    """Held is no verdict: the model must not hear that a person decided it did not happen."""
    world.shop.stalls["issue_refund"] = ["after"]
    leases = {f"issue_refund:{c}": world.grant(f"issue_refund:{c}") for c in (1500, 700)}

    def template(tool: str, arguments: Mapping[str, Any]) -> str:
        return f"{tool}:{arguments['amount_cents']}"

    async with world.tools(lease_id=leases, action_for=template) as tools:
        lost = await tools.call("issue_refund", REFUND)
        held = await tools.call("issue_refund", {**REFUND, "amount_cents": 700})
    assert world.verify(lost.receipt).final_state == "AMBIGUOUS"
    receipt = world.verify(held.receipt)
    assert lost.receipt is not None
    assert (receipt.final_state, receipt.held_by) == ("HELD", lost.receipt.effect_id)
    assert held.result.is_error
    assert text(held.result).startswith("Not done yet: issue_refund is held, not sent"), text(
        held.result
    )
    assert world.shop.refunds == [("pay_1", 1500)]


async def test_a_lost_answer_from_an_idempotent_tool_is_resent_under_the_same_key(
    world: World,
) -> None:
    world.shop.stalls["send_email"] = ["after"]
    async with world.tools() as tools:
        sent = await tools.call("send_email", EMAIL)
    receipt = world.verify(sent.receipt)
    assert receipt.final_state == "COMMITTED_BY_RETRY"
    assert world.shop.emails_sent == [receipt.effect_id]  # the server deduped the resend
    assert (sent.result.is_error, text(sent.result)) == (False, "msg_1")  # the resend's answer


@pytest.mark.parametrize(
    ("moment", "state"), [("after", "COMMITTED_ON_QUERY"), ("before", "COMMITTED_BY_RETRY")]
)
async def test_a_lost_answer_at_tier_2_is_looked_up_and_resent_only_if_not_found(
    world: World, moment: str, state: str
) -> None:
    world.shop.stalls["create_ticket"] = [moment]
    async with world.tools() as tools:
        opened = await tools.call("create_ticket", {"subject": "Refund for pay_1"})
    receipt = world.verify(opened.receipt)
    assert receipt.final_state == state
    assert world.shop.tickets == [receipt.effect_id]  # one ticket, either way
    assert not opened.result.is_error
    if moment == "after":  # found: no answer from the tool, the journal's reference instead
        assert opened.result.structured_content["result_ref"] == "tk_1"
    else:
        assert text(opened.result) == "tk_1"


async def test_an_effect_left_in_flight_is_settled_by_recover_in_a_new_session(
    world: World,
) -> None:
    world.shop.stalls["send_email"] = ["after", "after"]  # the resend's answer is lost too
    async with world.tools() as tools:
        pending = await tools.call("send_email", EMAIL)
    receipt = world.verify(pending.receipt)
    assert receipt.final_state == "DISPATCHED"
    assert pending.result.is_error
    assert text(pending.result).startswith("Not settled")

    async with world.tools() as tools:  # the agent restarted
        [recovered] = await tools.recover()
        again = await tools.call("send_email", EMAIL)
    assert world.verify(recovered).final_state == "COMMITTED_BY_RETRY"
    assert again.receipt == recovered
    assert world.shop.emails_sent == [receipt.effect_id]


@pytest.mark.parametrize(
    ("policy", "error"),
    [
        ({"gated": {"issue_refnd"}}, "lists no tool named"),
        ({"read_only": {"send_email"}, "gated": {"send_email"}}, "both read-only and gated"),
        ({"premises": {"get_payment": lambda args: []}}, "is not gated"),
        ({"lookups": {"issue_refund": "find_ticket"}}, "need an effect-id argument"),
        ({"lookups": {"create_ticket": "send_email"}}, "must be read-only"),
    ],
)
async def test_a_policy_that_would_leave_a_tool_unchecked_is_rejected(
    world: World, policy: dict[str, Any], error: str
) -> None:
    async with Client(world.shop.server) as client:
        listing = await client.list_tools()
        with pytest.raises(ValueError, match=error):
            GatedTools(client, world.journal, listing.tools, case_id=CASE, lease_id="l", **policy)


async def test_a_tool_named_outside_the_notarys_alphabet_is_a_target_it_takes(
    world: World,
) -> None:
    """MCP allows capitals and dots in a tool's name; the target (and so the effect id) is the
    name the notary takes, and the tool called is still the server's own."""
    lease = world.grant("Shop.IssueVoucher")
    async with world.tools(lease_id={**world.leases, "Shop.IssueVoucher": lease}) as tools:
        called = await tools.call("Shop.IssueVoucher", {"payment": "pay_1"})
    receipt = world.verify(called.receipt)
    assert receipt.final_state == "COMMITTED"
    assert receipt.proposed["target"] == "shop-issuevoucher"
    assert re.fullmatch(r"[a-z0-9]([a-z0-9_-]{0,61}[a-z0-9])?", receipt.proposed["target"])
    assert world.shop.refunds == [("pay_1", 0)]
