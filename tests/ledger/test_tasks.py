from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path

import pytest
from django.db import connection

from ledger import services
from ledger.core.checkpoint import log_verifier, open_checkpoint
from ledger.core.note import Signer
from ledger.models import Checkpoint, Log
from ledger.tasks import sign_due_checkpoints
from testkit.celery_worker import running_worker


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
    with running_worker(NOTARY_SIGNING_KEY_FILE=str(signing_key_file)) as (queue, wait_until):
        sign_due_checkpoints.apply_async(queue=queue)
        wait_until(lambda: Checkpoint.objects.filter(log=log).exists())
    checkpoint = Checkpoint.objects.get(log=log)
    opened = open_checkpoint(checkpoint.note, [log_verifier(log.origin, signer)], origin=log.origin)
    assert opened.size == 1


def worker_backends() -> list[int]:
    """The server processes of every other session on this test database: the worker's."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND pid <> pg_backend_pid()"
        )
        return [pid for (pid,) in cursor.fetchall()]


@pytest.mark.slow
def test_a_worker_keeps_one_connection_across_tasks_and_survives_losing_it(
    transactional_db: None, signing_key_file: Path
) -> None:
    log = services.ensure_log(origin=f"worker.interlock.example/{secrets.token_hex(4)}")

    def sign_at(size: int) -> None:
        services.append_entry(log=log, kind="PROPOSED", body={"n": size})
        sign_due_checkpoints.apply_async(queue=queue)
        wait_until(lambda: Checkpoint.objects.filter(log=log, size=size).exists())

    with running_worker(NOTARY_SIGNING_KEY_FILE=str(signing_key_file)) as (queue, wait_until):
        for size in (1, 2, 3):
            sign_at(size)
        [backend] = worker_backends()  # three tasks, one session
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [backend])  # as a restart would
        sign_at(4)
        assert worker_backends() != [backend]
