"""Projection snapshots: the projections copied out at one event-log position, and back.

A snapshot is one ``projection_snapshots`` row (the last event-log ``seq`` it reflects, the
latest ``applied_at`` up to it, how many entries, the uids of the pending and running
podgroups), one ``projection_snapshot_tables`` row per projection table other than the
podgroups' (its rows as ``COPY ... TO STDOUT`` text in key order, every column, bookkeeping
too, zlib-compressed), and a ``projection_snapshot_podgroups`` document for each podgroup
whose rows changed since its newest document. The state at a snapshot is its tables and, for
each podgroup, its newest document at or before the snapshot's ``seq``. Restoring is the
reverse ``COPY ... FROM STDIN`` into a shadow's empty tables.

Besides, a snapshot stores the ``podgroup_state`` rows of the podgroups pending or running
then as one more ``projection_snapshot_tables`` row, named ``podgroup_state`` (the active
block, ``ACTIVE_BLOCK``): the same rows as those podgroups' documents, in one block, so an
answer that restores the active podgroups (``restore`` with ``podgroups``) copies one block
instead of looking up a document per podgroup. Snapshots taken before it have none and
restore as before.

Which tables, and their keys, are the caller's (``minruntime.store.shadows.PROJECTIONS``).
Consistency is the caller's too: ``write`` copies what ``conn``'s transaction sees; see
``SNAPSHOT_LOCK_KEY`` for how a taker makes that exactly the state up to one ``seq``.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy import exc as sa_exc

from minruntime.errors import SnapshotError
from minruntime.store.engine import driver_cursor, driver_rows
from minruntime.store.schema import LIVE, StateTables

# Every writer of the live event log holds this advisory lock shared from its append to its
# commit (``event_log.append``); a snapshot taker holds it exclusively for the moment it takes
# its database snapshot, so no transaction that appended to the log is in flight then: the
# snapshot sees every entry up to the largest ``seq`` it sees, and their whole effect.
SNAPSHOT_LOCK_KEY: Final = int.from_bytes(b"minrtsnp", "big", signed=True)
# zlib level 1: the COPY text of a projection shrinks ~5x at a few hundred MB/s.
_LEVEL: Final = 1

_POSITION: Final = (
    "SELECT max(seq) AS seq, count(*) AS events, max(applied_at) AS applied_until,"
    " COALESCE(sum(pg_column_size(payload)), 0) AS bytes, min(applied_at) AS applied_from"
    " FROM minruntime_state.event_log WHERE seq > :after"
)
_INSERT_SNAPSHOT: Final = (
    "INSERT INTO minruntime_state.projection_snapshots"
    " (log_seq, applied_until, since_seq, applied_from, events, podgroups)"
    " VALUES (%(log_seq)s, %(applied_until)s, %(since_seq)s, %(applied_from)s, %(events)s,"
    " %(podgroups)s)"
    " RETURNING id, taken_at"
)
_INSERT_TABLE: Final = (
    "INSERT INTO minruntime_state.projection_snapshot_tables"
    " (snapshot_id, table_name, rows, columns, data) VALUES (%s, %s, %s, %s, %s)"
)
# The podgroups' tables: keyed by uid, the bulk of the state, most of it podgroups that ended
# long ago. A podgroup's rows in all four are stored as one document when they changed since
# its newest one; each snapshot lists the podgroups that were pending or running.
PODGROUP_TABLES: Final = ("podgroup_state", "subgroup_state", "pod_state", "nominations")
# The podgroup table whose active podgroups' rows a snapshot also stores as one block.
ACTIVE_BLOCK: Final = "podgroup_state"
_ACTIVE: Final = "status IN ('pending', 'running')"
_DROP_NAMED: Final = "DELETE FROM {schema}.podgroup_state WHERE uid = ANY(%(uids)s)"
_ACTIVE_UIDS: Final = (
    "SELECT uid FROM minruntime_state.podgroup_state WHERE status IN ('pending', 'running')"
    " ORDER BY uid"
)
_EVERY_PODGROUP: Final = "SELECT uid FROM minruntime_state.podgroup_state"
_CANDIDATES: Final = (
    "SELECT subject FROM minruntime_state.event_log WHERE seq > %(after)s AND subject IS NOT NULL"
)
_ACTIVE_LIST: Final = "SELECT podgroups FROM minruntime_state.projection_snapshots WHERE id = %s"
_CHANGED_SINCE: Final = (
    "SELECT subject FROM minruntime_state.event_log"
    " WHERE seq > %(after)s AND seq <= %(upto)s AND subject IS NOT NULL"
    " UNION SELECT uid FROM minruntime_state.projection_snapshot_podgroups"
    " WHERE snapshot_id = %(snapshot)s"
)
# One backward index probe per uid: the newest document at or before the position.
_NEWEST_DOCUMENTS: Final = (
    "SELECT u.uid, d.document FROM unnest(CAST(%(uids)s AS text[])) AS u(uid)"
    " CROSS JOIN LATERAL (SELECT p.document FROM minruntime_state.projection_snapshot_podgroups p"
    " WHERE p.uid = u.uid AND p.log_seq <= %(seq)s ORDER BY p.log_seq DESC LIMIT 1) d"
)
_ALL_DOCUMENTS: Final = (
    "SELECT DISTINCT ON (uid) uid, document FROM minruntime_state.projection_snapshot_podgroups"
    " WHERE log_seq <= %(seq)s ORDER BY uid, log_seq DESC"
)
_COPY_DOCUMENTS: Final = (
    "COPY minruntime_state.projection_snapshot_podgroups (uid, snapshot_id, log_seq, document)"
    " FROM STDIN"
)
_SNAPSHOTS: Final = (
    "SELECT id, log_seq, applied_until, events, taken_at FROM minruntime_state.projection_snapshots"
)
_TABLES: Final = (
    "SELECT table_name, rows, columns, data FROM minruntime_state.projection_snapshot_tables"
    " WHERE snapshot_id = %(snapshot)s ORDER BY table_name"
)
_BLOCK: Final = (
    "SELECT rows, columns, data FROM minruntime_state.projection_snapshot_tables"
    " WHERE snapshot_id = %(snapshot)s AND table_name = %(table)s"
)


class Snapshot(NamedTuple):
    """One stored snapshot: the state after every event-log entry up to ``log_seq``."""

    id: int
    log_seq: int
    # The latest applied_at of those entries: an answer "at T" may start here when T >= it.
    applied_until: datetime
    events: int
    taken_at: datetime


class QuietSpan(NamedTuple):
    """Event-log positions (``start``, ``end``]: no entry there was applied by an instant."""

    start: int
    end: int


class LogPosition(NamedTuple):
    """How far the event log a transaction sees goes (``seq`` 0: empty)."""

    seq: int
    events: int
    applied_until: datetime | None
    # The stored size of the payloads after the snapshot it was counted from (all of them
    # without one): what a replay of those entries costs, as decoding and applying them grows
    # with their size (a gang of 2,000 pods is one entry and the work of hundreds).
    bytes: int = 0
    # The earliest applied_at of those same entries, the ones after seq ``since`` (None: none).
    applied_from: datetime | None = None
    since: int = 0


# How long a taker waits for the lock: the writers that come after it wait behind it, so a
# writer that holds the lock long (a huge batch) makes the taker give up, not the writers wait.
LOCK_TIMEOUT: Final = "2s"


def take_lock(conn: Connection, timeout: str = LOCK_TIMEOUT) -> bool:
    """Wait until no event-log writer is in flight and hold them off until ``conn``'s
    transaction ends; False (nothing held) when that took longer than ``timeout``."""
    conn.execute(sa.text("SELECT set_config('lock_timeout', :timeout, true)"), {"timeout": timeout})
    try:
        with conn.begin_nested():
            conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({SNAPSHOT_LOCK_KEY})")
    except sa_exc.OperationalError as error:
        if isinstance(error.orig, psycopg.errors.LockNotAvailable):
            return False
        raise
    return True


def position(conn: Connection, after: Snapshot | None = None) -> LogPosition:
    """The log position ``conn``'s transaction sees (counted on from ``after``, if given)."""
    row = (
        conn.execute(LIVE.text(_POSITION), {"after": after.log_seq if after else 0})
        .mappings()
        .one()
    )
    if after is None:
        return LogPosition(
            int(row["seq"] or 0),
            int(row["events"]),
            row["applied_until"],
            int(row["bytes"]),
            row["applied_from"],
        )
    if row["seq"] is None:
        return LogPosition(after.log_seq, after.events, after.applied_until, since=after.log_seq)
    return LogPosition(
        int(row["seq"]),
        after.events + int(row["events"]),
        max(after.applied_until, row["applied_until"]),
        int(row["bytes"]),
        row["applied_from"],
        after.log_seq,
    )


