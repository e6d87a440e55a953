"""Every command docker-compose runs is a real entry point of the project, and the production
ones start: gunicorn serves the WSGI app with DEBUG off, Celery beat loads its schedule."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.core.management import get_commands

from ledger.core.checkpoint import Checkpoint, log_verifier
from ledger.core.note import Signer
from ledger.keys import load_signing_key
from notary.celery import app
from notary.settings import parse_witnesses
from testkit.notary_server import free_port, wait_until_answering
from testkit.paths import REPO_ROOT
from testkit.witness_process import RunningWitness, spec_cosignature_timestamp

COMPOSE = yaml.safe_load((REPO_ROOT / "docker-compose.yml").read_text())


def _command(service: str) -> list[str]:
    command: Any = COMPOSE["services"][service]["command"]
    return command if isinstance(command, list) else shlex.split(command)


def test_compose_runs_postgres_redis_web_worker_beat_and_two_witnesses() -> None:
    expected = {"postgres", "redis", "web", "worker", "beat", "witness1", "witness2"}
    assert expected <= set(COMPOSE["services"])


def test_every_manage_py_command_in_compose_exists() -> None:
    script = " ".join(_command("init"))
    used = {part.split()[0] for part in script.split("manage.py ")[1:]}
    assert used == {"migrate", "generate_signing_key"}
    assert used <= set(get_commands())


def test_compose_celery_commands_name_the_project_app() -> None:
    for service, role in (("worker", "worker"), ("beat", "beat")):
        command = _command(service)
        assert command[:3] == ["celery", "--app", "notary"]
        assert command[3] == role
    assert app.main == "notary"
    app.loader.import_default_modules()  # what a worker does at start: autodiscover tasks
    scheduled = {entry["task"] for entry in app.conf.beat_schedule.values()}
    assert scheduled == {
        "ledger.tasks.sign_due_checkpoints",
        "notary.tasks.sweep_in_flight",
        "webhooks.tasks.ingest_stranded_events",
        "webhooks.tasks.prune_unverified_requests",
        "ledger.tasks.witness_latest_checkpoints",
        "notary.tasks.notify_overdue_reviews",
        "notary.tasks.send_stranded_review_notices",
        "notary.tasks.reconcile_with_providers",
    }
    assert scheduled <= set(app.tasks)


def test_compose_environment_names_settings_the_notary_reads() -> None:
    """Each variable is one the settings read: by name, or NAME_FILE for a secret read with
    env_secret("NAME", ...); the secrets are files, never variables of the notary."""
    settings_source = (REPO_ROOT / "notary" / "settings.py").read_text()
    environment = COMPOSE["x-notary"]["environment"]
    for name in environment:
        secret = name.removesuffix("_FILE")
        read = f'"{name}"' in settings_source or f'env_secret("{secret}"' in settings_source
        assert read, f"{name} is not read by notary/settings.py"
    assert {"SECRET_KEY", "DATABASE_PASSWORD"}.isdisjoint(environment)
    assert environment["SECRET_KEY_FILE"] == "/run/secrets/secret_key"
    assert "notary:" not in environment["DATABASE_URL"]  # no password in the URL
    assert COMPOSE["services"]["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"]


def test_compose_restarts_and_health_checks_its_services_and_keeps_the_key_from_the_web() -> None:
    services = COMPOSE["services"]
    for name in ("postgres", "redis", "web", "worker", "beat", "witness1", "witness2"):
        restart = services[name].get("restart", COMPOSE["x-notary"]["restart"])
        assert restart == "unless-stopped", name
    for name in ("postgres", "redis", "web", "witness1", "witness2"):
        assert "healthcheck" in services[name], name
    assert not any(volume.startswith("keys:") for volume in services["web"]["volumes"])
    for name in ("worker", "beat"):  # they sign checkpoints
        assert "keys:/keys" in services[name].get("volumes", COMPOSE["x-notary"]["volumes"])
    assert "redis-data:/data" in services["redis"]["volumes"]


def _production_env(tmp_path: Path) -> dict[str, str]:
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notary.settings",
        "DEBUG": "false",
        "SECRET_KEY": "test-only-" + "x" * 40,
        "NOTARY_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }


@pytest.mark.slow
def test_gunicorn_serves_the_wsgi_app_from_compose(tmp_path: Path) -> None:
    command = _command("web")
    assert command[:2] == ["gunicorn", "notary.wsgi:application"]
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", command[1], "--bind", f"127.0.0.1:{port}"],
        cwd=REPO_ROOT,
        env=_production_env(tmp_path),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2) as reply:
                    assert reply.status == 200
                    assert reply.read() == b'{"status": "ok"}'
                    break
            except OSError:
                assert server.poll() is None, server.stderr.read().decode()  # type: ignore[union-attr]
                assert time.monotonic() < deadline, "gunicorn did not answer within 30 s"
                time.sleep(0.2)
    finally:
        server.terminate()
        server.wait(timeout=10)


def test_production_settings_refuse_to_start_without_a_secret_key(tmp_path: Path) -> None:
    env = _production_env(tmp_path)
    del env["SECRET_KEY"]
    result = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr


def _shell(service: str, folder: Path, mounts: dict[str, str], port: int = 8700) -> str:
    """The service's `sh -c` script as a shell runs it (compose's `$$` is `$`), its volumes
    mapped into `folder` and its port onto `port`."""
    command = _command(service)
    assert command[:2] == ["sh", "-c"]
    script = command[2].replace("$$", "$").replace("0.0.0.0:8700", f"127.0.0.1:{port}")
    for mount, subfolder in mounts.items():
        script = script.replace(mount, f"{folder}/{subfolder}")
    return script


@pytest.mark.slow
def test_the_compose_witnesses_start_and_cosign_the_notarys_checkpoints(tmp_path: Path) -> None:
    """witness-keys, init's key step and a witness, run as compose runs them (volumes mapped to
    folders): the notary's settings read the witness list, and the witness cosigns a
    checkpoint of a tenant log signed with the key init made."""
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",  # the image's python
        "NOTARY_ORIGIN": "notary.compose.example",
    }
    for volume in ("witness1", "witness2", "public"):
        (tmp_path / volume).mkdir()
    keys = _shell("witness-keys", tmp_path, {"/witness$n/": "witness$n/", "/public/": "public/"})
    for _ in range(2):  # a second start keeps the keys it made
        subprocess.run(["sh", "-c", keys], cwd=REPO_ROOT, env=env, check=True, timeout=120)
        witnesses = (tmp_path / "public" / "witnesses").read_text().splitlines()
        listed = parse_witnesses(",".join(witnesses))
        assert [url for url, _ in listed] == ["http://witness1:8700", "http://witness2:8700"]

    init = " ".join(_command("init")).split("(test -f /keys/signing.key ||", 1)[1].rstrip(')" ')
    key_step = init.replace("/keys/", f"{tmp_path}/").replace("/public/", f"{tmp_path}/public/")
    subprocess.run(["sh", "-c", key_step], cwd=REPO_ROOT, env=env, check=True, timeout=120)
    signer: Signer = load_signing_key(tmp_path / "signing.key")
    assert (tmp_path / "public" / "notary.vkey").read_text().strip() == signer.verifier.vkey

    port = free_port()
    serve = _shell("witness1", tmp_path, {"/witness/": "witness1/", "/public/": "public/"}, port)
    log = tmp_path / "witness1.stderr"
    process = subprocess.Popen(
        ["sh", "-c", serve],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("wb"),
    )
    witness = RunningWitness(f"http://127.0.0.1:{port}", listed[0][1], process)
    try:
        wait_until_answering(
            lambda: witness.request("GET", "/healthz"), process, log, "the witness", OSError
        )
        origin = "notary.compose.example/acme"
        note = Checkpoint(origin, 1, bytes(32)).sign(signer)
        answer = witness.add_checkpoint(old=0, proof=[], note=note)
        assert answer.status == 200, answer.text
        body = note[: note.rfind("\n\n") + 1]
        assert spec_cosignature_timestamp(answer.text, body, witness.vkey) > 0
        assert log_verifier(origin, signer).name == origin
    finally:
        witness.stop()


def _settings_value(env: dict[str, str], expression: str) -> subprocess.CompletedProcess[str]:
    code = f"import django; django.setup(); from django.conf import settings; print({expression})"
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_secrets_are_read_from_files_and_a_secret_given_twice_is_refused(tmp_path: Path) -> None:
    env = _production_env(tmp_path)
    key = env.pop("SECRET_KEY")
    (tmp_path / "secret_key").write_text(key + "\n")
    (tmp_path / "db_password").write_text("s3cret pass\n")
    env.update(
        SECRET_KEY_FILE=str(tmp_path / "secret_key"),
        DATABASE_PASSWORD_FILE=str(tmp_path / "db_password"),
    )
    read = _settings_value(env, "settings.SECRET_KEY, settings.DATABASES['default']['PASSWORD']")
    assert read.returncode == 0, read.stderr
    assert read.stdout.strip() == f"{key} s3cret pass"
    twice = _settings_value({**env, "SECRET_KEY": key}, "settings.SECRET_KEY")
    assert twice.returncode != 0
    assert "set SECRET_KEY or SECRET_KEY_FILE, not both" in twice.stderr
    (tmp_path / "secret_key").write_text("\n")
    empty = _settings_value(env, "settings.SECRET_KEY")
    assert empty.returncode != 0 and "is empty" in empty.stderr
