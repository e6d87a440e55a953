"""`make demo`'s path on the embedded default: SQLite under a fresh var/, no servers."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.paths import REPO_ROOT


def manage(var_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(DJANGO_SETTINGS_MODULE="notary.settings", NOTARY_VAR_DIR=str(var_dir))
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_demo_walks_a_refund_through_the_notary_on_sqlite(tmp_path: Path) -> None:
    assert manage(tmp_path, "migrate", "--verbosity", "0").returncode == 0
    result = manage(tmp_path, "demo")
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    out = result.stdout
    assert (tmp_path / "notary.sqlite3").exists()
    assert (tmp_path / "signing.key").exists()
    assert "The notary says: DISPATCHED; the payment service's own records: 1 refund." in out
    assert "Final state: COMMITTED_BY_RETRY; refunds at the payment service: 1." in out
    assert '"authorized_when_fired": true' in out
    assert "5 entries, each proved included in the signed tree of size 5" in out
    assert "re-derived from them: VERIFIED" in out
    assert re.search(r"cosign each checkpoint .*only checkpoints all 2 cosigned \(LEDGER_COS", out)
    assert "The tree is cosigned by 2 witnesses (w1.demo.interlock.example, w2.demo" in out
    assert "witnesses: OK  cosigned by 2 of 2 trusted witnesses" in out
    assert "answers 422: refused: split view: a checkpoint of size 15 with another root" in out
    assert (tmp_path / "witnesses" / "w1.state.evidence.jsonl").exists()
    login = re.search(r"/admin/ as demo-reviewer / (\S+) \(a finance reviewer, created now\)", out)
    assert login, out[-2000:]
    assert "- The export again, offline: .venv/bin/python -m gate_client.verify " in out
    assert re.search(r"settles it: COMMITTED_ON_EVIDENCE, citing ledger entry \d+\.", out)
    assert "Emails sent: 1; the restarted agent had 0 effects left to recover." in out
    assert "The restarted agent's recovery: AMBIGUOUS — it cannot know, and does not guess." in out
    assert re.search(r"The review queue holds 1 effect; demo-reviewer decides it happened", out)
    assert re.search(r"recorded at ledger seq \d+: RESOLVED_HAPPENED\. Texts sent: 1\.", out)
    assert re.search(r"^OK \S+: 15 entries, \d+ Merkle nodes, 1 signed checkpoints", out, re.M)
    assert "completeness: OK  every entry of [0, 15) present once, in order" in out
    assert re.search(r"^  COMMITTED_ON_EVIDENCE +1$", out, re.M)
    assert re.search(r"^  RESOLVED_HAPPENED +1$", out, re.M)


@pytest.mark.slow
def test_sqlite_triggers_refuse_changes_and_verify_ledger_exits_nonzero_on_tamper(
    tmp_path: Path,
) -> None:
    assert manage(tmp_path, "migrate", "--verbosity", "0").returncode == 0
    demo = manage(tmp_path, "demo")
    assert demo.returncode == 0, demo.stderr
    origin = re.search(r", log (\S+)$", demo.stdout, re.MULTILINE)
    assert origin is not None
    database = sqlite3.connect(tmp_path / "notary.sqlite3")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        database.execute("UPDATE ledger_entry SET body = X'7B7D' WHERE seq = 1")
    with pytest.raises(sqlite3.IntegrityError, match="append-only"):
        database.execute("DELETE FROM ledger_checkpoint")

    database.execute("DROP TRIGGER ledger_entry_no_update")
    database.execute("""UPDATE ledger_entry SET body = '{"forged":true}' WHERE seq = 1""")
    database.commit()
    database.close()
    result = manage(tmp_path, "verify_ledger", "--log", origin.group(1))
    assert result.returncode == 1
    assert "FAIL at seq 1: entry hash does not match" in result.stderr
    missing = manage(tmp_path, "verify_ledger", "--log", "nope.example/log")
    assert missing.returncode == 1
    assert "no log with origin 'nope.example/log'" in missing.stderr
