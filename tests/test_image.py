"""The Docker image, without Docker: a folder holding exactly the files the Dockerfile COPYs,
run with this virtualenv's packages but nothing else of the repository (`python -S` skips the
site hooks, among them the editable install that would find any package of the checkout). The
image's own commands run there with the production settings (DEBUG off, secrets from files,
HTTPS behind a TLS proxy): `check --deploy`, the build's collectstatic, migrate, the commands
that set a tenant up, gunicorn as CMD starts it and a Celery worker; then the admin's CSS,
Swagger UI's JavaScript, /healthz and one effect through the gate are fetched from it."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from gate_client.gate import Gate
from gate_client.notary_journal import NotaryJournal
from gate_client.proposal import Premise, PremiseResult, Proposal
from notary.models import Tenant
from testkit.factories import leased
from testkit.notary_server import free_port, wait_until_answering
from testkit.paths import REPO_ROOT, child_database_url
from testkit.world import NoOpTarget

pytestmark = pytest.mark.slow

DEADLINE = 120  # seconds any one command of the image may take on a busy machine


def instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """The Dockerfile's instructions as (KEYWORD, arguments), continuation lines joined."""
    joined = re.sub(r"\\\n", " ", dockerfile.read_text())
    found = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, arguments = line.partition(" ")
            found.append((keyword.upper(), arguments.strip()))
    return found


@dataclass
class Image:
    app: Path  # the image's WORKDIR
    env: dict[str, str]
    run_steps: list[str]  # the `python manage.py ...` steps of the build's RUN
    command: list[str]  # CMD

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            self.python(*args),
            cwd=self.app,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=DEADLINE,
            check=False,
        )
        assert done.returncode == 0, f"{shlex.join(args)}:\n{done.stdout}\n{done.stderr}"
        return done

    def python(self, *args: str) -> list[str]:
        """A command of the image as this folder's interpreter runs it: `python X` and the
        console scripts (gunicorn, celery) as `python -S [-m module] ...`."""
        first, *rest = args
        if first == "python":
            return [sys.executable, "-S", *rest]
        return [sys.executable, "-S", "-m", first, *rest]

    def spawn(self, *args: str, log: Path) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            self.python(*args),
            cwd=self.app,
            env=self.env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
        )


def build(tmp_path: Path) -> Image:
    """The image's file set and environment, from the Dockerfile."""
    app, var = tmp_path / "app", tmp_path / "var"
    mapped = {"/app": str(app), "/var/lib/notary": str(var)}
    env: dict[str, str] = {}
    run_steps: list[str] = []
    command: list[str] = []
    for keyword, arguments in instructions(REPO_ROOT / "Dockerfile"):
        if keyword == "COPY":
            *sources, destination = shlex.split(arguments)
            target = app / destination
            for source in sources:
                path = REPO_ROOT / source
                if path.is_dir():
                    shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__"))
                else:
                    target.mkdir(parents=True, exist_ok=True)
                    shutil.copy2(path, target / path.name)
        elif keyword == "ENV":
            for pair in shlex.split(arguments):
                name, _, value = pair.partition("=")
                env[name] = mapped.get(value, value)
        elif keyword == "RUN":
            steps = [step.strip() for step in arguments.split("&&")]
            assert any(step.startswith("pip install") for step in steps)
            run_steps = [step for step in steps if step.startswith("python manage.py")]
        elif keyword == "CMD":
            command = [str(part) for part in json.loads(arguments)]
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "secret_key").write_text("image-test-" + os.urandom(32).hex() + "\n")
    (secrets / "database_url").write_text(child_database_url() + "\n")
    site_packages = sysconfig.get_paths()["purelib"]
    env.update(
        PATH=os.environ["PATH"],
        PYTHONPATH=f"{app}{os.pathsep}{site_packages}",
        DJANGO_SETTINGS_MODULE="notary.settings",
        DEBUG="false",
        SECRET_KEY_FILE=str(secrets / "secret_key"),
        DATABASE_URL_FILE=str(secrets / "database_url"),
        REDIS_URL="redis://127.0.0.1:6379/13",
        ALLOWED_HOSTS="127.0.0.1",
        CSRF_TRUSTED_ORIGINS="https://127.0.0.1",
        NOTARY_HTTPS="true",
        NOTARY_BEHIND_TLS_PROXY="true",
        SECURE_HSTS_PRELOAD="true",
        NOTARY_SIGNING_KEY_FILE=str(tmp_path / "signing.key"),
    )
    return Image(app, env, run_steps, command)


