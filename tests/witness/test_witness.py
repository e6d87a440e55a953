"""The witness as a real process on a free port, fed checkpoints the ledger signed and proofs
the ledger computed. Its cosignatures are checked by `spec_cosignature_timestamp`
(testkit.witness_process), written from the text of C2SP tlog-cosignature, not by the witness's
own code."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import signal
import subprocess
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from ledger import selectors, services
from ledger.core.checkpoint import Checkpoint as CheckpointText
from ledger.core.checkpoint import log_verifier, open_checkpoint
from ledger.core.note import Signer, sign_note
from ledger.models import Log
from testkit.notary_server import free_port
from testkit.paths import REPO_ROOT
from testkit.witness_process import (
    RunningWitness,
    spawn_witness,
    spec_cosignature_timestamp,
    witness_command,
    witness_keygen,
)

pytestmark = pytest.mark.slow

WITNESS_NAME = "witness.test.interlock.example/w1"


@pytest.fixture
def witness_key(tmp_path: Path) -> tuple[Path, str]:
    """A witness key made by the witness's keygen; (key file, the vkey it printed)."""
    path = tmp_path / "witness.key"
    vkey = witness_keygen(path, WITNESS_NAME)
    assert path.stat().st_mode & 0o777 == 0o600
    return path, vkey


@pytest.fixture
def start_witness(
    tmp_path: Path, witness_key: tuple[Path, str], log: Log, signer: Signer
) -> Iterator[Callable[[], RunningWitness]]:
    """Start (or restart) the witness for `log`, on one state file in tmp_path (initialised
    on the first start)."""
    started: list[RunningWitness] = []
    log_vkey = log_verifier(log.origin, signer).vkey
    state = tmp_path / "witness.state"

    def start() -> RunningWitness:
        running = spawn_witness(
            key=witness_key[0],
            vkey=witness_key[1],
            state=state,
            logs=["--log", f"{log.origin}={log_vkey}"],
            init=not started,
        )
        started.append(running)
        return running

    yield start
    for running in started:
        running.stop()


def grow(log: Log, count: int) -> None:
    for n in range(count):
        services.append_entry(log=log, kind="PROPOSED", body={"n": n})


def note_body(note: str) -> str:
    return note[: note.rfind("\n\n") + 1]


def evidence(tmp_path: Path) -> list[dict[str, object]]:
    path = tmp_path / "witness.state.evidence.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- Tests ------------------------------------------------------------------------------------


def test_witness_cosigns_consistent_extensions_of_the_ledger(
    log: Log,
    signer: Signer,
    witness_key: tuple[Path, str],
    start_witness: Callable[[], RunningWitness],
) -> None:
    witness = start_witness()
    grow(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)

    answer = witness.add_checkpoint(old=0, proof=[], note=first.note)
    assert answer.status == 200, answer.text
    [line] = answer.text.splitlines(keepends=True)
    first_time = spec_cosignature_timestamp(line, note_body(first.note), witness_key[1])

    grow(log, 4)
    second = services.sign_checkpoint(log=log, signer=signer)
    proof = selectors.consistency_proof(log=log, old_size=first.size, new_size=second.size)
    assert proof, "a proof from 3 to 7 is not empty"
    answer = witness.add_checkpoint(old=first.size, proof=proof, note=second.note)
    assert answer.status == 200, answer.text
    [line] = answer.text.splitlines(keepends=True)
    assert spec_cosignature_timestamp(line, note_body(second.note), witness_key[1]) >= first_time

    # The monitoring view: the log's signature it verified and its own cosignature.
    held = witness.held(log.origin)
    assert held.status == 200
    assert note_body(held.text) == note_body(second.note)
    opened = open_checkpoint(held.text, [log_verifier(log.origin, signer)], origin=log.origin)
    assert (opened.size, opened.root) == (second.size, bytes(second.root))
    assert held.text.endswith(line)

    # The same checkpoint again is consistent with itself: cosigned again.
    assert witness.add_checkpoint(old=second.size, proof=[], note=second.note).status == 200


