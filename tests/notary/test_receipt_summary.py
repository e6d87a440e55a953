"""The admin's receipts summary (a TenantAdmin action, for auditors and finance reviewers) is
the table the offline verifier gives for the tenant's export: counted from the effects table
and the proposed payloads, it must agree with the count from the verified export."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest
from django.test import Client

from ledger import services as ledger_services
from ledger.core.checkpoint import log_verifier
from ledger.core.note import Signer
from notary import services
from notary.exports import export_receipts
from notary.models import Tenant
from testkit.factories import CENTS_MONEY, register, settled

pytestmark = pytest.mark.django_db

PASSWORD = "a long passphrase, unguessable"


def test_the_admin_summary_is_the_verified_exports_summary(
    acme: Tenant, globex: Tenant, signer: Signer, tmp_path: Path
) -> None:
    register(
        acme,
        "payments",
        tier=1,
        queryable=True,
        key_window=timedelta(hours=24),
        money=CENTS_MONEY,
    )
    register(
        globex,
        "payments",
        tier=1,
        queryable=True,
        key_window=timedelta(hours=24),
        money=CENTS_MONEY,
    )
    for n, (cents, currency, outcome) in enumerate(
        [(1250, "usd", "COMMITTED"), (750, "usd", "COMMITTED"), (900, "eur", "AMBIGUOUS")]
    ):
        payload = {"payment": f"pi_{n}", "amount_cents": cents, "currency": currency}
        settled(acme, f"case-{n}", "payments", payload, outcome)
    settled(globex, "case-x", "payments", {"amount_cents": 99_999, "currency": "usd"}, "COMMITTED")
    # The target reports a second refund for one effect: a duplicate at the target, which no
    # total may count as one plain COMMITTED refund.
    twice = settled(
        acme, "case-9", "payments", {"amount_cents": 4000, "currency": "usd"}, "COMMITTED"
    )
    duplicate = {"source": "webhook", "outcome": "performed", "result_ref": "re_twice"}
    services.effect_observe(tenant=acme, effect_id=twice, evidence=duplicate)
    ledger_services.sign_checkpoint(log=acme.log, signer=signer)

    services.auditor_create(username="audrey", email="audrey@example.com", password=PASSWORD)
    browser = Client()
    assert browser.login(username="audrey", password=PASSWORD)
    reply = browser.post(
        "/admin/notary/tenant/",
        {"action": "receipts_summary", "_selected_action": [acme.pk]},
    )
    assert reply.status_code == 200
    assert reply["Content-Type"].startswith("text/csv")
    from_admin = reply.content.decode()
    assert "99999" not in from_admin  # another tenant's money is not in it

    export = tmp_path / "export.jsonl"
    export.write_text("".join(export_receipts(tenant=acme)))
    summary = tmp_path / "summary.csv"
    vkey = log_verifier(acme.log.origin, signer).vkey
    done = subprocess.run(
        [sys.executable, "-m", "gate_client.verify", str(export), "--vkey", vkey,
         "--no-witnesses", "--summary", str(summary)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert from_admin == summary.read_bytes().decode()  # the very same table
    table = done.stdout.split("outcomes:\n")[1].splitlines()
    outcomes = {
        state.strip(): int(count.replace(",", ""))
        for state, count in (line.rsplit(maxsplit=1) for line in table if line.startswith("  "))
    }
    # The duplicated refund is flagged, not counted as a third plain COMMITTED.
    assert outcomes == {"AMBIGUOUS": 1, "COMMITTED": 2, "COMMITTED (contradicted)": 1}
    rows = [line.split(",")[1:] for line in from_admin.splitlines()[1:]]
    assert rows == [
        ["payments", "AMBIGUOUS", "EUR", "1", "900", "9.00"],
        ["payments", "COMMITTED", "USD", "2", "2000", "20.00"],
        ["payments", "COMMITTED (contradicted)", "USD", "1", "4000", "40.00"],
    ]
