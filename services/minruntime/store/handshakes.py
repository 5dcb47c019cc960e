"""The evictor's checkpoint handshakes (``requeue.checkpoint``): one row per decision, written
once (a redelivered or replayed event changes nothing)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert

from minruntime.store.schema import StateTables


def insert_handshakes(
    conn: Connection, tables: StateTables, rows: Sequence[Mapping[str, Any]]
) -> None:
    """Record handshakes (the ``checkpoint_handshakes`` view); a decision's first row stays."""
    if rows:
        statement = insert(tables.checkpoint_handshakes).on_conflict_do_nothing(
            index_elements=["decision_id"]
        )
        conn.execute(statement, list(rows))
