"""Read-only views of the state: live, as the service had it at a past instant, or what-if.

Every operator command reads through a ``Shadow`` (see ``minruntime.audit.shadow``): the live
schemas, or a temporary shadow filled inside a transaction that is always rolled back, so
nothing is left behind and the live state is never written.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from minruntime.audit.replay import read_log, replay
from minruntime.audit.shadow import LIVE, Shadow, copy_live_state, create_shadow, temporary_name


@contextmanager
def snapshot(engine: Engine) -> Iterator[Connection]:
    """A REPEATABLE READ transaction that is rolled back at the end, whatever happens."""
    with engine.connect() as conn:
        conn.execute(sa.text("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ"))
        try:
            yield conn
        finally:
            conn.rollback()


@contextmanager
def state_at(engine: Engine, at: datetime | None) -> Iterator[tuple[Connection, Shadow]]:
    """The state the service had at ``at`` (None: the live state now), read-only.

    For a past instant the event log is replayed up to ``at`` into a temporary shadow; the
    shadow answers the same SQL as the live schema (its queue tree and configuration are
    the ones in force at ``at``).
    """
    with snapshot(engine) as conn:
        if at is None:
            yield conn, LIVE
            return
        shadow = create_shadow(conn, temporary_name())
        replay(conn, read_log(conn, until=at))
        yield conn, shadow


@contextmanager
def live_copy(engine: Engine) -> Iterator[tuple[Connection, Shadow]]:
    """A temporary shadow holding a copy of the live state, to change without consequence.

    ``conn`` is pointed at the shadow's state tables: ``apply_batch(conn, ...)`` changes the
    copy. Everything is rolled back at the end.
    """
    with snapshot(engine) as conn:
        shadow = create_shadow(conn, temporary_name("minruntime_whatif"))
        copy_live_state(conn, shadow)
        yield conn, shadow
