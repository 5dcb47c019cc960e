"""Projection snapshots: the projection tables copied out at one event-log position, and back.

A snapshot is one ``projection_snapshots`` row (the last event-log ``seq`` it reflects, the
latest ``applied_at`` up to it, how many entries) and one ``projection_snapshot_tables`` row
per projection table: its rows as ``COPY ... TO STDOUT`` text in key order, every column
(bookkeeping too, so a restored copy is the table as it was), zlib-compressed. Restoring is
the reverse ``COPY ... FROM STDIN`` into a shadow's empty tables.

Which tables, and their keys, are the caller's (``minruntime.audit.shadow.PROJECTIONS``).
Consistency is the caller's too: ``write`` copies what ``conn``'s transaction sees; see
``SNAPSHOT_LOCK_KEY`` for how a taker makes that exactly the state up to one ``seq``.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import Connection

from minruntime.store.schema import LIVE, StateTables

# Every writer of the live event log holds this advisory lock shared from its append to its
# commit (``event_log.append``); a snapshot taker holds it exclusively for the moment it takes
# its database snapshot, so no transaction that appended to the log is in flight then: the
# snapshot sees every entry up to the largest ``seq`` it sees, and their whole effect.
SNAPSHOT_LOCK_KEY: Final = int.from_bytes(b"minrtsnp", "big", signed=True)
# zlib level 1: the COPY text of a projection shrinks ~5x at a few hundred MB/s.
_LEVEL: Final = 1

_POSITION: Final = (
    "SELECT max(seq) AS seq, count(*) AS events, max(applied_at) AS applied_until"
    " FROM minruntime_state.event_log WHERE seq > :after"
)
_INSERT_SNAPSHOT: Final = (
    "INSERT INTO minruntime_state.projection_snapshots (log_seq, applied_until, events)"
    " VALUES (:log_seq, :applied_until, :events) RETURNING id, taken_at"
)
_INSERT_TABLE: Final = (
    "INSERT INTO minruntime_state.projection_snapshot_tables"
    " (snapshot_id, table_name, rows, columns, data) VALUES (%s, %s, %s, %s, %s)"
)
_SNAPSHOTS: Final = (
    "SELECT id, log_seq, applied_until, events, taken_at FROM minruntime_state.projection_snapshots"
)
_TABLES: Final = (
    "SELECT table_name, rows, columns, data FROM minruntime_state.projection_snapshot_tables"
    " WHERE snapshot_id = %s ORDER BY table_name"
)


@dataclass(frozen=True)
class Snapshot:
    """One stored snapshot: the state after every event-log entry up to ``log_seq``."""

    id: int
    log_seq: int
    # The latest applied_at of those entries: an answer "at T" may start here when T >= it.
    applied_until: datetime
    events: int
    taken_at: datetime


@dataclass(frozen=True)
class LogPosition:
    """How far the event log a transaction sees goes (``seq`` 0: empty)."""

    seq: int
    events: int
    applied_until: datetime | None


def take_lock(conn: Connection) -> None:
    """Wait until no event-log writer is in flight, and hold them off until ``conn`` ends."""
    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SNAPSHOT_LOCK_KEY})")


def position(conn: Connection, after: Snapshot | None = None) -> LogPosition:
    """The log position ``conn``'s transaction sees (counted on from ``after``, if given)."""
    row = (
        conn.execute(LIVE.text(_POSITION), {"after": after.log_seq if after else 0})
        .mappings()
        .one()
    )
    if after is None:
        return LogPosition(int(row["seq"] or 0), int(row["events"]), row["applied_until"])
    if row["seq"] is None:
        return LogPosition(after.log_seq, after.events, after.applied_until)
    return LogPosition(
        int(row["seq"]),
        after.events + int(row["events"]),
        max(after.applied_until, row["applied_until"]),
    )


