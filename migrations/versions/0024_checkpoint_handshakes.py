"""The evictor's checkpoint handshakes: ``minruntime.checkpoint_handshakes`` (issue 28).

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-29

One row per committed requeue whose PodGroup declared ``minruntime.kai.scheduler/
checkpoint-grace``: the evictor's ``requeue.checkpoint`` event (docs/events.md) as the
processor applied it: the decision, the podgroup, how the wait ended (``acknowledged``,
``timed_out``, ``gone``), the request, the grace, the end and the workload's
``checkpointed-at`` that answered. The view adds ``waited`` (end − request). No backfill: no
event logged before this revision is a ``requeue.checkpoint``. Downgrade drops both.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from revision_parts import READER, STATE
from sqlalchemy.dialects.postgresql import INTERVAL

revision: str = "0024"
down_revision: str | None = "0023"

VIEW_SQL = f"""
CREATE VIEW minruntime.checkpoint_handshakes AS
SELECT uid, decision_id, outcome, requested_at, grace, ended_at, checkpointed_at,
       ended_at - requested_at AS waited
FROM {STATE}.checkpoint_handshakes;

GRANT SELECT ON minruntime.checkpoint_handshakes TO {READER};
"""


def upgrade() -> None:
    op.create_table(
        "checkpoint_handshakes",
        sa.Column("decision_id", sa.Text, nullable=False),
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("outcome", sa.Text, nullable=False),
        sa.Column("requested_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("grace", INTERVAL, nullable=False),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("checkpointed_at", sa.DateTime(timezone=True)),
        sa.PrimaryKeyConstraint("decision_id", name="pk_checkpoint_handshakes"),
        sa.CheckConstraint(
            "outcome IN ('acknowledged', 'timed_out', 'gone')",
            name="ck_checkpoint_handshakes_outcome",
        ),
        schema=STATE,
    )
    op.create_index(
        "ix_checkpoint_handshakes_uid",
        "checkpoint_handshakes",
        ["uid", "requested_at"],
        schema=STATE,
    )
    op.execute(VIEW_SQL)


def downgrade() -> None:
    op.execute("DROP VIEW minruntime.checkpoint_handshakes")
    op.drop_table("checkpoint_handshakes", schema=STATE)