def write(
    conn: Connection,
    source: StateTables,
    projections: Mapping[str, Sequence[str]],
    at: LogPosition,
    previous: Snapshot | None,
) -> Snapshot:
    """Copy ``projections`` (table -> key columns) of ``source`` into a new snapshot at ``at``.

    Whole tables, except the podgroups' (``PODGROUP_TABLES``): a podgroup's rows are stored as
    one document when they differ from its newest stored one, and the snapshot lists the
    podgroups that are pending or running. Only podgroups that an entry after ``previous``
    names can differ (every podgroup entry names its podgroup as subject), so a snapshot costs
    the entries since the previous one and the list, not the whole state.
    """
    if at.applied_until is None:
        raise SnapshotError("the event log is empty: there is nothing to snapshot")
    with driver_cursor(conn) as cursor:
        active = [uid for (uid,) in cursor.execute(source.sql(_ACTIVE_UIDS))]
        row = cursor.execute(
            LIVE.sql(_INSERT_SNAPSHOT),
            {
                "log_seq": at.seq,
                "applied_until": at.applied_until,
                "since_seq": at.since,
                "applied_from": at.applied_from,
                "events": at.events,
                "podgroups": zlib.compress(json.dumps(active).encode(), _LEVEL),
            },
        ).fetchone()
        assert row is not None
        snapshot = Snapshot(row[0], at.seq, at.applied_until, at.events, row[1])
        for table, keys in projections.items():
            if table in PODGROUP_TABLES:
                continue
            _store_table(cursor, source, snapshot, table, _copy_out(cursor, source, table, keys))
        keys = projections[ACTIVE_BLOCK]
        block = _copy_out(cursor, source, ACTIVE_BLOCK, keys, _ACTIVE)
        _store_table(cursor, source, snapshot, ACTIVE_BLOCK, block)
        after = previous.log_seq if previous is not None else 0
        candidates = source.sql(_CANDIDATES if previous else _EVERY_PODGROUP)
        documents = _documents(cursor, source, projections, candidates, {"after": after})
        stored = _newest_documents(cursor, list(documents), at.seq)
        changed = [
            (uid, snapshot.id, at.seq, document)
            for uid, document in documents.items()
            if stored.get(uid) != document
        ]
        if changed:
            with cursor.copy(_COPY_DOCUMENTS) as copy:
                for version in changed:
                    copy.write_row(version)
    return snapshot


