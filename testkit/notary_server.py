"""A real notary for end-to-end tests: gunicorn serving the WSGI app, against the test database."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from testkit.paths import REPO_ROOT
from testkit.processes import armed_env


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until_answering(
    ask: Callable[[], object],
    process: subprocess.Popen[bytes],
    log: Path,
    name: str,
    not_yet: type[Exception] | tuple[type[Exception], ...],
) -> None:
    """Ask a starting server until it answers; fail with its log if it dies, or after 30 s."""
    deadline = time.monotonic() + 30
    while True:
        try:
            ask()
            return
        except not_yet:
            if process.poll() is not None:
                raise RuntimeError(log.read_text()) from None
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name} did not answer within 30 s") from None
            time.sleep(0.1)


@contextmanager
def running_notary(
    database_url: str,
    var_dir: Path,
    *,
    workers: int = 2,
    threads: int = 8,
    settings: dict[str, str] | None = None,
) -> Iterator[str]:
    """Start gunicorn on a free port; yield its base URL once /healthz answers; stop it.
    Its errors go to gunicorn.log in `var_dir`."""
    port = free_port()
    env = {
        **armed_env(None, drop=("REDIS_URL",)),
        "DJANGO_SETTINGS_MODULE": "notary.settings",
        "DATABASE_URL": database_url,
        "NOTARY_VAR_DIR": str(var_dir),
        **(settings or {}),
    }
    log = var_dir / "gunicorn.log"
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gunicorn",
            "notary.wsgi:application",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            str(workers),
            "--worker-class",
            "gthread",
            "--threads",
            str(threads),
            "--graceful-timeout",
            "3",
        ],
        cwd=REPO_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=log.open("ab"),
    )
    url = f"http://127.0.0.1:{port}"

    def healthz() -> None:
        with urllib.request.urlopen(f"{url}/healthz", timeout=2) as reply:
            reply.read()

    try:
        wait_until_answering(healthz, server, log, "the notary", OSError)
        yield url
    finally:
        server.terminate()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()  # a worker still holding a keep-alive connection past the grace
            server.wait(timeout=10)
