"""gate_client installs on its own, with the ledger core and without Django, and works there."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from testkit.paths import REPO_ROOT

AGENT = textwrap.dedent(
    """
    import importlib.util, sys
    from datetime import UTC, datetime, timedelta
    import gate_client, ledger.core
    from gate_client.gate import Gate
    from gate_client.journal import LocalJournal
    from gate_client.leases import Lease
    from gate_client.proposal import Proposal
    from gate_client.receipts import verify_receipt
    from gate_client.targets import Sent, NotFound, Tier

    class Mailer:
        name, tier, queryable = "mailer", Tier.DEDUPES, False
        key_window, max_inflight = timedelta(hours=24), timedelta(seconds=1)
        evidence_window, attests_before_acting, lookup_needs_key = None, False, False
        money = None
        def send(self, effect_id, payload):
            return Sent("msg-1")
        def lookup(self, effect_id, payload):
            return NotFound()

    assert "site-packages" in gate_client.__file__ and "site-packages" in ledger.core.__file__
    assert importlib.util.find_spec("django") is None
    journal = LocalJournal(sys.argv[1])
    journal.grant_lease(Lease("l1", "c1", "email", datetime.now(UTC) + timedelta(hours=1), "ops"))
    receipt = Gate(journal, {"mailer": Mailer()}).submit(
        Proposal("c1", "mailer", "email", {"to": "a@example.com"}, "l1")
    )
    verify_receipt(receipt, LocalJournal(sys.argv[1]).entries(), origin=journal.origin)
    print(receipt.final_state)
    """
)


@pytest.mark.slow
def test_gate_client_installs_alone_and_submits_without_django(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    install = subprocess.run(
        [python, "-m", "pip", "install", "--quiet", str(REPO_ROOT / "gate_client")],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert install.returncode == 0, install.stderr
    (tmp_path / "agent.py").write_text(AGENT)
    result = subprocess.run(
        [python, "agent.py", str(tmp_path / "journal")],
        cwd=tmp_path,  # away from the repository, so only the installed copy can be imported
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "COMMITTED"
