"""What a requeue decision writes: its log row, the nominations it consumes, the podgroup's
cooldown and the promises of a commit (``ingest.decisions`` says which, from the event); and
the evictor's checkpoint handshake of a committed one (``requeue.checkpoint``)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert

from minruntime.store.schema import StateTables

_CONSUME_NOMINATIONS: Final = (
    "DELETE FROM minruntime_state.nominations WHERE uid = :uid AND nominated_by = ANY(:by)"
)
_COMMIT_PODGROUP: Final = (
    "UPDATE minruntime_state.podgroup_state SET"
    " annotations = annotations || jsonb_build_object(CAST(:key AS text), CAST(:value AS text)),"
    " requeue_not_before = :not_before,"
    " awaiting_release = (status = 'running' AND start_time IS NOT DISTINCT FROM :run_start),"
    " updated_at = now()"
    " WHERE uid = :uid"
)


def recorded_decision_ids(conn: Connection, tables: StateTables, ids: Iterable[str]) -> set[str]:
    """The decision ids of ``ids`` already in the decision log."""
    log = tables.requeue_decision_log
    return set(conn.scalars(sa.select(log.c.decision_id).where(log.c.decision_id.in_(list(ids)))))


def insert_handshakes(
    conn: Connection, tables: StateTables, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Record handshakes (the ``checkpoint_handshakes`` view), one row per decision, written
    once: a decision's first row stays (a redelivered or replayed event changes nothing)."""
    if rows:
        statement = insert(tables.checkpoint_handshakes).on_conflict_do_nothing(
            index_elements=["decision_id"]
        )
        conn.execute(statement, list(rows))


def insert_decisions(
    conn: Connection, tables: StateTables, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Append rows to the decision log (the ``requeue_decisions`` view)."""
    if rows:
        conn.execute(sa.insert(tables.requeue_decision_log), list(rows))


def consume_nominations(
    conn: Connection, tables: StateTables, consumed: Sequence[Mapping[str, Any]]
) -> None:
    """Delete the nominations (uid, by: nominators) a decision answered."""
    if consumed:
        conn.execute(tables.text(_CONSUME_NOMINATIONS), list(consumed))


def commit_cooldowns(
    conn: Connection, tables: StateTables, commits: Sequence[Mapping[str, Any]]
) -> None:
    """Set the requeue-not-before annotation (key, value), column and ``awaiting_release``."""
    if commits:
        conn.execute(tables.text(_COMMIT_PODGROUP), list(commits))


def insert_promises(
    conn: Connection, tables: StateTables, promises: Sequence[Mapping[str, Any]]
) -> None:
    """Record the capacity a committed requeue promised to its beneficiaries."""
    if promises:
        conn.execute(sa.insert(tables.requeue_promises), list(promises))
