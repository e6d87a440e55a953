"""Receipt exports and the offline verifier: an export of a real tenant verifies with only its
log's key, and every single-line change, deletion or reordering, and byte changes throughout
it, are caught, each by the verdict it offends; what is missing is named; another log's key,
a receipt line removed from a filtered export and an entry moved out of its receipt line are
refused; an export of a damaged database stops cleanly and writes no file."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import LazySettings
from django.contrib.auth.models import Group, User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connection
from django.test import Client

from gate_client import verify
from gate_client.proposal import Proposal
from gate_client.receipts import derive_receipt
from gate_client.verify import Failure, verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier, parse_tlog_proof
from ledger.core.cosignature import CosignerKey
from ledger.core.note import Signer, Verifier
from ledger.selectors import iter_entries
from notary import exports, services
from notary.exports import Progress, export_receipts
from notary.groups import AUDITORS
from notary.models import Tenant
from testkit.exports import carried_entry, carried_seq
from testkit.factories import client_for, dispatched, leased, register

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


def key_of(tenant: Tenant, signer: Signer) -> Verifier:
    """The tenant's log key: the notary's key under the log's origin, as /v1/logs publishes."""
    return log_verifier(tenant.log.origin, signer)


def test_an_export_verifies_with_the_notarys_key_alone(shop: Tenant, signer: Signer) -> None:
    report = verify_export(lines_of(shop), [key_of(shop, signer)])
    assert report.receipts == 5
    assert report.proved == report.size  # every entry once...
    assert report.copies == 5  # ...and each lease grant again, as a copy in its receipt
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
    ambiguous_only = verify_export(lines_of(shop, state="AMBIGUOUS"), [key_of(shop, signer)])
    assert dict(ambiguous_only.outcomes) == {"AMBIGUOUS": 1}
    committed = verify_export(lines_of(shop, state="COMMITTED*"), [key_of(shop, signer)])
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


@pytest.mark.parametrize(
    ("tlog_proofs", "height"),
    [(False, exports.SUBTREE_HEIGHT), (False, 2), (True, None)],
    ids=["v3", "v3 in subtrees of 4", "v1 tlog-proofs"],
)
def test_every_change_deletion_and_reordering_is_caught_by_the_right_verdict(
    shop: Tenant, signer: Signer, tlog_proofs: bool, height: int | None, monkeypatch: Any
) -> None:
    if height is not None:
        monkeypatch.setattr(exports, "SUBTREE_HEIGHT", height)
    lines = lines_of(shop, tlog_proofs=tlog_proofs)
    checked = 0
    for what, changed, allowed in mutations(lines):
        with pytest.raises(Failure) as failure:
            verify_export(changed, [key_of(shop, signer)])
            pytest.fail(f"{what}: not caught")
        assert failure.value.verdict in allowed, f"{what}: {failure.value}"
        checked += 1
    assert checked > 10 * len(lines)


def test_a_header_vkey_in_another_spelling_of_the_same_key_fails_authenticity(
    shop: Tenant, signer: Signer
) -> None:
    """Upper-case hex in the key id, or white space around it, read as the same key: the
    header must still be the exporter's own bytes."""
    lines = lines_of(shop)
    header = json.loads(lines[0])
    vkey = header["vkeys"][0]
    name, key_id, material = vkey.split("+", 2)
    for spelling in {f"{name}+{key_id.upper()}+{material}", f" {vkey}", f"{vkey}\n"} - {vkey}:
        altered = json.dumps({**header, "vkeys": [spelling]}, separators=(",", ":")).encode()
        with pytest.raises(Failure) as failure:
            verify_export([altered, *lines[1:]], [key_of(shop, signer)])
        assert failure.value.verdict == "authenticity", spelling


