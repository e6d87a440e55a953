from __future__ import annotations

import enum
import json
import math
import re
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger.core.canonical import (
    MAX_DEPTH,
    MAX_ENCODING_DEPTH,
    MAX_SAFE_INTEGER,
    CanonicalJSONError,
    _has_long_digit_run,
    _jcs,
    _parse_checking,
    canonical_json,
    check_depth,
    parse_canonical,
    parse_checked,
)


def test_keys_are_sorted_by_utf16_code_units_without_white_space() -> None:
    # RFC 8785 §3.2.3's sorting example: U+1F600 (a surrogate pair) sorts before U+E000 in UTF-16.
    value = {"\u20ac": "Euro", "\r": "CR", "\ufb33": "Hebrew", "1": "One", "\U0001f600": "Emoji",
             "\u0080": "Control", "\u00f6": "Latin"}  # fmt: skip
    encoded = canonical_json(value).decode("utf-8")
    keys = list(json.loads(encoded, object_pairs_hook=lambda pairs: [k for k, _ in pairs]))
    assert keys == ["\r", "1", "\u0080", "\u00f6", "\u20ac", "\U0001f600", "\ufb33"]
    assert " " not in encoded.replace("\u0080", "")


@pytest.mark.parametrize(
    ("number", "expected"),
    [
        # RFC 8785 Appendix B number samples.
        (0.0, "0"),
        (-0.0, "0"),
        (1e21, "1e+21"),
        (1e20, "100000000000000000000"),
        (333333333.3333333, "333333333.3333333"),
        (5e-324, "5e-324"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740992.0, "9007199254740992"),
        (0.000001, "0.000001"),
        (1e-7, "1e-7"),
        (-1.5e-10, "-1.5e-10"),
        (100.0, "100"),
        (4.5, "4.5"),
    ],
)
def test_numbers_print_as_ecmascript_does(number: float, expected: str) -> None:
    assert canonical_json(number) == expected.encode()


def test_strings_escape_only_what_json_requires() -> None:
    assert canonical_json('é\u2028\x01\n"\\/') == '"é\u2028\\u0001\\n\\"\\\\/"'.encode()


@pytest.mark.parametrize(
    "value",
    [
        math.nan,
        math.inf,
        -math.inf,
        {1: "x"},
        {("a",): 1},
        MAX_SAFE_INTEGER + 1,
        -(MAX_SAFE_INTEGER + 1),
        b"bytes",
        {1.5},
        object(),
        "\ud800",
        {"nested": [1, {"deeper": math.nan}]},
    ],
)
def test_values_without_a_canonical_form_are_refused(value: object) -> None:
    with pytest.raises(CanonicalJSONError):
        canonical_json(value)


@pytest.mark.parametrize(
    "data",
    [
        b'{"b":1,"a":2}',
        b'{"a": 1}',
        b'{"a":1,"a":1}',
        b"NaN",
        b'{"a":Infinity}',
        b"1.0",
        b'"\\u00e9"',
        b"\xff",
        b"",
        b'{"a":1}\n',
    ],
)
def test_parse_refuses_bytes_that_are_not_canonical(data: bytes) -> None:
    with pytest.raises(CanonicalJSONError):
        parse_canonical(data)


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-MAX_SAFE_INTEGER, max_value=MAX_SAFE_INTEGER)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(), children, max_size=4)
    ),
    max_leaves=20,
)


@given(json_values)
def test_encoding_round_trips_and_is_a_fixed_point(value: object) -> None:
    encoded = canonical_json(value)
    decoded = parse_canonical(encoded)
    assert canonical_json(decoded) == encoded
    # Canonical bytes are plain JSON: a parser reading numbers as doubles gets the same value.
    assert json.loads(encoded, parse_int=float) == json.loads(json.dumps(value), parse_int=float)


def _nested(depth: int, leaf: object = 1) -> object:
    value = leaf
    for i in range(depth):
        value = [value] if i % 2 else {"a": value}
    return value


def test_one_depth_limit_counts_arrays_and_objects_iteratively() -> None:
    check_depth(1)
    check_depth(_nested(MAX_DEPTH))
    with pytest.raises(CanonicalJSONError, match=f"deeper than {MAX_DEPTH}"):
        check_depth(_nested(MAX_DEPTH + 1))
    with pytest.raises(CanonicalJSONError):
        check_depth(_nested(100_000))  # no RecursionError, however deep
    check_depth(_nested(3), limit=3)
    with pytest.raises(CanonicalJSONError):
        check_depth(_nested(4), limit=3)


def test_encoding_and_parsing_refuse_what_nests_too_deep_instead_of_overflowing() -> None:
    assert parse_canonical(canonical_json(_nested(MAX_ENCODING_DEPTH))) == _nested(
        MAX_ENCODING_DEPTH
    )
    with pytest.raises(CanonicalJSONError, match="deeper than"):
        canonical_json(_nested(MAX_ENCODING_DEPTH + 1))
    with pytest.raises(CanonicalJSONError):
        canonical_json(_nested(100_000))
    with pytest.raises(CanonicalJSONError):
        parse_canonical(b"[" * 100_000 + b"]" * 100_000)


