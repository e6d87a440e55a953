"""The one canonical JSON encoding of the ledger (RFC 8785, JCS).

Every byte that is hashed or signed goes through `canonical_json`, so two parties that hold the
same value always hash the same bytes:

- objects: keys are strings, sorted by their UTF-16 code units, no duplicates;
- no insignificant white space; strings in UTF-8, escaped as ECMAScript ``JSON.stringify`` does;
- numbers as ECMAScript prints IEEE-754 doubles (``1.0`` is ``1``, ``1e21`` is ``1e+21``);
  integers must fit a double exactly (|n| <= 2**53 - 1); NaN and the infinities are refused;
- only dict, list/tuple, str, int, float, bool and None are accepted;
- nesting is bounded: `MAX_DEPTH` is the one limit every input (API bodies, webhooks) is held to,
  checked with `check_depth` before anything is written; the encoder and the parser themselves
  refuse anything past `MAX_ENCODING_DEPTH`, which leaves room for the envelopes an entry wraps
  around an accepted input, so no value can make either of them exhaust the stack.

Money and counters belong in integers (minor units); a float is accepted only because JCS
defines its one true spelling.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from json.encoder import encode_basestring
from typing import Any

MAX_SAFE_INTEGER = 2**53 - 1
# How many arrays and objects may nest in any input: a scalar is depth 0, ``[]`` and ``{}`` are
# depth 1, ``{"a": [1]}`` is depth 2.
MAX_DEPTH = 64
# What the encoding itself accepts: an accepted input plus the envelopes around it.
MAX_ENCODING_DEPTH = 2 * MAX_DEPTH


class CanonicalJSONError(ValueError):
    """The value has no canonical encoding, or the bytes are not canonically encoded."""


CanonicalError = CanonicalJSONError


def check_depth(value: object, limit: int = MAX_DEPTH) -> None:
    """Refuse `value` if more than `limit` arrays and objects nest in it.

    Iterative, so it answers for any value however deep, and it stops at the first level past
    the limit without walking the rest."""
    # Each item: a container and how deep it sits (the outermost container is depth 1).
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, Mapping):
            children: Iterable[object] = item.values()
        elif isinstance(item, (list, tuple)):
            children = item
        else:
            continue
        if depth > limit:
            raise CanonicalJSONError(f"value nests deeper than {limit} arrays and objects")
        stack.extend((child, depth + 1) for child in children)


def canonical_json(value: Any) -> bytes:
    """Encode `value` as canonical JSON; raise CanonicalJSONError for what JCS cannot encode."""
    if _is_plain(value, 0):
        plain = _plain_json(value)
        if plain is not None:
            return plain
    return _jcs(value)


def _jcs(value: Any) -> bytes:
    """JCS written out member by member: for every value, the plain ones included."""
    parts: list[str] = []
    _encode(value, parts, "$", 0)
    try:
        return "".join(parts).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(f"string holds a lone surrogate ({exc.reason})") from exc


def parse_canonical(data: bytes) -> Any:
    """Decode bytes that must already be canonical JSON; anything else is refused, not repaired."""
    if not _has_long_digit_run(data):
        try:
            # Without a float, NaN or an integer of sixteen digits, the C decoder alone reads
            # what the checking hooks below would; a duplicate key is left out of the value, so
            # its bytes differ from the value's encoding. Anything else is judged, and named,
            # by the checking parse.
            value = _decode(data, _INTEGRAL_DECODER.decode)
        except (CanonicalJSONError, _NotIntegral):
            pass
        else:
            if _encodes_plainly_to(value, data):
                return value
    return _parse_checking(data)


def _parse_checking(data: bytes) -> Any:
    """parse_canonical with every hook that tells canonical bytes from others."""
    shape = _Shape()
    value = _parse(data, shape)
    if shape.plain and _encodes_plainly_to(value, data):
        return value
    if canonical_json(value) != data:
        raise CanonicalJSONError("JSON is valid but not in canonical form")
    return value


def _encodes_plainly_to(value: Any, data: bytes) -> bool:
    """Whether the C encoder writes `value`, parsed from `data` with no float and no integer
    past a double, as `data`. Without keys past the BMP or nesting past the encoder's limit (the
    two places where JCS and Python's sorted, compact json.dumps differ), it writes what
    canonical_json would: bytes equal to it are canonical."""
    return (
        _ASTRAL_UTF8.search(data) is None
        and data.count(b"[") + data.count(b"{") <= MAX_ENCODING_DEPTH
        and _plain_json(value) == data
    )


def parse_checked(data: bytes) -> Any:
    """Decode bytes parse_canonical has accepted before (or a part of such bytes that is a
    value of its own): the same value, without encoding it again to compare."""
    if not _has_long_digit_run(data):
        # Every integer spelled fits a double exactly, and accepted bytes hold no duplicate key
        # and no NaN: the C decoder alone reads the value the checking hooks would.
        return _decode(data, _PLAIN_DECODER.decode)
    return _parse(data, _Shape())


# A character past the Basic Multilingual Plane, in UTF-8: JCS orders such keys by UTF-16 code
# units, Python by code points, so only canonical_json may judge bytes that hold one.
_ASTRAL_UTF8 = re.compile(rb"[\xf0-\xf4]")


def _has_long_digit_run(data: bytes) -> bool:
    """Sixteen digits in a row: perhaps an integer past 2**53 - 1, which _parse_integer reads
    as the double it must be. Found by mapping every digit to 0 and the rest to a space, in C:
    a regular expression's search costs eight times as much, and this runs for every read of
    an entry's body."""
    return _SIXTEEN_ZEROS in data.translate(_DIGITS_AS_ZEROS)