def _store_table(
    cursor: psycopg.Cursor[Any], source: StateTables, snapshot: Snapshot, table: str, text: bytes
) -> None:
    """One ``projection_snapshot_tables`` row: ``text`` (COPY text of ``table``) compressed."""
    # COPY text escapes newlines inside values: one line per row.
    cursor.execute(
        LIVE.sql(_INSERT_TABLE),
        (
            snapshot.id,
            table,
            text.count(b"\n"),
            _columns(source, table),
            zlib.compress(text, _LEVEL),
        ),
    )


def _copy_out(
    cursor: psycopg.Cursor[Any],
    source: StateTables,
    table: str,
    keys: Sequence[str],
    where: str = "TRUE",
    params: Mapping[str, Any] | None = None,
) -> bytes:
    names = ", ".join(f'"{name}"' for name in _columns(source, table))
    order = ", ".join(f'"{key}"' for key in keys)
    query = (
        f"COPY (SELECT {names} FROM {source.schema}.{table} WHERE {where} ORDER BY {order})"
        " TO STDOUT"
    )
    with cursor.copy(query, params) as copy:
        return b"".join(bytes(block) for block in copy)


def _documents(
    cursor: psycopg.Cursor[Any],
    source: StateTables,
    projections: Mapping[str, Sequence[str]],
    uids: str,
    params: Mapping[str, Any],
) -> dict[str, bytes]:
    """uid -> its rows in every podgroup table (``table<TAB>COPY line``), for ``uids`` (SQL)."""
    parts: dict[str, list[bytes]] = {}
    for table in PODGROUP_TABLES:
        text = _copy_out(cursor, source, table, projections[table], f"uid IN ({uids})", params)
        prefix = table.encode() + b"\t"
        for line in text.splitlines(keepends=True):
            # The uid is the first column of every podgroup table.
            uid = _uid(line)
            parts.setdefault(uid, []).append(prefix + line)
    return {uid: b"".join(lines) for uid, lines in parts.items()}


