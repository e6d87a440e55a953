"""A tree cut at one height: its subtrees' hashes make the root, and an entry's proof within
its subtree is the start of its whole inclusion proof, for every size and height tried."""

from __future__ import annotations

import hashlib

import pytest

from ledger.core.merkle import (
    ProofError,
    inclusion_ranges,
    leaf_hash,
    root_of_leaf_hashes,
)
from ledger.core.subtrees import (
    inner_inclusion_ranges,
    root_of_subtrees,
    split_hashes,
    subtree_ranges,
    verify_in_subtree,
)

SIZES = [1, 2, 3, 5, 8, 13, 16, 17, 31, 64, 65, 100]
HEIGHTS = [0, 1, 2, 3, 4, 8]


def leaves(size: int) -> list[bytes]:
    return [leaf_hash(hashlib.sha256(str(n).encode()).digest()) for n in range(size)]


def mth(hashes: list[bytes], start: int, end: int) -> bytes:
    return root_of_leaf_hashes(hashes[start:end])


@pytest.mark.parametrize("height", HEIGHTS)
@pytest.mark.parametrize("size", SIZES)
def test_the_subtrees_make_the_root_and_prove_every_leaf(size: int, height: int) -> None:
    hashes = leaves(size)
    ranges = subtree_ranges(size, height)
    subtrees = [mth(hashes, start, end) for start, end in ranges]
    assert root_of_subtrees(subtrees) == root_of_leaf_hashes(hashes)
    joined = b"".join(subtrees)
    for index in range(size):
        inner = inner_inclusion_ranges(index, size, height)
        assert inner == inclusion_ranges(index, size)[: len(inner)]
        proof = [mth(hashes, start, end) for start, end in inner]
        verify_in_subtree(
            leaf_hash=hashes[index],
            index=index,
            size=size,
            height=height,
            proof=proof,
            subtree_hashes=joined,
        )
        with pytest.raises(ProofError):
            verify_in_subtree(
                leaf_hash=hashes[(index + 1) % size] if size > 1 else b"\x00" * 32,
                index=index,
                size=size,
                height=height,
                proof=proof,
                subtree_hashes=joined,
            )


def test_hashes_must_be_whole_and_the_height_bounded() -> None:
    assert split_hashes(b"a" * 64) == [b"a" * 32, b"a" * 32]
    with pytest.raises(ProofError):
        split_hashes(b"a" * 33)
    with pytest.raises(ProofError):
        subtree_ranges(10, 33)
    with pytest.raises(ProofError):
        subtree_ranges(10, -1)
