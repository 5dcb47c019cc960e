"""What the commands share: the invocation's settings, the --at option, the engine factory and
the database errors a user can act on (the output is `commands.render`'s).

The store's modules (SQLAlchemy, psycopg: 0.4 s of CPU) are imported where they are used,
not here: the services that never read the database (`kube bridge`) start without them.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from pydantic import ValidationError

from minruntime.commands import INVOCATION
from minruntime.core import MinRuntimeError, parse_duration, parse_rfc3339
from minruntime.errors import ConfigError, UserError
from minruntime.settings import Settings

if TYPE_CHECKING:
    import sqlalchemy as sa

    from minruntime.store.unit import Units


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
LogLevel = Annotated[str, typer.Option(help="Log level: debug, info, warning, error.")]
ReclaimerQueue = Annotated[
    str | None,
    option(
        "--reclaimer-queue",
        metavar="QUEUE",
        help="Resolve for a reclaimer in QUEUE (the reclaim rule). Default: the preempt rule.",
    ),
]


def current_settings() -> Settings:
    """The settings of this invocation, read from the environment on first use.

    Outside `invocation()` (a command called by a test) they are read afresh at each call.
    """
    kept = INVOCATION.get()
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
def units(url: str | None = None, **options: Any) -> Iterator[Units]:
    """The units of work of one command (``store.unit``: ``read()``, ``write()``) on the
    owner role's engine (or ``url``'s, with engine ``options``), whose connections are closed
    after the block."""
    from minruntime.store import engine_from
    from minruntime.store.unit import Units

    options.setdefault("pool_pre_ping", False)
    made = Units(engine() if url is None else engine_from(url, **options))
    try:
        yield made
    finally:
        made.dispose()


def insufficient_privilege(error: BaseException) -> bool:
    """True when PostgreSQL refused the role a privilege (SQLSTATE 42501), wrapped or not."""
    from minruntime.store.failures import sqlstate

    return sqlstate(error) == "42501"


def database_error(error: BaseException) -> str | None:
    """One line for a database error a user can act on (None: not one of those)."""
    from sqlalchemy.exc import DataError, OperationalError, ProgrammingError

    from minruntime.store.failures import needs_the_primary

    if isinstance(error, DataError) or type(error).__name__ == "DataError":
        # A value stored by an older version that this one cannot read back, e.g. a timestamp
        # in year 0 or 10000 once in UTC (docs/events.md "Bounds"): say which, in one line.
        return (
            f"the database holds a value this version cannot read: {first_line(error)} "
            "(stored by an older version; see docs/events.md, Bounds)"
        )
    read_only = needs_the_primary(error)
    if read_only is not None:
        return read_only
    if isinstance(error, OperationalError) or _raised_by_the_driver(error, "OperationalError"):
        # SQLAlchemy's, or the driver's own from a driver cursor (bulk writes, the podgroups'
        # loads and pipelined writes: store.engine.driver_cursor), e.g. a connection lost.
        return f"cannot read the database: {first_line(error)}"
    if isinstance(error, ProgrammingError) and getattr(error.orig, "sqlstate", None) in (
        "42883",  # undefined function
        "42P01",  # undefined table
        "3F000",  # undefined schema
    ):
        return "the database has no minruntime read surface: run `minruntime migrate`"
    return None


def _raised_by_the_driver(error: BaseException, name: str) -> bool:
    """Whether ``error`` is the driver's (psycopg's) exception ``name`` or one of its
    subclasses, told by class, as commands import no driver."""
    return any(
        cls.__name__ == name and cls.__module__.startswith("psycopg") for cls in type(error).__mro__
    )


def first_line(error: BaseException) -> str:
    """The first line of a driver error (SQLAlchemy appends a background link)."""
    orig = getattr(error, "orig", None) or error
    lines = str(orig).strip().splitlines()
    return lines[0] if lines else type(orig).__name__


def service_logging(loglevel: str) -> None:
    """A long-running service's logs: to stderr at `loglevel`, aiokafka's errors only."""
    level = logging.getLevelName(loglevel.upper())
    if not isinstance(level, int):
        raise typer.BadParameter(f"unknown log level {loglevel!r}", param_hint="--loglevel")
    logging.basicConfig(
        level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s", force=True
    )
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
