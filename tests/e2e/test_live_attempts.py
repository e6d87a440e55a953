"""A live attempt is not a crashed one (DESIGN §3): eight agent processes submit one tier-3
effect at once through a live notary, to a service that neither dedupes nor can be looked up.
Exactly one request reaches it, and every process's receipt is the sender's COMMITTED: the
others wait out the target's max in-flight for its answer instead of calling it AMBIGUOUS."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import timedelta
from pathlib import Path

import pytest

from ledger.selectors import iter_entries
from notary import services
from testkit.agents.agent_process import ACTION, TARGET, effect_id
from testkit.factories import leased
from testkit.notary_server import running_notary
from testkit.paths import REPO_ROOT, child_database_url
from testkit.peers.reference_service import read_acts, running_server
from testkit.processes import armed_env

pytestmark = pytest.mark.slow
AGENTS = 8
MAX_INFLIGHT_SECONDS = 20  # generous: the sender answers in milliseconds on a quiet machine


def test_eight_processes_one_effect_one_send_and_every_receipt_committed(
    transactional_db: None, tmp_path: Path
) -> None:
    tenant = services.tenant_create(slug="race", name="Race")
    services.target_register(
        tenant=tenant,
        name=TARGET,
        tier=3,
        queryable=False,
        max_inflight=timedelta(seconds=MAX_INFLIGHT_SECONDS),
    )
    _, token = services.api_key_issue(tenant=tenant, role="agent", holder="bot")
    lease = leased(tenant, "case_1", ACTION)
    world = tmp_path / "world.json"
    world.write_text(json.dumps({"refund_status": "succeeded"}))
    env = armed_env(None)
    with (
        running_notary(child_database_url(), tmp_path) as notary,
        running_server(tmp_path / "store", dedupe=False, lookup=False) as service,
    ):
        args = ["submit", str(tmp_path / "unused.journal"), str(world), "--url", service.url]
        args += ["--case", "case_1", "--tier", "3", "--text", "Your refund is on the way"]
        args += ["--max-inflight", str(MAX_INFLIGHT_SECONDS), "--notary", notary]
        args += ["--notary-token", token, "--tenant", tenant.slug, "--lease", lease.lease_id]
        agents = [
            subprocess.Popen(
                [sys.executable, "-m", "testkit.agents.agent_process", *args],
                cwd=REPO_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            for _ in range(AGENTS)
        ]
        outputs = [agent.communicate(timeout=MAX_INFLIGHT_SECONDS * 4) for agent in agents]
        assert all(agent.returncode == 0 for agent in agents), [err for _, err in outputs]
        the_effect = effect_id("case_1", tenant.slug)
        assert len(read_acts(service.store, the_effect)) == 1
    states = [json.loads(out.splitlines()[-1])["receipt"]["final_state"] for out, _ in outputs]
    assert states == ["COMMITTED"] * AGENTS
    kinds = [e.kind for e in iter_entries(log=tenant.log) if e.effect_id == the_effect]
    assert kinds == ["PROPOSED", "DISPATCHED", "COMMITTED"]
