"""What the commands share: the invocation's settings, the --at option, the engine, the output
(JSON, a console for tables, an instant for people)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer

from minruntime.errors import ConfigError, UserError

if TYPE_CHECKING:
    import sqlalchemy as sa
    from rich.console import Console

    from minruntime.settings import Settings


def option(*names: str, **settings: Any) -> Any:
    """A ``typer.Option`` whose default the help does not show (the help text says it)."""
    return typer.Option(*names, show_default=False, **settings)


_AGO: Final = re.compile(r"now\s*-\s*(\S+)")

AT_HELP: Final = (
    "Answer as the service had it at this instant: RFC3339 (2026-11-21T10:00:00Z), "
    "'now', or 'now-DURATION' (now-15m). Default: the live state now."
)
At = Annotated[str | None, option("--at", help=AT_HELP)]
Json = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]
Uid = Annotated[str, typer.Argument(metavar="UID", help="The podgroup's uid.", show_default=False)]


# What one invocation of the command line keeps (its settings), while it runs.
_INVOCATION: ContextVar[dict[str, Any] | None] = ContextVar("minruntime_invocation", default=None)


@contextmanager
def invocation() -> Iterator[None]:
    """One run of the command line: `current_settings` reads the environment once inside."""
    token = _INVOCATION.set({})
    try:
        yield
    finally:
        _INVOCATION.reset(token)


def current_settings() -> Settings:
    """The settings of this invocation, read from the environment on first use.

    Outside `invocation()` (a command called by a test) they are read afresh at each call.
    """
    from pydantic import ValidationError

    from minruntime.settings import Settings

    kept = _INVOCATION.get()
    if kept is None:
        kept = {}
    if "settings" not in kept:
        try:
            kept["settings"] = Settings()
        except ValidationError as error:
            # A MINRUNTIME_* variable the service cannot use: the user's to fix.
            raise ConfigError(str(error)) from error
    settings: Settings = kept["settings"]
    return settings


def parse_at(
    text: str | None, now: datetime | None = None, option: str = "--at"
) -> datetime | None:
    """The instant named by ``option`` (None when absent); UserError with one line when bad."""
    if text is None:
        return None
    from minruntime.core import MinRuntimeError, parse_duration, parse_rfc3339

    current = now or datetime.now(UTC)
    stripped = text.strip()
    if stripped == "now":
        return current
    ago = _AGO.fullmatch(stripped)
    try:
        if ago:
            return current - parse_duration(ago.group(1))
        return parse_rfc3339(stripped)
    except MinRuntimeError as error:
        detail = f"{error}; " if ago else ""
        raise UserError(
            f"{option} {text!r}: {detail}use RFC3339 (2026-11-21T10:00:00Z), 'now' or "
            "'now-DURATION' (now-15m)"
        ) from None


def engine() -> sa.Engine:
    """An engine for the operator commands: the owner role (they build shadow schemas)."""
    from minruntime.store import engine_from

    return engine_from(current_settings().owner_url, pool_pre_ping=False)


@contextmanager
def disposed(database: sa.Engine) -> Iterator[sa.Engine]:
    """``database`` for a ``with`` block; its connections are closed (disposed) after it."""
    try:
        yield database
    finally:
        database.dispose()


def database_error(error: BaseException) -> str | None:
    """One line for a database error a user can act on (None: not one of those)."""
    from sqlalchemy.exc import DataError, OperationalError, ProgrammingError

    if isinstance(error, DataError) or type(error).__name__ == "DataError":
        # A value stored by an older version that this one cannot read back, e.g. a timestamp
        # in year 0 or 10000 once in UTC (docs/events.md "Bounds"): say which, in one line.
        return (
            f"the database holds a value this version cannot read: {first_line(error)} "
            "(stored by an older version; see docs/events.md, Bounds)"
        )
    from minruntime.store.failures import needs_the_primary

    read_only = needs_the_primary(error)
    if read_only is not None:
        return read_only
    if isinstance(error, OperationalError):
        return f"cannot read the database: {first_line(error)}"
    if isinstance(error, ProgrammingError) and getattr(error.orig, "sqlstate", None) in (
        "42883",  # undefined function
        "42P01",  # undefined table
        "3F000",  # undefined schema
    ):
        return "the database has no minruntime read surface: run `minruntime migrate`"
    return None


def first_line(error: BaseException) -> str:
    """The first line of a driver error (SQLAlchemy appends a background link)."""
    orig = getattr(error, "orig", None) or error
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else type(orig).__name__


def wide_console(pipe_width: int = 200) -> Console:
    """A console for tables: a terminal keeps its own width; a pipe gets at least
    ``pipe_width`` columns, wide enough that a piped table is not wrapped."""
    from rich.console import Console

    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, pipe_width)
    return console


def rfc3339(moment: datetime | None) -> str:
    """An instant for people: RFC3339, or "-" when there is none."""
    from minruntime.core import format_rfc3339

    return "-" if moment is None else format_rfc3339(moment)


def counted(count: int, noun: str) -> str:
    """A count and its noun, plural unless one: "1 pod", "3 running pods"."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def print_json(value: Any) -> None:
    """One JSON document on stdout (datetimes as RFC3339, intervals as seconds)."""
    print(json.dumps(value, indent=2, default=_default, sort_keys=False))


def _default(value: Any) -> Any:
    from datetime import timedelta
    from decimal import Decimal

    from minruntime.core import format_rfc3339

    if isinstance(value, datetime):
        return format_rfc3339(value)
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    raise TypeError(f"not JSON serialisable: {type(value).__name__}")
