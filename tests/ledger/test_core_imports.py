"""The ledger core must stay importable without Django: the gate client and auditors reuse it."""

from __future__ import annotations

import subprocess
import sys

from testkit.paths import REPO_ROOT

CORE_MODULES = [
    "ledger.core.canonical",
    "ledger.core.entries",
    "ledger.core.merkle",
    "ledger.core.note",
    "ledger.core.checkpoint",
    "ledger.core.verify",
]


def test_importing_the_core_loads_no_django_module() -> None:
    code = (
        "import sys\n"
        + "".join(f"import {name}\n" for name in CORE_MODULES)
        + "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith('django.'))\n"
        + "print(','.join(loaded))\n"
        + "print(len([m for m in sys.modules if m.startswith('ledger.core')]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    django_modules, core_count = result.stdout.splitlines()
    assert django_modules == ""
    assert int(core_count) >= len(CORE_MODULES)
