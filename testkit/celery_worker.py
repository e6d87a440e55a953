"""A real Celery worker process on the test database and the test Redis, for one queue."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from notary.celery import app
from testkit.paths import REPO_ROOT, child_database_url

# Generous: a worker starts Django and Celery first, which on a busy shared machine has taken
# more than 30 s.
WAIT_SECONDS = 180


@contextmanager
def running_worker(
    queue: str | None = None, **settings: str
) -> Iterator[tuple[str, Callable[[Callable[[], bool]], None]]]:
    """Yield (queue, wait_until): the queue the worker consumes (by default one only it does),
    and a poll that fails the test with the worker's output if it exits or WAIT_SECONDS pass.
    Tasks are not eager meanwhile. `settings` override the worker's environment."""
    queue = queue or f"test-{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notary.settings",
        "DATABASE_URL": child_database_url(),
        "REDIS_URL": app.conf.broker_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        **settings,
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--app", "notary", "worker", "--pool", "solo",
         "--queues", queue, "--loglevel", "warning", "--without-heartbeat", "--without-gossip",
         "--without-mingle"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip

    def wait_until(done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + WAIT_SECONDS
        while not done():
            assert worker.poll() is None, worker.stdout.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, f"the worker did not get there in {WAIT_SECONDS} s"
            time.sleep(0.2)

    app.conf.task_always_eager = False
    try:
        yield queue, wait_until
    finally:
        app.conf.task_always_eager = True
        worker.terminate()
        worker.wait(timeout=10)
