"""An entry read from its envelope as a JSON value is the entry read from its leaf bytes."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from functools import partial
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger.core.canonical import (
    MAX_SAFE_INTEGER,
    CanonicalJSONError,
    canonical_json,
    parse_canonical,
)
from ledger.core.entries import (
    Entry,
    EntryError,
    EntryKind,
    entry_from_envelope,
    entry_from_leaf,
    format_timestamp,
    genesis_hash,
    leaf_bytes,
    seal_entry,
)

BODIES: list[Any] = [
    {},
    {"amount_cents": 2000, "to": "customer@example.com", "nested": {"b": [1, 2, {"c": None}]}},
    {"text": 'é✓ \u2028 "quoted" \\ back', "ratio": 0.5, "big": 9007199254740991},
    {"flags": [True, False], "empty": "", "z": -3},
]


@pytest.mark.parametrize("body", BODIES)
def test_an_envelope_value_gives_the_entry_its_leaf_gives(body: Any) -> None:
    entry = seal_entry(
        seq=7,
        kind="PROPOSED",
        effect_id="eff_1",
        body=canonical_json(body),
        created_at=datetime(2026, 12, 5, 3, 0, 6, 869368, tzinfo=UTC),
        prev_hash=genesis_hash("example.com/log"),
    )
    leaf = entry.leaf_bytes()
    from_value = entry_from_envelope(json.loads(leaf))
    assert from_value == entry_from_leaf(leaf) == entry
    assert from_value.body_value() == body


def sealed_envelope() -> dict[str, Any]:
    entry = seal_entry(
        seq=3,
        kind="DISPATCHED",
        effect_id="eff_1",
        body=b'{"attempt":1}',
        created_at=datetime(2026, 12, 5, tzinfo=UTC),
        prev_hash=bytes(32),
    )
    envelope: dict[str, Any] = json.loads(entry.leaf_bytes())
    return envelope


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"seq": 3.0}, "field seq is not a JSON int"),
        ({"seq": True}, "field seq is not a JSON int"),
        ({"v": "1"}, "field v is not a JSON int"),
        ({"kind": None}, "field kind is not a JSON str"),
        ({"created_at": "2026-12-05T00:00:00.000000+00:00"}, "does not re-encode"),
        ({"extra": 1}, "exactly the keys"),
        ({"v": 2}, "unknown entry version"),
        ({"body": float("nan")}, "no canonical JSON"),
    ],
)
def test_an_envelope_that_is_not_an_entry_as_logged_is_refused(
    change: dict[str, Any], why: str
) -> None:
    with pytest.raises(EntryError, match=why):
        entry_from_envelope({**sealed_envelope(), **change})


def test_an_envelope_without_a_field_is_refused() -> None:
    envelope = sealed_envelope()
    del envelope["effect_id"]
    with pytest.raises(EntryError, match="effect_id"):
        entry_from_envelope(envelope)
    with pytest.raises(EntryError, match="JSON object"):
        entry_from_envelope([envelope])


@given(
    seq=st.integers(min_value=0, max_value=MAX_SAFE_INTEGER) | st.integers(),
    kind=st.sampled_from(list(EntryKind)) | st.text(),
    effect_id=st.from_regex(r"[A-Za-z0-9_-]{0,128}", fullmatch=True) | st.text(),
    created_at=st.datetimes(timezones=st.just(UTC)),
    prev_hash=st.binary(min_size=32, max_size=32),
)
def test_leaf_bytes_are_the_canonical_json_of_the_envelope(
    seq: int, kind: str, effect_id: str, created_at: datetime, prev_hash: bytes
) -> None:
    """The envelope is spelled out directly when its fields allow; any field that does not (a
    quote in an id, a seq past a double) must give the encoder's bytes all the same."""
    body = {"amount": 1, "note": 'a "quoted" \u2028 text'}
    envelope = {
        "body": body,
        "created_at": format_timestamp(created_at),
        "effect_id": effect_id,
        "kind": kind,
        "prev_hash": prev_hash.hex(),
        "seq": seq,
        "v": 1,
    }
    leaf = partial(
        leaf_bytes,
        seq=seq,
        kind=kind,
        effect_id=effect_id,
        body=canonical_json(body),
        created_at=created_at,
        prev_hash=prev_hash,
    )
    try:
        expected = canonical_json(envelope)
    except CanonicalJSONError:  # a seq past a double: refused either way
        with pytest.raises(CanonicalJSONError):
            leaf()
        return
    assert leaf() == expected


