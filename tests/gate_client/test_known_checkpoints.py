"""Issue 16: `python -m gate_client.verify --known-checkpoint FILE`, run as a subprocess on a
real export. A checkpoint kept outside the database catches an export of a log restored from an
old backup (rolled back), one regrown to the same size (forked) and one whose early entries
were rewritten (its prefix has another root); one signed by an untrusted key is refused; an
honest export extends every checkpoint seen before it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ledger import services as ledger_services
from ledger.core.checkpoint import Checkpoint, log_verifier
from ledger.core.note import Signer
from ledger.models import Log
from ledger.services import NewEntry
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.insider import back_up, restore

pytestmark = pytest.mark.django_db


def grow(log: Log, start: int, end: int, *, tag: str = "honest") -> None:
    ledger_services.append_entries(
        log=log,
        items=[NewEntry(kind="OBSERVED", body={"n": n, "tag": tag}) for n in range(start, end)],
    )


def kept(log: Log, signer: Signer, path: Path) -> Path:
    """Sign the log's tree head and keep the note in a file, as an auditor would."""
    log.refresh_from_db()
    path.write_text(ledger_services.sign_checkpoint(log=log, signer=signer).note, "utf-8")
    return path


def verify(tenant: Tenant, signer: Signer, tmp_path: Path, *known: Path) -> tuple[int, str]:
    export = tmp_path / "export.jsonl"
    export.write_text("".join(export_receipts(tenant=tenant)), encoding="utf-8")
    vkey = log_verifier(tenant.log.origin, signer).vkey
    args = [sys.executable, "-m", "gate_client.verify", str(export), "--vkey", vkey]
    args.append("--no-witnesses")
    for path in known:
        args += ["--known-checkpoint", str(path)]
    done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=60)
    return done.returncode, done.stdout + done.stderr


def test_an_honest_export_extends_every_checkpoint_kept(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    grow(acme.log, 0, 7)
    at_7 = kept(acme.log, signer, tmp_path / "at-7")
    grow(acme.log, 7, 20)
    at_20 = kept(acme.log, signer, tmp_path / "at-20")
    code, out = verify(acme, signer, tmp_path, at_7, at_20)
    assert code == 0, out
    assert "history: OK  the export's tree extends 2 known checkpoint(s)" in out


def test_an_export_of_a_rolled_back_log_is_refused(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    grow(acme.log, 0, 10)
    at_10 = kept(acme.log, signer, tmp_path / "at-10")
    backup = back_up(acme.log)
    grow(acme.log, 10, 20)
    at_20 = kept(acme.log, signer, tmp_path / "at-20")
    restore(backup)
    code, out = verify(acme, signer, tmp_path, at_10)
    assert code == 0, out  # the restored log does extend what was signed before the backup
    code, out = verify(acme, signer, tmp_path, at_10, at_20)
    assert code == 1, out
    assert f"history: FAIL at {at_20}: history rewritten, a rollback" in out
    assert at_20.read_text() in out  # both checkpoints, the evidence
    assert at_10.read_text() in out


def test_an_export_of_a_forked_log_is_refused(
    acme: Tenant, signer: Signer, tmp_path: Path, signed_heads_file: Path
) -> None:
    """An insider with the database and the notary's key host (its memory of what it signed
    deleted, or it would refuse to sign the fork) signs a forked tree: the kept checkpoint
    shows it."""
    grow(acme.log, 0, 10)
    backup = back_up(acme.log)
    grow(acme.log, 10, 20)
    at_20 = kept(acme.log, signer, tmp_path / "at-20")
    restore(backup)
    signed_heads_file.unlink()
    grow(acme.log, 10, 20, tag="forged")
    kept(acme.log, signer, tmp_path / "forged-20")
    code, out = verify(acme, signer, tmp_path, at_20)
    assert code == 1, out
    assert "a fork: two checkpoints of size 20, roots differ" in out
    grow(acme.log, 20, 30, tag="forged")
    kept(acme.log, signer, tmp_path / "forged-30")
    code, out = verify(acme, signer, tmp_path, at_20)
    assert code == 1, out
    assert "a fork: the export's first 20 entries have another root" in out


def test_a_known_checkpoint_by_an_untrusted_key_is_refused(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    grow(acme.log, 0, 4)
    kept(acme.log, signer, tmp_path / "at-4")
    acme.log.refresh_from_db()
    # A larger "checkpoint" under the log's name but another key: it proves nothing.
    forged = Checkpoint(acme.log.origin, 9, bytes(32)).sign(Signer.generate("someone"))
    (tmp_path / "forged").write_text(forged, "utf-8")
    code, out = verify(acme, signer, tmp_path, tmp_path / "forged")
    assert code == 1, out
    assert f"not a checkpoint of {acme.log.origin} by a trusted key" in out
