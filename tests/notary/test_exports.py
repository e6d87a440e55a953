"""Receipt exports and the offline verifier: an export of a real tenant verifies with only the
notary's key, and every single-line change, deletion or reordering, and byte changes throughout
it, are caught, each by the verdict it offends."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from gate_client.verify import Failure, verify_export
from ledger import services as ledger_services
from ledger.core.note import Signer
from notary import services
from notary.exports import export_receipts
from notary.groups import AUDITORS
from notary.models import Tenant
from testkit.factories import client_for, dispatched, register

pytestmark = pytest.mark.django_db


@pytest.fixture
def shop(acme: Tenant, signer: Signer) -> Tenant:
    """A tenant whose effects ended in several ways, a checkpoint, and an effect after it."""
    register(acme, "mail", evidence_window=timedelta(hours=1), max_inflight=timedelta(seconds=1))
    committed = dispatched(acme, "mail", "case-1")
    services.effect_record_outcome(
        tenant=acme,
        effect_id=committed,
        kind="COMMITTED",
        body={"state": "COMMITTED", "attempt": 1, "result_ref": "msg_1", "recheck": None},
    )
    ambiguous = dispatched(acme, "mail", "case-2")
    services.effect_record_outcome(tenant=acme, effect_id=ambiguous, kind="AMBIGUOUS", body={})
    resolved = dispatched(acme, "mail", "case-3")
    services.effect_record_outcome(tenant=acme, effect_id=resolved, kind="AMBIGUOUS", body={})
    services.effect_resolve(
        tenant=acme, effect_id=resolved, happened=True, reason="in the outbox", by="fiona"
    )
    attested = dispatched(acme, "mail", "case-4")
    services.attestation_record(
        tenant=acme, by="mailer", effect_id=attested, stage="performed", reference="m4", detail=""
    )
    dispatched(acme, "mail", "case-5")  # still in flight
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)
    dispatched(acme, "mail", "case-6")  # after the checkpoint: not in this export
    return acme


def lines_of(shop: Tenant, **wanted: Any) -> list[bytes]:
    return [line.rstrip("\n").encode() for line in export_receipts(tenant=shop, **wanted)]


def test_an_export_verifies_with_the_notarys_key_alone(shop: Tenant, signer: Signer) -> None:
    report = verify_export(lines_of(shop), [signer.verifier])
    assert report.receipts == 5
    assert report.proved == report.size + 5  # every entry once, each lease grant also copied
    assert dict(report.outcomes) == {
        "COMMITTED": 1,
        "AMBIGUOUS": 1,
        "RESOLVED_HAPPENED": 1,
        "COMMITTED_ON_EVIDENCE": 1,
        "DISPATCHED": 1,
    }
    # 5 x (grant, PROPOSED, DISPATCHED), then COMMITTED, AMBIGUOUS, AMBIGUOUS + RESOLVED,
    # OBSERVED + COMMITTED
    assert report.size == 5 * 3 + 6
    ambiguous_only = verify_export(lines_of(shop, state="AMBIGUOUS"), [signer.verifier])
    assert dict(ambiguous_only.outcomes) == {"AMBIGUOUS": 1}
    committed = verify_export(lines_of(shop, state="COMMITTED*"), [signer.verifier])
    assert committed.receipts == 2


def test_an_untrusted_key_fails_authenticity(shop: Tenant) -> None:
    with pytest.raises(Failure) as failure:
        verify_export(lines_of(shop), [Signer.generate("someone.else").verifier])
    assert failure.value.verdict == "authenticity"


def mutations(lines: list[bytes]) -> Iterator[tuple[str, list[bytes], set[str]]]:
    """(what, the changed export, the verdicts that may catch it)."""
    last = len(lines) - 1
    for index in range(len(lines)):
        where = "header" if index == 0 else "footer" if index == last else f"line {index + 1}"
        whole = {"authenticity"} if index == 0 else {"completeness"}
        yield f"delete {where}", lines[:index] + lines[index + 1 :], whole
        if index < last:
            swapped = list(lines)
            swapped[index], swapped[index + 1] = swapped[index + 1], swapped[index]
            yield f"swap {where} with the next", swapped, whole
        line = lines[index]
        for position in range(0, len(line), max(1, len(line) // 9)):
            changed = bytearray(line)
            changed[position] = ord("B") if changed[position] != ord("B") else ord("C")
            edited = [*lines[:index], bytes(changed), *lines[index + 1 :]]
            allowed = (
                {"authenticity"}
                if index == 0
                else {"completeness", "integrity"}
                if index == last
                else {"integrity"}
            )
            yield f"byte {position} of {where}", edited, allowed


def test_every_change_deletion_and_reordering_is_caught_by_the_right_verdict(
    shop: Tenant, signer: Signer
) -> None:
    lines = lines_of(shop)
    checked = 0
    for what, changed, allowed in mutations(lines):
        with pytest.raises(Failure) as failure:
            verify_export(changed, [signer.verifier])
            pytest.fail(f"{what}: not caught")
        assert failure.value.verdict in allowed, f"{what}: {failure.value}"
        checked += 1
    assert checked > 10 * len(lines)


def test_the_command_and_the_cli_verifier(shop: Tenant, signer: Signer, tmp_path: Path) -> None:
    out = tmp_path / "receipts.jsonl"
    call_command("export_receipts", tenant="acme", out=out, no_progress=True, stdout=io.StringIO())
    verified = subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(out), "--vkey", signer.verifier.vkey],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "authenticity: OK" in verified.stdout
    assert "completeness: OK  every entry of [0, 21) present once, in order" in verified.stdout
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(out.read_text().replace('"AMBIGUOUS"', '"COMMITTED"', 1))
    refused = subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(tampered), "--vkey", signer.verifier.vkey],
        capture_output=True,
        text=True,
    )
    assert refused.returncode == 1
    assert "integrity: FAIL at line" in refused.stdout
    with pytest.raises(CommandError, match="no tenant"):
        call_command("export_receipts", tenant="nope", out=out)


def test_the_api_streams_an_export_to_auditors_only(
    shop: Tenant, signer: Signer, globex: Tenant
) -> None:
    auditor = client_for(shop, "auditor", "audrey")
    answer = auditor.get("/v1/exports/receipts", {"state": "AMBIGUOUS"})
    assert answer.status_code == 200
    assert answer["Content-Type"] == "application/x-ndjson"
    lines = answer.getvalue().splitlines()
    assert verify_export(lines, [signer.verifier]).receipts == 1
    assert client_for(shop, "agent", "bot").get("/v1/exports/receipts").status_code == 403
    assert auditor.get("/v1/exports/receipts", {"from": "not a date"}).status_code == 400
    empty = client_for(globex, "auditor", "gary").get("/v1/exports/receipts")
    assert empty.status_code == 409
    assert empty.json()["error"] == "no_checkpoint"


def test_an_auditor_downloads_the_export_from_the_admin(shop: Tenant, signer: Signer) -> None:
    auditor = User.objects.create_user("audrey", password="pw", is_staff=True)
    auditor.groups.add(Group.objects.get(name=AUDITORS))
    browser = Client()
    browser.force_login(auditor)
    answer = browser.post(
        "/admin/notary/tenant/", {"action": "export_receipts", "_selected_action": [shop.pk]}
    )
    assert answer.status_code == 200
    assert answer["Content-Disposition"] == 'attachment; filename="receipts-acme.jsonl"'
    lines = answer.getvalue().splitlines()
    assert verify_export(lines, [signer.verifier]).receipts == 5


def test_an_export_after_a_key_rotation_verifies_with_the_new_key(
    shop: Tenant, signer: Signer
) -> None:
    successor = Signer.generate("test.interlock.example")
    dispatched(shop, "mail", "case-7")
    ledger_services.sign_checkpoint(log=shop.log, signer=successor)
    lines = lines_of(shop)
    assert len(json.loads(lines[0])["vkeys"]) == 2  # both keys are published
    assert verify_export(lines, [successor.verifier]).receipts == 7  # case-6 and case-7 too
    with pytest.raises(Failure) as failure:
        verify_export(lines, [signer.verifier])  # the retired key did not sign this checkpoint
    assert failure.value.verdict == "authenticity"
