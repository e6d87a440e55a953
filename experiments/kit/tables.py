"""Markdown tables, the one format every result file and benchmark prints."""

from __future__ import annotations

from collections.abc import Sequence


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A plain table for result files: cells as given, a `|` inside a cell written `/`."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def aligned_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table for a terminal: columns padded to one width, the first left-aligned and every
    other (figures) right-aligned."""
    widths = [max(len(cell) for cell in column) for column in zip(header, *rows, strict=True)]

    def line(cells: Sequence[str]) -> str:
        padded = (
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(cells, widths, strict=True))
        )
        return "| " + " | ".join(padded) + " |"

    rule = "|" + "|".join("-" * (width + 1) + (":" if i else "-") for i, width in enumerate(widths))
    return "\n".join([line(header), rule + "|", *(line(row) for row in rows)])
