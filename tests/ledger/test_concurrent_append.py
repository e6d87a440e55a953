"""Many writer processes appending to one log at once still give one gapless, verifiable log.

The writers are separate interpreters with their own PostgreSQL connections, released together,
so the only thing ordering their appends is the Log row lock `append_entries` takes."""

from __future__ import annotations

import io
import itertools
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
from django.core.management import call_command

from ledger import selectors, services
from ledger.core import merkle
from ledger.core.checkpoint import log_verifier, open_checkpoint, parse_tlog_proof
from ledger.core.note import Signer
from ledger.models import Checkpoint, Entry, Log
from testkit.paths import REPO_ROOT, child_database_url

WRITERS = 6
OTHER_WRITERS = 2
PER_WRITER = 60
CHILD_TIMEOUT = 60


def run_children(commands: list[list[str]], env: dict[str, str]) -> list[tuple[int, str]]:
    """Start every child, wait until all are connected, release them together, collect them."""
    children = [
        subprocess.Popen(
            [sys.executable, "-m", "testkit.agents.ledger_writer", *command],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for command in commands
    ]
    try:
        for child in children:
            assert child.stdout is not None
            ready = child.stdout.readline()
            assert ready == "ready\n", child.communicate(timeout=CHILD_TIMEOUT)[1]
        for child in children:
            assert child.stdin is not None
            child.stdin.write("go\n")
            child.stdin.flush()
        results = []
        for child in children:
            _, stderr = child.communicate(timeout=CHILD_TIMEOUT)
            results.append((child.returncode, stderr))
        return results
    finally:
        for child in children:
            if child.poll() is None:
                child.kill()
                child.wait()


def writer_bodies(log: Log) -> list[tuple[int, str, int]]:
    """(seq, writer, n) of every entry, in seq order."""
    rows = []
    for entry in selectors.iter_entries(log=log):
        body = entry.body_value()
        rows.append((entry.seq, body["writer"], body["n"]))
    return rows


def assert_log_is_whole(log: Log, writers: list[str], signer: Signer) -> None:
    """Gapless seqs; each writer's entries once and in its order; chain, tree, checkpoints hold."""
    size = len(writers) * PER_WRITER
    log.refresh_from_db()
    assert log.size == size
    rows = writer_bodies(log)
    assert [seq for seq, _, _ in rows] == list(range(size))
    by_writer: dict[str, list[int]] = defaultdict(list)
    for _, writer, n in rows:
        by_writer[writer].append(n)
    assert by_writer == {writer: list(range(PER_WRITER)) for writer in writers}

    checkpoints = selectors.signed_checkpoints(log=log)
    report = selectors.verify_stored(log=log, verifiers=[log_verifier(log.origin, signer)])
    assert (report.entries, report.checkpoints) == (size, len(checkpoints))
    leaf_hashes = [entry.entry_hash for entry in selectors.iter_entries(log=log)]
    expected_root = merkle.root_of_leaf_hashes(leaf_hashes)
    assert report.root == expected_root
    assert selectors.root_at(log=log, size=size) == expected_root
    out = io.StringIO()
    call_command("verify_ledger", log=log.origin, no_progress=True, stdout=out)
    assert out.getvalue().startswith(
        f"OK {log.origin}: {size} entries, {report.nodes} Merkle nodes, "
        f"{len(checkpoints)} signed checkpoints"
    )


@pytest.mark.slow
def test_concurrent_writer_processes_append_one_gapless_verifiable_log(
    transactional_db: None, signer: Signer, signing_key_file: Path
) -> None:
    """Six processes on one log, two on another, and a checkpoint signer, all at once."""
    origin = f"test.interlock.example/concurrent-{os.getpid()}"
    other_origin = f"{origin}-other"
    writers = [f"w{i}" for i in range(WRITERS)]
    other_writers = [f"o{i}" for i in range(OTHER_WRITERS)]
    total = WRITERS * PER_WRITER
    services.ensure_log(origin=origin)
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "notary.settings",
        "DATABASE_URL": child_database_url(),
        "NOTARY_SIGNING_KEY_FILE": str(signing_key_file),
    }
    commands = [
        *(["append", origin, writer, str(PER_WRITER)] for writer in writers),
        # The other log does not exist yet: its writers race to create it.
        *(["append", other_origin, writer, str(PER_WRITER)] for writer in other_writers),
        ["checkpoint", origin, str(total)],
    ]

    results = run_children(commands, env)

    assert [code for code, _ in results] == [0] * len(commands), [err for _, err in results]
    log = selectors.get_log(origin=origin)
    other = selectors.get_log(origin=other_origin)
    assert Log.objects.filter(origin=other_origin).count() == 1
    assert_log_is_whole(log, writers, signer)
    assert_log_is_whole(other, other_writers, signer)
    assert Entry.objects.count() == total + OTHER_WRITERS * PER_WRITER

    # The appends really interleaved: the seq order switches writer far more often than once each.
    seq_writers = [writer for _, writer, _ in writer_bodies(log)]
    switches = sum(a != b for a, b in itertools.pairwise(seq_writers))
    assert switches > WRITERS

    # Checkpoints signed mid-flight are prefixes of the final tree, and carry inclusion proofs.
    final = services.sign_checkpoint(log=log, signer=signer)
    assert final.size == total
    verifier = log_verifier(origin, signer)
    sizes = list(Checkpoint.objects.filter(log=log).order_by("size").values_list("size", flat=True))
    assert sizes[-1] == total
    assert len(sizes) > 1
    for old_size in sizes[:-1]:
        old = open_checkpoint(
            Checkpoint.objects.get(log=log, size=old_size).note, [verifier], origin=origin
        )
        merkle.verify_consistency(
            old_size=old_size,
            new_size=total,
            old_root=old.root,
            new_root=open_checkpoint(final.note, [verifier], origin=origin).root,
            proof=selectors.consistency_proof(log=log, old_size=old_size, new_size=total),
        )
    for index in (0, sizes[0] - 1, total // 2, total - 1):
        entry = selectors.get_entry(log=log, seq=index)
        earliest = next(size for size in sizes if size > index)
        for size in (earliest, total):
            proof = parse_tlog_proof(selectors.tlog_proof(log=log, index=index, size=size).text())
            assert proof.verify(entry.leaf_bytes(), [verifier], origin=origin).size == size
