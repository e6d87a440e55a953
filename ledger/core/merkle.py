"""RFC 6962 / RFC 9162 Merkle tree: hashing, proof paths over stored nodes, and proof verification.

A *node* ``(level, index)`` is the root of the perfect subtree over leaves
``[index * 2**level, (index + 1) * 2**level)``; level 0 is a leaf hash. Perfect nodes never change
once their last leaf is appended, so storage keeps exactly those, and every hash a proof needs —
including the right edge of a tree whose size is not a power of two — is folded from O(log n) of
them. Proof generation therefore asks for a set of node ids up front (`*_nodes`) and then folds
the answers (`*_from_nodes`): one batched read, never a scan.

Verification follows RFC 9162 §2.1.3.2 (inclusion) and §2.1.4.2 (consistency) to the letter and
refuses anything that is not exactly 32 bytes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

HASH_SIZE = 32
EMPTY_ROOT = hashlib.sha256(b"").digest()

NodeId = tuple[int, int]
Range = tuple[int, int]


class ProofError(ValueError):
    """A proof, size or index is malformed or does not verify."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _largest_power_of_two_below(n: int) -> int:
    """k such that k < n <= 2k (RFC 6962 §2.1); n must be > 1."""
    return 1 << ((n - 1).bit_length() - 1)


def root_of_leaf_hashes(hashes: Sequence[bytes]) -> bytes:
    """MTH over already-hashed leaves, straight from the RFC's recursive definition."""
    if not hashes:
        return EMPTY_ROOT
    if len(hashes) == 1:
        return hashes[0]
    k = _largest_power_of_two_below(len(hashes))
    return node_hash(root_of_leaf_hashes(hashes[:k]), root_of_leaf_hashes(hashes[k:]))


# --- Which subtrees a proof consists of -------------------------------------------------------


def inclusion_ranges(index: int, size: int) -> list[Range]:
    """The leaf ranges whose MTH form PATH(index, D[0:size]), leaf to root (RFC 6962 §2.1.1)."""
    _check_index(index, size)
    ranges: list[Range] = []
    start, end = 0, size
    while end - start > 1:
        k = _largest_power_of_two_below(end - start)
        if index < start + k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
    ranges.reverse()
    return ranges


def consistency_ranges(old_size: int, new_size: int) -> list[Range]:
    """The leaf ranges whose MTH form PROOF(old_size, D[0:new_size]) (RFC 6962 §2.1.2)."""
    _check_sizes(old_size, new_size)
    ranges: list[Range] = []
    start, end, m, complete = 0, new_size, old_size, True
    while m != end - start:
        k = _largest_power_of_two_below(end - start)
        if m <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
            m -= k
            complete = False
    if not complete:
        ranges.append((start, end))
    ranges.reverse()
    return ranges


def perfect_subtrees(start: int, end: int) -> list[NodeId]:
    """The perfect nodes, left to right, whose fold is MTH(D[start:end]).

    `start` must be aligned as in every range RFC 6962 recursion produces (a multiple of the
    largest power of two not above end - start)."""
    nodes: list[NodeId] = []
    while start < end:
        level = (end - start).bit_length() - 1
        width = 1 << level
        if start % width:
            raise ProofError(f"range [{start}, {end}) is not a subtree of an RFC 6962 tree")
        nodes.append((level, start >> level))
        start += width
    return nodes


def nodes_for_ranges(ranges: Iterable[Range]) -> set[NodeId]:
    needed: set[NodeId] = set()
    for start, end in ranges:
        needed.update(perfect_subtrees(start, end))
    return needed


def range_hash(start: int, end: int, nodes: Mapping[NodeId, bytes]) -> bytes:
    """MTH(D[start:end]) folded right to left from stored perfect nodes."""
    parts = [nodes[node] for node in perfect_subtrees(start, end)]
    result = parts[-1]
    for part in reversed(parts[:-1]):
        result = node_hash(part, result)
    return result


def hashes_for_ranges(ranges: Iterable[Range], nodes: Mapping[NodeId, bytes]) -> list[bytes]:
    return [range_hash(start, end, nodes) for start, end in ranges]


# --- Building the tree one leaf at a time -----------------------------------------------------