def _newest_documents(
    cursor: psycopg.Cursor[Any], uids: list[str], log_seq: int
) -> dict[str, bytes]:
    """uid -> its newest stored document at or before ``log_seq`` (COPY-escaped uids)."""
    return dict(_document_rows(cursor, uids, log_seq)) if uids else {}


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


# The snapshots whose entries were all applied after an instant: each saw every entry up to
# its log_seq, and no later entry takes a seq at or below it, so none of (since_seq, log_seq]
# was applied before its applied_from, ever (whatever a later seq carries).
_QUIET: Final = (
    "SELECT since_seq, log_seq FROM minruntime_state.projection_snapshots"
    " WHERE log_seq > %(after)s AND since_seq IS NOT NULL AND applied_from > %(until)s"
    " ORDER BY since_seq, log_seq"
)


def quiet_spans(conn: Connection, after: int, until: datetime) -> list[QuietSpan]:
    """The spans of the event log after seq ``after`` that hold no entry applied by ``until``,
    as the snapshots recorded them (``applied_from``), merged, in order.

    ``applied_at`` is the writer's transaction start: a later ``seq`` may carry an earlier
    time, so a read of the entries applied by ``until`` cannot stop at a ``seq`` it finds;
    it can skip these spans, and only these. Snapshots taken before migration 0026 recorded
    nothing and are read as before.
    """
    spans: list[QuietSpan] = []
    for since, end in driver_rows(conn, LIVE.sql(_QUIET), {"after": after, "until": until}):
        start = max(int(since), after)
        if spans and start <= spans[-1].end:
            spans[-1] = QuietSpan(spans[-1].start, max(spans[-1].end, int(end)))
        else:
            spans.append(QuietSpan(start, int(end)))
    return spans


Document = tuple[str, bytes]
"""A podgroup's uid and its stored document (its rows in every podgroup table)."""


def newest_documents(conn: Connection, snapshot: Snapshot, uids: Iterable[str]) -> list[Document]:
    """The newest document at or before ``snapshot`` of each of ``uids`` that has one: what
    ``restore`` reads for the podgroups it restores whole, for a caller to read beforehand
    (on another connection that sees the same database snapshot)."""
    with driver_cursor(conn) as cursor:
        return _document_rows(cursor, sorted(set(uids)), snapshot.log_seq)


def _document_rows(cursor: psycopg.Cursor[Any], uids: list[str], log_seq: int) -> list[Document]:
    """Each of ``uids``' newest document at or before ``log_seq``, one index probe each (in
    binary: the documents as raw bytes, not hex text)."""
    rows = cursor.execute(LIVE.sql(_NEWEST_DOCUMENTS), {"uids": uids, "seq": log_seq}, binary=True)
    return [(str(uid), bytes(document)) for uid, document in rows]


class StoredTable(NamedTuple):
    """One table of a snapshot as ``restore`` copies it in: its rows' COPY text, unpacked."""

    table: str
    rows: int
    columns: list[str]
    text: bytes


def stored_tables(conn: Connection, snapshot: Snapshot) -> list[StoredTable]:
    """``snapshot``'s stored tables (the active block among them), unpacked: what ``restore``
    reads first, for a caller to read beforehand on another connection that sees the same
    database snapshot (``read_transactions.import_snapshot``)."""
    stored = driver_rows(conn, LIVE.sql(_TABLES), {"snapshot": snapshot.id})
    return [
        StoredTable(str(table), int(rows), list(columns), zlib.decompress(data))
        for table, rows, columns, data in stored
    ]


