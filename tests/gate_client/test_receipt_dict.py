"""Receipt.to_dict: JSON's shape of the receipt, a copy that shares nothing mutable with it."""

from __future__ import annotations

from dataclasses import asdict

from gate_client.protocol import State
from gate_client.receipts import Receipt

NESTED = Receipt(
    effect_id="eff_1",
    final_state=State.COMMITTED,
    proposed={"case_id": "c-1", "payload": {"items": [{"sku": "a", "qty": 2}], "note": None}},
    authorized_when_fired=True,
    assumptions_held=None,
    happened="unknown",
    recorded=True,
    recheck_at_recovery={"premises": [{"name": "p", "held": True, "value": 1.5}]},
    entry_seqs=(3, 4, 9),
    contradicted=True,
    contradictions=({"seq": 9, "says": ["COMMITTED", "FAILED"]},),
    budget={"spent": {"EUR": 1299}},
    mandate={"token": "t", "keys": ("k1", "k2")},
)


def test_to_dict_is_asdict_with_lists_for_the_sequences_and_unset_options_left_out() -> None:
    expected = asdict(NESTED)
    expected["entry_seqs"] = [3, 4, 9]
    expected["contradictions"] = [{"seq": 9, "says": ["COMMITTED", "FAILED"]}]
    del expected["held_by"]
    assert NESTED.to_dict() == expected
    assert type(NESTED.to_dict()["mandate"]["keys"]) is tuple  # as asdict leaves it
    assert Receipt.from_dict(NESTED.to_dict()) == NESTED


def test_changing_the_dict_changes_nothing_in_the_receipt() -> None:
    data = NESTED.to_dict()
    data["proposed"]["payload"]["items"][0]["qty"] = 99
    data["recheck_at_recovery"]["premises"].clear()
    data["contradictions"][0]["says"].append("AMBIGUOUS")
    data["budget"]["spent"]["EUR"] = 0
    assert NESTED.proposed["payload"]["items"][0]["qty"] == 2
    assert NESTED.recheck_at_recovery is not None
    assert len(NESTED.recheck_at_recovery["premises"]) == 1
    assert NESTED.contradictions[0]["says"] == ["COMMITTED", "FAILED"]
    assert NESTED.budget == {"spent": {"EUR": 1299}}