def read_as_before(envelope: dict[str, Any], leaf: bytes) -> Entry:
    """The entry of `leaf` (the canonical JSON of `envelope`) by re-encoding its fields other
    than the body and finding them at the leaf's end, as entries were read before: the
    reference for reading them by comparing their spelling."""
    keys = sorted(sealed_envelope())
    if sorted(envelope) != keys:
        raise EntryError(f"entry must have exactly the keys {keys}")
    if envelope["v"] != 1:
        raise EntryError(f"unknown entry version {envelope['v']!r}")
    try:
        created_at = datetime.fromisoformat(envelope["created_at"].replace("Z", "+00:00"))
        prev_hash = bytes.fromhex(envelope["prev_hash"])
    except (AttributeError, TypeError, ValueError) as exc:
        raise EntryError(f"malformed entry field: {exc}") from exc
    fields = {name: envelope[name] for name in ("seq", "kind", "effect_id")}
    rest = canonical_json(
        {
            **fields,
            "created_at": format_timestamp(created_at),
            "prev_hash": prev_hash.hex(),
            "v": 1,
        }
    )
    tail = b"," + rest[1:]
    if not leaf.startswith(b'{"body":') or not leaf.endswith(tail):
        raise EntryError("entry does not re-encode to the bytes it was read from")
    body = leaf[len(b'{"body":') : len(leaf) - len(tail)]
    return seal_entry(**fields, body=body, created_at=created_at, prev_hash=prev_hash)


# Spellings of each field, the logged one first (drawn half the time); the body's and the ids'
# strings hold what the last `,"created_at":"` of a leaf could be mistaken for.
SPELLINGS: dict[str, list[Any]] = {
    "body": [
        {"attempt": 1},
        {"a": 1, "created_at": "2026-12-05T00:00:00.000000Z", "z": ',"created_at":"x'},
        {"note": '","created_at":"2026-12-05T00:00:00.000000Z"'},
    ],
    "created_at": [
        "2026-12-05T00:00:00.000000Z",
        "2026-12-05T00:00:00Z",
        "2026-12-05T00:00:00.000000+00:00",
        "2026-12-05T01:00:00.000000+01:00",
        "2026-12-05 00:00:00.000000Z",
        "2026-12-05T00:00:00.000000",
        "0999-12-05T00:00:00.000000Z",
        "not a time",
    ],
    "effect_id": ["eff_1", "", 'a","created_at":"b', ',"created_at":"'],
    "kind": ["DISPATCHED", 'K","created_at":"2026-12-05T00:00:00.000000Z'],
    "prev_hash": ["00" * 32, "AA" * 32, "00 " * 32, "0", "zz"],
    "seq": [3, 0, 2**53 - 1],
    "v": [1, 2, True, 1.0],
}


def outcome(read: Callable[[], Entry]) -> Entry | str:
    try:
        return read()
    except EntryError as exc:
        return str(exc)


@settings(max_examples=300, deadline=None)
@given(
    st.fixed_dictionaries(
        {name: st.just(values[0]) | st.sampled_from(values) for name, values in SPELLINGS.items()}
    )
)
def test_a_leaf_is_read_as_re_encoding_its_fields_reads_it(envelope: dict[str, Any]) -> None:
    leaf = canonical_json(envelope)
    expected = outcome(lambda: read_as_before(parse_canonical(leaf), leaf))
    assert outcome(lambda: entry_from_leaf(leaf)) == expected
    from_value = outcome(lambda: entry_from_envelope(envelope))
    if not (isinstance(from_value, str) and "is not a JSON" in from_value):  # v of 1.0, True
        assert from_value == outcome(lambda: read_as_before(envelope, leaf))
    if isinstance(expected, Entry):
        assert expected.leaf_bytes() == leaf
