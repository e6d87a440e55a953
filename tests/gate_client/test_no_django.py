"""gate_client is embedded in agents that have no Django: importing it must not load any."""

from __future__ import annotations

import subprocess
import sys

from tests.conftest import REPO_ROOT

MODULES = [
    "gate_client",
    "gate_client.ids",
    "gate_client.proposal",
    "gate_client.targets",
    "gate_client.leases",
    "gate_client.journal",
    "gate_client.faults",
]


def test_importing_gate_client_and_writing_a_journal_loads_no_django(tmp_path: object) -> None:
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in MODULES)
        + "from gate_client.journal import LocalJournal\n"
        + "from ledger.core.entries import EntryKind\n"
        + f"j = LocalJournal({str(tmp_path)!r} + '/journal')\n"
        + "j.record(kind=EntryKind.PROPOSED, effect_id='eff_1', body={'a': 1})\n"
        + "assert len(LocalJournal(j.path).entries()) == 1\n"
        + "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
