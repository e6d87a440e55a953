from __future__ import annotations

import re

import pytest

from gate_client.ids import effect_id_for
from gate_client.proposal import Premise, PremiseResult, Proposal
from ledger.core.canonical import CanonicalJSONError


def test_effect_ids_are_stable_url_safe_and_at_least_128_bits() -> None:
    effect_id = effect_id_for("case_4711", "stripe", "refund")
    assert effect_id == effect_id_for("case_4711", "stripe", "refund")
    # A fixed value: changing the derivation would orphan every effect already journaled.
    assert effect_id == "eff_sIyqW0ZyS06sJxf915RtEp7XZa0"
    assert re.fullmatch(r"[A-Za-z0-9_-]+", effect_id)
    assert len(effect_id.removeprefix("eff_")) * 6 >= 128


def test_every_part_of_the_case_changes_the_id() -> None:
    base = effect_id_for("case_1", "stripe", "refund", tenant="acme")
    others = {
        effect_id_for("case_2", "stripe", "refund", tenant="acme"),
        effect_id_for("case_1", "resend", "refund", tenant="acme"),
        effect_id_for("case_1", "stripe", "email", tenant="acme"),
        effect_id_for("case_1", "stripe", "refund", tenant="globex"),
        # No concatenation ambiguity: ("a|b", "c") and ("a", "b|c") differ.
        effect_id_for("case_1|stripe", "refund", "x", tenant="acme"),
    }
    assert base not in others
    assert len(others) == 5


@pytest.mark.parametrize("bad", ["", None, 5])
def test_effect_id_parts_must_be_non_empty_strings(bad: object) -> None:
    with pytest.raises(ValueError):
        effect_id_for(bad, "stripe", "refund")  # type: ignore[arg-type]


def test_the_payload_hash_is_over_the_canonical_encoding() -> None:
    first = Proposal("case_1", "stripe", "refund", {"amount_cents": 2000, "payment": "pi_1"}, "l1")
    same = Proposal("case_1", "stripe", "refund", {"payment": "pi_1", "amount_cents": 2000}, "l1")
    other = Proposal("case_1", "stripe", "refund", {"payment": "pi_1", "amount_cents": 3000}, "l1")
    assert first.payload_bytes == b'{"amount_cents":2000,"payment":"pi_1"}'
    assert first.payload_hash == same.payload_hash != other.payload_hash
    # The id comes from the case, never from what the model asked for.
    assert first.effect_id == other.effect_id == effect_id_for("case_1", "stripe", "refund")


def test_premises_report_what_they_observed_and_a_failing_check_does_not_hold() -> None:
    holds = Premise("refundable", lambda: PremiseResult(True, {"status": "succeeded"}))
    assert holds.evaluate() == {
        "name": "refundable",
        "holds": True,
        "observed": {"status": "succeeded"},
    }

    def broken() -> PremiseResult:
        raise ConnectionError("payments API down")

    result = Premise("refundable", broken).evaluate()
    assert result["holds"] is False
    assert "payments API down" in result["observed"]["error"]
    with pytest.raises(CanonicalJSONError):
        Premise("x", lambda: PremiseResult(True, {"amount": float("nan")})).evaluate()
