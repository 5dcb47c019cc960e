"""The protection table at an instant, read from a shadow's SQL read surface.

The numbers are the SQL functions' own (``S.preempt_protection(at)``,
``S.reclaim_protection(q, at)``): this module only reads them, adds each podgroup's node pool
(so a default can say whose default it is) and words the notes a reader needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final

from sqlalchemy import Connection

from minruntime.store.read_surface import (
    ProtectionRow,
    protection_rows,
    queue_exists,
    queue_node_pool,
)
from minruntime.store.read_transactions import database_now
from minruntime.store.shadows import Shadow

__all__ = [
    "PREEMPT",
    "RECLAIM",
    "ProtectionRow",
    "ProtectionTable",
    "instant",
    "protection_rows",
    "protection_table",
]

PREEMPT: Final = "preempt"
RECLAIM: Final = "reclaim"


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
    return at if at is not None else database_now(conn)


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
        else:
            pool = queue_node_pool(conn, shadow, reclaimer_queue)
            if pool is not None:
                notes.append(
                    f"queue {reclaimer_queue!r} belongs to node pool {pool!r}: podgroups of "
                    "other pools get their pool's defaultReclaimMinRuntime (their scheduler "
                    "does not see it)"
                )
            if any(row.queue == reclaimer_queue for row in rows):
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