def test_the_checkpoint_is_stated_once_and_tlog_proofs_are_there_on_request(
    shop: Tenant, signer: Signer
) -> None:
    """v3 states the checkpoint and the subtrees once, each entry's proof is its hashes within
    its subtree; v1 (on request) proves each entry with a whole C2SP tlog-proof that opens
    alone. Both verify, and the subtrees altered in the header fail authenticity."""
    compact, whole = lines_of(shop), lines_of(shop, tlog_proofs=True)
    header = json.loads(compact[0])
    assert header["format"] == "interlock-receipts-export/v3"
    assert json.loads(whole[0])["format"] == "interlock-receipts-export/v1"
    assert "subtrees" not in json.loads(whole[0])
    note = header["checkpoint"]
    assert all(note.encode() not in line for line in compact[1:])
    proofs = sum(len(json.loads(line).get("entries", [None])) for line in whole[1:-1])
    assert sum(map(len, compact[1:])) < sum(map(len, whole[1:])) - proofs * len(note)
    first = json.loads(whole[1])["entries"][0]
    proof = parse_tlog_proof(first["proof"])
    leaf = base64.b64decode(first["leaf"])
    opened = proof.verify(leaf, [key_of(shop, signer)], origin=shop.log.origin)
    assert (opened.size, proof.index, proof.signed_checkpoint) == (21, first["seq"], note)
    for lines in (compact, whole):
        assert verify_export(lines, [key_of(shop, signer)]).receipts == 5
    hashes = base64.b64decode(header["subtrees"]["hashes"])
    for changed in (
        {**header["subtrees"], "hashes": base64.b64encode(hashes[::-1]).decode()},
        {**header["subtrees"], "height": 2},
        None,
    ):
        altered = {**header, "subtrees": changed}
        with pytest.raises(Failure) as failure:
            verify_export([json.dumps(altered).encode(), *compact[1:]], [key_of(shop, signer)])
        assert (failure.value.verdict, failure.value.where) == ("authenticity", "line 1")


