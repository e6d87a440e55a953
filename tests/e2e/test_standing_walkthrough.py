"""The README's standing approval, from grant to audit, run as written: a live notary on the
test database, the reference payment service started by the README's own shell line (it does
not dedupe), the example's refunds under one standing approval with a budget, and the
auditor's export verified offline with every budget statement re-derived."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from gate_client.verify import verify_export
from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from notary import services
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.notary_server import free_port, running_notary
from testkit.paths import child_database_url
from testkit.peers.reference_service import read_acts
from testkit.readme import examples, run, shell_examples

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def payment_service(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """The README's shell line, in a fresh folder with a `.venv` of this interpreter, on a free
    port instead of 8100: (the port, the service's record of every refund it made)."""
    port = str(free_port())
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    command = shell_examples()["standing"].strip().replace("8100", port)
    assert command.endswith("&") and "--dedupe" not in command
    started = subprocess.Popen(
        ["sh", "-c", command.removesuffix("&").strip()],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        assert started.stdout is not None
        assert started.stdout.readline().decode().strip() == port
        yield port, tmp_path / "var" / "payments.jsonl"
    finally:
        os.killpg(started.pid, signal.SIGTERM)
        started.wait(timeout=30)


def test_the_readme_standing_approval_runs_from_grant_to_audit(
    payment_service: tuple[str, Path], tmp_path: Path, signer: Signer
) -> None:
    port, record = payment_service
    acme = services.tenant_create(slug="acme", name="Acme Refunds")
    services.target_register(
        tenant=acme,
        name="payments",
        tier=2,
        queryable=True,
        max_inflight=timedelta(seconds=30),
        money={"amount_field": "amount_cents", "currency_field": "currency"},
    )
    _, approver = services.api_key_issue(tenant=acme, role="approver", holder="maria@acme.example")
    _, agent = services.api_key_issue(tenant=acme, role="agent", holder="refund-bot")
    (tmp_path / "notary").mkdir()
    with running_notary(child_database_url(), tmp_path / "notary") as url:
        env = {"NOTARY_URL": url, "APPROVER_KEY": approver, "AGENT_KEY": agent}
        printed = run(examples()["standing"].replace("8100", port), tmp_path, env)
    assert printed == [
        "RF-1001 COMMITTED True 0",
        "RF-1002 COMMITTED True 4000",
        "RF-1003 REFUSED:lease_budget None -",
    ]
    assert [act["payload"]["amount_cents"] for act in read_acts(record)] == [4000, 4500]

    audited = Tenant.objects.get(pk=acme.pk)
    ledger_services.sign_checkpoint(log=audited.log, signer=signer)
    lines = [line.rstrip("\n").encode() for line in export_receipts(tenant=audited)]
    report = verify_export(lines, [log_verifier(audited.log.origin, signer)])
    assert report.budgets == 2  # both statements re-derived from the entries before them
    assert dict(report.outcomes) == {"COMMITTED": 2, "REFUSED:lease_budget": 1}
