from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ledger import services
from ledger.core.checkpoint import log_verifier, open_checkpoint
from ledger.core.note import Signer
from ledger.models import Checkpoint, Log
from ledger.tasks import sign_due_checkpoints
from notary.celery import app
from tests.conftest import REPO_ROOT, child_database_url


def test_sign_due_checkpoints_signs_logs_that_grew_and_is_safe_to_rerun(
    make_log: Callable[[], Log], signer: Signer
) -> None:
    grown, quiet = make_log(), make_log()
    services.append_entry(log=grown, kind="PROPOSED", body={"n": 1})
    services.append_entry(log=quiet, kind="PROPOSED", body={"n": 1})
    services.sign_checkpoint(log=quiet, signer=signer)
    services.append_entry(log=grown, kind="PROPOSED", body={"n": 2})

    signed = sign_due_checkpoints()
    mine = Checkpoint.objects.filter(pk__in=signed, log__in=[grown, quiet])
    assert [(c.log_id, c.size) for c in mine] == [(grown.pk, 2)]
    assert Checkpoint.objects.filter(log=quiet).count() == 1
    assert not Checkpoint.objects.filter(pk__in=sign_due_checkpoints(), log=grown).exists()


@pytest.mark.slow
def test_a_real_worker_signs_checkpoints_from_the_redis_queue(
    transactional_db: None, signing_key_file: Path, signer: Signer
) -> None:
    log = services.ensure_log(origin=f"worker.interlock.example/{secrets.token_hex(4)}")
    services.append_entry(log=log, kind="PROPOSED", body={"n": 1})
    queue = f"test-{secrets.token_hex(4)}"
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notary.settings",
        "DATABASE_URL": child_database_url(),
        "REDIS_URL": app.conf.broker_url,
        "CELERY_TASK_ALWAYS_EAGER": "false",
        "NOTARY_SIGNING_KEY_FILE": str(signing_key_file),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "--app", "notary", "worker", "--pool", "solo",
         "--queues", queue, "--loglevel", "warning", "--without-heartbeat", "--without-gossip",
         "--without-mingle"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    app.conf.task_always_eager = False
    try:
        sign_due_checkpoints.apply_async(queue=queue)
        deadline = time.monotonic() + 30
        while not Checkpoint.objects.filter(log=log).exists():
            assert worker.poll() is None, worker.stdout.read().decode()  # type: ignore[union-attr]
            assert time.monotonic() < deadline, "the worker signed nothing within 30 s"
            time.sleep(0.2)
    finally:
        app.conf.task_always_eager = True
        worker.terminate()
        worker.wait(timeout=10)
    checkpoint = Checkpoint.objects.get(log=log)
    opened = open_checkpoint(checkpoint.note, [log_verifier(log.origin, signer)], origin=log.origin)
    assert opened.size == 1