def write(
    conn: Connection,
    source: StateTables,
    projections: Mapping[str, Sequence[str]],
    at: LogPosition,
) -> Snapshot:
    """Copy ``projections`` (table -> key columns) of ``source`` into a new snapshot at ``at``."""
    if at.applied_until is None:
        raise ValueError("the event log is empty: there is nothing to snapshot")
    row = (
        conn.execute(
            LIVE.text(_INSERT_SNAPSHOT),
            {"log_seq": at.seq, "applied_until": at.applied_until, "events": at.events},
        )
        .mappings()
        .one()
    )
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        for table, keys in projections.items():
            columns = _columns(source, table)
            names = ", ".join(f'"{name}"' for name in columns)
            order = ", ".join(f'"{key}"' for key in keys)
            query = f"COPY (SELECT {names} FROM {source.schema}.{table} ORDER BY {order}) TO STDOUT"
            with cursor.copy(query) as copy:
                text = b"".join(bytes(block) for block in copy)
            # COPY text escapes newlines inside values: one line per row.
            cursor.execute(
                LIVE.sql(_INSERT_TABLE),
                (row["id"], table, text.count(b"\n"), columns, zlib.compress(text, _LEVEL)),
            )
    return Snapshot(row["id"], at.seq, at.applied_until, at.events, row["taken_at"])


def available(conn: Connection) -> bool:
    """True when the database has the snapshot tables (migration 0009)."""
    found = conn.exec_driver_sql(
        "SELECT to_regclass('minruntime_state.projection_snapshots') IS NOT NULL"
    ).scalar_one()
    return bool(found)


def snapshots(conn: Connection) -> list[Snapshot]:
    """Every stored snapshot, oldest position first."""
    rows = conn.execute(LIVE.text(_SNAPSHOTS + " ORDER BY log_seq")).mappings()
    return [Snapshot(**row) for row in rows]


def newest(conn: Connection, at: datetime | None = None) -> Snapshot | None:
    """The snapshot of the longest log whose entries were all applied by ``at`` (None: any)."""
    row = (
        conn.execute(
            LIVE.text(
                _SNAPSHOTS + " WHERE CAST(:at AS timestamptz) IS NULL OR applied_until <= :at"
                " ORDER BY log_seq DESC LIMIT 1"
            ),
            {"at": at},
        )
        .mappings()
        .first()
    )
    return None if row is None else Snapshot(**row)


def restore(conn: Connection, snapshot: Snapshot, target: StateTables) -> dict[str, int]:
    """Fill ``target``'s (empty) tables with ``snapshot``; table -> rows restored."""
    if target.is_live:
        raise RuntimeError("a snapshot is restored into a shadow, never into the live state")
    driver = conn.connection.driver_connection
    assert driver is not None
    restored = {}
    with driver.cursor() as cursor:
        stored = cursor.execute(LIVE.sql(_TABLES), (snapshot.id,)).fetchall()
        for table, rows, columns, data in stored:
            names = ", ".join(f'"{name}"' for name in columns)
            with cursor.copy(f"COPY {target.schema}.{table} ({names}) FROM STDIN") as copy:
                copy.write(zlib.decompress(data))
            restored[table] = int(rows)
    for table in restored:
        continue_numbering(conn, target, table)
    return restored


def continue_numbering(conn: Connection, tables: StateTables, table: str) -> None:
    """Rows copied in with their numbers (identity columns): later inserts continue after them."""
    qualified = f"{tables.schema}.{table}"
    for column in tables.metadata.tables[qualified].columns:
        if column.identity is not None:
            conn.exec_driver_sql(
                f"SELECT setval(pg_get_serial_sequence('{qualified}', '{column.name}'),"
                f" GREATEST(max({column.name}), 1), max({column.name}) IS NOT NULL)"
                f" FROM {qualified}"
            )


def _columns(tables: StateTables, table: str) -> list[str]:
    return [column.name for column in tables.metadata.tables[f"{tables.schema}.{table}"].columns]
