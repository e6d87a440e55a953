"""Our checkpoints, notes and proofs checked by the Go reference code (golang.org/x/mod's
sumdb/note and sumdb/tlog), compiled from Debian's sources: an independent verifier that no
one here wrote. CI installs it (.ci/run); elsewhere the test is skipped if it is missing."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from rest_framework.test import APIClient

from ledger import selectors, services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from ledger.models import Log
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.factories import client_for
from testkit.goverify import run_goverify

SIZES = [1, 2, 3, 7, 8, 13, 32, 33, 64, 70]


@pytest.fixture
def signed_sizes(log: Log, signer: Signer) -> dict[int, str]:
    notes = {}
    for size in SIZES:
        while selectors.log_head(log=log).size < size:
            services.append_entry(log=log, kind="OBSERVED", body={"n": log.size, "text": "é✓"})
        notes[size] = services.sign_checkpoint(log=log, signer=signer).note
    return notes


def test_go_reference_accepts_every_inclusion_proof(
    goverify: Path, log: Log, signer: Signer, signed_sizes: dict[int, str], tmp_path: Path
) -> None:
    vkey = log_verifier(log.origin, signer).vkey
    for size in SIZES:
        for index in sorted({0, size // 2, size - 1}):
            proof = tmp_path / "entry.tlog-proof"
            leaf = tmp_path / "leaf"
            proof.write_text(selectors.tlog_proof(log=log, index=index, size=size).text())
            leaf.write_bytes(selectors.get_entry(log=log, seq=index).leaf_bytes())
            result = run_goverify(goverify, "inclusion", vkey, proof, leaf)
            assert result.stdout == f"ok inclusion {log.origin} size {size} index {index}\n"


def test_go_reference_accepts_every_consistency_proof(
    goverify: Path, log: Log, signer: Signer, signed_sizes: dict[int, str], tmp_path: Path
) -> None:
    vkey = log_verifier(log.origin, signer).vkey
    for old in SIZES:
        for new in SIZES:
            if old > new:
                continue
            (tmp_path / "old").write_text(signed_sizes[old])
            (tmp_path / "new").write_text(signed_sizes[new])
            hashes = selectors.consistency_proof(log=log, old_size=old, new_size=new)
            (tmp_path / "proof").write_text(
                "".join(base64.b64encode(h).decode() + "\n" for h in hashes)
            )
            result = run_goverify(
                goverify, "consistency", vkey, *(tmp_path / n for n in ("old", "new", "proof"))
            )
            assert result.stdout == f"ok consistency {log.origin} {old} -> {new}\n"


def test_go_reference_rejects_a_changed_leaf_a_stranger_key_and_a_bad_proof(
    goverify: Path, log: Log, signer: Signer, signed_sizes: dict[int, str], tmp_path: Path
) -> None:
    vkey = log_verifier(log.origin, signer).vkey
    proof, leaf = tmp_path / "p", tmp_path / "leaf"
    proof.write_text(selectors.tlog_proof(log=log, index=5, size=13).text())
    original = selectors.get_entry(log=log, seq=5).leaf_bytes()
    leaf.write_bytes(original)
    assert run_goverify(goverify, "inclusion", vkey, proof, leaf).returncode == 0

    leaf.write_bytes(original.replace(b'"n":5', b'"n":6'))
    assert "inclusion: " in run_goverify(goverify, "inclusion", vkey, proof, leaf).stdout
    leaf.write_bytes(original)

    stranger = log_verifier(log.origin, Signer.generate("x")).vkey
    assert "note: " in run_goverify(goverify, "inclusion", stranger, proof, leaf).stdout

    lines = proof.read_text().split("\n")
    lines[2] = base64.b64encode(b"\x00" * 32).decode()
    proof.write_text("\n".join(lines))
    assert "inclusion: " in run_goverify(goverify, "inclusion", vkey, proof, leaf).stdout


@pytest.mark.django_db
def test_go_reference_opens_the_api_checkpoint_with_exactly_the_published_log_vkey(
    goverify: Path, acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    """What an outside tool is given over HTTP: the log's vkey (no credentials), the latest
    checkpoint and an inclusion proof (an auditor's key). note.Open takes the vkey as is."""
    for n in range(5):
        services.append_entry(log=acme.log, kind="OBSERVED", body={"n": n})
    services.sign_checkpoint(log=acme.log, signer=signer)
    published = APIClient().get(f"/v1/logs/{acme.log.origin}/vkey").json()
    vkey = published["vkeys"][0]["vkey"]
    auditor = client_for(acme, "auditor", "audrey")
    note = auditor.get("/v1/checkpoints/latest").json()["note"]
    (tmp_path / "checkpoint").write_text(note)
    (tmp_path / "empty").write_text("")
    result = run_goverify(
        goverify,
        "consistency",
        vkey,
        *(tmp_path / n for n in ("checkpoint", "checkpoint", "empty")),
    )
    assert result.stdout == f"ok consistency {acme.log.origin} 5 -> 5\n"
    proof = auditor.get("/v1/proofs/inclusion", {"index": 3}).json()["tlog_proof"]
    (tmp_path / "proof").write_text(proof)
    (tmp_path / "leaf").write_bytes(selectors.get_entry(log=acme.log, seq=3).leaf_bytes())
    result = run_goverify(goverify, "inclusion", vkey, tmp_path / "proof", tmp_path / "leaf")
    assert result.stdout == f"ok inclusion {acme.log.origin} size 5 index 3\n"
    # The notary's key as /v1/keys lists it (under the notary's name) is not the log's key.
    listed = APIClient().get("/v1/keys").json()[0]["vkey"]
    assert listed != vkey
    refused = run_goverify(goverify, "inclusion", listed, tmp_path / "proof", tmp_path / "leaf")
    assert refused.returncode == 1 and "note: " in refused.stdout


@pytest.mark.django_db
def test_go_reference_accepts_the_tlog_proofs_of_an_export_made_with_them(
    goverify: Path, acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    """An export made with tlog_proofs (v1) proves each entry with a C2SP tlog-proof that the
    reference verifier accepts with the entry's leaf and the log's vkey alone."""
    for n in range(13):
        services.append_entry(log=acme.log, kind="OBSERVED", body={"n": n})
    services.sign_checkpoint(log=acme.log, signer=signer)
    vkey = log_verifier(acme.log.origin, signer).vkey
    lines = [json.loads(line) for line in export_receipts(tenant=acme, tlog_proofs=True)]
    entries = [line for line in lines if line["type"] == "entry"]
    assert [entry["seq"] for entry in entries] == list(range(13))
    for entry in entries:
        (tmp_path / "proof").write_text(entry["proof"])
        (tmp_path / "leaf").write_bytes(base64.b64decode(entry["leaf"]))
        result = run_goverify(goverify, "inclusion", vkey, tmp_path / "proof", tmp_path / "leaf")
        assert result.stdout == f"ok inclusion {acme.log.origin} size 13 index {entry['seq']}\n"
