"""A receipts export's lines read the way the tests pick them apart (gate_client.verify checks
them; this only reads)."""

from __future__ import annotations

import base64
from typing import Any

from gate_client.export_format import carried_envelope
from ledger.core.entries import Entry, entry_from_envelope, entry_from_leaf


def carried_entry(item: Any, *, line_effect: str = "") -> Entry:
    """The entry an export line carries: in v1 its bytes in base64, in v3 its JSON value, which
    leaves out the line's effect id (`line_effect`) when the entry is that effect's."""
    if "leaf" in item:
        return entry_from_leaf(base64.b64decode(item["leaf"]))
    return entry_from_envelope(carried_envelope(item["entry"], line_effect=line_effect))


def carried_seq(item: Any, *, line_effect: str = "") -> int:
    """The seq of a receipt line's item: a v3 line cites an entry carried before by its seq."""
    if isinstance(item, int):
        return item
    return carried_entry(item, line_effect=line_effect).seq
