from __future__ import annotations

import base64
import hashlib

import pytest

from ledger.core.checkpoint import (
    Checkpoint,
    CheckpointError,
    Succession,
    log_verifier,
    make_tlog_proof,
    open_checkpoint,
    parse_checkpoint_text,
    parse_tlog_proof,
    succession,
)
from ledger.core.merkle import Frontier, hashes_for_ranges, inclusion_ranges, leaf_hash
from ledger.core.note import Signer

ORIGIN = "example.com/log"
ROOT = hashlib.sha256(b"root").digest()


def test_checkpoint_text_is_origin_size_and_base64_root() -> None:
    text = Checkpoint(ORIGIN, 20852163, ROOT).text()
    assert text == f"{ORIGIN}\n20852163\n{base64.b64encode(ROOT).decode()}\n"
    assert parse_checkpoint_text(text) == Checkpoint(ORIGIN, 20852163, ROOT)


def test_signed_checkpoint_opens_under_the_log_key_named_after_the_origin() -> None:
    signer = Signer.generate("notary")
    note = Checkpoint(ORIGIN, 5, ROOT).sign(signer)
    assert note.splitlines()[-1].startswith(f"— {ORIGIN} ")
    verifier = log_verifier(ORIGIN, signer)
    assert verifier.vkey.startswith(f"{ORIGIN}+")
    assert open_checkpoint(note, [verifier], origin=ORIGIN) == Checkpoint(ORIGIN, 5, ROOT)
    with pytest.raises(CheckpointError, match=r"not 'other\.example/log'"):
        open_checkpoint(note, [verifier], origin="other.example/log")
    with pytest.raises(CheckpointError):
        open_checkpoint(note, [signer.verifier])  # the key under another name is not this log's


@pytest.mark.parametrize(
    "text",
    [
        f"{ORIGIN}\n5\n",
        f"\n5\n{base64.b64encode(ROOT).decode()}\n",
        f"{ORIGIN}\n05\n{base64.b64encode(ROOT).decode()}\n",
        f"{ORIGIN}\n-5\n{base64.b64encode(ROOT).decode()}\n",
        f"{ORIGIN}\n5\n{base64.b64encode(ROOT[:31]).decode()}\n",
        f"{ORIGIN}\n5\n{base64.b64encode(ROOT).decode()}\n\n",
        f"{ORIGIN}\n5\n{base64.b64encode(ROOT).decode()}",
    ],
)
def test_malformed_checkpoint_text_is_refused(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_checkpoint_text(text)


def _tree(size: int) -> tuple[list[bytes], dict[tuple[int, int], bytes], bytes]:
    leaves = [f'{{"seq":{i}}}'.encode() for i in range(size)]
    nodes: dict[tuple[int, int], bytes] = {}
    frontier = Frontier()
    for i, leaf in enumerate(leaves):
        nodes[(0, i)] = leaf_hash(leaf)
        nodes.update(frontier.append(leaf_hash(leaf)))
    return leaves, nodes, frontier.root()


def test_tlog_proof_text_round_trips_and_verifies() -> None:
    signer = Signer.generate("notary")
    leaves, nodes, root = _tree(11)
    note = Checkpoint(ORIGIN, 11, root).sign(signer)
    proof = make_tlog_proof(
        index=6, hashes=hashes_for_ranges(inclusion_ranges(6, 11), nodes), signed_checkpoint=note
    )
    text = proof.text()
    lines = text.split("\n")
    assert lines[0] == "c2sp.org/tlog-proof@v1"
    assert lines[1] == "index 6"
    assert text.endswith("\n\n" + note)
    parsed = parse_tlog_proof(text)
    assert parsed == proof
    verifier = log_verifier(ORIGIN, signer)
    assert parsed.verify(leaves[6], [verifier], origin=ORIGIN).size == 11
    with pytest.raises(CheckpointError, match="inclusion proof"):
        parsed.verify(leaves[5], [verifier], origin=ORIGIN)


def test_tlog_proof_with_extra_data_parses() -> None:
    signer = Signer.generate("notary")
    leaves, _, root = _tree(1)
    note = Checkpoint(ORIGIN, 1, root).sign(signer)
    text = f"c2sp.org/tlog-proof@v1\nextra {base64.b64encode(b'ctx').decode()}\nindex 0\n\n{note}"
    parsed = parse_tlog_proof(text)
    assert parsed.extra == b"ctx"
    assert parsed.hashes == ()
    assert parsed.text() == text
    parsed.verify(leaves[0], [log_verifier(ORIGIN, signer)])


@pytest.mark.parametrize(
    "text",
    [
        "c2sp.org/tlog-proof@v2\nindex 0\n\nx\n",
        "c2sp.org/tlog-proof@v1\nindex 01\n\nx\n",
        "c2sp.org/tlog-proof@v1\nindex -1\n\nx\n",
        "c2sp.org/tlog-proof@v1\n\nx\n",
        "c2sp.org/tlog-proof@v1\nindex 0\nAAAA\n\nx\n",
        "c2sp.org/tlog-proof@v1\nindex 0\n",
    ],
)
def test_malformed_tlog_proofs_are_refused(text: str) -> None:
    with pytest.raises(CheckpointError):
        parse_tlog_proof(text)


A, B = b"\x01" * 32, b"\x02" * 32


@pytest.mark.parametrize(
    ("held", "later", "step"),
    [
        ((5, A), (5, A), Succession.SAME),
        ((5, A), (5, B), Succession.FORK),
        ((5, A), (4, A), Succession.ROLLBACK),
        ((5, A), (0, B), Succession.ROLLBACK),
        ((5, A), (6, B), Succession.EXTENDS),
        ((0, A), (6, B), Succession.EXTENDS),
    ],
)
def test_what_a_later_checkpoint_is_to_one_held(
    held: tuple[int, bytes], later: tuple[int, bytes], step: Succession
) -> None:
    got = succession(held_size=held[0], held_root=held[1], size=later[0], root=later[1])
    assert got is step
