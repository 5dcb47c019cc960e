"""A podgroup's top owner as the wire carries it, and a queue's disruption overrides (issue 28).

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-29

``podgroup_state`` gains ``owner_kind``, ``owner_name`` and ``owner_uid``: the submission's
``topOwner`` (``podgroup.submitted``, docs/events.md; the bridge fills it from KAI's
``kai.scheduler/top-owner-metadata``, else the pods' controller ownerReference). NULL = not
carried: the processor and the planner then read the annotation as before, so existing rows
need no backfill (a replay of the log gives them the same NULLs: old events carry no
``topOwner``). ``queue_nodes`` gains ``disruption``: the Queue's overrides of the node pool's
disruption budget and gap (``queue.upserted``'s ``annotations``: annotation name -> value;
NULL = none). ``minruntime.runs`` gains, at its end, the requeues the evictor abandoned
during each run (``requeue.abandoned`` logged between its start and its end):
``requeues_abandoned`` (how many), ``last_abandoned_at`` and ``last_abandoned_reason`` (pdb,
forbidden, not_found, api_error, expired). Downgrade drops the columns.
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op
from revision_parts import STATE, add_runs_columns, remake_runs, runs_definition
from sqlalchemy.dialects.postgresql import JSONB

revision: str = "0023"
down_revision: str | None = "0022"

_OWNER_COLUMNS = ("owner_kind", "owner_name", "owner_uid")
# The abandoned requeues of one run: its podgroup's, logged while it ran (ix_..._uid serves it).
_DURING_RUN = (
    f" FROM {STATE}.requeue_decision_log a WHERE a.uid = run_log.uid"
    " AND a.outcome = 'abandoned' AND a.decided_at >= run_log.run_start"
    " AND a.decided_at <= run_log.run_end"
)
_NEWEST = " ORDER BY a.decided_at DESC, a.seq DESC LIMIT 1"
_ABANDONED_COLUMNS = (
    f"(SELECT count(*){_DURING_RUN}) AS requeues_abandoned",
    f"(SELECT a.decided_at{_DURING_RUN}{_NEWEST}) AS last_abandoned_at",
    f"(SELECT a.reason{_DURING_RUN}{_NEWEST}) AS last_abandoned_reason",
)
_ABANDONED_NAMES = ("requeues_abandoned", "last_abandoned_at", "last_abandoned_reason")


def upgrade() -> None:
    for column in _OWNER_COLUMNS:
        op.add_column("podgroup_state", sa.Column(column, sa.Text), schema=STATE)
    op.add_column("queue_nodes", sa.Column("disruption", JSONB), schema=STATE)
    # New columns at the end: the view's grants and its readers' columns stay as they were.
    add_runs_columns(", ".join(_ABANDONED_COLUMNS))


def downgrade() -> None:
    definition = runs_definition()
    for name in _ABANDONED_NAMES:
        # The server prints each as ",\n    ( SELECT ... ) AS name".
        definition = re.sub(rf",\s*\(\s*SELECT\b.*?\)\s+AS\s+{name}\b", "", definition, flags=re.S)
    remake_runs(definition)
    op.drop_column("queue_nodes", "disruption", schema=STATE)
    for column in reversed(_OWNER_COLUMNS):
        op.drop_column("podgroup_state", column, schema=STATE)
