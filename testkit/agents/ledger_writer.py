"""A child process for the concurrency tests: its own interpreter, its own database connection.

Run as ``python -m testkit.agents.ledger_writer ROLE ORIGIN ...`` with DJANGO_SETTINGS_MODULE and
DATABASE_URL in the environment. It sets Django up and connects, prints ``ready``, and waits for one
line on stdin, so the parent can release every child at the same moment.

- ``append ORIGIN WRITER COUNT``: append COUNT entries, one transaction each, bodies
  ``{"writer": WRITER, "n": 0..COUNT-1}``;
- ``checkpoint ORIGIN SIZE``: every few milliseconds, sign a checkpoint if the log has grown, until
  it reaches SIZE;
- ``acked ORIGIN THREADS``: THREADS threads of this process appending without end, each
  printing ``acked SEQ WRITER N`` as soon as an append of ``{"writer": WRITER, "n": N}``
  returns, until the process is killed.
"""

from __future__ import annotations

import sys
import threading
import time

import django


def append(origin: str, writer: str, count: int) -> None:
    from ledger import services

    log = services.ensure_log(origin=origin)
    for n in range(count):
        services.append_entry(
            log=log, kind="OBSERVED", body={"writer": writer, "n": n}, effect_id=f"{writer}-{n}"
        )


def acked(origin: str, threads: int) -> None:
    from ledger import services

    lock = threading.Lock()

    def writer(name: str) -> None:
        log = services.ensure_log(origin=origin)
        for n in range(1_000_000):
            entry = services.append_entry(
                log=log, kind="OBSERVED", body={"writer": name, "n": n}, effect_id=f"{name}-{n}"
            )
            with lock:
                print(f"acked {entry.seq} {name} {n}", flush=True)

    workers = [threading.Thread(target=writer, args=(f"t{i}",)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()


def checkpoint(origin: str, final_size: int) -> None:
    from ledger import services
    from ledger.keys import load_signing_key
    from ledger.models import Log

    signer = load_signing_key()
    log = services.ensure_log(origin=origin)
    signed = 0
    while signed < final_size:
        size = Log.objects.values_list("size", flat=True).get(pk=log.pk)
        if size > signed:
            signed = services.sign_checkpoint(log=log, signer=signer).size
        time.sleep(0.02)


def main(argv: list[str]) -> None:
    django.setup()
    from django.db import connection

    connection.ensure_connection()
    print("ready", flush=True)
    sys.stdin.readline()
    role, origin, *rest = argv
    if role == "append":
        append(origin, rest[0], int(rest[1]))
    elif role == "acked":
        acked(origin, int(rest[0]))
    elif role == "checkpoint":
        checkpoint(origin, int(rest[0]))
    else:
        raise SystemExit(f"unknown role {role!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
