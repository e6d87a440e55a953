"""@gated over plain functions whose effects land in a file: the file is the ground truth."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from gate_client.adapters.decorator import GatedFunctions
from gate_client.adapters.outcomes import EffectAmbiguous, EffectFailed, EffectRefused
from gate_client.faults import CrashPoint
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Premise, PremiseResult
from gate_client.targets import Tier
from testkit.agents.gated_agent import REFUND_MONEY, Payments, case, lease
from testkit.processes import spawn_armed

AGENT = "testkit.agents.gated_agent"


@pytest.fixture
def journal(tmp_path: Path) -> LocalJournal:
    journal = LocalJournal(tmp_path / "journal")
    expires = datetime.now(UTC) + timedelta(hours=1)
    for order in ("A1", "A2"):
        limits = {"amount_cents": 5_000}
        journal.grant_lease(
            Lease(f"lease-{order}", f"order:{order}", "refund", expires, "support", limits)
        )
    return journal


@pytest.fixture
def payments(tmp_path: Path) -> Payments:
    return Payments(tmp_path / "payments.jsonl")


@pytest.fixture
def functions(journal: LocalJournal) -> GatedFunctions:
    return GatedFunctions(journal)


Refund = Callable[..., dict[str, Any]]


@pytest.fixture
def refund(functions: GatedFunctions, payments: Payments) -> Refund:
    """A tier-3 refund: it takes no key and nothing can look it up."""

    @functions.gated(case_id=case, lease_id=lease, money=REFUND_MONEY)
    def refund(order: str, amount_cents: int) -> dict[str, Any]:
        return payments.refund(order, amount_cents)

    return refund


def test_a_call_runs_once_and_a_repeat_returns_the_first_result(
    functions: GatedFunctions, refund: Refund, payments: Payments
) -> None:
    first = refund("A1", 2_000)
    assert first == {"id": "re_1", "order": "A1", "amount": 2_000}
    assert refund("A1", amount_cents=2_000) == first  # read back from the journal
    assert refund("A2", 1_000)["id"] == "re_2"  # another case is another effect
    assert len(payments.acts()) == 2
    effect_id = functions.effect_id_of(refund, "A1", amount_cents=2_000)
    assert functions.receipt(effect_id).final_state == "COMMITTED"


def test_other_arguments_for_the_same_case_are_refused_and_never_sent(
    refund: Refund, payments: Payments
) -> None:
    refund("A1", 2_000)
    with pytest.raises(EffectRefused) as refused:
        refund("A1", 3_000)
    assert refused.value.receipt.final_state == "REFUSED:payload_changed"
    assert [a["amount"] for a in payments.acts()] == [2_000]


def test_lease_and_premises_are_checked_before_the_function_runs(
    functions: GatedFunctions, payments: Payments
) -> None:
    world = {"refundable": False}

    def still_refundable(order: str, **_: Any) -> list[Premise]:
        check = lambda: PremiseResult(world["refundable"], {"order": order})  # noqa: E731
        return [Premise("order_refundable", check)]

    @functions.gated(case_id=case, lease_id=lease, money=REFUND_MONEY, premises=still_refundable)
    def refund(order: str, amount_cents: int) -> dict[str, Any]:
        return payments.refund(order, amount_cents)

    with pytest.raises(EffectRefused) as stale:
        refund("A1", 2_000)
    assert stale.value.receipt.final_state == "REFUSED:stale_premise"
    world["refundable"] = True
    with pytest.raises(EffectRefused) as over:
        refund("A2", 9_000)
    assert over.value.receipt.final_state == "REFUSED:lease_scope"
    assert payments.acts() == []


def test_a_revoked_lease_refuses(journal: LocalJournal, refund: Refund, payments: Payments) -> None:
    journal.revoke_lease("lease-A1", by="finance", reason="fraud review")
    with pytest.raises(EffectRefused) as refused:
        refund("A1", 2_000)
    assert refused.value.receipt.final_state == "REFUSED:lease_revoked"
    assert payments.acts() == []


def test_a_declared_refusal_is_a_failure_and_carries_the_cause(
    functions: GatedFunctions, payments: Payments
) -> None:

    class CardDeclined(Exception):
        pass

    @functions.gated(case_id=case, lease_id=lease, money=REFUND_MONEY, fails_on=(CardDeclined,))
    def refund(order: str, amount_cents: int) -> dict[str, Any]:
        raise CardDeclined(order)

    with pytest.raises(EffectFailed) as failed:
        refund("A1", 2_000)
    assert failed.value.receipt.final_state == "FAILED:CardDeclined"
    assert isinstance(failed.value.__cause__, CardDeclined)


def test_an_error_after_acting_is_ambiguous_at_tier_3(refund: Refund, payments: Payments) -> None:
    payments.fail_after_acting = ConnectionError
    with pytest.raises(EffectAmbiguous) as ambiguous:
        refund("A1", 2_000)
    assert ambiguous.value.receipt.final_state == "AMBIGUOUS"
    assert isinstance(ambiguous.value.__cause__, ConnectionError)
    with pytest.raises(EffectAmbiguous):
        refund("A1", 2_000)  # never resent: a person decides
    assert len(payments.acts()) == 1


def test_a_function_that_dedupes_is_resent_under_its_effect_id(
    functions: GatedFunctions, payments: Payments
) -> None:

    @functions.gated(case_id=case, lease_id=lease, money=REFUND_MONEY)
    def refund(order: str, amount_cents: int, effect_id: str) -> dict[str, Any]:
        return payments.refund(order, amount_cents, key=effect_id)

    payments.fail_after_acting = TimeoutError
    result = refund("A1", 2_000)
    [act] = payments.acts()
    assert result == {"id": act["id"], "order": "A1", "amount": 2_000}
    assert act["key"].startswith("eff_")
    effect_id = functions.effect_id_of(refund, "A1", 2_000)
    assert functions.receipt(effect_id).final_state == "COMMITTED_BY_RETRY"


def test_a_lookup_settles_without_resending(functions: GatedFunctions, payments: Payments) -> None:

    def find(order: str, amount_cents: int, effect_id: str) -> dict[str, Any] | None:
        return payments.find(effect_id)

    @functions.gated(
        case_id=case,
        lease_id=lease,
        money=REFUND_MONEY,
        lookup=find,
        tier=Tier.LOOKUP,
        max_inflight=timedelta(seconds=1),
    )
    def refund(order: str, amount_cents: int, effect_id: str) -> dict[str, Any]:
        return payments.refund(order, amount_cents, key=effect_id)

    payments.fail_after_acting = TimeoutError
    assert refund("A1", 2_000)["amount"] == 2_000
    assert len(payments.acts()) == 1


def test_bad_declarations_and_arguments_fail_before_anything_runs(
    functions: GatedFunctions, payments: Payments
) -> None:
    def plain(order: str) -> None:
        payments.refund(order, 1)

    with pytest.raises(TypeError, match="tier 1 needs"):
        functions.gated(case_id=case, lease_id=lease, tier=Tier.DEDUPES)(plain)
    with pytest.raises(TypeError, match="tier 2 needs a lookup"):
        functions.gated(case_id=case, lease_id=lease, tier=Tier.LOOKUP)(plain)
    gated_plain = functions.gated(case_id=case, lease_id=lease)(plain)
    with pytest.raises(ValueError, match="already named"):
        functions.gated(case_id=case, lease_id=lease)(plain)
    with pytest.raises(TypeError):
        gated_plain("A1", "unexpected")
    with pytest.raises(ValueError):
        gated_plain(float("nan"))
    assert payments.acts() == [] and functions.journal.unsettled() == []


@pytest.mark.slow
@pytest.mark.parametrize(
    ("with_lookup", "state"), [(True, "COMMITTED_ON_QUERY"), (False, "AMBIGUOUS")]
)
def test_a_process_killed_after_the_function_returned_is_recovered_by_tier(
    journal: LocalJournal, tmp_path: Path, with_lookup: bool, state: str
) -> None:
    args = [str(journal.path), str(tmp_path / "payments.jsonl")]
    args += ["--lookup"] if with_lookup else []
    worker = spawn_armed(AGENT, ["submit", *args], CrashPoint.AFTER_RESPONSE)
    assert worker.returncode == -9, worker.stderr
    restarted = spawn_armed(AGENT, ["recover", *args], None)
    assert restarted.returncode == 0, restarted.stderr
    assert json.loads(restarted.stdout) == [state]
    assert len(Payments(tmp_path / "payments.jsonl").acts()) == 1


def test_the_declaration_follows_from_the_tier(
    functions: GatedFunctions, payments: Payments
) -> None:
    """A tier-3 function cannot be looked up and has no key window; only tier 1 has one."""

    def find(order: str) -> None:
        return None

    def plain(order: str) -> None:
        payments.refund(order, 1)

    def keyed(order: str, effect_id: str) -> None:
        payments.refund(order, 1, key=effect_id)

    second = timedelta(seconds=1)
    with pytest.raises(TypeError, match=r"tier 3 .* cannot have a lookup"):
        functions.gated(
            case_id=case, lease_id=lease, tier=Tier.NEITHER, lookup=find, max_inflight=second
        )(plain)
    for tier in (Tier.NEITHER, Tier.LOOKUP):
        with pytest.raises(TypeError, match=f"tier {int(tier)} cannot have key_window"):
            functions.gated(
                case_id=case,
                lease_id=lease,
                tier=tier,
                lookup=find if tier == Tier.LOOKUP else None,
                key_window=timedelta(hours=1),
                max_inflight=second,
            )(plain)
    with pytest.raises(TypeError, match="give max_inflight="):  # a lookup counts after it
        functions.gated(case_id=case, lease_id=lease, lookup=find)(plain)
    functions.gated(case_id=case, lease_id=lease, target="tier3", tier=Tier.NEITHER)(keyed)
    tier3 = functions.gate.targets["tier3"]
    assert (tier3.tier, tier3.queryable, tier3.key_window) == (Tier.NEITHER, False, None)
    functions.gated(case_id=case, lease_id=lease, target="tier1", key_window=second)(keyed)
    tier1 = functions.gate.targets["tier1"]
    assert (tier1.tier, tier1.queryable, tier1.key_window) == (Tier.DEDUPES, False, second)
    assert functions.journal.unsettled() == []