@dataclass
class Frontier:
    """The perfect subtrees covering [0, size), largest first: all an appender needs to know.

    Its roots fold into the tree's root; appending a leaf yields the perfect nodes it completes,
    which is what storage keeps."""

    size: int = 0
    roots: list[bytes] = field(default_factory=list)

    def append(self, leaf_hash_: bytes) -> list[tuple[NodeId, bytes]]:
        """Add a leaf hash; return every newly completed internal node (level >= 1)."""
        _check_hash(leaf_hash_, "leaf hash")
        completed: list[tuple[NodeId, bytes]] = []
        index, level, current = self.size, 0, leaf_hash_
        # A trailing 1 bit of the old index means a left sibling of the same height to merge with.
        while index & 1:
            current = node_hash(self.roots.pop(), current)
            index >>= 1
            level += 1
            completed.append(((level, index), current))
        self.roots.append(current)
        self.size += 1
        return completed

    def root(self) -> bytes:
        if not self.roots:
            return EMPTY_ROOT
        result = self.roots[-1]
        for part in reversed(self.roots[:-1]):
            result = node_hash(part, result)
        return result

    def to_bytes(self) -> bytes:
        return b"".join(self.roots)

    @classmethod
    def from_bytes(cls, size: int, data: bytes) -> Frontier:
        count = bin(size).count("1")
        if size < 0 or len(data) != count * HASH_SIZE:
            raise ProofError(f"frontier of {len(data)} bytes does not fit a tree of size {size}")
        return cls(size, [data[i : i + HASH_SIZE] for i in range(0, len(data), HASH_SIZE)])


# --- Verification (RFC 9162) ------------------------------------------------------------------


def verify_inclusion(
    *, leaf_hash: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes
) -> None:
    """RFC 9162 §2.1.3.2: raise ProofError unless `leaf_hash` is leaf `index` under `root`."""
    _check_hash(leaf_hash, "leaf hash")
    _check_hash(root, "root")
    for item in proof:
        _check_hash(item, "proof hash")
    if size < 1 or index < 0 or index >= size:
        raise ProofError(f"index {index} is outside a tree of size {size}")
    fn, sn, r = index, size - 1, leaf_hash
    for p in proof:
        if sn == 0:
            raise ProofError("inclusion proof is longer than the tree is high")
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("inclusion proof is shorter than the tree is high")
    if r != root:
        raise ProofError("inclusion proof does not lead to the root")


def verify_consistency(
    *, old_size: int, new_size: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> None:
    """RFC 9162 §2.1.4.2; raises ProofError unless the old tree is a prefix of the new one.

    Consistency from size 0 proves nothing and is refused; equal sizes need an empty proof and
    equal roots, which are compared as given (nothing is hashed, as in the reference vectors)."""
    for item in proof:
        _check_hash(item, "proof hash")
    _check_sizes(old_size, new_size)
    if old_size == new_size:
        _check_same_tree(old_root, new_root, proof)
        return
    _check_hash(old_root, "old root")
    _check_hash(new_root, "new root")
    fr, sr = _consistency_roots(old_size, new_size, old_root, proof)
    # Step 7: fr must be the old root and sr the new one (sn == 0 was checked by the walk).
    if fr != old_root:
        raise ProofError("consistency proof does not lead to the old root")
    if sr != new_root:
        raise ProofError("consistency proof does not lead to the new root")


def _check_same_tree(old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> None:
    """Equal sizes are one tree: nothing to prove, so the proof is empty and the roots equal."""
    if proof:
        raise ProofError("equal sizes take an empty consistency proof")
    if old_root != new_root:
        raise ProofError("equal sizes but different roots")


def _consistency_roots(
    old_size: int, new_size: int, old_root: bytes, proof: Sequence[bytes]
) -> tuple[bytes, bytes]:
    """RFC 9162 §2.1.4.2 steps 1 to 6 and the check that sn reached 0: the old and new roots
    (fr, sr) that `proof` leads to, for 0 < old_size < new_size."""
    if not proof:  # step 1
        raise ProofError("consistency proof is empty")
    path = list(proof)
    if old_size & (old_size - 1) == 0:  # step 2: the old tree is a perfect subtree
        path.insert(0, old_root)
    fn, sn = old_size - 1, new_size - 1  # step 3
    while fn & 1:  # step 4
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]  # step 5
    for c in path[1:]:  # step 6
        if sn == 0:
            raise ProofError("consistency proof is too long")
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    if sn != 0:
        raise ProofError("consistency proof is too short")
    return fr, sr


def _check_hash(value: bytes, what: str) -> None:
    if not isinstance(value, bytes) or len(value) != HASH_SIZE:
        raise ProofError(f"{what} must be exactly {HASH_SIZE} bytes")


def _check_index(index: int, size: int) -> None:
    if size < 1 or not 0 <= index < size:
        raise ProofError(f"index {index} is outside a tree of size {size}")


def _check_sizes(old_size: int, new_size: int) -> None:
    if old_size < 1:
        raise ProofError("consistency from an empty tree proves nothing")
    if old_size > new_size:
        raise ProofError(f"old size {old_size} is larger than new size {new_size}")
