"""C2SP signed-note (c2sp.org/signed-note) with Ed25519, byte for byte as the Go reference does it.

Keys travel in the reference text forms:

- verifier key (vkey): ``<name>+<8 hex digits key id>+<base64(0x01 || 32-byte public key)>``
- signer key (skey):   ``PRIVATE+KEY+<name>+<key id>+<base64(0x01 || 32-byte seed)>``

with key id = SHA-256(name || 0x0A || 0x01 || public key)[:4], big-endian.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

ALG_ED25519 = 0x01
MAX_SIGNATURES = 100
_SIG_PREFIX = "\u2014 "


class NoteError(ValueError):
    """A key or note is malformed, or a note does not verify."""


def is_valid_key_name(name: str) -> bool:
    """Non-empty, no Unicode white space, no '+' (the spec's rule for key names)."""
    return bool(name) and "+" not in name and not any(_is_unicode_space(c) for c in name)


def _is_unicode_space(char: str) -> bool:
    return char.isspace() or unicodedata.category(char) == "Zs"


def key_id(name: str, public_key: bytes) -> int:
    digest = hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([ALG_ED25519]) + public_key)
    return int.from_bytes(digest.digest()[:4], "big")


@dataclass(frozen=True)
class Verifier:
    name: str
    key_id: int
    public_key: bytes

    @property
    def vkey(self) -> str:
        encoded = base64.b64encode(bytes([ALG_ED25519]) + self.public_key).decode()
        return f"{self.name}+{self.key_id:08x}+{encoded}"

    def renamed(self, name: str) -> Verifier:
        """The same public key under another name (and so another key id)."""
        _require_name(name)
        return Verifier(name, key_id(name, self.public_key), self.public_key)

    def verify(self, message: bytes, signature: bytes) -> bool:
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(signature, message)
        except InvalidSignature:
            return False
        return True


@dataclass(frozen=True)
class Signer:
    name: str
    seed: bytes

    @classmethod
    def generate(cls, name: str) -> Signer:
        _require_name(name)
        seed = Ed25519PrivateKey.generate().private_bytes_raw()
        return cls(name, seed)

    def renamed(self, name: str) -> Signer:
        """The same key under another name (and so another key id): one key, one name per log."""
        _require_name(name)
        return Signer(name, self.seed)

    @property
    def public_key(self) -> bytes:
        return (
            Ed25519PrivateKey.from_private_bytes(self.seed)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )

    @property
    def verifier(self) -> Verifier:
        public = self.public_key
        return Verifier(self.name, key_id(self.name, public), public)

    @property
    def skey(self) -> str:
        encoded = base64.b64encode(bytes([ALG_ED25519]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id:08x}+{encoded}"

    def sign(self, message: bytes) -> bytes:
        return Ed25519PrivateKey.from_private_bytes(self.seed).sign(message)


def parse_vkey(text: str) -> Verifier:
    name, key_hash, key = split_key(text.strip(), what="verifier key")
    if len(key) != 33 or key[0] != ALG_ED25519:
        raise NoteError("verifier key is not an Ed25519 key")
    if key_id(name, key[1:]) != key_hash:
        raise NoteError("verifier key id does not match its name and key")
    return Verifier(name, key_hash, key[1:])


def parse_skey(text: str) -> Signer:
    text = text.strip()
    if not text.startswith("PRIVATE+KEY+"):
        raise NoteError("signer key must start with PRIVATE+KEY+")
    name, key_hash, key = split_key(text[len("PRIVATE+KEY+") :], what="signer key")
    if len(key) != 33 or key[0] != ALG_ED25519:
        raise NoteError("signer key is not an Ed25519 key")
    signer = Signer(name, key[1:])
    if signer.verifier.key_id != key_hash:
        raise NoteError("signer key id does not match its name and key")
    return signer


def split_key(text: str, *, what: str) -> tuple[str, int, bytes]:
    """`<name>+<hex key id>+<base64 key material>` (a vkey, or a key file after PRIVATE+KEY+)
    as (name, key id, key material): the form every signed-note key takes, cosigners' too."""
    fields = text.split("+", 2)
    if len(fields) != 3:
        raise NoteError(f"malformed {what}")
    name, hash_hex, key_b64 = fields
    _require_name(name)
    if len(hash_hex) != 8 or any(c not in "0123456789abcdefABCDEF" for c in hash_hex):
        raise NoteError(f"malformed {what}: key id must be 8 hex digits")
    return name, int(hash_hex, 16), _b64decode(key_b64, what)


def _require_name(name: str) -> None:
    if not is_valid_key_name(name):
        raise NoteError(f"invalid key name {name!r}: must be non-empty, no spaces, no '+'")


def _b64decode(text: str, what: str) -> bytes:
    try:
        return base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, UnicodeEncodeError) as exc:
        raise NoteError(f"malformed {what}: bad base64") from exc