def restore(
    conn: Connection,
    snapshot: Snapshot,
    target: StateTables,
    podgroups: Iterable[str] | Callable[[], Iterable[str]] | None = None,
    *,
    active: bool = True,
    tables: Callable[[], Sequence[StoredTable]] | None = None,
    documents: Callable[[list[str]], Sequence[Document]] | None = None,
) -> dict[str, int]:
    """Fill ``target``'s (empty) tables with ``snapshot``; table -> rows restored.

    ``podgroups`` None: the whole state. Else the podgroups that were pending or running at
    the snapshot (unless ``active`` is false) and the ones named there, no other: enough for
    answers about running podgroups and the named ones, after a replay of the entries whose
    subjects were named too. Of the active ones that are not named, only the
    ``podgroup_state`` rows when the snapshot has the active block (one COPY); their whole
    documents when it has none (a snapshot taken before the block). ``podgroups`` may be a
    function, called once the tables that need no names are restored (the caller learns the
    names meanwhile). ``tables``: ``stored_tables(conn, snapshot)``, read by the caller (a
    function, called when they are needed); None: read here. ``documents(uids)``:
    ``newest_documents(conn, snapshot, uids)``, which the caller may have read beforehand for
    the names it expected (None: read here).
    """
    if target.is_live:
        raise RuntimeError("a snapshot is restored into a shadow, never into the live state")
    restored: dict[str, int] = {}
    stored = tables() if tables is not None else stored_tables(conn, snapshot)
    with driver_cursor(conn) as cursor:
        block = None
        for stored_table in stored:
            if stored_table.table == ACTIVE_BLOCK:
                block = stored_table
                continue
            _copy_in(cursor, target, stored_table.table, stored_table.columns, stored_table.text)
            restored[stored_table.table] = stored_table.rows
        found: Sequence[Document]
        if podgroups is None:
            # Binary results: the documents as raw bytes, not hex text.
            found = cursor.execute(
                LIVE.sql(_ALL_DOCUMENTS), {"seq": snapshot.log_seq}, binary=True
            ).fetchall()
        else:
            used = block if active else None
            if used is not None:
                _copy_in(cursor, target, ACTIVE_BLOCK, used.columns, used.text)
            named = sorted(set(podgroups() if callable(podgroups) else podgroups))
            if used is not None:
                restored[ACTIVE_BLOCK] = used.rows - _drop_named(cursor, target, named)
                wanted = named
            else:
                wanted = sorted({*(active_list(conn, snapshot) if active else []), *named})
            found = (
                documents(wanted)
                if documents is not None
                else _document_rows(cursor, wanted, snapshot.log_seq)
            )
        lines: dict[bytes, list[bytes]] = {}
        for _, document in found:
            for line in bytes(document).splitlines(keepends=True):
                table_name, row = line.split(b"\t", 1)
                lines.setdefault(table_name, []).append(row)
        for table_name, rows_of in lines.items():
            table = table_name.decode()
            _copy_in(cursor, target, table, _columns(target, table), b"".join(rows_of))
            restored[table] = restored.get(table, 0) + len(rows_of)
    for table in restored:
        continue_numbering(conn, target, table)
    # Or the replay after a restore would not look its podgroups up by uid through the keys.
    refresh_statistics(conn, target)
    return restored


def _drop_named(cursor: psycopg.Cursor[Any], target: StateTables, named: list[str]) -> int:
    """Delete the ``named`` podgroups' rows the active block put in ``target``'s
    podgroup_state (they are restored whole from their documents); how many."""
    if not named:
        return 0
    cursor.execute(_DROP_NAMED.format(schema=target.schema), {"uids": named})
    return cursor.rowcount


def active_block(conn: Connection, snapshot: Snapshot, target: StateTables) -> int | None:
    """Copy ``snapshot``'s active block into ``target``'s (empty) podgroup_state; its rows
    (None: the snapshot has no block)."""
    with driver_cursor(conn) as cursor:
        found = cursor.execute(
            LIVE.sql(_BLOCK), {"snapshot": snapshot.id, "table": ACTIVE_BLOCK}
        ).fetchone()
        if found is None:
            return None
        _copy_in(cursor, target, ACTIVE_BLOCK, list(found[1]), zlib.decompress(found[2]))
        return int(found[0])


def refresh_statistics(conn: Connection, tables: StateTables) -> None:
    """Fresh (rough: a small sample) planner statistics of a shadow's podgroup tables.

    A shadow is filled inside one transaction, which autovacuum never sees: without them the
    planner takes its tables for empty and joins a batch's rows with them by scanning them
    whole, which grows with the shadow.
    """
    if tables.is_live:
        raise RuntimeError("the live tables have autovacuum")
    conn.exec_driver_sql("SET LOCAL default_statistics_target = 10")
    for table in PODGROUP_TABLES:
        conn.exec_driver_sql(f"ANALYZE {tables.schema}.{table}")
    conn.exec_driver_sql("RESET default_statistics_target")


class Pruned(NamedTuple):
    """What ``prune`` removed."""

    snapshots: int
    documents: int
    kept_from: Snapshot | None  # the oldest snapshot kept (None: there were none)


