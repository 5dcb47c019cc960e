"""Fill new projection columns from the event log: what a replay of the log finds.

Migration 0013 creates ``run_log``, migration 0015 the preemption-delay columns of
``podgroup_state``; the projection fills them from then on. For the log already applied the
answer is what a replay of the log finds, so each backfill is one: the whole log is replayed
into a temporary shadow with the service's own code, and the shadow's values are copied.
``replay --verify`` then finds the live tables equal to a replay, as for every projection.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sqlalchemy import Connection

from minruntime.audit.replay import read_log, replay
from minruntime.store.runs import copy_podgroup_columns, copy_runs
from minruntime.store.schema import LIVE, StateTables
from minruntime.store.shadows import create_shadow, drop_shadow, temporary_name


def backfill_runs(conn: Connection, columns: Sequence[str]) -> int:
    """Add to the live ``run_log`` (the ``columns`` given) every run a replay of the whole log
    ends, in ``conn``'s transaction; the number of rows added."""
    return _from_replay(conn, lambda replayed: copy_runs(conn, replayed, LIVE, columns))


def backfill_podgroup_columns(conn: Connection, columns: Sequence[str]) -> int:
    """Set the ``columns`` of every live podgroup to what a replay of the whole log gives, in
    ``conn``'s transaction; the number of rows updated."""
    return _from_replay(conn, lambda replayed: copy_podgroup_columns(conn, replayed, LIVE, columns))


def _from_replay(conn: Connection, copy: Callable[[StateTables], int]) -> int:
    shadow = create_shadow(conn, temporary_name("minruntime_backfill"))
    try:
        replay(conn, read_log(conn), into=shadow.tables)
        return copy(shadow.tables)
    finally:
        drop_shadow(conn, shadow.name)
