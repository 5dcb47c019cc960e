"""Every run that ends is kept, with the windows in force at its end: ``minruntime.runs``.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-27

A run lasts from a podgroup's start (SEMANTICS.md §5) to the event that ended it (§10).
The podgroup projection appends one ``run_log`` row per run at that event: the podgroup, its
queue and node pool, start, end, ``ended_by``, GPUs and GPU-seconds, the rule windows every
possible preemptor had to respect then (preempt, the reclaim classes, the unknown queue), the
verdict (definite / possible / none) and by how much the longest window still protecting it
was cut short. ``minruntime.runs`` shows them to the reader; ``minruntime violations`` reads
the ones an eviction ended inside a window (a partial index).

The runs of the log applied before this migration are filled in by replaying the log once
into a temporary shadow (as ``minruntime replay`` does) and copying its rows: ``replay
--verify`` then finds the live table equal. An empty log costs nothing. Downgrade drops the
view and the table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from revision_parts import READER, RUN_LOG_COLUMNS_0013, RUNS_COLUMNS_0013, STATE, log_is_empty
from sqlalchemy.dialects.postgresql import INTERVAL

revision: str = "0013"
down_revision: str | None = "0012"

# The columns this revision creates (what the backfill copies, whatever later code adds).
COLUMNS = RUN_LOG_COLUMNS_0013

VIEW_SQL = f"""
CREATE VIEW minruntime.runs AS
SELECT {RUNS_COLUMNS_0013}
FROM {STATE}.run_log;

GRANT SELECT ON minruntime.runs TO {READER};
"""


def upgrade() -> None:
    op.create_table(
        "run_log",
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("end_source", sa.Text, nullable=False),
        sa.Column("end_event_id", sa.Text, nullable=False),
        sa.Column("queue", sa.Text),
        sa.Column("node_pool", sa.Text, nullable=False),
        sa.Column("preemptibility", sa.Text, nullable=False),
        sa.Column("run_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_end", sa.DateTime(timezone=True), nullable=False),
        sa.Column("ended_by", sa.Text, nullable=False),
        sa.Column("eviction", sa.Boolean, nullable=False),
        sa.Column("gpus", sa.Numeric),
        sa.Column("gpu_seconds", sa.Numeric),
        sa.Column("preempt_min_runtime", INTERVAL, nullable=False),
        sa.Column("preempt_resolved_from", sa.Text),
        sa.Column("shortest_reclaim_min_runtime", INTERVAL, nullable=False),
        sa.Column("longest_reclaim_min_runtime", INTERVAL, nullable=False),
        sa.Column("windows", sa.Text, nullable=False),
        sa.Column("protection", sa.Text, nullable=False),
        sa.Column("cut_short", INTERVAL),
        sa.PrimaryKeyConstraint("uid", "end_source", "end_event_id", name="pk_run_log"),
        sa.CheckConstraint(
            "protection IN ('definite', 'possible', 'none')", name="ck_run_log_protection"
        ),
        schema=STATE,
    )
    op.create_index(
        "ix_run_log_violations",
        "run_log",
        ["run_end"],
        schema=STATE,
        postgresql_where=sa.text("eviction AND protection <> 'none'"),
    )
    op.execute(VIEW_SQL)
    _backfill()


def _backfill() -> None:
    if log_is_empty():
        return
    # Lazily: only a database with a log needs the replay machinery.
    from minruntime.audit.runs import backfill_runs

    backfill_runs(op.get_bind(), COLUMNS)


def downgrade() -> None:
    op.execute("DROP VIEW minruntime.runs")
    op.drop_table("run_log", schema=STATE)
