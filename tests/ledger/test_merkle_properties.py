"""Every tree size up to 300: proofs built from stored perfect nodes verify by RFC 9162, and any
single flipped bit in a proof hash or a root makes them fail."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.core import merkle
from ledger.core.merkle import Frontier, NodeId, ProofError

MAX_SIZE = 300
LEAVES = [merkle.leaf_hash(f"entry {i}".encode()) for i in range(MAX_SIZE)]


def _build() -> tuple[dict[NodeId, bytes], list[bytes]]:
    """All perfect nodes of the 300-leaf tree, and the root at every size (via the frontier)."""
    nodes: dict[NodeId, bytes] = {}
    roots = [merkle.EMPTY_ROOT]
    frontier = Frontier()
    for index, leaf in enumerate(LEAVES):
        nodes[(0, index)] = leaf
        nodes.update(frontier.append(leaf))
        roots.append(frontier.root())
    return nodes, roots


NODES, ROOTS = _build()


def _inclusion(index: int, size: int) -> list[bytes]:
    return merkle.hashes_for_ranges(merkle.inclusion_ranges(index, size), NODES)


def _consistency(old: int, new: int) -> list[bytes]:
    return merkle.hashes_for_ranges(merkle.consistency_ranges(old, new), NODES)


def test_frontier_roots_match_the_rfc_definition_at_every_size() -> None:
    for size in range(MAX_SIZE + 1):
        assert ROOTS[size] == merkle.root_of_leaf_hashes(LEAVES[:size])
    assert ROOTS[0] == hashlib.sha256(b"").digest()


def test_frontier_survives_serialization() -> None:
    frontier = Frontier()
    for leaf in LEAVES[:77]:
        frontier.append(leaf)
    restored = Frontier.from_bytes(77, frontier.to_bytes())
    assert restored.root() == ROOTS[77]
    with pytest.raises(ProofError):
        Frontier.from_bytes(76, frontier.to_bytes())  # 76 has three set bits, 77 four


def test_every_inclusion_proof_verifies_at_every_size_up_to_300() -> None:
    checked = 0
    for size in range(1, MAX_SIZE + 1):
        for index in range(size):
            merkle.verify_inclusion(
                leaf_hash=LEAVES[index],
                index=index,
                size=size,
                proof=_inclusion(index, size),
                root=ROOTS[size],
            )
            checked += 1
    assert checked == MAX_SIZE * (MAX_SIZE + 1) // 2


def test_every_consistency_proof_verifies_at_every_size_up_to_300() -> None:
    checked = 0
    for new in range(1, MAX_SIZE + 1):
        for old in range(1, new + 1):
            merkle.verify_consistency(
                old_size=old,
                new_size=new,
                old_root=ROOTS[old],
                new_root=ROOTS[new],
                proof=_consistency(old, new),
            )
            checked += 1
    assert checked == MAX_SIZE * (MAX_SIZE + 1) // 2


def _flip(value: bytes, bit: int) -> bytes:
    flipped = bytearray(value)
    flipped[bit // 8] ^= 1 << (bit % 8)
    return bytes(flipped)


@st.composite
def inclusion_cases(draw: st.DrawFn) -> tuple[int, int, list[bytes], int, int]:
    size = draw(st.integers(1, MAX_SIZE))
    index = draw(st.integers(0, size - 1))
    proof = _inclusion(index, size)
    target = draw(st.integers(-2, len(proof) - 1))  # -2: the leaf, -1: the root, else a proof hash
    return size, index, proof, target, draw(st.integers(0, 255))


@settings(max_examples=400)
@given(inclusion_cases())
def test_a_flipped_bit_breaks_an_inclusion_proof(
    case: tuple[int, int, list[bytes], int, int],
) -> None:
    size, index, proof, target, bit = case
    leaf, root = LEAVES[index], ROOTS[size]
    if target == -2:
        leaf = _flip(leaf, bit)
    elif target == -1:
        root = _flip(root, bit)
    else:
        proof = [*proof[:target], _flip(proof[target], bit), *proof[target + 1 :]]
    with pytest.raises(ProofError):
        merkle.verify_inclusion(leaf_hash=leaf, index=index, size=size, proof=proof, root=root)


@st.composite
def consistency_cases(draw: st.DrawFn) -> tuple[int, int, list[bytes], int, int]:
    new = draw(st.integers(2, MAX_SIZE))
    old = draw(st.integers(1, new - 1))
    proof = _consistency(old, new)
    target = draw(st.integers(-2, len(proof) - 1))  # -2: old root, -1: new root, else a proof hash
    return old, new, proof, target, draw(st.integers(0, 255))


@settings(max_examples=400)
@given(consistency_cases())
def test_a_flipped_bit_breaks_a_consistency_proof(
    case: tuple[int, int, list[bytes], int, int],
) -> None:
    old, new, proof, target, bit = case
    old_root, new_root = ROOTS[old], ROOTS[new]
    if target == -2:
        old_root = _flip(old_root, bit)
    elif target == -1:
        new_root = _flip(new_root, bit)
    else:
        proof = [*proof[:target], _flip(proof[target], bit), *proof[target + 1 :]]
    with pytest.raises(ProofError):
        merkle.verify_consistency(
            old_size=old, new_size=new, old_root=old_root, new_root=new_root, proof=proof
        )


@given(st.integers(2, MAX_SIZE).flatmap(lambda n: st.tuples(st.just(n), st.integers(0, n - 1))))
def test_a_proof_for_one_index_does_not_prove_another(size_index: tuple[int, int]) -> None:
    size, index = size_index
    proof = _inclusion(index, size)
    other = (index + 1) % size
    with pytest.raises(ProofError):
        merkle.verify_inclusion(
            leaf_hash=LEAVES[index], index=other, size=size, proof=proof, root=ROOTS[size]
        )


@pytest.mark.parametrize(
    ("index", "size"), [(-1, 5), (5, 5), (0, 0), (7, 3)], ids=["negative", "at", "empty", "past"]
)
def test_proof_generation_refuses_bad_indexes(index: int, size: int) -> None:
    with pytest.raises(ProofError):
        merkle.inclusion_ranges(index, size)


@pytest.mark.parametrize(("old", "new"), [(0, 5), (6, 5), (-1, 2)])
def test_consistency_generation_refuses_bad_sizes(old: int, new: int) -> None:
    with pytest.raises(ProofError):
        merkle.consistency_ranges(old, new)
