"""Read-only views of the state: live, as the service had it at a past instant, or what-if.

Every operator command reads through a read unit (``minruntime.store.unit``) whose ``State``
is the live one, or a temporary shadow filled inside a transaction that is always rolled back,
so nothing is left behind and the live state is never written.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import datetime

from sqlalchemy import Connection

from minruntime.audit.replay import PAGE_SIZE, read_first_page, read_log, replay
from minruntime.store import event_log, snapshots
from minruntime.store.event_log import LoggedRow
from minruntime.store.schema import LIVE as LIVE_TABLES
from minruntime.store.shadows import copy_live_state, create_shadow, temporary_name
from minruntime.store.snapshots import Snapshot
from minruntime.store.unit import ReadUnit, Units

# ReadUnit, Units: the types ``state_at`` yields and takes, for its callers.
__all__ = ["ReadUnit", "Units", "live_copy", "start_from_snapshot", "state_at"]


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
    """
    with units.read() as live:
        if at is None:
            yield live
            return
        conn = live.connection
        unit = live.on(create_shadow(conn, temporary_name()))
        start = newest_snapshot(conn, at) if from_snapshot else None
        after = start.log_seq if start else 0
        # The tail's first page, read once: when it is the whole tail (the usual case, the
        # snapshots being closer than a page), its subjects are the podgroups to restore
        # whole, and the replay does not read it again (each read of a tail scans the log
        # from its start to the log's end, for the entries applied by ``at``).
        first = read_first_page(conn, at, after)
        if start is not None:
            restore_snapshot(unit, start, at, podgroups, first)
        replay(conn, read_log(conn, until=at, after=after, first=first), into=unit.state.tables)
        yield unit


def start_from_snapshot(
    unit: ReadUnit, at: datetime, podgroups: Iterable[str] | None = None
) -> Snapshot | None:
    """Restore into the unit's (shadow) state the newest snapshot an answer at ``at`` may
    start from.

    ``podgroups`` (None: all) as for ``state_at``; the subjects of the tail are added to it.
    """
    start = newest_snapshot(unit.connection, at)
    if start is not None:
        restore_snapshot(unit, start, at, podgroups)
    return start


def newest_snapshot(conn: Connection, at: datetime) -> Snapshot | None:
    """The newest snapshot an answer at ``at`` may start from (None: none)."""
    return snapshots.newest(conn, at) if snapshots.available(conn) else None


def restore_snapshot(
    unit: ReadUnit,
    start: Snapshot,
    at: datetime,
    podgroups: Iterable[str] | None,
    first: Sequence[LoggedRow] | None = None,
) -> None:
    """Restore ``start`` into the unit's (shadow) state for an answer at ``at``: ``podgroups``
    (None: all) and the tail's subjects, read from ``first`` (the tail's first page) when it
    is the whole tail."""
    conn = unit.connection
    wanted = None
    if podgroups is not None:
        if first is not None and len(first) < PAGE_SIZE:
            subjects = {str(row[5]) for row in first if row[5] is not None}
        else:
            subjects = event_log.subjects(conn, LIVE_TABLES, start.log_seq, at)
        wanted = {*podgroups, *subjects}
    snapshots.restore(conn, start, unit.state.tables, wanted)


@contextmanager
def live_copy(units: Units) -> Iterator[ReadUnit]:
    """A temporary shadow holding a copy of the live state, to change without consequence.

    The unit reads the shadow; its connection changes the copy when handed the shadow's
    state tables (``apply_batch(conn, ...)``). Everything is rolled back at the end.
    """
    with units.read() as live:
        shadow = create_shadow(live.connection, temporary_name("minruntime_whatif"))
        copy_live_state(live.connection, shadow)
        yield live.on(shadow)