class ThroughTlsProxy(httpx.HTTPTransport):
    """What the TLS proxy in front of the notary adds to every request it forwards."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        request.headers["X-Forwarded-Proto"] = "https"
        return super().handle_request(request)


@pytest.fixture
def image(tmp_path: Path, transactional_db: None) -> Image:
    return build(tmp_path)


@pytest.fixture
def serving(image: Image, tmp_path: Path) -> Iterator[str]:
    """gunicorn as the image's CMD starts it, on a free port; its base URL."""
    port = free_port()
    assert image.command[:2] == ["gunicorn", "notary.wsgi:application"]
    command = [part.replace("0.0.0.0:8000", f"127.0.0.1:{port}") for part in image.command]
    log = tmp_path / "gunicorn.log"
    server = image.spawn(*command, log=log)
    url = f"http://127.0.0.1:{port}"
    client = httpx.Client(transport=ThroughTlsProxy(), timeout=10)

    def healthz() -> None:
        client.get(f"{url}/healthz").raise_for_status()

    try:
        wait_until_answering(healthz, server, log, "the image's gunicorn", httpx.HTTPError)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_image_file_set_passes_the_deploy_checks_and_collects_its_static_files(
    image: Image,
) -> None:
    assert not (image.app / "testkit").exists() and not (image.app / "tests").exists()
    checked = image.run("python", "manage.py", "check", "--deploy", "--fail-level", "WARNING")
    assert "System check identified no issues" in checked.stdout
    assert image.run_steps == ["python manage.py collectstatic --noinput --verbosity 0"]
    for step in image.run_steps:
        image.run(*shlex.split(step))
    manifest = Path(image.env["NOTARY_STATIC_ROOT"]) / "staticfiles.json"
    assert manifest.exists()
    image.run("python", "manage.py", "migrate", "--noinput")
    image.run("python", "-m", "witness", "keygen", "--name", "w.example", "--key", "w.key")


def test_the_image_serves_the_admin_swagger_and_an_effect_behind_a_tls_proxy(
    image: Image, serving: str, tmp_path: Path
) -> None:
    for step in image.run_steps:  # as the build does, before any server starts
        image.run(*shlex.split(step))
    client = httpx.Client(base_url=serving, transport=ThroughTlsProxy(), timeout=30)

    login = client.get("/admin/login/")
    assert login.status_code == 200
    css = re.search(r'href="(/static/admin/css/base\.[0-9a-f]{12}\.css)"', login.text)
    assert css, "the admin's stylesheet is not served under a content-hashed name"
    stylesheet = client.get(css.group(1))
    assert stylesheet.status_code == 200
    assert stylesheet.headers["content-type"].startswith("text/css")
    docs = client.get("/v1/docs/")
    assert docs.status_code == 200
    bundle = re.search(
        r'src="(/static/drf_spectacular_sidecar/[^"]*swagger-ui-bundle[^"]*\.js)"', docs.text
    )
    assert bundle, docs.text[:2000]
    script = client.get(bundle.group(1))
    assert script.status_code == 200 and len(script.content) > 100_000

    plain = httpx.get(f"{serving}/admin/login/", timeout=30)  # not through the proxy
    assert plain.status_code == 301 and plain.headers["location"].startswith("https://")
    assert httpx.get(f"{serving}/healthz", timeout=30).status_code == 200  # for load balancers

    image.run(
        "python", "manage.py", "generate_signing_key", "--out", image.env["NOTARY_SIGNING_KEY_FILE"]
    )
    image.run("python", "manage.py", "create_tenant", "--slug", "img", "--name", "Image test")
    image.run(
        "python", "manage.py", "create_target", "--tenant", "img", "--name", "noop", "--tier", "1",
        "--queryable", "--max-inflight", str(NoOpTarget.max_inflight.total_seconds()),
        "--key-window", "86400",
    )  # fmt: skip
    issued = image.run(
        "python",
        "manage.py",
        "issue_api_key",
        "--tenant",
        "img",
        "--role",
        "agent",
        "--holder",
        "bot",
    )
    token = issued.stdout.strip()
    tenant = Tenant.objects.get(slug="img")
    lease = leased(tenant, "case_1", "refund", requested_by="bot")
    target = NoOpTarget()
    proposal = Proposal(
        case_id="case_1",
        target="noop",
        action="refund",
        payload={"amount_cents": 500},
        lease_id=lease.lease_id,
        premises=[Premise("paid", lambda: PremiseResult(True, {"status": "paid"}))],
        tenant="img",
    )
    with NotaryJournal(serving, token, transport=ThroughTlsProxy()) as journal:
        receipt = Gate(journal, {"noop": target}).submit(proposal)
    assert receipt.final_state == "COMMITTED"
    assert target.sent == [receipt.effect_id]


def test_the_image_runs_a_celery_worker(image: Image, tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    worker = image.spawn(
        "celery", "--app", "notary", "worker", "--pool", "solo", "--loglevel", "info", log=log
    )
    try:
        deadline = time.monotonic() + DEADLINE
        while True:
            ping = subprocess.run(
                image.python("celery", "--app", "notary", "inspect", "ping", "--timeout", "2"),
                cwd=image.app,
                env=image.env,
                capture_output=True,
                text=True,
                timeout=DEADLINE,
                check=False,
            )
            if ping.returncode == 0 and "pong" in ping.stdout:
                break
            assert worker.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no worker answered:\n{log.read_text()}"
        assert "ledger.tasks.witness_checkpoint" in log.read_text()  # its tasks were found
    finally:
        worker.terminate()
        worker.wait(timeout=60)
