"""C2SP tlog-checkpoint (the signed tree head) and tlog-proof (an offline inclusion proof).

A checkpoint is a signed note whose text is ``origin\\nsize\\nbase64(root)\\n``; the log signs it
under a key named after its origin. A tlog-proof is ``c2sp.org/tlog-proof@v1``, optionally an
``extra`` line, ``index N``, the inclusion hashes one per line, a blank line, then the signed
checkpoint verbatim.
"""

from __future__ import annotations

import base64
import binascii
import enum
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ledger.core.merkle import HASH_SIZE, leaf_hash, verify_inclusion
from ledger.core.note import NoteError, Signer, Verifier, is_valid_key_name, open_note, sign_note

TLOG_PROOF_HEADER = "c2sp.org/tlog-proof@v1"


class CheckpointError(ValueError):
    """A checkpoint or tlog-proof is malformed, unsigned, or does not verify."""


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes
    extensions: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [
            self.origin,
            str(self.size),
            base64.b64encode(self.root).decode(),
            *self.extensions,
        ]
        return "".join(line + "\n" for line in lines)

    def sign(self, signer: Signer) -> str:
        """The signed note, signed under the key named after the origin (the spec's SHOULD)."""
        return sign_note(self.text(), [signer.renamed(self.origin)])


class Succession(enum.StrEnum):
    """What a later checkpoint of one log is to a checkpoint held before it: the rule every
    client that keeps checkpoints applies (the gate's journal, the export verifier,
    verify_ledger, a witness). Only EXTENDS still needs a consistency proof."""

    SAME = "same"  # the same tree
    EXTENDS = "extends"  # a larger tree: consistent only with a consistency proof
    ROLLBACK = "rollback"  # smaller than a tree already signed
    FORK = "fork"  # the same size with another root: a split view


def succession(*, held_size: int, held_root: bytes, size: int, root: bytes) -> Succession:
    if size < held_size:
        return Succession.ROLLBACK
    if size == held_size:
        return Succession.SAME if root == held_root else Succession.FORK
    return Succession.EXTENDS


def parse_checkpoint_text(text: str) -> Checkpoint:
    if not text.endswith("\n"):
        raise CheckpointError("checkpoint text must end in a newline")
    lines = text[:-1].split("\n")
    if len(lines) < 3:
        raise CheckpointError("checkpoint needs origin, size and root lines")
    origin, size_text, root_text, *extensions = lines
    if not origin:
        raise CheckpointError("checkpoint origin is empty")
    if (
        not size_text.isascii()
        or not size_text.isdigit()
        or (size_text != "0" and size_text.startswith("0"))
    ):
        raise CheckpointError(
            f"checkpoint size {size_text!r} is not a decimal without leading zeros"
        )
    root = _decode_hash(root_text, "checkpoint root")
    if any(not line for line in extensions):
        raise CheckpointError("checkpoint extension lines must be non-empty")
    return Checkpoint(origin, int(size_text), root, tuple(extensions))


def open_checkpoint(
    signed_note: bytes | str, known: Iterable[Verifier], *, origin: str | None = None
) -> Checkpoint:
    """Verify the note's signature and parse it; with `origin`, also require that origin."""
    try:
        opened = open_note(signed_note, known)
    except NoteError as exc:
        raise CheckpointError(f"checkpoint signature: {exc}") from exc
    checkpoint = parse_checkpoint_text(opened.text)
    if origin is not None and checkpoint.origin != origin:
        raise CheckpointError(f"checkpoint is for {checkpoint.origin!r}, not {origin!r}")
    return checkpoint


def log_verifier(origin: str, key: Signer | Verifier) -> Verifier:
    """The verifier an auditor trusts for one log: a notary key under the log's origin."""
    if not is_valid_key_name(origin):
        raise CheckpointError(f"origin {origin!r} cannot name a key (no spaces, no '+')")
    verifier = key.verifier if isinstance(key, Signer) else key
    return verifier.renamed(origin)


@dataclass(frozen=True)
class TlogProof:
    index: int
    hashes: tuple[bytes, ...]
    signed_checkpoint: str
    extra: bytes | None = None

    def text(self) -> str:
        lines = [TLOG_PROOF_HEADER]
        if self.extra is not None:
            lines.append("extra " + base64.b64encode(self.extra).decode())
        lines.append(f"index {self.index}")
        lines.extend(base64.b64encode(h).decode() for h in self.hashes)
        return "\n".join(lines) + "\n\n" + self.signed_checkpoint

    def verify(
        self, leaf: bytes, known: Iterable[Verifier], *, origin: str | None = None
    ) -> Checkpoint:
        """Check the checkpoint's signature and that `leaf` (the entry's bytes) sits at `index`."""
        checkpoint = open_checkpoint(self.signed_checkpoint, known, origin=origin)
        try:
            verify_inclusion(
                leaf_hash=leaf_hash(leaf),
                index=self.index,
                size=checkpoint.size,
                proof=self.hashes,
                root=checkpoint.root,
            )
        except ValueError as exc:
            raise CheckpointError(f"inclusion proof: {exc}") from exc
        return checkpoint


def add_checkpoint_request(
    *, old_size: int, proof: Sequence[bytes], signed_checkpoint: str
) -> bytes:
    """The body of a C2SP tlog-witness add-checkpoint request: `old <size>`, the consistency
    proof from that size one base64 hash per line, an empty line, the signed checkpoint."""
    lines = [f"old {old_size}", *(base64.b64encode(h).decode() for h in proof)]
    return ("\n".join(lines) + "\n\n" + signed_checkpoint).encode()


def make_tlog_proof(*, index: int, hashes: Sequence[bytes], signed_checkpoint: str) -> TlogProof:
    return TlogProof(index, tuple(hashes), signed_checkpoint)


def parse_tlog_proof(text: str) -> TlogProof:
    head, sep, signed_checkpoint = text.partition("\n\n")
    if not sep or not signed_checkpoint:
        raise CheckpointError("tlog-proof has no checkpoint after a blank line")
    lines = head.split("\n")
    if lines[0] != TLOG_PROOF_HEADER:
        raise CheckpointError(f"tlog-proof must start with {TLOG_PROOF_HEADER}")
    position = 1
    extra = None
    if position < len(lines) and lines[position].startswith("extra "):
        extra = _decode_base64(lines[position][len("extra ") :], "extra data")
        position += 1
    if position >= len(lines) or not lines[position].startswith("index "):
        raise CheckpointError("tlog-proof has no index line")
    index_text = lines[position][len("index ") :]
    if (
        not index_text.isascii()
        or not index_text.isdigit()
        or (index_text != "0" and index_text.startswith("0"))
    ):
        raise CheckpointError(
            f"tlog-proof index {index_text!r} is not a decimal without leading zeros"
        )
    hashes = tuple(_decode_hash(line, "inclusion hash") for line in lines[position + 1 :])
    return TlogProof(int(index_text), hashes, signed_checkpoint, extra)


def _decode_base64(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise CheckpointError(f"{what} is not base64") from exc


def _decode_hash(text: str, what: str) -> bytes:
    value = _decode_base64(text, what)
    if len(value) != HASH_SIZE:
        raise CheckpointError(f"{what} must be {HASH_SIZE} bytes, not {len(value)}")
    return value
