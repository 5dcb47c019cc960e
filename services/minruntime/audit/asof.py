"""Read-only views of the state: live, as the service had it at a past instant, or what-if.

Every operator command reads through a read unit (``minruntime.store.unit``) whose ``State``
is the live one, or a temporary shadow filled inside a transaction that is always rolled back,
so nothing is left behind and the live state is never written.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection

from minruntime.audit.replay import PAGE_SIZE, read_first_page, read_log, replay
from minruntime.ingest.memory import collected_rarely
from minruntime.store import event_log, shadows, snapshots
from minruntime.store.event_log import LoggedRow
from minruntime.store.read_transactions import export_snapshot, import_snapshot
from minruntime.store.schema import LIVE as LIVE_TABLES
from minruntime.store.shadows import Shadow, copy_live_state, temporary_name
from minruntime.store.snapshots import Document, Snapshot, StoredTable
from minruntime.store.unit import ReadUnit, Units

# ReadUnit, Units: the types ``state_at`` yields and takes, for its callers.
__all__ = ["ReadUnit", "Units", "live_copy", "shadow_from_snapshot", "state_at"]


@contextmanager
def state_at(
    units: Units,
    at: datetime | None,
    *,
    podgroups: Iterable[str] | None = None,
    from_snapshot: bool = True,
) -> Iterator[ReadUnit]:
    """The state the service had at ``at`` (None: the live state now), read-only.

    For a past instant a temporary shadow is filled with the newest projection snapshot
    whose entries were all applied by ``at`` (none: empty), and the rest of the event log up
    to ``at`` is replayed on it; the shadow answers the same SQL as the live schema (its
    queue tree and configuration are the ones in force at ``at``).

    ``podgroups`` names the podgroups the caller will read besides the running ones' rows in
    the podgroups view: given, only those and the ones the replayed tail names are restored
    whole; of the others, only the ``podgroup_state`` rows of the ones pending or running at
    the snapshot (the shadow then answers the protection functions and the ``podgroups`` view
    for running podgroups, and everything about the named ones: fast at any log length).
    None: everything. ``from_snapshot=False``
    replays the whole log up to ``at`` instead (the same answers, slower).

    The answer is made and read with the garbage collector at the replay's thresholds
    (``minruntime.ingest.memory``): its shadow's tables, the tail's events and the rows read
    are tens of thousands of objects, and at CPython's defaults a full pass over the process
    fell inside an answer now and then (0.2 s of one, in ``bench_asof.py``).
    """
    with units.read() as live:
        if at is None:
            yield live
            return
        with collected_rarely():
            unit, start, first = shadow_from_snapshot(units, live, at, podgroups, from_snapshot)
            conn = live.connection
            after = start.log_seq if start else 0
            tail = read_log(conn, until=at, after=after, first=first)
            replay(conn, tail, into=unit.state.tables)
            yield unit


def shadow_from_snapshot(
    units: Units,
    live: ReadUnit,
    at: datetime,
    podgroups: Iterable[str] | None,
    from_snapshot: bool = True,
) -> tuple[ReadUnit, Snapshot | None, list[LoggedRow]]:
    """A new shadow on ``live``'s transaction holding the newest snapshot for an answer at
    ``at`` (``podgroups`` as for ``state_at``; none with ``from_snapshot`` false); that
    snapshot, and the first page of the log's tail after it.

    The snapshot's stored tables (fetched and unpacked), the tail's first page and then the
    documents of the podgroups to restore whole are read once, on a second connection that
    sees ``live``'s database snapshot, while this one makes the shadow and restores. When
    that page is the whole tail (the usual case, the snapshots being closer than a page) its
    subjects are the podgroups restored whole, and the replay does not read it again.
    """
    conn = live.connection
    start = newest_snapshot(conn, at) if from_snapshot else None
    after = start.log_seq if start else 0
    named = None if podgroups is None else frozenset(podgroups)
    exported = export_snapshot(conn)
    with ThreadPoolExecutor(1, thread_name_prefix="minruntime-tail-reader") as reader:
        tables: Future[list[StoredTable]] | None = None
        documents: Future[Prefetched | None] | None = None
        page: Future[list[LoggedRow]]
        with units.read() as beside:
            import_snapshot(beside.connection, exported)
            if start is not None:
                tables = reader.submit(snapshots.stored_tables, beside.connection, start)
            page = reader.submit(read_first_page, beside.connection, at, after)
            if start is not None and tables is not None and named is not None:
                documents = reader.submit(
                    _tail_documents, beside.connection, start, named, tables, page
                )
            try:
                unit = live.on(create_shadow(conn, temporary_name()))
                if start is not None and tables is not None:
                    restore_snapshot(unit, start, at, named, page.result, tables.result, documents)
            finally:
                # The beside connection is not left while its reads run (nor after an error).
                reads: list[Future[Any]] = [
                    page,
                    *(f for f in (tables, documents) if f is not None),
                ]
                wait(reads)
            first = page.result()
    return unit, start, first


class Prefetched(NamedTuple):
    """Documents read beforehand for the podgroups an answer restores whole, by name."""

    uids: frozenset[str]
    documents: list[Document]


def _tail_documents(
    conn: Connection,
    start: Snapshot,
    named: frozenset[str],
    tables: Future[list[StoredTable]],
    page: Future[list[LoggedRow]],
) -> Prefetched | None:
    """The documents ``restore_snapshot`` reads for ``named`` and the tail's subjects when
    the snapshot has the active block and the first page is the whole tail (None: it reads
    them itself). Run after ``tables`` and ``page`` on the same reader."""
    if not any(table.table == snapshots.ACTIVE_BLOCK for table in tables.result()):
        return None  # it restores the active podgroups whole too: their list is read there
    rows = page.result()
    if len(rows) >= PAGE_SIZE:
        return None
    uids = frozenset({*named, *_subjects(rows)})
    return Prefetched(uids, snapshots.newest_documents(conn, start, uids))


def _subjects(page: Sequence[LoggedRow]) -> set[str]:
    """The subjects the log entries of ``page`` name (a podgroup entry's: its uid)."""
    return {str(row[5]) for row in page if row[5] is not None}


def create_shadow(conn: Connection, name: str) -> Shadow:
    """The shadow an answer is restored into and read from, once: without the indexes no
    answer uses (``shadows.UNUSED_BY_ANSWERS``)."""
    return shadows.create_shadow(conn, name, answer=True)


def newest_snapshot(conn: Connection, at: datetime) -> Snapshot | None:
    """The newest snapshot an answer at ``at`` may start from (None: none)."""
    return snapshots.newest(conn, at) if snapshots.available(conn) else None


def restore_snapshot(
    unit: ReadUnit,
    start: Snapshot,
    at: datetime,
    podgroups: Iterable[str] | None,
    first: Callable[[], Sequence[LoggedRow]] | None = None,
    tables: Callable[[], Sequence[StoredTable]] | None = None,
    prefetched: Future[Prefetched | None] | None = None,
) -> None:
    """Restore ``start`` into the unit's (shadow) state for an answer at ``at``: ``podgroups``
    (None: all) and the tail's subjects, read from ``first()`` (the tail's first page,
    asked for once the tables that need no names are restored) when it is the whole tail;
    ``tables()``: the snapshot's stored tables, read by the caller (None: read here);
    ``prefetched``: the documents the caller read for the names it expected, used when they
    are the names restored (else they are read here)."""
    conn = unit.connection
    if podgroups is None:
        snapshots.restore(conn, start, unit.state.tables, tables=tables)
        return
    named = set(podgroups)

    def wanted() -> set[str]:
        page = first() if first is not None else None
        if page is not None and len(page) < PAGE_SIZE:
            subjects = _subjects(page)
        else:
            subjects = event_log.subjects(conn, LIVE_TABLES, start.log_seq, at)
        return {*named, *subjects}

    def documents(uids: list[str]) -> Sequence[Document]:
        read = prefetched.result() if prefetched is not None else None
        if read is not None and read.uids == frozenset(uids):
            return read.documents
        return snapshots.newest_documents(conn, start, uids)

    snapshots.restore(conn, start, unit.state.tables, wanted, tables=tables, documents=documents)


@contextmanager
def live_copy(units: Units) -> Iterator[ReadUnit]:
    """A temporary shadow holding a copy of the live state, to change without consequence.

    The unit reads the shadow; its connection changes the copy when handed the shadow's
    state tables (``apply_batch(conn, ...)``). Everything is rolled back at the end.
    """
    with units.read() as live:
        shadow = shadows.create_shadow(live.connection, temporary_name("minruntime_whatif"))
        copy_live_state(live.connection, shadow)
        yield live.on(shadow)