def test_witness_refuses_an_inconsistent_checkpoint_and_keeps_both_as_evidence(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    witness = start_witness()
    grow(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)
    assert witness.add_checkpoint(old=0, proof=[], note=first.note).status == 200
    grow(log, 4)
    real_proof = selectors.consistency_proof(log=log, old_size=3, new_size=7)
    # The log's key signs a tree of 7 that does not extend the 3 the witness cosigned.
    forged = CheckpointText(log.origin, 7, hashlib.sha256(b"another history").digest())
    forged_note = forged.sign(signer)

    answer = witness.add_checkpoint(old=3, proof=real_proof, note=forged_note)
    assert answer.status == 422, answer.text
    assert "consistency proof from size 3 does not verify" in answer.text
    assert note_body(first.note) in answer.text and forged_note in answer.text
    assert note_body(witness.held(log.origin).text) == note_body(first.note)  # unchanged
    [event] = evidence(tmp_path)
    assert event["kind"] == "inconsistent"
    assert event["submitted"] == forged_note
    assert note_body(str(event["held"])) == note_body(first.note)

    # The real tree of 7 still extends it.
    real = services.sign_checkpoint(log=log, signer=signer)
    assert witness.add_checkpoint(old=3, proof=real_proof, note=real.note).status == 200


def test_witness_refuses_a_split_view_and_reports_both_checkpoints(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    witness = start_witness()
    grow(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)
    assert witness.add_checkpoint(old=0, proof=[], note=first.note).status == 200
    other = CheckpointText(log.origin, 3, hashlib.sha256(b"a fork").digest()).sign(signer)

    answer = witness.add_checkpoint(old=3, proof=[], note=other)
    assert answer.status == 422, answer.text
    assert "split view" in answer.text
    assert note_body(first.note) in answer.text and other in answer.text

    # Offered as a first checkpoint (old 0): 409 with the size the witness holds, per spec.
    answer = witness.add_checkpoint(old=0, proof=[], note=other)
    assert (answer.status, answer.content_type, answer.text) == (409, "text/x.tlog.size", "3\n")

    events = evidence(tmp_path)
    assert [e["kind"] for e in events] == ["split_view", "split_view"]
    assert "split_view checkpoint from" in (tmp_path / "witness.stderr").read_text()
    for event in events:
        assert event["submitted"] == other
        assert note_body(str(event["held"])) == note_body(first.note)


def test_witness_refuses_a_rollback(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    witness = start_witness()
    grow(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)
    grow(log, 2)
    second = services.sign_checkpoint(log=log, signer=signer)
    assert witness.add_checkpoint(old=0, proof=[], note=second.note).status == 200

    assert witness.add_checkpoint(old=5, proof=[], note=first.note).status == 400
    answer = witness.add_checkpoint(old=3, proof=[], note=first.note)
    assert (answer.status, answer.text) == (409, "5\n")
    assert [e["kind"] for e in evidence(tmp_path)] == ["rollback", "rollback"]
    assert note_body(witness.held(log.origin).text) == note_body(second.note)


def test_witness_answers_bad_requests_with_the_spec_status_codes(
    log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    witness = start_witness()
    grow(log, 2)
    good = services.sign_checkpoint(log=log, signer=signer)
    body = note_body(good.note)

    unknown = CheckpointText("other.example/log", 2, bytes(good.root)).sign(signer)
    assert witness.add_checkpoint(old=0, proof=[], note=unknown).status == 404
    stranger = CheckpointText(log.origin, 2, bytes(good.root)).sign(Signer.generate("x"))
    assert witness.add_checkpoint(old=0, proof=[], note=stranger).status == 403
    sig_line = good.note.splitlines(keepends=True)[-1]
    blob = bytearray(base64.b64decode(sig_line.split(" ")[-1]))
    blob[-1] ^= 1  # the trusted key's name and id, a signature that fails
    broken = body + "\n" + sig_line.rsplit(" ", 1)[0] + " " + base64.b64encode(blob).decode()
    assert witness.add_checkpoint(old=0, proof=[], note=broken + "\n").status == 403

    for malformed in (
        b"old 01\n\n" + good.note.encode(),  # leading zero
        b"new 0\n\n" + good.note.encode(),
        b"old 0\n" + good.note.encode(),  # no empty line before the checkpoint
        b"old 0\nnot-base64!\n\n" + good.note.encode(),
        ("old 0\n" + "AAAA" * 11 + "\n" * 64 + "\n").encode() + good.note.encode(),
    ):
        assert witness.request("POST", "/add-checkpoint", malformed).status == 400, malformed
    too_many = [hashlib.sha256(bytes([i])).digest() for i in range(64)]
    assert witness.add_checkpoint(old=0, proof=too_many, note=good.note).status == 400

    # old 0 takes no proof; a size-0 checkpoint needs the empty tree's root.
    one_hash = [hashlib.sha256(b"x").digest()]
    assert witness.add_checkpoint(old=0, proof=one_hash, note=good.note).status == 422
    empty = CheckpointText(log.origin, 0, hashlib.sha256(b"not empty").digest()).sign(signer)
    assert witness.add_checkpoint(old=0, proof=[], note=empty).status == 422
    assert witness.held(log.origin).status == 404  # nothing was cosigned


def test_witness_remembers_its_latest_checkpoint_across_sigkill(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    witness = start_witness()
    grow(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)
    assert witness.add_checkpoint(old=0, proof=[], note=first.note).status == 200
    os.kill(witness.process.pid, signal.SIGKILL)
    witness.process.wait(timeout=10)

    restarted = start_witness()
    assert note_body(restarted.held(log.origin).text) == note_body(first.note)
    answer = restarted.add_checkpoint(old=0, proof=[], note=first.note)
    assert (answer.status, answer.text) == (409, "3\n")
    assert not (tmp_path / "witness.state.evidence.jsonl").exists()  # a stale client, no fork
    grow(log, 2)
    second = services.sign_checkpoint(log=log, signer=signer)
    proof = selectors.consistency_proof(log=log, old_size=3, new_size=5)
    assert restarted.add_checkpoint(old=3, proof=proof, note=second.note).status == 200
    assert sorted(p.name for p in tmp_path.glob("*witness.state*")) == [
        "witness.state",
        "witness.state.generation",
        "witness.state.lock",
    ]  # no temporary file left behind


def test_a_second_witness_process_cannot_share_the_state_file(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    start_witness()
    key = tmp_path / "witness.key"
    second = subprocess.run(
        witness_command(
            "--key",
            str(key),
            "--state",
            str(tmp_path / "witness.state"),
            "--log",
            f"{log.origin}={log_verifier(log.origin, signer).vkey}",
            "--listen",
            f"127.0.0.1:{free_port()}",
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert second.returncode == 2
    assert "in use by another witness process" in second.stderr


def serve_refused(tmp_path: Path, log: Log, signer: Signer) -> str:
    """Start the witness on tmp_path's state and expect it to refuse at once; its stderr."""
    refused = subprocess.run(
        witness_command(
            *("--key", str(tmp_path / "witness.key"), "--state", str(tmp_path / "witness.state")),
            *("--log", f"{log.origin}={log_verifier(log.origin, signer).vkey}"),
            *("--listen", f"127.0.0.1:{free_port()}"),
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2, refused.stderr
    return refused.stderr


def cosign_at(witness: RunningWitness, log: Log, signer: Signer, old: int, count: int) -> None:
    grow(log, count)
    signed = services.sign_checkpoint(log=log, signer=signer)
    proof = selectors.consistency_proof(log=log, old_size=old, new_size=log.size) if old else []
    assert witness.add_checkpoint(old=old, proof=proof, note=signed.note).status == 200


def test_a_witness_with_its_state_deleted_refuses_to_start_until_initialised(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    """Its state file gone, a witness would start over and cosign a fork of what it cosigned:
    it refuses to start, saying how to begin anew on purpose. `init` creates a state once,
    never over an existing one."""
    witness = start_witness()
    cosign_at(witness, log, signer, 0, 3)
    witness.stop()
    state = tmp_path / "witness.state"
    state.unlink()
    assert "does not exist: a witness without its state would cosign a fork" in serve_refused(
        tmp_path, log, signer
    )
    made = subprocess.run(
        witness_command("init", "--state", str(state)), cwd=REPO_ROOT, capture_output=True
    )
    assert made.returncode == 0 and json.loads(state.read_text())["logs"] == {}
    again = subprocess.run(
        witness_command("init", "--state", str(state)),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
    )
    assert again.returncode == 2 and "is initialised once" in again.stderr


def test_a_witness_refuses_to_start_on_a_state_rolled_back(
    tmp_path: Path, log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    """The state file put back from an older copy (it held size 3; the witness has cosigned 5
    since): the generation it records is behind the witness's record, and it refuses to start
    rather than cosign a tree of 5 other than the one it cosigned."""
    witness = start_witness()
    cosign_at(witness, log, signer, 0, 3)
    state = tmp_path / "witness.state"
    older = state.read_bytes()
    cosign_at(witness, log, signer, 3, 2)
    witness.stop()
    state.write_bytes(older)
    assert "is at generation 1, but this witness recorded generation 2" in serve_refused(
        tmp_path, log, signer
    )


def test_witness_refuses_a_log_key_not_named_after_the_origin(
    tmp_path: Path, witness_key: tuple[Path, str], log: Log, signer: Signer
) -> None:
    refused = subprocess.run(
        witness_command(
            "--key",
            str(witness_key[0]),
            "--state",
            str(tmp_path / "s"),
            "--log",
            f"{log.origin}={signer.verifier.vkey}",
        ),
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 2
    assert "named after its origin" in refused.stderr


def test_concurrent_extensions_never_roll_the_witness_back(
    log: Log, signer: Signer, start_witness: Callable[[], RunningWitness]
) -> None:
    """The spec's race: checking `old` and storing the new checkpoint are one step, so of many
    extensions of the same old size exactly one is cosigned and it is the one held."""
    witness = start_witness()
    grow(log, 3)
    first = services.sign_checkpoint(log=log, signer=signer)
    assert witness.add_checkpoint(old=0, proof=[], note=first.note).status == 200
    requests = []
    for _ in range(8):
        grow(log, 1)
        checkpoint = services.sign_checkpoint(log=log, signer=signer)
        proof = selectors.consistency_proof(log=log, old_size=3, new_size=checkpoint.size)
        requests.append((checkpoint, proof))

    with ThreadPoolExecutor(max_workers=len(requests)) as pool:
        answers = list(
            pool.map(lambda r: witness.add_checkpoint(old=3, proof=r[1], note=r[0].note), requests)
        )
    pairs = zip(requests, answers, strict=True)
    won = [checkpoint for (checkpoint, _), a in pairs if a.status == 200]
    assert len(won) == 1, [a.status for a in answers]
    assert sorted(a.status for a in answers) == [200] + [409] * 7
    assert {a.text for a in answers if a.status == 409} == {f"{won[0].size}\n"}
    assert note_body(witness.held(log.origin).text) == note_body(won[0].note)


def test_witness_ignores_signatures_by_unknown_keys(
    log: Log,
    signer: Signer,
    witness_key: tuple[Path, str],
    start_witness: Callable[[], RunningWitness],
) -> None:
    witness = start_witness()
    grow(log, 2)
    signed = services.sign_checkpoint(log=log, signer=signer)
    body = note_body(signed.note)
    stranger = sign_note(body, [Signer.generate("stranger.example")])
    both = signed.note + stranger.split("\n\n", 1)[1]
    assert witness.add_checkpoint(old=0, proof=[], note=stranger).status == 403
    answer = witness.add_checkpoint(old=0, proof=[], note=both)
    assert answer.status == 200, answer.text
    spec_cosignature_timestamp(answer.text, body, witness_key[1])
    held = witness.held(log.origin).text
    assert "stranger.example" not in held
    assert held == signed.note + answer.text


def test_a_log_family_witnesses_every_tenant_log_of_one_notary_key(
    tmp_path: Path,
    witness_key: tuple[Path, str],
    make_log: Callable[[], Log],
    signer: Signer,
) -> None:
    """`--log-family PREFIX=VKEY` takes the notary's key as /v1/keys lists it and trusts it, under
    each log's own origin, for PREFIX/<tenant> only: logs created after the witness started are
    witnessed, a deeper or foreign origin is not."""
    witness = spawn_witness(
        key=witness_key[0],
        vkey=witness_key[1],
        state=tmp_path / "family.state",
        logs=["--log-family", f"test.interlock.example={signer.verifier.vkey}"],
        init=True,
    )
    try:
        for log in (make_log(), make_log()):
            grow(log, 2)
            signed = services.sign_checkpoint(log=log, signer=signer)
            answer = witness.add_checkpoint(old=0, proof=[], note=signed.note)
            assert answer.status == 200, answer.text
            spec_cosignature_timestamp(answer.text, note_body(signed.note), witness_key[1])
            assert witness.held(log.origin).text == signed.note + answer.text
        for origin in ("test.interlock.example/acme/deeper", "other.example/acme"):
            stray = CheckpointText(origin, 1, hashlib.sha256(b"x").digest()).sign(signer)
            assert witness.add_checkpoint(old=0, proof=[], note=stray).status == 404
        # The family key as given, not renamed to the origin, signs nothing the witness accepts.
        unrenamed = sign_note(CheckpointText(log.origin, 3, bytes(32)).text(), [signer])
        assert witness.add_checkpoint(old=2, proof=[], note=unrenamed).status == 403
    finally:
        witness.stop()