def test_the_command_and_the_cli_verifier(shop: Tenant, signer: Signer, tmp_path: Path) -> None:
    """The command signs the log's 24 entries first (case-6 came after the checkpoint of 21)."""
    out = tmp_path / "receipts.jsonl"
    said = io.StringIO()
    call_command("export_receipts", tenant="acme", out=out, no_progress=True, stdout=said)
    assert said.getvalue() == f"{out}: 14 lines, the log's entries [0, 24)\n"
    verified = subprocess.run(
        [
            *(sys.executable, "-m", "gate_client.verify", str(out)),
            *("--vkey", key_of(shop, signer).vkey, "--no-witnesses"),
        ],
        capture_output=True,
        text=True,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "authenticity: OK" in verified.stdout
    assert "completeness: OK  every entry of [0, 24) present once, in order" in verified.stdout
    assert (
        "integrity: OK  6 receipts re-derived from their entries, 24 entries proved in the tree "
        "(and 6 copies of lease entries carried in receipts, proved too)"
    ) in verified.stdout
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(out.read_text().replace('"AMBIGUOUS"', '"COMMITTED"', 1))
    refused = subprocess.run(
        [
            sys.executable,
            "-m",
            "gate_client.verify",
            str(tampered),
            "--vkey",
            key_of(shop, signer).vkey,
            "--no-witnesses",
        ],
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
    assert verify_export(lines, [key_of(shop, signer)]).receipts == 1
    assert client_for(shop, "agent", "bot").get("/v1/exports/receipts").status_code == 403
    assert auditor.get("/v1/exports/receipts", {"from": "not a date"}).status_code == 400
    empty = client_for(globex, "auditor", "gary").get("/v1/exports/receipts")
    assert empty.status_code == 409
    assert empty.json()["error"] == "no_checkpoint"
    detail = empty.json()["detail"]
    assert detail.startswith(f"log {globex.log.origin} has no signed checkpoint yet: ")
    assert f"`manage.py sign_checkpoint --log {globex.log.origin}`; export again" in detail


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
    assert verify_export(lines, [key_of(shop, signer)]).receipts == 5


def test_an_export_after_a_key_rotation_verifies_with_the_new_key(
    shop: Tenant, signer: Signer
) -> None:
    successor = Signer.generate("test.interlock.example")
    dispatched(shop, "mail", "case-7")
    ledger_services.sign_checkpoint(log=shop.log, signer=successor)
    lines = lines_of(shop)
    assert len(json.loads(lines[0])["vkeys"]) == 2  # both keys are published
    assert verify_export(lines, [key_of(shop, successor)]).receipts == 7  # case-6, case-7 too
    with pytest.raises(Failure) as failure:
        verify_export(lines, [key_of(shop, signer)])  # the retired key did not sign this checkpoint
    assert failure.value.verdict == "authenticity"


def test_one_logs_key_does_not_accept_another_logs_export(
    shop: Tenant, globex: Tenant, signer: Signer
) -> None:
    """The notary signs every log with one key, under each log's origin: a trusted key renamed
    to the export's origin would let acme's key vouch for globex's export."""
    ledger_services.append_entry(log=globex.log, kind="OBSERVED", body={"n": 0})
    ledger_services.sign_checkpoint(log=globex.log, signer=signer)
    theirs = lines_of(globex)
    assert verify_export(theirs, [key_of(globex, signer)]).size == 1
    for trusted in ([key_of(shop, signer)], [signer.verifier]):
        with pytest.raises(Failure) as failure:
            verify_export(theirs, trusted)
        assert failure.value.verdict == "authenticity"
        assert f"no trusted key is named {globex.log.origin!r}" in failure.value.detail


def entry_line(item: dict[str, Any]) -> bytes:
    return json.dumps({"type": "entry", **item}, separators=(",", ":")).encode()


def rehomed(lines: list[bytes], effect_id: str, keep: int | None = None) -> list[bytes]:
    """The export with `effect_id`'s receipt line removed (or, with `keep`, cut to its first
    `keep` own entries with the receipt re-derived to match), the entries taken out moved to
    entry lines in seq order, and the footer's counts fixed: what a forger would do."""
    records = [json.loads(line) for line in lines]
    at = next(i for i, r in enumerate(records) if r.get("effect_id") == effect_id)
    receipt = records[at]
    own = [
        e
        for e in receipt["entries"]
        if not isinstance(e, int) and carried_entry(e, line_effect=effect_id).effect_id == effect_id
    ]
    moved = own if keep is None else own[keep:]
    if keep is None:
        del records[at]
    else:
        receipt["entries"] = [e for e in receipt["entries"] if e not in moved]
        journal = [carried_entry(e, line_effect=effect_id) for e in receipt["entries"]]
        receipt["receipt"] = derive_receipt(journal, effect_id).to_dict()
    body = [r for r in records if r["type"] == "entry"]
    body += [
        {"type": "entry", "entry": {**e["entry"], "effect_id": effect_id}, "proof": e["proof"]}
        for e in moved
    ]
    body.sort(key=lambda r: carried_seq(r))
    receipts = [r for r in records if r["type"] == "receipt"]
    footer = {"type": "footer", "receipts": len(receipts), "entries": len(body)}
    return [
        lines[0],
        *(json.dumps(r, separators=(",", ":")).encode() for r in [*receipts, *body, footer]),
    ]


def committed_effect(shop: Tenant, lines: list[bytes]) -> str:
    records = [json.loads(line) for line in lines]
    return str(
        next(
            r["effect_id"]
            for r in records
            if r["type"] == "receipt" and r["receipt"]["final_state"] == "COMMITTED"
        )
    )


def test_a_receipt_removed_from_a_filtered_export_is_found_from_the_entries(
    shop: Tenant, signer: Signer
) -> None:
    lines = lines_of(shop, state="COMMITTED*")
    effect_id = committed_effect(shop, lines)
    forged = rehomed(lines, effect_id)
    with pytest.raises(Failure) as failure:
        verify_export(forged, [key_of(shop, signer)])
    assert failure.value.verdict == "completeness"
    assert f"its receipt is missing: {effect_id} is COMMITTED by its entries" in str(failure.value)
    # The effects the filter refuses stay on entry lines, as the exporter leaves them.
    assert verify_export(lines, [key_of(shop, signer)]).receipts == 2


def test_an_entry_moved_out_of_its_receipt_line_is_refused(shop: Tenant, signer: Signer) -> None:
    """The COMMITTED entry moved to the entry lines and the receipt re-derived without it: the
    receipt line holds together (DISPATCHED), but an entry of its effect lives elsewhere."""
    lines = lines_of(shop)
    effect_id = committed_effect(shop, lines)
    forged = rehomed(lines, effect_id, keep=2)  # PROPOSED, DISPATCHED
    with pytest.raises(Failure) as failure:
        verify_export(forged, [key_of(shop, signer)])
    assert failure.value.verdict == "completeness"
    assert f"an entry of {effect_id}, missing from its receipt line" in failure.value.detail


def test_a_deleted_line_is_named_by_what_it_held(shop: Tenant, signer: Signer) -> None:
    lines = lines_of(shop)
    records = [json.loads(line) for line in lines]
    first_entry = next(i for i, r in enumerate(records) if r["type"] == "entry")
    seq = carried_seq(records[first_entry])
    with pytest.raises(Failure) as failure:
        verify_export(lines[:first_entry] + lines[first_entry + 1 :], [key_of(shop, signer)])
    assert failure.value.detail == (
        f"entries {seq} are missing: no line carries them; "
        f"the footer counts {len(records) - 7} entry lines, {len(records) - 8} are here"
    )
    receipt = records[1]
    line_effect = receipt["effect_id"]
    seqs = [carried_seq(e, line_effect=line_effect) for e in receipt["entries"][1:]]
    own = [
        e.seq
        for e in (carried_entry(item, line_effect=line_effect) for item in receipt["entries"])
        if e.effect_id == line_effect
    ]
    assert seqs  # the lease grant is a copy; the effect's own entries are named
    with pytest.raises(Failure) as failure:
        verify_export([lines[0], *lines[2:]], [key_of(shop, signer)])
    detail = failure.value.detail
    named, _, rest = detail.removeprefix("entries ").partition(" are missing: no line carries")
    assert seqs_in(named) == set(own)
    assert rest == " them; the footer counts 5 receipt lines, 4 are here"


def seqs_in(ranges: str) -> set[int]:
    """'3-5, 9' as {3, 4, 5, 9}."""
    seqs: set[int] = set()
    for part in ranges.split(", "):
        first, _, last = part.partition("-")
        seqs.update(range(int(first), int(last or first) + 1))
    return seqs


def test_an_export_of_an_altered_database_stops_cleanly_and_writes_nothing(
    shop: Tenant, tmp_path: Path
) -> None:
    exports = tmp_path / "exports"
    exports.mkdir()
    out = exports / "receipts.jsonl"
    call_command("export_receipts", tenant="acme", out=out, no_progress=True, stdout=io.StringIO())
    earlier = out.read_bytes()
    with connection.cursor() as cursor:  # the test database's superuser, triggers off
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE ledger_entry SET body = convert_to(replace(convert_from(body, 'UTF8'), "
            "'in the outbox', 'never sent'), 'UTF8') WHERE log_id = %s AND kind = 'RESOLVED'",
            [shop.log.pk],
        )
        assert cursor.rowcount == 1
        cursor.execute("SET LOCAL session_replication_role = origin")
    for target in (out, exports / "fresh.jsonl"):
        with pytest.raises(CommandError) as refused:
            call_command(
                "export_receipts", tenant="acme", out=target, no_progress=True, stdout=io.StringIO()
            )
        message = str(refused.value)
        assert "is not in the tree signed at size 24" in message
        assert "the ledger's database was altered; run verify_ledger" in message
        assert f"{target} was not written" in message
    assert out.read_bytes() == earlier  # the earlier export is left as it was
    assert sorted(p.name for p in exports.iterdir()) == ["receipts.jsonl"]  # no partial file


def test_an_export_whose_checkpoint_was_replaced_is_refused_before_a_line(
    shop: Tenant, signer: Signer, tmp_path: Path
) -> None:
    ledger_services.sign_checkpoint(log=shop.log, signer=signer)  # the whole log: 24
    replace_checkpoint_size(shop, 24, 23)
    out = tmp_path / "exports" / "receipts.jsonl"
    out.parent.mkdir()
    with pytest.raises(CommandError, match=r"the checkpoint of \S+ at size 24: checkpoint signat"):
        call_command("export_receipts", tenant="acme", out=out, no_progress=True)
    assert list(out.parent.iterdir()) == []


def test_a_log_whose_checkpoint_was_replaced_is_not_signed_again(
    shop: Tenant, tmp_path: Path
) -> None:
    """The log grew past the replaced checkpoint: the command's signing refuses the tree."""
    replace_checkpoint_size(shop, 21, 20)
    out = tmp_path / "receipts.jsonl"
    with pytest.raises(CommandError) as refused:
        call_command("export_receipts", tenant="acme", out=out, no_progress=True)
    assert str(refused.value).startswith("nothing signed: the tree of size 24 is not consistent")
    assert str(refused.value).endswith("; run verify_ledger")
    assert not out.exists()
    assert shop.log.checkpoints.count() == 1


def replace_checkpoint_size(tenant: Tenant, size: int, claimed: int) -> None:
    """Change the size the stored checkpoint's note states, past the ledger's triggers."""
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL session_replication_role = replica")
        cursor.execute(
            "UPDATE ledger_checkpoint SET note = replace(note, %s, %s) "
            "WHERE log_id = %s AND size = %s",
            [f"\n{size}\n", f"\n{claimed}\n", tenant.log.pk, size],
        )
        assert cursor.rowcount == 1
        cursor.execute("SET LOCAL session_replication_role = origin")


def test_the_command_signs_a_checkpoint_of_the_whole_log_first(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    """No checkpoint yet: the command signs one of every entry and exports it; a log its latest
    checkpoint covers is not signed again."""
    register(acme, "mail", evidence_window=timedelta(hours=1), max_inflight=timedelta(seconds=1))
    dispatched(acme, "mail", "case-1")
    out = tmp_path / "receipts.jsonl"
    for _ in range(2):
        call_command(
            "export_receipts", tenant="acme", out=out, no_progress=True, stdout=io.StringIO()
        )
        report = verify_export(out.read_bytes().splitlines(), [key_of(acme, signer)])
        assert (report.size, report.receipts) == (3, 1)  # grant, PROPOSED, DISPATCHED
    assert acme.log.checkpoints.count() == 1


def test_an_export_waiting_for_witnesses_says_what_is_missing(
    shop: Tenant, signer: Signer, settings: LazySettings, tmp_path: Path
) -> None:
    """Two witnesses' cosignatures are required; the log's latest checkpoint has one. Both the
    command and the API say so, and what to do; nothing is written."""
    first, second = (CosignerKey.generate(f"w{n}.witness.example") for n in (1, 2))
    settings.LEDGER_WITNESSES = [(f"http://{w.name}", w.verifier.vkey) for w in (first, second)]
    settings.LEDGER_COSIGNATURE_QUORUM = 2
    latest = ledger_services.sign_checkpoint(log=shop.log, signer=signer)  # all 24 entries
    body = latest.note[: latest.note.rfind("\n\n") + 1]
    line = first.cosign(body, timestamp=1_800_000_000)
    ledger_services.record_cosignature(checkpoint=latest, witness=first.verifier, line=line)
    out = tmp_path / "receipts.jsonl"
    with pytest.raises(CommandError) as refused:
        call_command("export_receipts", tenant="acme", out=out, no_progress=True)
    detail = str(refused.value).removesuffix(f"; {out} was not written")
    assert detail == (
        f"log {shop.log.origin} publishes a checkpoint only once 2 of its witnesses "
        "(LEDGER_WITNESSES) cosigned it (LEDGER_COSIGNATURE_QUORUM), and none is yet: its "
        "latest, of size 24, is verifiably cosigned by 1. Each checkpoint is sent to the "
        "witnesses once signed, and again on the notary's beat: check that they run and are "
        "reachable, then export again"
    )
    assert not out.exists()
    answer = client_for(shop, "auditor", "audrey").get("/v1/exports/receipts")
    assert answer.status_code == 409
    assert answer.json() == {"error": "no_checkpoint", "detail": detail}
    settings.LEDGER_WITNESSES = settings.LEDGER_WITNESSES[:1]  # the second one dropped
    with pytest.raises(
        CommandError, match=r"is verifiably cosigned by 1 \(only 1 configured\)\. Each"
    ):
        call_command("export_receipts", tenant="acme", out=out, no_progress=True)


def test_an_export_while_the_new_checkpoint_awaits_its_witnesses_says_what_it_covers(
    shop: Tenant, settings: LazySettings, tmp_path: Path
) -> None:
    """The checkpoint of 21 is cosigned; the one the command signs, of 24, not yet (nothing
    is sent to the witness inside a test's transaction): the export is of 21, and says so."""
    witness = CosignerKey.generate("w1.witness.example")
    settings.LEDGER_WITNESSES = [(f"http://{witness.name}", witness.verifier.vkey)]
    settings.LEDGER_COSIGNATURE_QUORUM = 1
    cosigned = shop.log.checkpoints.get()
    body = cosigned.note[: cosigned.note.rfind("\n\n") + 1]
    line = witness.cosign(body, timestamp=1_800_000_000)
    ledger_services.record_cosignature(checkpoint=cosigned, witness=witness.verifier, line=line)
    out, said, warned = tmp_path / "receipts.jsonl", io.StringIO(), io.StringIO()
    call_command(
        "export_receipts", tenant="acme", out=out, no_progress=True, stdout=said, stderr=warned
    )
    assert said.getvalue() == f"{out}: 12 lines, the log's entries [0, 21)\n"
    assert warned.getvalue() == (
        "the latest checkpoint, of size 24, is not published yet (it awaits its witnesses' "
        "cosignatures): this export is as of size 21\n"
    )
    assert [c.size for c in shop.log.checkpoints.order_by("size")] == [21, 24]


def test_the_progress_counts_each_entry_of_the_checkpoint_once(shop: Tenant) -> None:
    """In entries given their line, of the checkpoint's size: from 0 at the header, never back,
    to all of them, whatever the filter leaves to entry lines."""
    for state in (None, "COMMITTED*", "AMBIGUOUS"):
        seen, progress = watched()
        lines = list(export_receipts(tenant=shop, state=state, progress=progress))
        assert seen[0] == (0, 21) and seen[-1] == (21, 21), state
        assert [done for done, _ in seen] == sorted(done for done, _ in seen)
        assert len(seen) == len(lines) - 1  # the header, then every line but the footer


def watched() -> tuple[list[tuple[int, int]], Progress]:
    """What an export reports of its progress, kept, and the callback that keeps it."""
    seen: list[tuple[int, int]] = []
    return seen, lambda done, total: seen.append((done, total))


@pytest.mark.parametrize(
    ("state", "hint"),
    [
        ("ambiguous", "did you mean AMBIGUOUS?"),
        ("committed*", "did you mean COMMITTED*?"),
        ("FAILED", "did you mean FAILED*?"),  # a failure has its code: FAILED:card_declined
        ("failed:card_declined", "did you mean FAILED:card_declined?"),
        ("REFUSED:lease_lost", None),
        ("PENDING*", None),
    ],
)
def test_a_state_no_receipt_can_have_is_refused_and_nothing_changes(
    shop: Tenant, tmp_path: Path, state: str, hint: str | None
) -> None:
    out = tmp_path / "receipts.jsonl"
    with pytest.raises(CommandError) as refused:
        call_command("export_receipts", tenant="acme", out=out, state=state, no_progress=True)
    detail = str(refused.value).removesuffix(f"; {out} was not written")
    assert detail.startswith(f"state {state!r} is no receipt's final state")
    assert (f"({hint})" in detail) if hint else ("did you mean" not in detail)
    for named in (
        "PROPOSED, HELD, DISPATCHED, COMMITTED, COMMITTED_BY_RETRY",
        "FAILED:<code>, REFUSED:<reason>[_at_recovery], AMBIGUOUS, RESOLVED_HAPPENED",
        "lease_expired, lease_revoked",
        "or a prefix ending in *, e.g. COMMITTED*",
    ):
        assert named in detail
    assert not out.exists()
    assert shop.log.checkpoints.count() == 1  # the command signed nothing (case-6 is unsigned)
    answer = client_for(shop, "auditor", "audrey").get("/v1/exports/receipts", {"state": state})
    assert answer.status_code == 400
    assert answer.json() == {"error": "invalid", "detail": detail}


def test_every_state_a_receipt_can_have_is_a_filter(shop: Tenant, signer: Signer) -> None:
    receipts = {
        "*": 5,
        "RESOLVED_*": 1,
        "COMMITTED_ON_EVIDENCE": 1,
        "DISPATCHED": 1,
        "PROPOSED": 0,
        "FAILED:card_declined": 0,
        "FAILED:*": 0,
        "REFUSED:stale_premise_at_recovery": 0,
        "REFUSED:lease_*": 0,
    }
    for state, count in receipts.items():
        assert verify_export(lines_of(shop, state=state), [key_of(shop, signer)]).receipts == count


@pytest.mark.parametrize("option", ["--from", "--to"])
def test_a_time_the_command_cannot_read_names_the_option_given(
    shop: Tenant, tmp_path: Path, option: str
) -> None:
    out = tmp_path / "receipts.jsonl"
    for moment in ("yesterday", "2026-11-01T00:00"):  # no zone
        with pytest.raises(CommandError, match=f"^{option}: an ISO 8601 time with a zone"):
            call_command("export_receipts", "--tenant=acme", f"--out={out}", option, moment)


def one_lease_three_effects(acme: Tenant, signer: Signer) -> None:
    """Three effects proposed under one lease, and a checkpoint of them signed."""
    lease = leased(acme, "case-1", "email", requested_by="mail-bot")
    for target in ("mail-1", "mail-2", "mail-3"):
        register(acme, target)
        proposal = Proposal(
            case_id="case-1",
            target=target,
            action="email",
            payload={"to": "customer@example.com"},
            lease_id=lease.lease_id,
            tenant=acme.slug,
        )
        services.effect_propose(
            tenant=acme, effect_id=proposal.effect_id, proposal=proposal.proposed_body([])
        )
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)


def test_lease_entries_copied_into_several_receipts_are_counted_once(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    """Three effects under one lease: the grant is proved at its home and carried or cited in
    each receipt; the verifier counts the log's 4 entries once, and the 3 copies apart."""
    one_lease_three_effects(acme, signer)
    out = tmp_path / "receipts.jsonl"
    out.write_text("".join(export_receipts(tenant=acme)), encoding="utf-8")
    vkey = key_of(acme, signer).vkey
    verified = subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(out), "--vkey", vkey, "--no-witnesses"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert (
        "integrity: OK  3 receipts re-derived from their entries, 4 entries proved in the tree "
        "(and 3 copies of lease entries carried in receipts, proved too)\n"
    ) in verified.stdout


def receipt_items(lines: list[bytes]) -> list[list[Any]]:
    return [json.loads(line)["entries"] for line in lines if b'"type":"receipt"' in line]


def with_receipt_items(lines: list[bytes], line: int, items: list[Any]) -> list[bytes]:
    """The export with the `line`-th receipt line's entries replaced by `items`."""
    at = [i for i, raw in enumerate(lines) if b'"type":"receipt"' in raw][line]
    record = {**json.loads(lines[at]), "entries": items}
    return [*lines[:at], json.dumps(record, separators=(",", ":")).encode(), *lines[at + 1 :]]


def test_a_lease_entry_is_cited_only_within_the_window_of_receipt_lines_that_carried_it(
    acme: Tenant, signer: Signer, monkeypatch: Any
) -> None:
    """The first receipt line carries the lease grant, the next within CITE_WINDOW lines cite
    its seq; past the window it is carried again. A citation of an entry no line within the
    window carried is refused, and so is one the verifier's smaller window no longer holds."""
    one_lease_three_effects(acme, signer)
    key = [log_verifier(acme.log.origin, signer)]
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    grant = next(e.seq for e in iter_entries(log=acme.log) if e.kind == "LEASE_GRANTED")
    assert [grant in items for items in receipt_items(lines)] == [False, True, True]
    assert verify_export(lines, key).copies == 3

    uncarried = with_receipt_items(lines, 0, [grant, *receipt_items(lines)[0][1:]])
    with pytest.raises(Failure) as failure:
        verify_export(uncarried, key)
    assert failure.value.verdict == "integrity"
    assert f"it cites entry {grant}, which none of the" in failure.value.detail

    for module in (exports, verify):
        monkeypatch.setattr(module, "CITE_WINDOW", 1)
    narrow = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    assert [grant in items for items in receipt_items(narrow)] == [False, True, False]
    assert verify_export(narrow, key).receipts == 3
    with pytest.raises(Failure) as failure:
        verify_export(lines, key)  # its third line cites the grant two lines back
    assert f"it cites entry {grant}, which none of the 1 receipt lines" in failure.value.detail


def test_a_carried_entry_stands_for_its_canonical_bytes_and_nothing_else(
    acme: Tenant, signer: Signer
) -> None:
    """v3 carries each entry as a JSON value, its own effect's without the effect id: a value
    changed, or a lease's entry with its effect id ("") left out, is not the logged entry."""
    one_lease_three_effects(acme, signer)
    key = [log_verifier(acme.log.origin, signer)]
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=acme)]
    items = receipt_items(lines)[0]
    lease_item, proposed_item = items[0], items[1]
    assert lease_item["entry"]["effect_id"] == "" and "effect_id" not in proposed_item["entry"]
    payload = proposed_item["entry"]["body"]["payload"]
    changed_body = {**proposed_item["entry"]["body"], "payload": {**payload, "to": "x@example.com"}}
    no_effect_id = {k: v for k, v in lease_item["entry"].items() if k != "effect_id"}
    for forged in (
        [lease_item, {**proposed_item, "entry": {**proposed_item["entry"], "body": changed_body}}],
        [{**lease_item, "entry": no_effect_id}, proposed_item],
    ):
        with pytest.raises(Failure) as failure:
            verify_export(with_receipt_items(lines, 0, forged), key)
        assert failure.value.verdict == "integrity"
        assert "is not in the tree" in failure.value.detail


def as_v2(lines: list[bytes]) -> list[bytes]:
    """A v3 export written as v2 was: each entry's bytes as a JSON string with its seq, every
    citation carried in full."""
    records = [json.loads(line) for line in lines]
    header = {**records[0], "format": "interlock-receipts-export/v2"}
    carried: dict[int, dict[str, Any]] = {}

    def v2_item(item: Any, line_effect: str) -> dict[str, Any]:
        if isinstance(item, int):
            return carried[item]
        entry = carried_entry(item, line_effect=line_effect)
        shown = {"seq": entry.seq, "text": entry.leaf_bytes().decode(), "proof": item["proof"]}
        carried[entry.seq] = shown
        return shown

    rest = []
    for record in records[1:]:
        if record["type"] == "receipt":
            items = [v2_item(item, record["effect_id"]) for item in record["entries"]]
            record = {**record, "entries": items}
        elif record["type"] == "entry":
            record = {"type": "entry", **v2_item(record, "")}
        rest.append(record)
    return [json.dumps(r, separators=(",", ":")).encode() for r in [header, *rest]]


def test_an_export_in_the_format_before_v3_still_verifies(acme: Tenant, signer: Signer) -> None:
    one_lease_three_effects(acme, signer)
    key = [log_verifier(acme.log.origin, signer)]
    older = as_v2([line.rstrip("\n").encode() for line in export_receipts(tenant=acme)])
    assert b'"text":' in older[1] and b'"entry":' not in older[1]
    report = verify_export(older, key)
    assert (report.receipts, report.proved, report.copies) == (3, 4, 3)
    tampered = [older[0], older[1].replace(b"mail-bot", b"mail-bob"), *older[2:]]
    with pytest.raises(Failure) as failure:
        verify_export(tampered, key)
    assert failure.value.verdict == "integrity"
