"""`python -m gate_client.verify` on real exports, the witnesses' verdict: by default it checks
the witnesses the export names and refuses an export that names none or whose checkpoint they
did not cosign, unless the auditor says --no-witnesses; it counts only cosignatures made within
the freshness bound of now, or of the instant the auditor names with --as-of. Cosignatures are
cosignature/v1 lines made with the witness's Ed25519 key at chosen times (a witness's clock is
its own), stored the way the notary stores a witness's answer."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.conf import LazySettings

from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.cosignature import DEFAULT_MAX_COSIGNATURE_AGE, CosignerKey
from ledger.core.note import Signer
from ledger.models import Checkpoint
from ledger.services import NewEntry
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.insider import back_up, restore

pytestmark = pytest.mark.django_db

DAY = 24 * 3600


@pytest.fixture
def witness(settings: LazySettings) -> CosignerKey:
    """A witness the notary is configured with (never reached: nothing is sent to witnesses
    inside a test's transaction), whose cosignature it requires."""
    key = CosignerKey.generate("w1.witness.example")
    settings.LEDGER_WITNESSES = [("http://127.0.0.1:9", key.verifier.vkey)]
    settings.LEDGER_COSIGNATURE_QUORUM = 1
    return key


def signed(tenant: Tenant, signer: Signer, count: int, *, tag: str = "honest") -> Checkpoint:
    """`count` more entries, and the checkpoint of the log's tree."""
    ledger_services.append_entries(
        log=tenant.log,
        items=[NewEntry(kind="OBSERVED", body={"n": n, "tag": tag}) for n in range(count)],
    )
    tenant.log.refresh_from_db()
    return ledger_services.sign_checkpoint(log=tenant.log, signer=signer)


def cosign(checkpoint: Checkpoint, witness: CosignerKey, at: int) -> None:
    body = checkpoint.note[: checkpoint.note.rfind("\n\n") + 1]
    line = witness.cosign(body, timestamp=at)
    ledger_services.record_cosignature(checkpoint=checkpoint, witness=witness.verifier, line=line)


def export(tenant: Tenant, path: Path) -> Path:
    path.write_text("".join(export_receipts(tenant=tenant)), encoding="utf-8")
    return path


def verify(path: Path, tenant: Tenant, signer: Signer, *args: str) -> tuple[int, str]:
    vkey = log_verifier(tenant.log.origin, signer).vkey
    command = [sys.executable, "-m", "gate_client.verify", str(path), "--vkey", vkey, *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)
    return done.returncode, done.stdout + done.stderr


def test_the_witnesses_the_export_names_are_checked_by_default(
    acme: Tenant, signer: Signer, witness: CosignerKey, tmp_path: Path
) -> None:
    cosign(signed(acme, signer, 3), witness, int(time.time()))
    path = export(acme, tmp_path / "export.jsonl")
    header = json.loads(path.read_text().split("\n", 1)[0])
    assert header["witnesses"] == {"vkeys": [witness.verifier.vkey], "quorum": 1}
    code, out = verify(path, acme, signer)
    assert code == 0, out
    assert (
        "witnesses: OK  cosigned by 1 of the 1 witnesses the export names "
        f"(w1.witness.example), 1 required, each within {DEFAULT_MAX_COSIGNATURE_AGE} s of now"
    ) in out


def test_an_export_without_cosignatures_passes_only_with_no_witnesses(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    """No witness configured: the export names none and its checkpoint carries no
    cosignature. Nothing shows it is the tree anyone else saw, so it is refused unless the
    auditor explicitly skips the witnesses."""
    signed(acme, signer, 3)
    path = export(acme, tmp_path / "export.jsonl")
    code, out = verify(path, acme, signer)
    assert code == 1, out
    assert "witnesses: FAIL at line 1: the export names no witnesses" in out
    code, out = verify(path, acme, signer, "--no-witnesses")
    assert code == 0, out
    assert "witnesses: not checked: --no-witnesses given" in out


def test_a_forked_export_is_refused_without_any_witness_flag(
    acme: Tenant,
    signer: Signer,
    witness: CosignerKey,
    tmp_path: Path,
    settings: LazySettings,
    signed_heads_file: Path,
) -> None:
    """An insider with the database and the notary's key host restores an old backup, regrows
    the log to a forked tree of the size the witness cosigned, signs it (the notary's memory
    deleted) and publishes it with no cosignature required. Its export names the witness, which
    never cosigned it; with the witness's real line of the honest tree copied in, that line does
    not verify; with the witnesses left out of the header, it names none. Each is refused by the
    verifier given no flag at all."""
    signed(acme, signer, 3)
    backup = back_up(acme.log)
    honest = signed(acme, signer, 3)
    cosign(honest, witness, int(time.time()))
    copied = honest.published_note[len(honest.note) :]  # the witness's line
    restore(backup)
    signed_heads_file.unlink()
    forked = signed(acme, signer, 3, tag="forked")
    assert forked.size == honest.size and forked.root != honest.root
    settings.LEDGER_COSIGNATURE_QUORUM = 0
    path = export(acme, tmp_path / "forked.jsonl")
    code, out = verify(path, acme, signer)
    assert code == 1, out
    assert "witnesses: FAIL at line 1: the checkpoint is cosigned by 0 of the trusted" in out
    first, rest = path.read_text().split("\n", 1)
    header = json.loads(first)
    path.write_text(json.dumps({**header, "checkpoint": forked.note + copied}) + "\n" + rest)
    code, out = verify(path, acme, signer)
    assert code == 1, out
    assert "witnesses: FAIL at line 1: invalid cosignature by w1.witness.example" in out
    settings.LEDGER_WITNESSES = []
    code, out = verify(export(acme, path), acme, signer)
    assert code == 1, out
    assert "witnesses: FAIL at line 1: the export names no witnesses" in out


def test_a_stale_cosignature_is_refused_unless_verified_as_of_an_instant(
    acme: Tenant, signer: Signer, witness: CosignerKey, tmp_path: Path
) -> None:
    """The only cosignature is two days old: the export could be a log rolled back to an old
    cosigned checkpoint, so it is refused, named and dated; verified as of an instant shortly
    after it was cosigned (Unix seconds or ISO 8601), it passes."""
    cosigned_at = int(time.time()) - 2 * DAY
    cosign(signed(acme, signer, 3), witness, cosigned_at)
    path = export(acme, tmp_path / "export.jsonl")
    for args in ((), ("--witness", witness.verifier.vkey)):
        code, out = verify(path, acme, signer, *args)
        assert code == 1, out
        assert "witnesses: FAIL at line 1: the checkpoint is cosigned by 0 of the trusted " in out
        assert f"stale or future cosignatures: w1.witness.example at {cosigned_at} (" in out
    code, out = verify(path, acme, signer, "--as-of", str(cosigned_at + 60))
    assert code == 0, out
    assert f"each within {DEFAULT_MAX_COSIGNATURE_AGE} s of {cosigned_at + 60}" in out
    instant = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(cosigned_at + 3600))
    code, out = verify(path, acme, signer, "--as-of", instant, "--max-cosignature-age", "7200")
    assert code == 0, out
    code, out = verify(path, acme, signer, "--max-cosignature-age", str(3 * DAY))
    assert code == 0, out
    code, out = verify(path, acme, signer, "--as-of", "yesterday")
    assert code == 2 and "--as-of 'yesterday': Unix seconds or an ISO 8601 time" in out, out
