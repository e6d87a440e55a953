"""`python -m gate_client.verify` on one receipt as the notary serves it, and its `--summary` of
an export: run as a subprocess on what the notary served, with only the log's key (and the
witnesses'); every change to the served receipt tried is refused."""

from __future__ import annotations

import base64
import csv
import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.cosignature import CosignerKey
from ledger.core.note import Signer
from notary import services
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.factories import client_for, dispatched, register, settled

pytestmark = pytest.mark.django_db


def verify(path: Path, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(path), *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    return done.returncode, done.stdout + done.stderr


def committed(tenant: Tenant, case_id: str) -> str:
    effect_id = dispatched(tenant, "mail", case_id)
    services.effect_record_outcome(
        tenant=tenant,
        effect_id=effect_id,
        kind="COMMITTED",
        body={"state": "COMMITTED", "attempt": 1, "result_ref": "msg_1", "recheck": None},
    )
    return effect_id


def served(tenant: Tenant, effect_id: str) -> dict[str, Any]:
    reply = client_for(tenant, "auditor", "audrey").get(f"/v1/effects/{effect_id}/receipt")
    assert reply.status_code == 200, reply.content
    body: dict[str, Any] = reply.json()
    return body


@pytest.fixture
def saved(acme: Tenant, signer: Signer, tmp_path: Path) -> tuple[Path, dict[str, Any], str]:
    """A committed effect's receipt, fetched once a checkpoint covers it, saved as a file; and
    the log's vkey."""
    register(acme, "mail", evidence_window=timedelta(hours=1), max_inflight=timedelta(seconds=1))
    effect_id = committed(acme, "case-1")
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    shown = served(acme, effect_id)
    path = tmp_path / "receipt.json"
    path.write_text(json.dumps(shown))
    return path, shown, log_verifier(acme.log.origin, signer).vkey


def test_a_served_receipt_verifies_offline_with_the_logs_key(
    saved: tuple[Path, dict[str, Any], str],
) -> None:
    path, shown, vkey = saved
    code, out = verify(path, "--vkey", vkey)
    assert code == 2 and "a receipt names no witnesses" in out, out  # unwitnessed: say so
    code, out = verify(path, "--vkey", vkey, "--no-witnesses")
    assert code == 0, out
    effect_id = shown["receipt"]["effect_id"]
    assert f"receipt: OK  {effect_id} COMMITTED, re-derived from its 4 entries" in out
    assert "witnesses: not checked: --no-witnesses given" in out
    # What could be known, as the target was declared when the effect was proposed.
    assert shown["receipt"]["declaration"]["evidence_window_us"] == 3_600_000_000
    assert shown["receipt"]["knowable"] == (
        "tier 3 with webhook evidence: what its webhooks say within 1 h settles it; silence "
        "proves nothing, so unseen is AMBIGUOUS; a request may be in flight for 1 s; it moves "
        "no money"
    )


def changed(shown: dict[str, Any], change: str) -> dict[str, Any]:
    copy: dict[str, Any] = json.loads(json.dumps(shown))
    if change == "state":
        copy["receipt"]["final_state"] = "FAILED:card_declined"
    elif change == "leaf":
        leaf = base64.b64decode(copy["entries"][-1]["leaf"])  # the COMMITTED entry
        assert b'"msg_1"' in leaf
        forged = leaf.replace(b'"msg_1"', b'"msg_2"')  # canonical still, another result
        copy["entries"][-1]["leaf"] = base64.b64encode(forged).decode()
    elif change == "entry dropped":
        del copy["entries"][-1]
    elif change == "proof":
        seq = str(copy["entries"][0]["seq"])
        copy["proofs"][seq] = copy["proofs"][str(copy["entries"][1]["seq"])]
    elif change == "no checkpoint":
        copy["checkpoint"] = None
    elif change == "declaration":  # claims a target that dedupes, so an answer looks exact
        copy["receipt"]["declaration"]["tier"] = 1
    elif change == "knowable":
        copy["receipt"]["knowable"] = "tier 1: it dedupes on the effect's key"
    return copy


@pytest.mark.parametrize(
    ("change", "reported"),
    [
        ("state", "the fields shown differ from its entries"),
        ("leaf", "stated hash or seq does not match its bytes"),
        ("entry dropped", "the fields shown differ from its entries"),
        ("proof", "is not proved in the checkpoint"),
        ("no checkpoint", "no signed checkpoint covers it yet"),
        ("declaration", "the fields shown differ from its entries"),
        ("knowable", "the fields shown differ from its entries"),
    ],
)
def test_a_changed_receipt_is_refused(
    saved: tuple[Path, dict[str, Any], str], tmp_path: Path, change: str, reported: str
) -> None:
    _, shown, vkey = saved
    path = tmp_path / "changed.json"
    path.write_text(json.dumps(changed(shown, change)))
    code, out = verify(path, "--vkey", vkey, "--no-witnesses")
    assert code == 1, out
    assert out.startswith("receipt: FAIL") and reported in out, out


def test_a_receipt_is_refused_under_another_key_or_without_the_witnesses(
    saved: tuple[Path, dict[str, Any], str],
) -> None:
    path, _, _ = saved
    stranger = Signer.generate("someone.example")
    code, out = verify(path, "--vkey", stranger.verifier.vkey, "--no-witnesses")
    assert code == 1 and "no trusted key is named" in out, out
    witness = CosignerKey.generate("w1.example").verifier.vkey
    _, _, vkey = saved
    code, out = verify(path, "--vkey", vkey, "--witness", witness)
    assert code == 1 and "cosigned by 0 of the trusted witnesses" in out, out


def test_the_summary_counts_receipts_and_money_per_month_target_state_and_currency(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    register(acme, "mail", evidence_window=timedelta(hours=1), max_inflight=timedelta(seconds=1))
    register(
        acme,
        "payments",
        tier=1,
        queryable=True,
        key_window=timedelta(hours=24),
        money={"amount_field": "amount_cents", "currency_field": "currency"},
    )
    payloads = [
        ("case-1", {"payment": "pi_1", "amount_cents": 1250, "currency": "usd"}, "COMMITTED"),
        ("case-2", {"payment": "pi_2", "amount_cents": 750, "currency": "usd"}, "COMMITTED"),
        ("case-3", {"payment": "pi_3", "amount_cents": 900, "currency": "eur"}, "COMMITTED"),
        ("case-4", {"payment": "pi_4", "amount_cents": 4000, "currency": "usd"}, "AMBIGUOUS"),
    ]
    for case_id, payload, outcome in payloads:
        settled(acme, case_id, "payments", payload, outcome)
    committed(acme, "case-9")  # an email: no amount
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    export = tmp_path / "export.jsonl"
    export.write_text("".join(export_receipts(tenant=acme)))
    summary = tmp_path / "summary.csv"
    vkey = log_verifier(acme.log.origin, signer).vkey
    code, out = verify(export, "--vkey", vkey, "--no-witnesses", "--summary", str(summary))
    assert code == 0, out
    assert f"summary: 4 rows written to {summary}" in out
    with summary.open(newline="") as rows:
        read = list(csv.DictReader(rows))
    month = read[0]["month"]
    assert len(month) == 7 and month[4] == "-"
    assert [
        (
            r["target"],
            r["final_state"],
            r["currency"],
            r["receipts"],
            r["amount"],
            r["amount_in_currency"],
        )
        for r in read
    ] == [
        ("mail", "COMMITTED", "", "1", "", ""),
        ("payments", "AMBIGUOUS", "USD", "1", "4000", "40.00"),
        ("payments", "COMMITTED", "EUR", "1", "900", "9.00"),
        ("payments", "COMMITTED", "USD", "2", "2000", "20.00"),
    ]
