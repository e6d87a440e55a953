"""A tree cut at one height: the aligned subtrees of 2**height leaves whose hashes fold into the
root, and an entry proved within its own subtree.

The subtrees of a tree of size N at height h cover [j * 2**h, min((j + 1) * 2**h, N)), the last
one partial when N is not a multiple of 2**h. Each is a node of the RFC 6962 tree (its recursion
splits at powers of two no smaller than 2**h until a range is one of them), so the tree's root is
the MTH of their hashes taken as leaves, and an entry's inclusion proof is its proof within its
subtree followed by its subtree's proof among the others. An export states the subtree hashes
once, checked against the signed root, and each entry carries the first part only.
"""

from __future__ import annotations

from collections.abc import Sequence

from ledger.core.merkle import (
    HASH_SIZE,
    Frontier,
    ProofError,
    Range,
    inclusion_ranges,
    verify_inclusion,
)

MAX_HEIGHT = 32


def subtree_ranges(size: int, height: int) -> list[Range]:
    """The leaf ranges of the tree's subtrees at `height`, left to right."""
    _check_height(height)
    width = 1 << height
    return [(start, min(start + width, size)) for start in range(0, size, width)]


def subtree_of(index: int, size: int, height: int) -> Range:
    """The leaf range of the subtree at `height` that holds leaf `index`."""
    _check_height(height)
    start = index >> height << height
    return start, min(start + (1 << height), size)


def inner_inclusion_ranges(index: int, size: int, height: int) -> list[Range]:
    """The leaf ranges whose MTH prove leaf `index` in its subtree, leaf upwards: the start of
    the tree's inclusion proof (RFC 6962 §2.1.1), up to the subtree's own hash."""
    start, end = subtree_of(index, size, height)
    return [(start + a, start + b) for a, b in inclusion_ranges(index - start, end - start)]


def root_of_subtrees(hashes: Sequence[bytes]) -> bytes:
    """The tree's root from its subtrees' hashes, left to right."""
    frontier = Frontier()
    for subtree in hashes:
        frontier.append(subtree)
    return frontier.root()


def split_hashes(joined: bytes) -> list[bytes]:
    """Hashes written one after another, each HASH_SIZE bytes."""
    if len(joined) % HASH_SIZE:
        raise ProofError(f"{len(joined)} bytes are not a whole number of {HASH_SIZE}-byte hashes")
    return [joined[i : i + HASH_SIZE] for i in range(0, len(joined), HASH_SIZE)]


def verify_in_subtree(
    *,
    leaf_hash: bytes,
    index: int,
    size: int,
    height: int,
    proof: Sequence[bytes],
    subtree_hashes: bytes,
) -> None:
    """Raise ProofError unless `leaf_hash` is leaf `index` of the tree of `size` whose subtrees
    at `height` have these hashes (joined, left to right, already checked against its root)."""
    if not 0 <= index < size:
        raise ProofError(f"index {index} is outside a tree of size {size}")
    start, end = subtree_of(index, size, height)
    at = (start >> height) * HASH_SIZE
    verify_inclusion(
        leaf_hash=leaf_hash,
        index=index - start,
        size=end - start,
        proof=proof,
        root=subtree_hashes[at : at + HASH_SIZE],
    )


def _check_height(height: int) -> None:
    if not 0 <= height <= MAX_HEIGHT:
        raise ProofError(f"subtree height {height} is not within 0..{MAX_HEIGHT}")