class _NotIntegral(Exception):
    """A float or a constant (NaN, Infinity) the integral decoder met."""


def _not_integral(text: str) -> Any:
    raise _NotIntegral(text)


_INTEGRAL_DECODER = json.JSONDecoder(parse_float=_not_integral, parse_constant=_not_integral)
_DIGITS_AS_ZEROS = bytes(0x30 if 0x30 <= byte <= 0x39 else 0x20 for byte in range(256))
_SIXTEEN_ZEROS = b"0" * 16
_PLAIN_DECODER = json.JSONDecoder()


class _Shape:
    """What parsing saw that only canonical_json encodes as JCS says: a float, or an integer
    spelling past what a double holds exactly."""

    def __init__(self) -> None:
        self.plain = True

    def number(self, text: str) -> float:
        self.plain = False
        return float(text)

    def integer(self, text: str) -> int | float:
        value = _parse_integer(text)
        if isinstance(value, float):
            self.plain = False
        return value


def _parse(data: bytes, shape: _Shape) -> Any:
    return _decode(
        data,
        lambda text: json.loads(
            text,
            parse_constant=_refuse_constant,
            parse_float=shape.number,
            parse_int=shape.integer,
            object_pairs_hook=_refuse_duplicate_keys,
        ),
    )


def _decode(data: bytes, decode: Callable[[str], Any]) -> Any:
    try:
        return decode(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CanonicalJSONError(f"not JSON: {exc}") from exc
    except RecursionError as exc:  # the C scanner's own guard, far past MAX_ENCODING_DEPTH
        raise CanonicalJSONError("JSON nests too deep to parse") from exc


def _plain_json(value: Any) -> bytes | None:
    """json.dumps sorted and compact, in UTF-8; None for a string no UTF-8 can hold."""
    try:
        return _PLAIN_ENCODER.encode(value).encode("utf-8")
    except UnicodeEncodeError:
        return None


_PLAIN_ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _is_plain(value: Any, depth: int) -> bool:
    """Whether the C encoder (_plain_json) writes `value` exactly as JCS does: builtin types
    only (no subclass, whose spelling json.dumps may not share), no float, no integer a double
    cannot hold, keys of strings in the BMP (there code points and UTF-16 code units sort
    alike), nesting within the encoder's limit. Anything else takes the written-out path."""
    kind = type(value)
    if kind is str or kind is bool or value is None:
        return True
    if kind is int:
        return bool(-MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER)
    if depth >= MAX_ENCODING_DEPTH:
        return False
    if kind is dict:
        return all(
            type(key) is str
            and (key.isascii() or max(key) <= "\uffff")
            and _is_plain(item, depth + 1)
            for key, item in value.items()
        )
    if kind is list or kind is tuple:
        return all(_is_plain(item, depth + 1) for item in value)
    return False


def _encode(value: Any, out: list[str], path: str, depth: int) -> None:
    # The builtin types by exact type (the common case, one lookup); anything else, such as a
    # StrEnum or an OrderedDict, by the first kind it is an instance of. `depth`: how many
    # arrays and objects enclose `value`.
    encoder = _ENCODERS_BY_TYPE.get(type(value)) or _encoder_for_subclass(value)
    encoder(value, out, path, depth)


def _encoder_for_subclass(value: Any) -> _Encoder:
    """The encoder of the first kind in _ENCODERS_IN_ORDER that `value` is an instance of."""
    return next(
        (encoder for kind, encoder in _ENCODERS_IN_ORDER if isinstance(value, kind)),
        _refuse_type,
    )


def _encode_null(value: None, out: list[str], path: str, depth: int) -> None:
    out.append("null")


def _encode_bool(value: bool, out: list[str], path: str, depth: int) -> None:
    out.append("true" if value else "false")


def _encode_string(value: str, out: list[str], path: str, depth: int) -> None:
    # The C string escaper json.dumps(..., ensure_ascii=False) uses, without its set-up cost.
    out.append(encode_basestring(value))


def _encode_integer(value: int, out: list[str], path: str, depth: int) -> None:
    if abs(value) > MAX_SAFE_INTEGER:
        raise CanonicalJSONError(f"{path}: integer {value} does not fit an IEEE-754 double")
    out.append(str(value))


def _encode_float(value: float, out: list[str], path: str, depth: int) -> None:
    out.append(_format_number(value, path))


def _encode_object(value: Mapping[Any, Any], out: list[str], path: str, depth: int) -> None:
    """Members sorted by their keys' UTF-16 code units; every key is checked to be a string
    before anything is written."""
    _check_nesting(depth, path)
    for key in value:
        if not isinstance(key, str):
            raise CanonicalJSONError(f"{path}: object key {key!r} is not a string")
    out.append("{")
    for i, key in enumerate(sorted(value, key=_utf16_order)):
        if i:
            out.append(",")
        out.append(encode_basestring(key))
        out.append(":")
        _encode(value[key], out, f"{path}.{key}", depth + 1)
    out.append("}")


def _encode_array(value: Sequence[Any], out: list[str], path: str, depth: int) -> None:
    _check_nesting(depth, path)
    out.append("[")
    for i, item in enumerate(value):
        if i:
            out.append(",")
        _encode(item, out, f"{path}[{i}]", depth + 1)
    out.append("]")


def _check_nesting(depth: int, path: str) -> None:
    if depth >= MAX_ENCODING_DEPTH:
        raise CanonicalJSONError(
            f"{path}: value nests deeper than {MAX_ENCODING_DEPTH} arrays and objects"
        )


def _refuse_type(value: Any, out: list[str], path: str, depth: int) -> None:
    raise CanonicalJSONError(f"{path}: {type(value).__name__} has no JSON encoding")


_Encoder = Callable[[Any, list[str], str, int], None]
_ENCODERS_BY_TYPE: dict[type, _Encoder] = {
    type(None): _encode_null,
    bool: _encode_bool,
    str: _encode_string,
    int: _encode_integer,
    float: _encode_float,
    dict: _encode_object,
    list: _encode_array,
    tuple: _encode_array,
}
# First match wins. bool before int: bool is a subclass of int (and cannot itself be
# subclassed). Bytes are sequences, but of bytes, not of JSON values.
_ENCODERS_IN_ORDER: tuple[tuple[type | tuple[type, ...], _Encoder], ...] = (
    (bool, _encode_bool),
    (str, _encode_string),
    (int, _encode_integer),
    (float, _encode_float),
    (Mapping, _encode_object),
    ((bytes, bytearray), _refuse_type),
    (Sequence, _encode_array),
)


def _utf16_order(key: str) -> bytes:
    # Big-endian UTF-16 bytes compare exactly as JCS's code-unit order does.
    return key.encode("utf-16-be", "surrogatepass")


def _format_number(value: float, path: str) -> str:
    """ECMAScript Number::toString, which JCS prescribes for every number."""
    if not math.isfinite(value):
        raise CanonicalJSONError(f"{path}: {value} is not a JSON number")
    if value == 0:
        return "0"
    sign = "-" if value < 0 else ""
    # repr gives the shortest digits that round-trip, as ECMAScript requires.
    mantissa, _, exp_text = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    all_digits = whole + frac
    significant = all_digits.lstrip("0")
    # n: where the decimal point sits relative to the first significant digit (ECMA-262 "n").
    n = len(whole) + int(exp_text or 0) - (len(all_digits) - len(significant))
    digits = significant.rstrip("0")
    k = len(digits)
    if k <= n <= 21:
        text = digits + "0" * (n - k)
    elif 0 < n <= 21:
        text = digits[:n] + "." + digits[n:]
    elif -6 < n <= 0:
        text = "0." + "0" * (-n) + digits
    else:
        exponent = n - 1
        sign_e = "+" if exponent >= 0 else "-"
        head = digits[0] + ("." + digits[1:] if k > 1 else "")
        text = f"{head}e{sign_e}{abs(exponent)}"
    return sign + text


def _parse_integer(text: str) -> int | float:
    # Past 2**53 an integer spelling can only be a large double printed without an exponent.
    value = int(text)
    return value if abs(value) <= MAX_SAFE_INTEGER else float(value)


def _refuse_constant(name: str) -> Any:
    raise CanonicalJSONError(f"{name} is not a JSON number")


def _refuse_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):  # the C dict kept the last of each key; name the first twice
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise CanonicalJSONError(f"duplicate object key {key!r}")
            seen.add(key)
    return result
