"""gate_client is embedded in agents that have no Django. `lint-imports` keeps its imports free
of Django (pyproject's contracts); this checks the same at run time, where an import made
inside a function would show: a whole submit and a receipt check load no Django module."""

from __future__ import annotations

import subprocess
import sys

from testkit.paths import REPO_ROOT


def test_submitting_and_verifying_a_receipt_loads_no_django(tmp_path: object) -> None:
    code = f"""
import sys
import gate_client.adapters.decorator, gate_client.adapters.mcp_tools
import gate_client.adapters.resend_email, gate_client.adapters.stripe_refunds
import gate_client.adapters.temporal
from datetime import UTC, datetime, timedelta
from gate_client.gate import Gate
from gate_client.journal import LocalJournal
from gate_client.leases import Lease
from gate_client.proposal import Proposal
from gate_client.receipts import verify_receipt
from testkit.world import ServiceTarget

journal = LocalJournal({str(tmp_path)!r} + "/journal")
journal.grant_lease(Lease("l1", "c1", "email", datetime.now(UTC) + timedelta(hours=1), "ops"))
receipt = Gate(journal, {{"service": ServiceTarget()}}).submit(
    Proposal("c1", "service", "email", {{"to": "a@example.com"}}, "l1")
)
verify_receipt(receipt, LocalJournal(journal.path).entries(), origin=journal.origin)
assert receipt.final_state == "COMMITTED", receipt
print(sorted(m for m in sys.modules if m == "django" or m.startswith("django.")))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
