"""Ledger entries: their kinds, their exact leaf bytes, and the per-log hash chain.

The leaf of entry ``seq`` is the canonical JSON of the envelope

    {"body": <body>, "created_at": "<RFC 3339 UTC, microseconds>", "effect_id": "<id or ''>",
     "kind": "<KIND>", "prev_hash": "<hex>", "seq": <n>, "v": 1}

and its hash is the RFC 6962 leaf hash SHA-256(0x00 || leaf). That one hash is both the Merkle
leaf and the link of the chain: ``prev_hash`` of entry n is the hash of entry n - 1, and entry 0
links to `genesis_hash(origin)`, so a chain cannot be moved to another log. An auditor who holds the
leaf bytes needs nothing else to check an inclusion proof.
"""

from __future__ import annotations

import enum
import hashlib
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from ledger.core.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalJSONError,
    canonical_json,
    parse_canonical,
    parse_checked,
)
from ledger.core.merkle import leaf_hash

ENTRY_VERSION = 1
MAX_EFFECT_ID_LENGTH = 128
_EFFECT_ID = re.compile(rf"[A-Za-z0-9_-]{{0,{MAX_EFFECT_ID_LENGTH}}}")


class EntryKind(enum.StrEnum):
    LEASE_GRANTED = "LEASE_GRANTED"
    LEASE_REVOKED = "LEASE_REVOKED"
    PROPOSED = "PROPOSED"
    REFUSED = "REFUSED"
    DISPATCHED = "DISPATCHED"
    COMMITTED = "COMMITTED"
    FAILED = "FAILED"
    AMBIGUOUS = "AMBIGUOUS"
    OBSERVED = "OBSERVED"
    RESOLVED = "RESOLVED"
    NOTED = "NOTED"  # a person's note on an effect under review: no verdict, no evidence
    # A reconciliation finding: what a target's provider showed against the admitted effects
    # (gate_client.reconciliation). Evidence for a person, never a verdict.
    RECONCILED = "RECONCILED"
    HELD = "HELD"  # a new effect not dispatched while another of its case waits: no verdict


class EntryError(ValueError):
    """An entry is malformed, or its stored hashes do not match its contents."""


def genesis_hash(origin: str) -> bytes:
    """What entry 0 links to: binds the chain to its log's origin."""
    return hashlib.sha256(b"interlock-ledger-genesis/v1\n" + origin.encode("utf-8")).digest()


def format_timestamp(moment: datetime) -> str:
    if moment.tzinfo is None:
        raise EntryError("entry timestamps must be timezone-aware")
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class Entry:
    """One ledger entry as stored: the contents and the two hashes that seal it."""

    seq: int
    kind: str
    effect_id: str
    body: bytes
    created_at: datetime
    prev_hash: bytes
    entry_hash: bytes

    def leaf_bytes(self) -> bytes:
        return leaf_bytes(
            seq=self.seq,
            kind=self.kind,
            effect_id=self.effect_id,
            body=self.body,
            created_at=self.created_at,
            prev_hash=self.prev_hash,
        )

    def body_value(self) -> Any:
        """The body's value, a new one each call; its bytes are checked canonical once."""
        if self.__dict__.get("_canonical"):
            return parse_checked(self.body)
        value = parse_canonical(self.body)
        self._checked()
        return value

    def _checked(self) -> None:
        """Note that the body's bytes are canonical (a frozen entry's one note to itself)."""
        object.__setattr__(self, "_canonical", True)

    def read_once(self) -> Entry:
        """A copy of this entry whose body_value parses the body once and gives that one value
        at every call, for a reader that reads each body several times and changes none (a
        receipt's derivation). This entry still gives a new value each call."""
        copy = object.__new__(_ReadOnce)
        copy.__dict__.update(self.__dict__)  # the fields, and the note that the body is checked
        return copy


class _ReadOnce(Entry):
    """An entry whose body is parsed at its first read only (Entry.read_once)."""

    def body_value(self) -> Any:
        if "_value" not in self.__dict__:
            object.__setattr__(self, "_value", super().body_value())
        return self.__dict__["_value"]


def check_entry_fields(*, kind: str, effect_id: str, body: bytes) -> None:
    """Refuse what no entry may hold, before anything is written."""
    check_entry_labels(kind=kind, effect_id=effect_id)
    try:
        body_value = parse_canonical(body)
    except CanonicalJSONError as exc:
        raise EntryError(f"entry body is not canonical JSON: {exc}") from exc
    if not isinstance(body_value, dict):
        raise EntryError("entry body must be a JSON object")


def check_entry_labels(*, kind: str, effect_id: str) -> None:
    """check_entry_fields without the body: for a body that is the canonical JSON of a mapping,
    which is a canonical JSON object by construction."""
    if kind not in EntryKind.__members__:
        raise EntryError(f"unknown entry kind {kind!r}; one of: {', '.join(EntryKind)}")
    if not _EFFECT_ID.fullmatch(effect_id):
        raise EntryError(
            f"effect_id must be at most {MAX_EFFECT_ID_LENGTH} characters of [A-Za-z0-9_-]"
        )


def leaf_bytes(
    *,
    seq: int,
    kind: str,
    effect_id: str,
    body: bytes,
    created_at: datetime,
    prev_hash: bytes,
) -> bytes:
    """The exact bytes the Merkle leaf and the chain hash commit to."""
    rest = _envelope(
        seq=seq, kind=kind, effect_id=effect_id, created_at=created_at, prev_hash=prev_hash
    )
    # "body" sorts before every other key, so splicing the stored canonical body in front keeps
    # the envelope canonical without decoding the body again.
    return _BODY_KEY + body + b"," + rest[1:]


