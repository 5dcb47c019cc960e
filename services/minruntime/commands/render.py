"""How the commands show what they found: consoles for tables, aligned text tables, instants,
counted nouns, and one JSON document.

The one place for output conventions, so every command prints an instant or a count the same
way (`commands.common` holds the options and the invocation's settings).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from rich.console import Console

from minruntime.core import format_rfc3339


def console(*, stderr: bool = False) -> Console:
    """A console for the command's own lines: no highlighting of numbers or paths."""
    return Console(stderr=stderr, highlight=False)


def wide_console(pipe_width: int = 200) -> Console:
    """A console for tables: a terminal keeps its own width; a pipe gets at least
    ``pipe_width`` columns, wide enough that a piped table is not wrapped."""
    wide = Console(highlight=False)
    if not wide.is_terminal:
        wide.width = max(wide.width, pipe_width)
    return wide


def rfc3339(moment: datetime | None) -> str:
    """An instant for people: RFC3339, or "-" when there is none."""
    return "-" if moment is None else format_rfc3339(moment)


def counted(count: int, noun: str) -> str:
    """A count and its noun, plural unless one: "1 pod", "3 running pods"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def aligned(rows: Sequence[Sequence[str]]) -> list[str]:
    """Rows of cells as text lines, each column as wide as its widest cell (two spaces
    between columns, no trailing spaces)."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return [_line(row, widths) for row in rows]


def aligned_with_details(
    header: Sequence[str], rows: Sequence[tuple[Sequence[str], Sequence[str]]], indent_to: int
) -> list[str]:
    """``aligned`` header and rows, each row followed by its detail lines, indented to where
    column ``indent_to`` starts."""
    widths = [
        max([len(header[i]), *(len(cells[i]) for cells, _ in rows)]) for i in range(len(header))
    ]
    indent = " " * sum(width + 2 for width in widths[:indent_to])
    lines = [_line(header, widths)]
    for cells, details in rows:
        lines.append(_line(cells, widths))
        lines.extend(indent + detail for detail in details)
    return lines


def _line(cells: Sequence[str], widths: Sequence[int]) -> str:
    return "  ".join(cell.ljust(width) for cell, width in zip(cells, widths, strict=True)).rstrip()


def print_json(value: Any) -> None:
    """One JSON document on stdout (datetimes as RFC3339, intervals as seconds)."""
    print(json.dumps(value, indent=2, default=_default, sort_keys=False))


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
