"""The README's adapter examples, run as written against the local peers: a README that no
longer runs fails here."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from testkit.notary_server import free_port
from testkit.paths import REPO_ROOT
from testkit.peers.localstripe import paid_intent, refunds_of, running_localstripe, stripe_client
from testkit.peers.resend_server import running_resend
from testkit.readme import examples, run, shell_examples
from testkit.webhook_signing import new_secret


def test_every_adapter_has_an_example() -> None:
    assert set(examples()) == {
        "agent",
        "stripe",
        "resend",
        "gated",
        "mcp",
        "temporal",
        "standing",
    }


@pytest.mark.slow
def test_the_agent_example_runs_twice_against_the_service_started_as_documented(
    tmp_path: Path,
) -> None:
    """In a fresh folder with a `.venv` of this interpreter: the README's shell line starts the
    reference service (on a free port instead of 8100, which another run may hold), the example
    refunds once, and a second run finds the receipt and refunds nothing more."""
    port = str(free_port())
    (tmp_path / ".venv" / "bin").mkdir(parents=True)
    (tmp_path / ".venv" / "bin" / "python").symlink_to(sys.executable)
    command = shell_examples()["agent"].strip().replace("8100", port)
    assert command.endswith("&")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    started = subprocess.Popen(
        ["sh", "-c", command.removesuffix("&").strip()],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,  # the shell and the service it starts, stopped together
    )
    try:
        assert started.stdout is not None
        assert started.stdout.readline().decode().strip() == port  # listening
        code = examples()["agent"].replace("8100", port)
        assert run(code, tmp_path, {}) == ["COMMITTED True True"]
        assert run(code, tmp_path, {}) == ["COMMITTED True True"]
        acts = (tmp_path / "var" / "payments.jsonl").read_text().splitlines()
        assert len(acts) == 1, acts
    finally:
        os.killpg(started.pid, signal.SIGTERM)
        started.wait(timeout=30)


@pytest.mark.slow
def test_the_stripe_example_refunds_once(tmp_path: Path) -> None:
    with running_localstripe(tmp_path) as url:
        client = stripe_client(url)
        payment = paid_intent(client, 10_000)
        env = {
            "STRIPE_API_KEY": "sk_test_readme",
            "STRIPE_API_BASE": url,
            "PAYMENT_INTENT": payment,
        }
        (tmp_path / "var").mkdir()
        assert run(examples()["stripe"], tmp_path, env) == ["COMMITTED True"]
        assert run(examples()["stripe"], tmp_path, env) == ["COMMITTED True"]  # not twice
        assert [r.amount for r in refunds_of(client, payment)] == [2_000]


@pytest.mark.slow
def test_the_resend_example_emails_once(tmp_path: Path) -> None:
    store = tmp_path / "emails.jsonl"
    with running_resend(store, verified_domains=("shop.example",)) as server:
        env = {"RESEND_API_KEY": "re_readme", "RESEND_API_URL": server.url}
        (tmp_path / "var").mkdir()
        assert run(examples()["resend"], tmp_path, env) == ["COMMITTED True"]
        assert run(examples()["resend"], tmp_path, env) == ["COMMITTED True"]
        [email] = server.emails()
        assert email["subject"] == "Your refund is on the way"


@pytest.mark.slow
def test_the_tenant_from_zero_runs_as_written_on_a_fresh_embedded_notary(tmp_path: Path) -> None:
    script = "set -e\n" + shell_examples()["tenant"]
    env = {k: v for k, v in os.environ.items() if k not in {"DATABASE_URL", "REDIS_URL"}}
    env.update(
        DJANGO_SETTINGS_MODULE="notary.settings",
        NOTARY_VAR_DIR=str(tmp_path),
        M=f"{sys.executable} manage.py",
        STRIPE_WEBHOOK_SECRET=new_secret("stripe"),
        REVIEWER_PASSWORD="a long passphrase, unguessable",
    )
    for step in (f"{sys.executable} manage.py migrate --verbosity 0", script):
        done = subprocess.run(
            ["sh", "-c", step], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300
        )
        assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout.splitlines()
    assert sum(line.startswith("ik_") for line in out) == 3  # the three keys
    assert any("/webhooks/" in line for line in out)
    assert out[-1].startswith("created fiona <fiona@acme.example>, staff in 'Finance reviewers'")


def test_the_gated_example_runs_twice_in_a_fresh_folder(tmp_path: Path) -> None:
    expected = ["True closed", "REFUSED:payload_changed"]
    assert run(examples()["gated"], tmp_path, {}) == expected  # no var/ yet: the journal makes it
    assert run(examples()["gated"], tmp_path, {}) == expected


@pytest.mark.slow
def test_the_temporal_example_retries_without_acting_twice(tmp_path: Path) -> None:
    assert run(examples()["temporal"], tmp_path, {}) == ["COMMITTED True 1"]
    assert run(examples()["temporal"], tmp_path, {}) == ["COMMITTED True 1"]


def test_the_mcp_example_runs_twice(tmp_path: Path) -> None:
    """The shop's refunds live in the example's own process: the first run refunds once, the
    second finds the receipt in the journal and refunds nothing."""
    for refunded in (1, 0):
        printed = run(examples()["mcp"], tmp_path, {})
        assert printed[0] == "None COMMITTED True"
        refused = f"{refunded} True Refused, not done: this tool was already called"
        assert printed[1].startswith(refused)
