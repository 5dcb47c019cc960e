"""The protection table at an instant, read from a shadow's SQL read surface.

The numbers are the SQL functions' own (``S.preempt_protection(at)``,
``S.reclaim_protection(q, at)``): this module only reads them, adds each podgroup's node pool
(so a default can say whose default it is) and words the notes a reader needs.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from minruntime.core import format_duration, format_rfc3339
from minruntime.ingest.memory import collected_rarely
from minruntime.store.unit import ProtectionRow as ProtectionRow  # for the commands
from minruntime.store.unit import ReadUnit, StateReader

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


def instant(unit: StateReader, at: datetime | None) -> datetime:
    """``at``, or the database's now() (the transaction's start) for the live state."""
    return at if at is not None else unit.now()


def protection_table(
    unit: ReadUnit, at: datetime | None, reclaimer_queue: str | None = None
) -> ProtectionTable:
    """The protection table at ``at`` (None: the database's now) in the unit's state."""
    moment = instant(unit, at)
    # Tens of thousands of rows, several objects each: without this the collector re-scans
    # the young ones every few hundred rows (minruntime.ingest.memory).
    with collected_rarely():
        rows = unit.protection_rows(moment, reclaimer_queue)
    notes: list[str] = []
    if reclaimer_queue is not None:
        if not unit.queue_exists(reclaimer_queue):
            notes.append(
                f"queue {reclaimer_queue!r} is not in the queue tree: as in KAI, every "
                "podgroup gets its node pool's defaultReclaimMinRuntime"
            )
        else:
            pool = unit.queue_node_pool(reclaimer_queue)
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


def describe_row(row: ProtectionRow) -> dict[str, Any]:
    """One row of ``protection --json`` (times and durations left for the JSON encoder)."""
    return {
        "uid": row.uid,
        "queue": row.queue,
        "node_pool": row.node_pool,
        "start_time": row.start_time,
        "min_runtime": row.min_runtime,
        "min_runtime_text": format_duration(row.min_runtime),
        "resolved_from": row.resolved_from,
        "protected_until": row.protected_until,
        "is_protected": row.is_protected,
        "evictable_pods": row.evictable_pods,
    }


def resolved_from_label(resolved_from: str | None, node_pool: str) -> str:
    """The queue whose value applied, or whose default it was."""
    if resolved_from is not None:
        return resolved_from
    return f"default (node pool {node_pool})"


def moment_text(at: datetime, as_of: bool) -> str:
    """When an answer holds, for people: the live state now, or as the service had it at."""
    if as_of:
        return f"at {format_rfc3339(at)}, as the service had it then"
    return f"now ({format_rfc3339(at)}), live"