@pytest.mark.parametrize(
    ("data", "canonical"),
    [
        (b"[1]", True),
        (b"[1.0]", False),  # Python's spelling of a float, not JCS's
        (b"[1.5,1e+21]", True),
        (b"[1e21]", False),
        (b"[9007199254740993]", False),  # a large integer is a double: 9007199254740992
        ('{"\U0001f600":1,"\uffff":2}'.encode(), True),  # UTF-16 order, not code points
        ('{"\uffff":2,"\U0001f600":1}'.encode(), False),
        (b"[" * MAX_ENCODING_DEPTH + b"]" * MAX_ENCODING_DEPTH, True),
        (b"[" * (MAX_ENCODING_DEPTH + 1) + b"]" * (MAX_ENCODING_DEPTH + 1), False),
        (b'["\\ud800"]', False),  # a lone surrogate has no UTF-8
        (b'{"a":1,"b":[true,null,"\\u001f\\n"]}', True),
        (b'{"b":1,"a":2}', False),
    ],
)
def test_parse_canonical_accepts_exactly_what_canonical_json_writes(
    data: bytes, canonical: bool
) -> None:
    """The C encoder's shortcut never accepts what the JCS encoder would not have written."""
    if canonical:
        assert canonical_json(parse_canonical(data)) == data
    else:
        with pytest.raises(CanonicalJSONError):
            parse_canonical(data)


class _Colour(enum.StrEnum):
    RED = "red"


# Values of every kind canonical_json takes, the ones its C-encoder shortcut must pass over
# included: floats, integers past a double, keys past the BMP beside keys just below it, tuples,
# subclasses of the builtin types.
mixed_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
    | st.just(_Colour.RED),
    lambda children: (
        st.lists(children, max_size=4)
        | st.lists(children, max_size=3).map(tuple)
        | st.dictionaries(
            st.text() | st.sampled_from(["\U0001f600", "\ufb33", "\ue000x"]), children, max_size=4
        )
    ),
    max_leaves=20,
)


@given(mixed_values)
def test_the_c_encoder_shortcut_writes_what_jcs_writes_member_by_member(value: object) -> None:
    try:
        expected = _jcs(value)
    except CanonicalJSONError:
        with pytest.raises(CanonicalJSONError):
            canonical_json(value)
        return
    assert canonical_json(value) == expected


def test_the_shortcut_passes_over_keys_that_sort_apart_in_utf16() -> None:
    # Python orders U+FB33 before U+1F600 (code points); JCS after it (UTF-16 code units).
    assert canonical_json({"\ufb33": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ufb33":1}'.encode()


@given(json_values | st.sampled_from([2.0**60, -(2.0**53), 1e21, {"\U0001f600": [2.0**70]}]))
def test_parse_checked_reads_what_parse_canonical_read(value: object) -> None:
    """Its shortcut (the C decoder alone) gives the same types too: an integer spelling past
    2**53 is a double either way."""
    encoded = canonical_json(value)
    assert repr(parse_checked(encoded)) == repr(parse_canonical(encoded))


def test_parse_orders_keys_past_the_bmp_by_utf16_code_units() -> None:
    assert parse_canonical('{"\U0001f600":2,"\ufb33":1}'.encode()) == {"\U0001f600": 2, "\ufb33": 1}
    with pytest.raises(CanonicalJSONError):
        parse_canonical('{"\ufb33":1,"\U0001f600":2}'.encode())  # Python's code-point order


@given(st.binary(max_size=64) | st.from_regex(rb"\A[0-9a\-.]{0,40}\Z"))
def test_a_run_of_sixteen_digits_is_found_wherever_it_is(data: bytes) -> None:
    """parse_checked's shortcut hinges on it: the C decoder alone only where no integer
    spelling could pass what a double holds exactly."""
    assert _has_long_digit_run(data) == (re.search(rb"[0-9]{16}", data) is not None)
    assert _has_long_digit_run(b"x" + b"7" * 16) and not _has_long_digit_run(b"7" * 15 + b".7")


def parsed(parse: Callable[[bytes], Any], data: bytes) -> str:
    """What `parse` makes of `data`: the value with its types, or the refusal."""
    try:
        return repr(parse(data))
    except CanonicalJSONError as exc:
        return f"refused: {exc}"


# The spellings a JSON value may have besides its canonical one.
spellings = st.sampled_from(
    [
        lambda value: json.dumps(value, sort_keys=True, separators=(",", ":")),
        lambda value: json.dumps(value, separators=(",", ":"), ensure_ascii=False),
        lambda value: json.dumps(value, sort_keys=True),
        lambda value: json.dumps(value, sort_keys=True, ensure_ascii=False, indent=1),
    ]
)
# Bytes canonical JSON holds next to each other, to splice into canonical bytes: a duplicate
# key, a float, a NaN, a long integer, a key past the BMP, a lone surrogate, deep nesting.
splices = st.sampled_from(
    [
        b'"a":1,"a":1,',
        b"1.0",
        b"1e-07",
        b"NaN",
        b"-0",
        b"9007199254740993",
        b"1234567890123456",
        '"\U0001f600":1,'.encode(),
        b'"\\ud800"',
        b"[" * MAX_ENCODING_DEPTH,
        b"]",
        b" ",
    ]
)


@given(
    json_values | st.sampled_from([{"a": 1, "b": [True, None, "\x1f\n"]}, {"\U0001f600": 2}]),
    spellings,
    splices,
    st.integers(min_value=0),
)
def test_the_plain_decoders_shortcut_accepts_and_refuses_what_the_checking_parse_does(
    value: Any, spell: Callable[[Any], str], splice: bytes, at: int
) -> None:
    """parse_canonical reads bytes with no float, NaN or long integer with the C decoder alone:
    on canonical bytes, on other spellings of the same value, and on canonical bytes with
    something spliced in, it gives what the checking parse gives, or refuses with its words."""
    canonical = canonical_json(value)
    at %= len(canonical) + 1
    for data in (canonical, spell(value).encode(), canonical[:at] + splice + canonical[at:]):
        assert parsed(parse_canonical, data) == parsed(_parse_checking, data)
