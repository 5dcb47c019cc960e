"""The transactions the operator commands read in: repeatable read, read only, shared.

A *repeatable-read transaction* (``repeatable_read``) sees one database snapshot from its
first query to its end and is always rolled back. Parallel readers share one: the first
exports it (``export_snapshot``) and each other connection imports it (``import_snapshot``),
so they all see exactly one log and one live state, as one reader would.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Final

from sqlalchemy import Connection, Engine

# What pg_export_snapshot() returns: nothing else may be pasted into SET TRANSACTION SNAPSHOT.
_EXPORTED: Final = re.compile(r"[0-9A-F]+-[0-9A-F]+(-[0-9]+)?")


@contextmanager
def repeatable_read(engine: Engine) -> Iterator[Connection]:
    """A REPEATABLE READ transaction that is rolled back at the end, whatever happens."""
    with engine.connect() as conn:
        begin_repeatable_read(conn)
        try:
            yield conn
        finally:
            conn.rollback()


def begin_repeatable_read(conn: Connection) -> None:
    """Make ``conn``'s transaction (not begun yet) REPEATABLE READ."""
    conn.exec_driver_sql("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")


def read_only(conn: Connection) -> None:
    conn.exec_driver_sql("SET TRANSACTION READ ONLY")


def export_snapshot(conn: Connection) -> str:
    """The id of ``conn``'s database snapshot, for other connections to import while ``conn``'s
    transaction stays open."""
    return str(conn.exec_driver_sql("SELECT pg_export_snapshot()").scalar_one())


def import_snapshot(conn: Connection, exported: object) -> None:
    """Make ``conn``'s REPEATABLE READ transaction see the snapshot ``exported`` (ValueError
    for anything that is not an exported snapshot's id)."""
    if not isinstance(exported, str) or not _EXPORTED.fullmatch(exported):
        raise ValueError(f"not an exported snapshot: {exported!r}")
    conn.exec_driver_sql(f"SET TRANSACTION SNAPSHOT '{exported}'")


def database_now(conn: Connection) -> datetime:
    """The database's now(): the start of ``conn``'s transaction."""
    return conn.exec_driver_sql("SELECT now()").scalar_one()  # type: ignore[no-any-return]


def ping(conn: Connection) -> None:
    """One round trip: raises when PostgreSQL does not answer."""
    conn.exec_driver_sql("SELECT 1")
