"""Exports on a terminal, each run as a real process under a pseudo-terminal: the progress of
`manage.py export_receipts` counts the log's entries, of the checkpoint's size, and closes at
100% (it once closed at 48%, counting lines against effects plus entries); that of
`python -m gate_client.verify` is the bytes read of the file's size, and its line ends before
the verdicts, which once ran on after "60,000 lines verified"."""

from __future__ import annotations

import fcntl
import os
import pty
import select
import struct
import subprocess
import sys
import termios
from datetime import timedelta
from pathlib import Path

import pytest

from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from ledger.services import sign_checkpoint
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.factories import dispatched, register
from testkit.paths import REPO_ROOT, child_database_url


def on_a_terminal(args: list[str], env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run `args` with stdout and stderr on a pseudo-terminal of 120 columns; its exit code
    and everything it wrote there, with the terminal's \\r\\n line ends."""
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    with subprocess.Popen(
        args, cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL, stdout=terminal, stderr=terminal
    ) as child:
        os.close(terminal)
        written = bytearray()
        while True:
            ready, _, _ = select.select([controller], [], [], 120)
            if not ready:
                child.kill()
                pytest.fail(f"{args}: nothing written for 120 s")
            try:
                chunk = os.read(controller, 65536)
            except OSError:  # EIO: every end of the terminal is closed, the child is done
                break
            if not chunk:
                break
            written += chunk
        code = child.wait(timeout=120)
    os.close(controller)
    return code, written.decode()


def four_effects(tenant: Tenant) -> None:
    """12 entries: 4 x (lease grant, PROPOSED, DISPATCHED); 4 receipt lines carry 8 of them."""
    register(tenant, "mail", evidence_window=timedelta(hours=1), max_inflight=timedelta(seconds=1))
    for case in range(4):
        dispatched(tenant, "mail", f"case-{case}")


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)  # the command's process reads what this one wrote
def test_the_export_commands_bar_counts_every_entry_and_closes_at_100_percent(
    acme: Tenant, signer: Signer, signing_key_file: Path, tmp_path: Path
) -> None:
    four_effects(acme)
    sign_checkpoint(log=acme.log, signer=signer)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notary.settings_test",
        "DATABASE_URL": child_database_url(),
        "NOTARY_SIGNING_KEY_FILE": str(signing_key_file),
    }
    out = tmp_path / "receipts.jsonl"
    command = [sys.executable, "manage.py", "export_receipts", "--tenant=acme", f"--out={out}"]
    code, written = on_a_terminal(command, env)
    assert code == 0, written
    bar, _, said = written.partition("\r\n")
    final = bar.split("\r")[-1]  # what the bar shows last, as it closes
    assert final.startswith("export: 100%|"), written
    assert "| 12/12 " in final
    assert said == f"{out}: 10 lines, the log's entries [0, 12)\r\n"


@pytest.mark.django_db
def test_the_verifiers_progress_is_of_the_files_bytes_and_ends_before_the_verdicts(
    acme: Tenant, signer: Signer, tmp_path: Path
) -> None:
    four_effects(acme)
    sign_checkpoint(log=acme.log, signer=signer)
    export = tmp_path / "receipts.jsonl"
    export.write_text("".join(export_receipts(tenant=acme)), encoding="utf-8")
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(export.read_text().replace('"DISPATCHED"', '"COMMITTED"', 1))
    lines = tampered.read_bytes().splitlines(keepends=True)
    bad = next(n for n, line in enumerate(lines) if b'"COMMITTED"' in line)  # where it stops
    upto = 100 * sum(map(len, lines[: bad + 1])) // len(b"".join(lines))
    vkey = log_verifier(acme.log.origin, signer).vkey
    runs = ((export, 0, "100%", "integrity: OK"), (tampered, 1, f"{upto:3d}%", "integrity: FAIL"))
    for path, code, read, verdict in runs:
        verifier = [
            *(sys.executable, "-m", "gate_client.verify", str(path)),
            *("--vkey", vkey, "--no-witnesses"),
        ]
        exited, written = on_a_terminal(verifier)
        assert exited == code, written
        progress, _, verdicts = written.partition("\r\n")
        # Redrawn as it goes, and last as far as it got: all, or up to the tampered receipt.
        assert progress.startswith("\rverifying: "), written
        assert progress.split("\r")[-1] == f"verifying: {read} of {path.stat().st_size:,} bytes"
        assert verdicts.startswith("authenticity: OK"), written  # on a line of its own
        assert verdict in verdicts
        quiet = subprocess.run(verifier, capture_output=True, text=True, check=False, timeout=120)
        assert (quiet.returncode, quiet.stderr) == (code, "")  # no progress off a terminal
