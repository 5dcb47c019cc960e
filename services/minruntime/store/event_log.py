"""The event log: its one writer (``append``), the de-duplication reads of a batch, and the
reads of replays (``read_page``, ``count``: always the live log, the one source of truth).

Every applied event is appended once: input events with their Kafka position, the decisions
the service made itself without one (logged in the transaction that makes them). Its
``(source, event_id)`` is the de-duplication key of CONTRACT.md §1.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from minruntime.store.bulk import insert_many, json_list
from minruntime.store.engine import driver_rows
from minruntime.store.parts import Part
from minruntime.store.schema import StateTables
from minruntime.store.snapshots import SNAPSHOT_LOCK_KEY, quiet_spans

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


# A range of the log ends at seq ``upto`` (``_UPTO``) or goes on to the log's end ("").
_UPTO: Final = "AND seq <= %(upto)s"
# (after, upto]: the seqs of one range (upto None: to the log's end).
Range = tuple[int, int | None]


def ranges(
    conn: Connection, tables: StateTables, after: int, until: datetime | None
) -> list[Range]:
    """The ranges of seq after ``after`` that can hold entries applied by ``until``, in order:
    the live log but the spans the snapshots recorded as applied later
    (``store.snapshots.quiet_spans``); one range to the end without ``until``."""
    if until is None or not tables.is_live:
        return [(after, None)]
    found: list[Range] = []
    for span in quiet_spans(conn, after, until):
        if span.start > after:
            found.append((after, span.start))
        after = max(after, span.end)
    return [*found, (after, None)]


_SUBJECTS: Final = (
    "SELECT DISTINCT subject FROM minruntime_state.event_log WHERE seq > %(after)s {upto}"
    " AND (CAST(%(until)s AS timestamptz) IS NULL OR applied_at <= %(until)s)"
    " AND subject IS NOT NULL"
)


def subjects(conn: Connection, tables: StateTables, after: int, until: datetime | None) -> set[str]:
    """The subjects of the entries after seq ``after`` applied by ``until`` (None: all)."""
    found: set[str] = set()
    for start, upto in ranges(conn, tables, after, until):
        statement = tables.sql(_SUBJECTS.format(upto=_UPTO if upto is not None else ""))
        params = {"after": start, "upto": upto, "until": until}
        found.update(str(subject) for subject in conn.exec_driver_sql(statement, params).scalars())
    return found


_READ: Final = (
    "SELECT seq, topic, partition, {offset} type, {rest} payload::text"
    " FROM minruntime_state.event_log"
    " WHERE seq > %(after)s {upto}"
    " AND (CAST(%(until)s AS timestamptz) IS NULL OR applied_at <= %(until)s)"
    " {only} ORDER BY seq LIMIT %(limit)s"
)
# The columns a replay of the log does not read come back as NULLs (a third of the cost of a
# row, converted for nothing otherwise).
_FULL: Final = {"offset": '"offset",', "rest": "subject, event_time, applied_at,"}
_LEAN: Final = {"offset": "NULL::bigint,", "rest": "subject, NULL::timestamptz, NULL::timestamptz,"}
_ABOUT: Final = "AND ((subject = %(subject)s AND type <> ALL(%(other)s)) OR type = ANY(%(shared)s))"
_READS: Final = {
    (full, about, bounded): _READ.format(
        only=_ABOUT if about else "", upto=_UPTO if bounded else "", **(_FULL if full else _LEAN)
    )
    for full in (False, True)
    for about in (False, True)
    for bounded in (False, True)
}
_COUNT: Final = (
    "SELECT count(*) FROM minruntime_state.event_log WHERE seq > %(after)s {upto}"
    " AND (CAST(%(until)s AS timestamptz) IS NULL OR applied_at <= %(until)s)"
)

# (seq, topic, partition, offset, type, subject, event_time, applied_at, payload text)
LoggedRow = tuple[int, str, int | None, int | None, str, str | None, datetime | None, datetime, str]


class About(NamedTuple):
    """The entries about one subject (except ``other`` types), and every entry of ``shared``
    types (events that concern every subject, such as the queue tree's)."""

    subject: str
    other: tuple[str, ...] = ()
    shared: tuple[str, ...] = ()


class OfPart(NamedTuple):
    """The entries of one part of the state (``store.parts``): those of ``scoped`` types
    whose subject (a podgroup) is in the part, the others in the first part; and the entries
    at ``positions`` whatever their part (where the reader must stop: snapshots)."""

    part: Part
    scoped: tuple[str, ...]
    positions: tuple[int, ...] = ()
    # Entries of this type (committed requeues) are also the part's when a podgroup they
    # promise capacity to (``data.placements[].podgroup``) is: the promise rows are its.
    promising: str = ""
    # Entries of these types are every part's: the queue tree's and the configurations' (the
    # windows of the runs a part's podgroups end are resolved in them).
    shared: tuple[str, ...] = ()

    @property
    def condition(self) -> str:
        """SQL: an entry is the part's (not only at a position)."""
        return (
            f"(CASE WHEN type = ANY(%(scoped)s) AND subject IS NOT NULL"
            f" THEN {self.part.of_column('subject')}"
            f" WHEN type = ANY(%(shared)s) THEN TRUE ELSE {self.part.first} END)"
        )

    @property
    def borrowing(self) -> str:
        """SQL: an entry promises capacity to a podgroup of the part."""
        beneficiary = self.part.of_column("p.placement->>'podgroup'")
        return (
            "(type = %(promising)s AND EXISTS (SELECT FROM"
            " jsonb_array_elements(payload->'data'->'placements') AS p(placement)"
            f" WHERE {beneficiary}))"
        )

    @property
    def params(self) -> dict[str, Any]:
        return {
            "scoped": list(self.scoped),
            "positions": list(self.positions),
            "promising": self.promising,
            "shared": list(self.shared),
        }


class Marks(NamedTuple):
    """Entries a part reads that are not simply its own."""

    # At a position only (another part's): a boundary, not applied.
    foreign: frozenset[int]
    # Another part's decisions that promise capacity to this part's podgroups.
    borrowed: frozenset[int]


_MARKS: Final = (
    "SELECT seq, {borrowing} FROM minruntime_state.event_log"
    " WHERE (seq = ANY(%(positions)s) OR {borrowing}) AND NOT {condition}"
)


def marks(conn: Connection, tables: StateTables, of_part: OfPart) -> Marks:
    """The entries of ``of_part``'s reads that are another part's (a few: positions and
    promising decisions)."""
    statement = tables.sql(_MARKS.format(borrowing=of_part.borrowing, condition=of_part.condition))
    rows = conn.exec_driver_sql(statement, of_part.params).all()
    return Marks(
        frozenset(int(seq) for seq, borrowed in rows if not borrowed),
        frozenset(int(seq) for seq, borrowed in rows if borrowed),
    )


def read_page(
    conn: Connection,
    tables: StateTables,
    *,
    after: int,
    until: datetime | None,
    limit: int,
    about: About | None = None,
    full: bool = False,
    of_part: OfPart | None = None,
) -> list[LoggedRow]:
    """Up to ``limit`` entries after seq ``after`` applied by ``until`` (None: all), in order,
    as plain tuples, in the caller's transaction. Without ``full`` the offset and times are
    None (a replay of the log reads neither). ``of_part``: only those entries (not with
    ``about``).

    Straight from the driver, in binary (a replay reads the whole log: SQLAlchemy's rows and
    text conversions cost more than the query); its errors are raised as SQLAlchemy's, as
    every other read's. With ``until`` only the ``ranges`` that can hold such entries are
    read (not the log to its end).
    """
    params: dict[str, Any] = {"after": after, "until": until, "limit": limit}
    if about is not None:
        params.update(subject=about.subject, other=list(about.other), shared=list(about.shared))
    if of_part is not None and about is not None:
        raise ValueError("a read is about one subject or of one part, not both")
    if of_part is not None:
        params.update(of_part.params)
    rows: list[LoggedRow] = []
    for start, upto in ranges(conn, tables, after, until):
        if of_part is None:
            statement = tables.sql(_READS[full, about is not None, upto is not None])
        else:
            only = f"AND ({of_part.condition} OR {of_part.borrowing} OR seq = ANY(%(positions)s))"
            shape = _FULL if full else _LEAN
            statement = tables.sql(
                _READ.format(only=only, upto=_UPTO if upto is not None else "", **shape)
            )
        params.update(after=start, upto=upto, limit=limit - len(rows))
        rows += driver_rows(conn, statement, params, binary=True)
        if len(rows) == limit:
            break
    return rows


def count(conn: Connection, tables: StateTables, *, after: int, until: datetime | None) -> int:
    """How many entries after seq ``after`` were applied by ``until`` (None: all)."""
    total = 0
    for start, upto in ranges(conn, tables, after, until):
        statement = tables.sql(_COUNT.format(upto=_UPTO if upto is not None else ""))
        params = {"after": start, "upto": upto, "until": until}
        total += int(conn.exec_driver_sql(statement, params).scalar_one())
    return total
