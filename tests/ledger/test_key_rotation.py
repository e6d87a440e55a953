"""Rotating the checkpoint signing key: the registry of every key used, derived from use, and
old checkpoints that stay verifiable under the published keys."""

from __future__ import annotations

import base64
import io
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, IntegrityError, connection, transaction

from ledger import selectors, services
from ledger.core.checkpoint import CheckpointError, log_verifier, open_checkpoint
from ledger.core.note import Signer, parse_skey, parse_vkey
from ledger.keys import load_signing_key
from ledger.models import Checkpoint, Log, SigningKey
from ledger.tasks import sign_due_checkpoints
from testkit.goverify import run_goverify


def run(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def grow_and_sign(log: Log) -> Checkpoint:
    services.append_entry(log=log, kind="PROPOSED", body={"n": selectors.log_head(log=log).size})
    (pk,) = [pk for pk in sign_due_checkpoints() if Checkpoint.objects.get(pk=pk).log_id == log.pk]
    return Checkpoint.objects.get(pk=pk)


def test_rotation_keeps_the_old_key_and_installs_a_new_one_atomically(
    signing_key_file: Path, signer: Signer
) -> None:
    vkey = run("rotate_signing_key").strip()

    new = load_signing_key()
    assert parse_vkey(vkey) == new.verifier
    assert new.name == signer.name
    assert new.public_key != signer.public_key
    retired = signing_key_file.with_name(f"signing.key.retired-{signer.verifier.key_id:08x}")
    assert parse_skey(retired.read_text()) == signer
    for path in (signing_key_file, retired):
        assert path.stat().st_mode & 0o777 == 0o600
    assert sorted(p.name for p in signing_key_file.parent.iterdir()) == sorted(
        ["signing.key", retired.name]
    )

    run("rotate_signing_key")
    assert len(list(signing_key_file.parent.glob("signing.key.retired-*"))) == 2
    assert parse_skey(retired.read_text()) == signer


def test_rotation_never_overwrites_a_kept_key(signing_key_file: Path, signer: Signer) -> None:
    retired = signing_key_file.with_name(f"signing.key.retired-{signer.verifier.key_id:08x}")
    retired.write_text(Signer.generate("someone.else").skey + "\n")
    with pytest.raises(CommandError, match="already exists and holds another key"):
        run("rotate_signing_key")
    assert load_signing_key() == signer

    # A rotation interrupted after keeping the old key can simply be run again.
    retired.write_text(signer.skey + "\n")
    run("rotate_signing_key")
    assert load_signing_key() != signer
    assert parse_skey(retired.read_text()) == signer


def test_rotation_without_a_key_says_how_to_make_one(settings: object, tmp_path: Path) -> None:
    settings.NOTARY_SIGNING_KEY_FILE = tmp_path / "missing.key"  # type: ignore[attr-defined]
    with pytest.raises(CommandError, match="generate_signing_key"):
        run("rotate_signing_key")


@pytest.mark.django_db
def test_every_key_used_is_published_with_its_period_and_old_checkpoints_verify(
    log: Log, signer: Signer
) -> None:
    first = grow_and_sign(log)
    vkey_b = run("rotate_signing_key").strip()
    key_b = load_signing_key()
    second = grow_and_sign(log)

    a, b = selectors.signing_keys()
    assert (a.vkey, a.key_id, a.name) == (
        signer.verifier.vkey,
        f"{signer.verifier.key_id:08x}",
        signer.name,
    )
    assert (a.valid_from, a.valid_until) == (first.created_at, second.created_at)
    assert (b.vkey, b.valid_from, b.valid_until) == (vkey_b, second.created_at, None)
    assert bytes(b.public_key) == key_b.public_key

    published = selectors.log_verifiers(log=log)
    assert published == [log_verifier(log.origin, signer), log_verifier(log.origin, key_b)]
    assert open_checkpoint(first.note, published, origin=log.origin).size == 1
    assert open_checkpoint(second.note, published, origin=log.origin).size == 2
    with pytest.raises(CheckpointError):
        open_checkpoint(first.note, [log_verifier(log.origin, key_b)])
    with pytest.raises(CheckpointError):
        open_checkpoint(second.note, [log_verifier(log.origin, signer)])

    out = run("verify_ledger", "--log", log.origin, "--no-progress")
    assert out.startswith(f"OK {log.origin}: 2 entries, 1 Merkle nodes, 2 signed checkpoints")
    only_b = log_verifier(log.origin, key_b).vkey
    with pytest.raises(CommandError, match="FAIL at seq 0: checkpoint at size 1"):
        run("verify_ledger", "--log", log.origin, "--no-progress", "--vkey", only_b)
    both = ["--vkey", log_verifier(log.origin, signer).vkey, "--vkey", only_b]
    assert run("verify_ledger", "--log", log.origin, "--no-progress", *both).startswith("OK")


@pytest.mark.django_db
def test_the_old_key_signs_until_the_new_one_has_signed_then_never_again(
    log: Log, signer: Signer, signing_key_file: Path
) -> None:
    grow_and_sign(log)
    run("rotate_signing_key")
    # A worker still holding the old key: it is current until the new key signs.
    services.append_entry(log=log, kind="PROPOSED", body={"n": 1})
    still_a = services.sign_checkpoint(log=log, signer=signer)
    assert [k.valid_until for k in selectors.signing_keys()] == [None]
    grow_and_sign(log)

    services.append_entry(log=log, kind="PROPOSED", body={"n": 3})
    with pytest.raises(services.RetiredSigningKeyError, match="was retired at"):
        services.sign_checkpoint(log=log, signer=signer)
    assert not Checkpoint.objects.filter(log=log, size=4).exists()

    # The old key file copied back is refused by the command and the periodic task alike.
    retired = next(signing_key_file.parent.glob("signing.key.retired-*"))
    signing_key_file.write_text(retired.read_text())
    with pytest.raises(CommandError, match="retired"):
        run("sign_checkpoint", "--log", log.origin)
    with pytest.raises(services.RetiredSigningKeyError):
        sign_due_checkpoints()
    assert not Checkpoint.objects.filter(log=log, size=4).exists()
    a, _ = selectors.signing_keys()
    assert a.valid_until is not None and still_a.created_at <= a.valid_until


@pytest.mark.django_db
def test_nothing_is_signed_and_no_key_registered_when_nothing_changed(
    log: Log, signer: Signer
) -> None:
    first = grow_and_sign(log)
    assert not Checkpoint.objects.filter(pk__in=sign_due_checkpoints(), log=log).exists()
    run("rotate_signing_key")
    assert not Checkpoint.objects.filter(pk__in=sign_due_checkpoints(), log=log).exists()
    assert [k.vkey for k in selectors.signing_keys()] == [signer.verifier.vkey]
    assert services.sign_checkpoint(log=log, signer=load_signing_key()) == first
    assert len(selectors.signing_keys()) == 1


@pytest.mark.django_db
def test_the_registry_refuses_rewrites_in_the_database(log: Log, signer: Signer) -> None:
    grow_and_sign(log)
    key = SigningKey.objects.get()
    table = SigningKey._meta.db_table
    for statement in (
        f"UPDATE {table} SET vkey = 'forged' WHERE id = %s",
        f"UPDATE {table} SET valid_from = valid_from - interval '1 day' WHERE id = %s",
        f"UPDATE {table} SET valid_until = valid_from, name = 'x' WHERE id = %s",
        f"DELETE FROM {table} WHERE id = %s",
    ):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
            connection.cursor().execute(statement, [key.pk])

    # Closing the current key's period is the one change allowed, and only once.
    connection.cursor().execute(
        f"UPDATE {table} SET valid_until = valid_from WHERE id = %s", [key.pk]
    )
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        connection.cursor().execute(
            f"UPDATE {table} SET valid_until = valid_from + interval '1 day' WHERE id = %s",
            [key.pk],
        )
    closed = SigningKey.objects.get()
    assert (closed.vkey, closed.valid_until) == (signer.verifier.vkey, closed.valid_from)


@pytest.mark.django_db
def test_the_registry_holds_one_current_key_at_most(log: Log, signer: Signer) -> None:
    grow_and_sign(log)
    current = SigningKey.objects.get()
    other = Signer.generate(signer.name).verifier
    with pytest.raises(IntegrityError), transaction.atomic():
        SigningKey.objects.create(
            name=other.name,
            key_id=f"{other.key_id:08x}",
            public_key=other.public_key,
            vkey=other.vkey,
            valid_from=current.valid_from,
        )


@pytest.mark.django_db(transaction=True)
def test_a_key_is_never_retired_under_a_signature_in_flight(
    make_log: Callable[[], Log], signer: Signer
) -> None:
    """The old key keeps signing one log while the new key signs its first checkpoint of
    another: every checkpoint the old key signed lies inside its published period."""
    old_log, new_log = make_log(), make_log()
    services.append_entry(log=new_log, kind="PROPOSED", body={"n": 0})
    services.append_entry(log=old_log, kind="PROPOSED", body={"n": 0})
    services.sign_checkpoint(log=old_log, signer=signer)
    new = Signer.generate(signer.name)
    refused = threading.Event()

    def keep_signing_with_the_old_key() -> None:
        try:
            for n in range(1, 500):
                services.append_entry(log=old_log, kind="PROPOSED", body={"n": n})
                services.sign_checkpoint(log=old_log, signer=signer)
        except services.RetiredSigningKeyError:
            refused.set()
        finally:
            connection.close()

    worker = threading.Thread(target=keep_signing_with_the_old_key)
    worker.start()
    while not Checkpoint.objects.filter(log=old_log, size__gte=5).exists():
        assert worker.is_alive()
        time.sleep(0.01)
    services.sign_checkpoint(log=new_log, signer=new)
    worker.join(timeout=60)
    assert refused.is_set()

    a, b = selectors.signing_keys()
    assert a.valid_until == b.valid_from
    signed_by_a = Checkpoint.objects.filter(log=old_log)
    assert all(a.valid_from <= c.created_at <= a.valid_until for c in signed_by_a)
    verifiers = selectors.log_verifiers(log=old_log)
    for checkpoint in signed_by_a:
        open_checkpoint(checkpoint.note, verifiers[:1], origin=old_log.origin)


@pytest.mark.django_db
def test_go_reference_verifies_across_a_rotation_with_the_published_keys(
    goverify: Path, log: Log, signer: Signer, tmp_path: Path
) -> None:
    for _ in range(3):
        old = grow_and_sign(log)
    run("rotate_signing_key")
    for _ in range(4):
        new = grow_and_sign(log)
    vkeys = ",".join(v.vkey for v in selectors.log_verifiers(log=log))
    (tmp_path / "old").write_text(old.note)
    (tmp_path / "new").write_text(new.note)
    hashes = selectors.consistency_proof(log=log, old_size=old.size, new_size=new.size)
    (tmp_path / "proof").write_text("".join(base64.b64encode(h).decode() + "\n" for h in hashes))
    files = [tmp_path / n for n in ("old", "new", "proof")]
    result = run_goverify(goverify, "consistency", vkeys, *files)
    assert result.stdout == f"ok consistency {log.origin} 3 -> 7\n"
    only_new = log_verifier(log.origin, load_signing_key()).vkey
    assert "note: " in run_goverify(goverify, "consistency", only_new, *files).stdout

    for index, size in ((1, 3), (5, 7)):
        (tmp_path / "p").write_text(selectors.tlog_proof(log=log, index=index, size=size).text())
        (tmp_path / "leaf").write_bytes(selectors.get_entry(log=log, seq=index).leaf_bytes())
        result = run_goverify(goverify, "inclusion", vkeys, tmp_path / "p", tmp_path / "leaf")
        assert result.stdout == f"ok inclusion {log.origin} size {size} index {index}\n"