def _check_text(text: str) -> None:
    if not text.endswith("\n"):
        raise NoteError("note text must end in a newline")
    if any(ord(c) < 0x20 and c != "\n" for c in text):
        raise NoteError("note text holds a control character")


def sign_note(text: str, signers: Iterable[Signer]) -> str:
    """The signed note: text, a blank line, one signature line per signer."""
    _check_text(text)
    message = text.encode("utf-8")
    lines = []
    for signer in signers:
        signature = signer.verifier.key_id.to_bytes(4, "big") + signer.sign(message)
        lines.append(f"{_SIG_PREFIX}{signer.name} {base64.b64encode(signature).decode()}\n")
    if not lines:
        raise NoteError("a note needs at least one signature")
    return text + "\n" + "".join(lines)


@dataclass(frozen=True)
class OpenedNote:
    text: str
    verified_by: tuple[Verifier, ...]
    unknown_signatures: int


def open_note(note: bytes | str, known: Iterable[Verifier]) -> OpenedNote:
    """Verify a signed note against known keys.

    Signatures by unknown keys are ignored; a bad signature by a known key rejects the whole note;
    a note with no valid signature by a known key is rejected."""
    text, signature_block = _split_note(note)
    keys = {(v.name, v.key_id): v for v in known}
    lines = signature_block[:-1].split("\n")
    if len(lines) > MAX_SIGNATURES:
        raise NoteError("too many signatures")
    message = text.encode("utf-8")
    verified: list[Verifier] = []
    unknown = 0
    for line in lines:
        name, key_hash, signature = parse_signature_line(line)
        verifier = keys.get((name, key_hash))
        if verifier is None:
            unknown += 1
        elif not verifier.verify(message, signature):
            raise NoteError(f"invalid signature by known key {name}+{key_hash:08x}")
        elif verifier not in verified:
            verified.append(verifier)
    if not verified:
        raise NoteError("note has no valid signature by a known key")
    return OpenedNote(text, tuple(verified), unknown)


def _split_note(note: bytes | str) -> tuple[str, str]:
    """The note's text (ending in its newline) and its signature block (ending in a newline):
    the note is UTF-8 without control characters, and the block follows the last blank line."""
    raw = note.encode("utf-8") if isinstance(note, str) else note
    try:
        message = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NoteError("note is not valid UTF-8") from exc
    if any(ord(c) < 0x20 and c != "\n" for c in message):
        raise NoteError("note holds a control character")
    split = message.rfind("\n\n")
    if split < 0:
        raise NoteError("note has no signature block")
    text, signature_block = message[: split + 1], message[split + 2 :]
    if not signature_block or not signature_block.endswith("\n"):
        raise NoteError("malformed signature block")
    return text, signature_block


def parse_signature_line(line: str) -> tuple[str, int, bytes]:
    """`— <name> <base64(key id || signature)>` as (name, key id, signature)."""
    if not line.startswith(_SIG_PREFIX):
        raise NoteError("malformed signature line")
    name, sep, encoded = line[len(_SIG_PREFIX) :].partition(" ")
    if not sep or not is_valid_key_name(name) or " " in encoded:
        raise NoteError("malformed signature line")
    signature = _b64decode(encoded, "signature")
    if len(signature) < 5:
        raise NoteError("signature too short")
    return name, int.from_bytes(signature[:4], "big"), signature[4:]
