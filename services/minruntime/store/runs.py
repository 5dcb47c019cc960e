"""``run_log``: the one writer of the runs that ended (appended by the podgroup projection)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.store.bulk import insert_many
from minruntime.store.schema import StateTables

# Column -> PostgreSQL type of an appended row.
RUN_COLUMNS: Final = {
    "uid": "text",
    "end_source": "text",
    "end_event_id": "text",
    "queue": "text",
    "node_pool": "text",
    "preemptibility": "text",
    "run_start": "timestamptz",
    "run_end": "timestamptz",
    "ended_by": "text",
    "eviction": "boolean",
    "gpus": "numeric",
    "gpu_seconds": "numeric",
    "preempt_min_runtime": "interval",
    "preempt_resolved_from": "text",
    "shortest_reclaim_min_runtime": "interval",
    "longest_reclaim_min_runtime": "interval",
    "windows": "text",
    "protection": "text",
    "cut_short": "interval",
    "core_pods": "integer",
    "eviction_source": "text",
    "eviction_action": "text",
    "evictor": "text",
    "evictor_queue": "text",
    "evicted_at": "timestamptz",
    "exact_verdict": "text",
    "applied_window": "text",
    "applied_min_runtime": "interval",
    "applied_cut_short": "interval",
    "owner_kind": "text",
    "owner_name": "text",
    "owner_uid": "text",
    "last_checkpoint": "timestamptz",
    "gpu_seconds_since_checkpoint": "numeric",
}


def append_runs(conn: Connection, tables: StateTables, rows: Sequence[Mapping[str, Any]]) -> None:
    """Append ended runs (rows keyed by ``RUN_COLUMNS``) in one COPY; nothing when empty."""
    insert_many(conn, tables.run_log, RUN_COLUMNS, rows)


def copy_runs(
    conn: Connection, source: StateTables, target: StateTables, columns: Sequence[str]
) -> int:
    """Copy ``source``'s runs (the ``columns`` given) into ``target``, keeping the runs it has
    already; the number of rows added."""
    names = ", ".join(f'"{column}"' for column in columns)
    added = conn.exec_driver_sql(
        f"INSERT INTO {target.run_log.fullname} ({names})"
        f" SELECT {names} FROM {source.run_log.fullname} ON CONFLICT DO NOTHING"
    ).rowcount
    return int(added)


def copy_podgroup_columns(
    conn: Connection, source: StateTables, target: StateTables, columns: Sequence[str]
) -> int:
    """Set the ``columns`` of every podgroup of ``target`` to their values in ``source``; the
    number of rows updated."""
    names = ", ".join(f'"{column}"' for column in columns)
    values = ", ".join(f'r."{column}"' for column in columns)
    into, source_table = target.podgroup_state.fullname, source.podgroup_state.fullname
    updated = conn.exec_driver_sql(
        f"UPDATE {into} p SET ({names}) = ROW({values}) FROM {source_table} r WHERE p.uid = r.uid"
    ).rowcount
    return int(updated)
