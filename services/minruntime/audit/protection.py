"""The protection table at an instant, read from a shadow's SQL read surface.

The numbers are the SQL functions' own (``S.preempt_protection(at)``,
``S.reclaim_protection(q, at)``): this module only reads them, adds each podgroup's node pool
(so a default can say whose default it is) and words the notes a reader needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import Connection

from minruntime.store.shadows import Shadow

PREEMPT: Final = "preempt"
RECLAIM: Final = "reclaim"

_COLUMNS: Final = (
    "r.uid, r.queue, p.node_pool, r.start_time, r.min_runtime, r.resolved_from,"
    " r.protected_until, r.is_protected, r.evictable_pods"
)


@dataclass(frozen=True, slots=True)
class ProtectionRow:
    """One running podgroup's protection window, as the SQL read surface resolves it."""

    uid: str
    queue: str | None
    node_pool: str
    start_time: datetime | None
    min_runtime: timedelta
    # The queue whose value applied; None: the node pool's default.
    resolved_from: str | None
    protected_until: datetime | None
    is_protected: bool
    evictable_pods: int


@dataclass(frozen=True, slots=True)
class ProtectionTable:
    """Every running podgroup's window at ``at``, for the preempt rule or one reclaimer."""

    at: datetime
    rule: str
    reclaimer_queue: str | None
    rows: tuple[ProtectionRow, ...]
    # What a reader must know to read the rows right (unknown queue, ...).
    notes: tuple[str, ...] = ()


def instant(conn: Connection, at: datetime | None) -> datetime:
    """``at``, or the database's now() (the transaction's start) for the live state."""
    if at is not None:
        return at
    return conn.execute(sa.text("SELECT now()")).scalar_one()  # type: ignore[no-any-return]


def queue_exists(conn: Connection, shadow: Shadow, name: str) -> bool:
    """True when the shadow's queue tree has a queue called ``name``."""
    found = conn.execute(
        sa.text(f"SELECT 1 FROM {shadow.read_schema}.queues WHERE name = :name"), {"name": name}
    ).first()
    return found is not None


def protection_rows(
    conn: Connection,
    shadow: Shadow,
    at: datetime,
    reclaimer_queue: str | None = None,
    uid: str | None = None,
) -> tuple[ProtectionRow, ...]:
    """The SQL function's rows at ``at`` (all running podgroups, or only ``uid``), by uid."""
    read = shadow.read_schema
    source = (
        f"{read}.preempt_protection(:at)"
        if reclaimer_queue is None
        else f"{read}.reclaim_protection(:reclaimer, :at)"
    )
    result = conn.execute(
        sa.text(
            f"SELECT {_COLUMNS} FROM {source} r JOIN {read}.podgroups p USING (uid)"
            " WHERE CAST(:uid AS text) IS NULL OR r.uid = :uid ORDER BY r.uid"
        ),
        {"at": at, "reclaimer": reclaimer_queue, "uid": uid},
    )
    return tuple(_row(row) for row in result)


def protection_table(
    conn: Connection, shadow: Shadow, at: datetime | None, reclaimer_queue: str | None = None
) -> ProtectionTable:
    """The protection table at ``at`` (None: the database's now) in ``shadow``."""
    moment = instant(conn, at)
    rows = protection_rows(conn, shadow, moment, reclaimer_queue)
    notes: list[str] = []
    if reclaimer_queue is not None:
        if not queue_exists(conn, shadow, reclaimer_queue):
            notes.append(
                f"queue {reclaimer_queue!r} is not in the queue tree: as in KAI, every "
                "podgroup gets its node pool's defaultReclaimMinRuntime"
            )
        elif any(row.queue == reclaimer_queue for row in rows):
            notes.append(
                f"podgroups in {reclaimer_queue!r} itself face the preempt rule from a "
                "preemptor in their own queue (see `minruntime protection` without "
                "--reclaimer-queue)"
            )
    return ProtectionTable(
        at=moment,
        rule=PREEMPT if reclaimer_queue is None else RECLAIM,
        reclaimer_queue=reclaimer_queue,
        rows=rows,
        notes=tuple(notes),
    )


def _row(row: Any) -> ProtectionRow:
    return ProtectionRow(
        uid=row.uid,
        queue=row.queue,
        node_pool=row.node_pool,
        start_time=row.start_time,
        min_runtime=row.min_runtime,
        resolved_from=row.resolved_from,
        protected_until=row.protected_until,
        is_protected=bool(row.is_protected),
        evictable_pods=int(row.evictable_pods),
    )
