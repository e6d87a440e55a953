"""A scenario's prose as data: its title, intro, notes and the fixed text of its findings live
in ``experiments/scenarios/text/<scenario>.toml``, written as wrapped paragraphs; the code fills
in the numbers, every one computed from the cells."""

from __future__ import annotations

import tomllib
from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

TEXT_DIR = Path(__file__).resolve().parent.parent / "scenarios" / "text"


@cache
def _load(name: str) -> dict[str, Any]:
    with (TEXT_DIR / f"{name}.toml").open("rb") as file:
        return tomllib.load(file)


def paragraph(text: str) -> str:
    """A wrapped paragraph as one line: its runs of white space become one space."""
    return " ".join(text.split())


class Prose:
    """One scenario's text: ``prose["intro"]`` is a paragraph, ``prose("key", n=3)`` one with
    its numbers filled in, ``prose.table("systems")`` a table of paragraphs by name."""

    def __init__(self, name: str) -> None:
        self.name = name

    def __getitem__(self, key: str) -> str:
        return paragraph(_load(self.name)[key])

    def __call__(self, key: str, **values: Any) -> str:
        return self[key].format(**values)

    def then(self, key: str, **values: Any) -> str:
        """The paragraph as a sentence that follows another: with a space before it."""
        return " " + self(key, **values)

    def table(self, key: str) -> dict[str, str]:
        return {name: paragraph(text) for name, text in _load(self.name)[key].items()}

    def raw(self, key: str) -> Any:
        """A value as written (file contents, say), white space and all."""
        return _load(self.name)[key]

    def list(self, key: str, **values: Any) -> list[str]:
        return [paragraph(text).format(**values) for text in _load(self.name)[key]]


def listing(items: Sequence[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    if len(items) <= 1:
        return "".join(items)
    return ", ".join(items[:-1]) + " and " + items[-1]


def dollars(cents: int) -> str:
    return f"${cents / 100:.2f}".replace(".00", "")


def pick(table: Mapping[str, str], keys: Sequence[str]) -> dict[str, str]:
    return {key: table[key] for key in keys}
