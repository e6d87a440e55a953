"""C2SP tlog-cosignature `cosignature/v1` (Ed25519): keys, key ids, the signed message, and the
one rule for a witnessed checkpoint (`require_cosignatures`, and how fresh a cosignature must be:
`WitnessPolicy`) that the witness, the notary, the gate's journal and the offline verifier share.

- key id: SHA-256(name || 0x0A || 0x04 || 32-byte public key)[:4]
- signature line: ``— <name> base64(key id || u64 big-endian timestamp || Ed25519 signature)``
- signed message: ``cosignature/v1\\ntime <timestamp>\\n`` followed by the checkpoint's note body
- vkey: ``<name>+<key id hex>+base64(0x04 || public key)``; the key file holds the same form with
  the seed: ``PRIVATE+KEY+<name>+<key id hex>+base64(0x04 || seed)``.
"""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from ledger.core.note import NoteError, is_valid_key_name, parse_signature_line, split_key

ALG_COSIGNATURE_V1 = 0x04
HEADER = "cosignature/v1\n"
MAX_TIMESTAMP = 2**63 - 1
# How old a cosignature a verifier accepts by default: a checkpoint the witnesses cosigned
# longer ago may be a log rolled back to an old cosigned head. A day, since the notary has a
# log's latest checkpoint cosigned again every LEDGER_COSIGNATURE_REFRESH_SECONDS (an hour)
# even when it does not grow; an auditor checking an older export names the instant to verify
# it as of.
DEFAULT_MAX_COSIGNATURE_AGE = 24 * 3600
# A cosignature this far past the instant verified as of is still the witness's clock ahead.
CLOCK_SKEW = 300
_SIG_PREFIX = "\u2014 "


class CosignatureError(ValueError):
    """A cosigner key or cosignature is malformed or does not verify."""


def cosigner_key_id(name: str, public_key: bytes) -> int:
    digest = hashlib.sha256(name.encode() + b"\n" + bytes([ALG_COSIGNATURE_V1]) + public_key)
    return int.from_bytes(digest.digest()[:4], "big")


def signed_message(body: str, timestamp: int) -> bytes:
    """What a cosignature/v1 signs: the header line, the time line, the note body."""
    if not 0 < timestamp <= MAX_TIMESTAMP:
        raise CosignatureError(f"timestamp {timestamp} is not in 1..2^63-1")
    if not body.endswith("\n"):
        raise CosignatureError("the cosigned note body must end in a newline")
    return f"{HEADER}time {timestamp}\n{body}".encode()


@dataclass(frozen=True)
class CosignerVerifier:
    name: str
    public_key: bytes

    @property
    def key_id(self) -> int:
        return cosigner_key_id(self.name, self.public_key)

    @property
    def vkey(self) -> str:
        encoded = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.public_key).decode()
        return f"{self.name}+{self.key_id:08x}+{encoded}"

    def timestamp_of(self, line: str, body: str) -> int | None:
        """The verified timestamp of a signature line by this key over `body`; None if the line
        is by another key; CosignatureError if it is by this key and does not verify."""
        try:
            name, key_hash, signature = parse_signature_line(line.removesuffix("\n"))
        except NoteError as exc:
            raise CosignatureError(str(exc)) from exc
        if (name, key_hash) != (self.name, self.key_id):
            return None
        if len(signature) != 8 + 64:
            raise CosignatureError(f"cosignature by {self.name} has the wrong length")
        timestamp = int.from_bytes(signature[:8], "big")
        try:
            Ed25519PublicKey.from_public_bytes(self.public_key).verify(
                signature[8:], signed_message(body, timestamp)
            )
        except InvalidSignature as exc:
            raise CosignatureError(f"invalid cosignature by {self.name}") from exc
        return timestamp


@dataclass(frozen=True)
class CosignerKey:
    name: str
    seed: bytes

    @classmethod
    def generate(cls, name: str) -> CosignerKey:
        _require_name(name)
        return cls(name, Ed25519PrivateKey.generate().private_bytes_raw())

    @property
    def verifier(self) -> CosignerVerifier:
        public = (
            Ed25519PrivateKey.from_private_bytes(self.seed)
            .public_key()
            .public_bytes(Encoding.Raw, PublicFormat.Raw)
        )
        return CosignerVerifier(self.name, public)

    @property
    def skey(self) -> str:
        encoded = base64.b64encode(bytes([ALG_COSIGNATURE_V1]) + self.seed).decode()
        return f"PRIVATE+KEY+{self.name}+{self.verifier.key_id:08x}+{encoded}"

    def cosign(self, body: str, *, timestamp: int) -> str:
        """The signature line (ending in a newline) cosigning the note body at `timestamp`."""
        signature = Ed25519PrivateKey.from_private_bytes(self.seed).sign(
            signed_message(body, timestamp)
        )
        blob = self.verifier.key_id.to_bytes(4, "big") + timestamp.to_bytes(8, "big") + signature
        return f"{_SIG_PREFIX}{self.name} {base64.b64encode(blob).decode()}\n"


