"""Fill ``run_log`` from the event log: the runs that ended before the table existed.

Migration 0013 creates ``run_log``; the projection fills it from then on. The runs of the log
already applied are what a replay of the log finds, so the backfill is one: the whole log is
replayed into a temporary shadow with the service's own code, and the shadow's rows are
copied. ``replay --verify`` then finds the live table equal to a replay, as for every
projection.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from minruntime.audit.replay import read_log, replay
from minruntime.store.runs import copy_runs
from minruntime.store.schema import LIVE
from minruntime.store.shadows import create_shadow, drop_shadow, temporary_name


def backfill_runs(conn: Connection, columns: Sequence[str]) -> int:
    """Add to the live ``run_log`` (the ``columns`` given) every run a replay of the whole log
    ends, in ``conn``'s transaction; the number of rows added."""
    shadow = create_shadow(conn, temporary_name("minruntime_runs"))
    try:
        replay(conn, read_log(conn), into=shadow.tables)
        return copy_runs(conn, shadow.tables, LIVE, columns)
    finally:
        drop_shadow(conn, shadow.name)
