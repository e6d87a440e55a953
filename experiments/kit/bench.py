"""What every benchmark's entry point shares: its command line (a --quick profile beside the
default one, options overriding a profile's sizes), progress on stderr, and its run time."""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

from tqdm import tqdm

P = TypeVar("P")
T = TypeVar("T")

_STARTED = time.perf_counter()


def progress(message: str) -> None:
    """A line on stderr, stamped with the seconds since the benchmark started."""
    print(f"[{time.perf_counter() - _STARTED:7.1f}s] {message}", file=sys.stderr, flush=True)


def bar(items: Iterable[T] | None = None, **options: Any) -> tqdm:
    """A progress bar on stderr, so stdout carries only the tables."""
    return tqdm(items, file=sys.stderr, **options)


def print_total() -> None:
    print(f"\nTotal run time {time.perf_counter() - _STARTED:.0f} s.")


def parser(doc: str | None) -> argparse.ArgumentParser:
    """A parser described by the first paragraph of the benchmark's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0] if doc else None)


def sizes(args: argparse.Namespace, profiles: Mapping[str, P]) -> P:
    """The quick or the default profile (a dataclass), each field an option of the same name
    overrides when given."""
    base = profiles["quick" if args.quick else "default"]
    given = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(base)  # type: ignore[arg-type]
        if getattr(args, f.name, None) is not None
    }
    return dataclasses.replace(base, **given)  # type: ignore[type-var]


def parse(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None, profiles: Mapping[str, P]
) -> tuple[argparse.Namespace, P]:
    args = parser.parse_args(argv)
    return args, sizes(args, profiles)