def cosignature_lines(note: str) -> list[str]:
    """The signature lines of a signed note (each ending in a newline), in order."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise CosignatureError("not a signed note: no signature block")
    return note[split + 2 :].splitlines(keepends=True)


def cosigners(note: str, witnesses: Iterable[CosignerVerifier]) -> dict[str, int]:
    """The trusted witnesses whose cosignature the note carries: name -> verified timestamp.
    Lines by other keys are ignored (the log's own signature, unknown witnesses); a line by a
    trusted witness that does not verify rejects the note, as signed-note verification does."""
    body = note[: note.rfind("\n\n") + 1]
    found: dict[str, int] = {}
    for line in cosignature_lines(note):
        for witness in witnesses:
            timestamp = witness.timestamp_of(line, body)
            if timestamp is not None:
                found[witness.name] = timestamp
    return found


def require_cosignatures(
    note: str, witnesses: Iterable[CosignerVerifier], *, quorum: int
) -> dict[str, int]:
    """The note's cosigners among `witnesses`, if at least `quorum` of them cosigned it;
    otherwise CosignatureError naming who did and who did not."""
    trusted = list(witnesses)
    if quorum > len(trusted):
        raise CosignatureError(f"{quorum} cosignatures required of only {len(trusted)} witnesses")
    found = cosigners(note, trusted)
    if len(found) < quorum:
        missing = sorted(w.name for w in trusted if w.name not in found)
        raise CosignatureError(
            f"the checkpoint is cosigned by {len(found)} of the trusted witnesses "
            f"({', '.join(sorted(found)) or 'none'}), {quorum} required; "
            f"not cosigned by {', '.join(missing)}"
        )
    return found


def fresh_cosigners(
    found: dict[str, int], *, as_of: int, max_age: int
) -> tuple[dict[str, int], dict[str, int]]:
    """Split verified cosigners (name -> timestamp) into those cosigned within `max_age`
    seconds before `as_of` (or up to CLOCK_SKEW after it) and the others."""
    fresh = {n: t for n, t in found.items() if as_of - max_age <= t <= as_of + CLOCK_SKEW}
    return fresh, {n: t for n, t in found.items() if n not in fresh}


@dataclass(frozen=True)
class WitnessPolicy:
    """Whom a client trusts to witness a log, and how many of them must have cosigned a
    checkpoint before the client accepts it (no witnesses: none required); with `max_age`,
    only cosignatures made at most that many seconds before `as_of` (a Unix time; None: the
    clock when checked) count, so an old cosigned checkpoint served again is refused."""

    witnesses: tuple[CosignerVerifier, ...] = ()
    quorum: int = 0
    max_age: int | None = None
    as_of: int | None = None

    @classmethod
    def of(cls, vkeys: Iterable[str], quorum: int | None = None) -> WitnessPolicy:
        """Witnesses from their vkeys; `quorum` defaults to all of them."""
        witnesses = tuple(parse_cosigner_vkey(vkey) for vkey in vkeys)
        required = len(witnesses) if quorum is None else quorum
        if not 0 <= required <= len(witnesses):
            raise CosignatureError(
                f"a quorum of {required} is not between 0 and the {len(witnesses)} witnesses"
            )
        return cls(witnesses, required)

    def check(self, note: str) -> dict[str, int]:
        """The note's fresh cosigners (name -> timestamp); CosignatureError short of the
        quorum, naming the stale ones."""
        found = require_cosignatures(note, self.witnesses, quorum=self.quorum)
        if self.max_age is None:
            return found
        as_of = int(time.time()) if self.as_of is None else self.as_of
        fresh, stale = fresh_cosigners(found, as_of=as_of, max_age=self.max_age)
        if len(fresh) < self.quorum:
            ages = ", ".join(
                f"{name} at {timestamp} ({as_of - timestamp} s before {as_of})"
                for name, timestamp in sorted(stale.items())
            )
            raise CosignatureError(
                f"the checkpoint is cosigned by {len(fresh)} of the trusted witnesses within "
                f"{self.max_age} s of {as_of}, {self.quorum} required; stale or future "
                f"cosignatures: {ages}. An old cosigned checkpoint served again is what a "
                "rollback looks like; to check an old export, name the instant to verify it as of"
            )
        return fresh


def parse_cosigner_vkey(text: str) -> CosignerVerifier:
    name, key_hash, key = _split_key(text.strip(), "cosigner vkey")
    verifier = CosignerVerifier(name, key)
    if verifier.key_id != key_hash:
        raise CosignatureError("cosigner vkey id does not match its name and key")
    return verifier


def parse_cosigner_skey(text: str) -> CosignerKey:
    text = text.strip()
    if not text.startswith("PRIVATE+KEY+"):
        raise CosignatureError("cosigner key must start with PRIVATE+KEY+")
    name, key_hash, seed = _split_key(text[len("PRIVATE+KEY+") :], "cosigner key")
    key = CosignerKey(name, seed)
    if key.verifier.key_id != key_hash:
        raise CosignatureError("cosigner key id does not match its name and key")
    return key


def _split_key(text: str, what: str) -> tuple[str, int, bytes]:
    """A signed-note key (ledger.core.note.split_key) whose material is a cosignature/v1 key."""
    try:
        name, key_hash, key = split_key(text, what=what)
    except NoteError as exc:
        raise CosignatureError(str(exc)) from exc
    if len(key) != 33 or key[0] != ALG_COSIGNATURE_V1:
        raise CosignatureError(f"{what} is not a cosignature/v1 (0x04) Ed25519 key")
    return name, key_hash, key[1:]


def _require_name(name: str) -> None:
    if not is_valid_key_name(name):
        raise CosignatureError(f"invalid key name {name!r}: must be non-empty, no spaces, no '+'")