_BODY_KEY = b'{"body":'
_CREATED_AT_KEY = b',"created_at":"'


def _envelope(
    *, seq: int, kind: str, effect_id: str, created_at: datetime, prev_hash: bytes
) -> bytes:
    """The canonical envelope of an entry without its body."""
    stamp = format_timestamp(created_at)
    if (
        type(seq) is int
        and 0 <= seq <= MAX_SAFE_INTEGER
        and kind in EntryKind.__members__
        and _EFFECT_ID.fullmatch(effect_id)
    ):
        # Every string here is of characters JSON writes as themselves and the keys are in
        # order, so this spelling is the canonical JSON, at a fifth of the encoder's cost (it
        # is paid for every entry appended and every entry read back).
        return (
            f'{{"created_at":"{stamp}","effect_id":"{effect_id}","kind":"{kind}",'
            f'"prev_hash":"{prev_hash.hex()}","seq":{seq},"v":{ENTRY_VERSION}}}'
        ).encode()
    return canonical_json(
        {
            "created_at": stamp,
            "effect_id": effect_id,
            "kind": kind,
            "prev_hash": prev_hash.hex(),
            "seq": seq,
            "v": ENTRY_VERSION,
        }
    )


def seal_entry(
    *,
    seq: int,
    kind: str,
    effect_id: str,
    body: bytes,
    created_at: datetime,
    prev_hash: bytes,
) -> Entry:
    """Compute the entry's hash from its contents and its predecessor's hash."""
    leaf = leaf_bytes(
        seq=seq,
        kind=kind,
        effect_id=effect_id,
        body=body,
        created_at=created_at,
        prev_hash=prev_hash,
    )
    return Entry(
        seq=seq,
        kind=kind,
        effect_id=effect_id,
        body=body,
        created_at=created_at,
        prev_hash=prev_hash,
        entry_hash=leaf_hash(leaf),
    )


_ENVELOPE_KEYS = {"body", "created_at", "effect_id", "kind", "prev_hash", "seq", "v"}


def entry_from_leaf(leaf: bytes) -> Entry:
    """Read an entry back from its exact leaf bytes (a journal line, an export, --entry-out).

    Only bytes that re-encode to themselves are accepted, so the entry hash is the hash of what
    was read."""
    try:
        envelope = parse_canonical(leaf)
    except CanonicalJSONError as exc:
        raise EntryError(f"entry is not canonical JSON: {exc}") from exc
    return _entry_of(envelope, leaf)


# The envelope's fields other than the body, with the JSON type each must have.
_ENVELOPE_TYPES = {
    "created_at": str,
    "effect_id": str,
    "kind": str,
    "prev_hash": str,
    "seq": int,
    "v": int,
}


def entry_from_envelope(envelope: Any) -> Entry:
    """The entry whose leaf is the canonical JSON of `envelope`, a JSON value (an export line
    carries entries so): what entry_from_leaf reads from those bytes, without parsing them
    again. Its fields must have their JSON types (a seq of 3.0 is not one), since they are taken
    from the value, not from the bytes."""
    if not isinstance(envelope, dict):
        raise EntryError("an entry is a JSON object")
    for name, kind in _ENVELOPE_TYPES.items():
        value = envelope.get(name)
        if not isinstance(value, kind) or isinstance(value, bool):
            raise EntryError(f"entry field {name} is not a JSON {kind.__name__}")
    try:
        leaf = canonical_json(envelope)
    except CanonicalJSONError as exc:
        raise EntryError(f"entry has no canonical JSON: {exc}") from exc
    return _entry_of(envelope, leaf)


def _entry_of(envelope: Any, leaf: bytes) -> Entry:
    """The entry of `leaf`, the canonical JSON of `envelope`."""
    if not isinstance(envelope, dict) or set(envelope) != _ENVELOPE_KEYS:
        raise EntryError(f"entry must have exactly the keys {sorted(_ENVELOPE_KEYS)}")
    if envelope["v"] != ENTRY_VERSION:
        raise EntryError(f"unknown entry version {envelope['v']!r}")
    try:
        created_at = datetime.fromisoformat(envelope["created_at"].replace("Z", "+00:00"))
        prev_hash = bytes.fromhex(envelope["prev_hash"])
    except (AttributeError, TypeError, ValueError) as exc:
        raise EntryError(f"malformed entry field: {exc}") from exc
    # The leaf is canonical JSON, so each field's bytes in it are its value's encoding: the
    # fields the entry holds as other values than the leaf's (the time, the hash, the version)
    # re-encode to the same bytes exactly when they spell them as the leaf does.
    spelled = (format_timestamp(created_at), prev_hash.hex())
    if (envelope["created_at"], envelope["prev_hash"]) != spelled or type(envelope["v"]) is not int:
        raise EntryError("entry does not re-encode to the bytes it was read from")
    # "body" is the first key and "created_at" the next: the body's bytes run up to the last
    # `,"created_at":"`, since no string after it can hold a quote unescaped.
    end = leaf.rfind(_CREATED_AT_KEY)
    if not leaf.startswith(_BODY_KEY) or end < len(_BODY_KEY):
        raise EntryError("entry does not re-encode to the bytes it was read from")
    fields: dict[str, Any] = {
        "seq": envelope["seq"],
        "kind": envelope["kind"],
        "effect_id": envelope["effect_id"],
        "body": leaf[len(_BODY_KEY) : end],
        "created_at": created_at,
        "prev_hash": prev_hash,
    }
    # The bytes were read and re-encoded to themselves: hashing what was read is sealing.
    entry = Entry(**fields, entry_hash=leaf_hash(leaf))
    entry._checked()  # a value of the canonical leaf's, so canonical itself
    return entry
