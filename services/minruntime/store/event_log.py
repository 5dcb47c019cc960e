"""The event log: its one writer (``append``) and the de-duplication reads of a batch.

Every applied event is appended once: input events with their Kafka position, the decisions
the service made itself without one (logged in the transaction that makes them). Its
``(source, event_id)`` is the de-duplication key of CONTRACT.md §1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.store.bulk import insert_many, json_list
from minruntime.store.schema import StateTables
from minruntime.store.snapshots import SNAPSHOT_LOCK_KEY

# Column -> PostgreSQL type of an appended row; ``payload`` is the event's JSON text.
LOG_COLUMNS: Final = {
    "topic": "text",
    "partition": "integer",
    "offset": "bigint",
    "event_id": "text",
    "source": "text",
    "type": "text",
    "subject": "text",
    "event_time": "timestamptz",
    "payload": "jsonb",
}
_SHARE_SNAPSHOT_LOCK: Final = f"SELECT pg_advisory_xact_lock_shared({SNAPSHOT_LOCK_KEY})"
_SEEN_IDS: Final = (
    "SELECT e.source, e.event_id FROM minruntime_state.event_log e"
    # One JSON array per column (``store.bulk.json_list``): cheap to send from Python.
    " JOIN ROWS FROM (json_array_elements_text(CAST(:sources AS json)),"
    " json_array_elements_text(CAST(:ids AS json))) AS u(source, event_id)"
    " ON e.source = u.source AND e.event_id = u.event_id"
)
# Only for the pairs already in the log: does the stored event equal the one sent again? jsonb
# equality, so whitespace and key order do not matter.
_CONFLICTS: Final = (
    "SELECT u.i, e.topic, e.partition, e.offset FROM minruntime_state.event_log e"
    " JOIN unnest(CAST(:sources AS text[]), CAST(:ids AS text[]), CAST(:payloads AS text[]),"
    " CAST(:indexes AS int[])) AS u(source, event_id, payload, i)"
    " ON e.source = u.source AND e.event_id = u.event_id"
    " WHERE e.payload <> CAST(u.payload AS jsonb)"
)


def append(conn: Connection, tables: StateTables, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append events (rows keyed by ``LOG_COLUMNS``) in one COPY; nothing when empty.

    On the live log, first the snapshot lock, shared, until the transaction ends: a snapshot
    is never taken while this transaction's entries are numbered but not committed.
    """
    if not rows:
        return
    if tables.is_live:
        conn.exec_driver_sql(_SHARE_SNAPSHOT_LOCK)
    insert_many(conn, tables.event_log, LOG_COLUMNS, rows)


def logged_ids(
    conn: Connection, tables: StateTables, keys: set[tuple[str, str]]
) -> set[tuple[str, str]]:
    """The (source, id) pairs of ``keys`` already in the event log."""
    if not keys:
        return set()
    rows = conn.execute(
        tables.text(_SEEN_IDS),
        {
            "sources": json_list(source for source, _ in keys),
            "ids": json_list(id_ for _, id_ in keys),
        },
    )
    return {(row.source, row.event_id) for row in rows}


def conflicting(
    conn: Connection, tables: StateTables, again: Sequence[tuple[int, str, str, str]]
) -> dict[int, str]:
    """For (index, source, id, payload) already logged: index -> where it was applied, when the
    logged payload differs (as jsonb: whitespace and key order do not count)."""
    if not again:
        return {}
    rows = conn.execute(
        tables.text(_CONFLICTS),
        {
            "indexes": [index for index, _, _, _ in again],
            "sources": [source for _, source, _, _ in again],
            "ids": [id_ for _, _, id_, _ in again],
            "payloads": [payload for _, _, _, payload in again],
        },
    )
    return {row.i: f"{row.topic}/{row.partition}@{row.offset}" for row in rows}


_SUBJECTS: Final = (
    "SELECT DISTINCT subject FROM minruntime_state.event_log WHERE seq > :after"
    " AND (CAST(:until AS timestamptz) IS NULL OR applied_at <= :until) AND subject IS NOT NULL"
)


def subjects(conn: Connection, tables: StateTables, after: int, until: datetime | None) -> set[str]:
    """The subjects of the entries after seq ``after`` applied by ``until`` (None: all)."""
    rows = conn.execute(tables.text(_SUBJECTS), {"after": after, "until": until})
    return {str(subject) for subject in rows.scalars()}