# Documents strictly before the oldest kept snapshot's position that a newer one (at or before
# that position) supersedes: no kept snapshot can use them.
_PRUNE_DOCUMENTS: Final = (
    "DELETE FROM minruntime_state.projection_snapshot_podgroups d WHERE d.log_seq < :seq"
    " AND EXISTS (SELECT 1 FROM minruntime_state.projection_snapshot_podgroups n"
    " WHERE n.uid = d.uid AND n.log_seq > d.log_seq AND n.log_seq <= :seq)"
)
# The documents left before that position are the newest of their podgroups there: the oldest
# kept snapshot uses them, so they become its own.
_ADOPT_DOCUMENTS: Final = (
    "UPDATE minruntime_state.projection_snapshot_podgroups SET snapshot_id = :id"
    " WHERE log_seq < :seq AND snapshot_id <> :id"
)
_PRUNE_TABLES: Final = (
    "DELETE FROM minruntime_state.projection_snapshot_tables WHERE snapshot_id IN"
    " (SELECT id FROM minruntime_state.projection_snapshots WHERE log_seq < :seq)"
)
_PRUNE_SNAPSHOTS: Final = "DELETE FROM minruntime_state.projection_snapshots WHERE log_seq < :seq"


def prune(conn: Connection, keep: int) -> Pruned:
    """Remove every snapshot but the newest ``keep`` (at least 1), in the caller's transaction.

    A podgroup's document serves every later snapshot until its next one, so the newest
    document of each podgroup at or before the oldest kept snapshot's position stays (and
    becomes that snapshot's); only the documents it supersedes go. Every kept snapshot then
    restores exactly as before. Needs the owner role: the runtime role may not delete
    snapshots.
    """
    if keep < 1:
        raise SnapshotError("keep at least one snapshot")
    stored = snapshots(conn)
    if len(stored) <= keep:
        return Pruned(0, 0, stored[0] if stored else None)
    oldest = stored[-keep]
    where = {"seq": oldest.log_seq, "id": oldest.id}
    documents = conn.execute(LIVE.text(_PRUNE_DOCUMENTS), where).rowcount
    conn.execute(LIVE.text(_ADOPT_DOCUMENTS), where)
    conn.execute(LIVE.text(_PRUNE_TABLES), where)
    removed = conn.execute(LIVE.text(_PRUNE_SNAPSHOTS), where).rowcount
    return Pruned(removed, documents, oldest)


def active_list(conn: Connection, snapshot: Snapshot) -> list[str]:
    """The podgroups ``snapshot`` lists as pending or running then."""
    listed = conn.exec_driver_sql(LIVE.sql(_ACTIVE_LIST), (snapshot.id,)).scalar_one_or_none()
    return list(json.loads(zlib.decompress(listed))) if listed is not None else []


def active_uids(conn: Connection, tables: StateTables) -> list[str]:
    """The podgroups pending or running in ``tables`` (what a snapshot lists), in order."""
    return [str(uid) for uid in conn.exec_driver_sql(tables.sql(_ACTIVE_UIDS)).scalars()]


def changed_since(conn: Connection, previous: Snapshot, snapshot: Snapshot) -> list[str]:
    """The podgroups whose rows can differ between two snapshots' positions: the subjects of
    the log's entries in between (every podgroup entry names its podgroup) and the podgroups
    ``snapshot`` stores a document of."""
    found = conn.exec_driver_sql(
        LIVE.sql(_CHANGED_SINCE),
        {"after": previous.log_seq, "upto": snapshot.log_seq, "snapshot": snapshot.id},
    ).scalars()
    return sorted(str(uid) for uid in found)


def _copy_in(
    cursor: psycopg.Cursor[Any], target: StateTables, table: str, columns: list[str], text: bytes
) -> None:
    names = ", ".join(f'"{name}"' for name in columns)
    with cursor.copy(f"COPY {target.schema}.{table} ({names}) FROM STDIN") as copy:
        copy.write(text)


_ESCAPES: Final = {b"b": b"\b", b"f": b"\f", b"n": b"\n", b"r": b"\r", b"t": b"\t", b"v": b"\v"}


def _uid(line: bytes) -> str:
    """The first column (the uid) of a COPY text line, unescaped."""
    field = line.split(b"\t", 1)[0].rstrip(b"\n")
    if b"\\" not in field:
        return field.decode()
    out, i = bytearray(), 0
    while i < len(field):
        if field[i : i + 1] == b"\\" and i + 1 < len(field):
            nxt = field[i + 1 : i + 2]
            out += _ESCAPES.get(nxt, nxt)
            i += 2
        else:
            out += field[i : i + 1]
            i += 1
    return out.decode()


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
