"""Projection snapshots: periodic copies of the projections, tied to an event-log position.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-25

``minruntime snapshot`` (as the runtime role) copies the projections under one
``projection_snapshots`` row that names the last event-log ``seq`` it reflects and lists the
pending and running podgroups: the other tables whole in ``projection_snapshot_tables``, and
each podgroup's rows as one document in ``projection_snapshot_podgroups`` when they changed
since its newest one. ``protection --at``
and ``explain --at`` start from the newest one at or before their instant and replay only the
tail; ``replay --verify`` checks each one against the replay of the log up to its position
(docs/audit.md#snapshots).

Least privilege: the runtime role may read and add snapshots, never change or delete one
(``minruntime.store.privileges.snapshot_limits``); the reader has no access (state schema).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from revision_parts import STATE, runtime_role
from sqlalchemy.dialects.postgresql import ARRAY, BYTEA

from minruntime.store.privileges import snapshot_limits

revision: str = "0009"
down_revision: str | None = "0008"


def upgrade() -> None:
    op.create_table(
        "projection_snapshots",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), nullable=False),
        sa.Column("log_seq", sa.BigInteger, nullable=False),
        sa.Column("applied_until", sa.DateTime(timezone=True), nullable=True),
        sa.Column("events", sa.BigInteger, nullable=False),
        sa.Column(
            "taken_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")
        ),
        sa.Column("podgroups", BYTEA, nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_projection_snapshots"),
        sa.UniqueConstraint("log_seq", name="uq_projection_snapshots_log_seq"),
        schema=STATE,
    )
    op.create_table(
        "projection_snapshot_tables",
        sa.Column("snapshot_id", sa.BigInteger, nullable=False),
        sa.Column("table_name", sa.Text, nullable=False),
        sa.Column("rows", sa.BigInteger, nullable=False),
        sa.Column("columns", ARRAY(sa.Text), nullable=False),
        sa.Column("data", BYTEA, nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            [f"{STATE}.projection_snapshots.id"],
            name="fk_projection_snapshot_tables_snapshot_id_projection_snapshots",
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("snapshot_id", "table_name", name="pk_projection_snapshot_tables"),
        schema=STATE,
    )
    op.create_table(
        "projection_snapshot_podgroups",
        sa.Column("uid", sa.Text, nullable=False),
        sa.Column("log_seq", sa.BigInteger, nullable=False),
        sa.Column("snapshot_id", sa.BigInteger, nullable=False),
        sa.Column("document", BYTEA, nullable=False),
        sa.ForeignKeyConstraint(
            ["snapshot_id"],
            [f"{STATE}.projection_snapshots.id"],
            name="fk_projection_snapshot_podgroups_snapshot",
        ),
        sa.PrimaryKeyConstraint("uid", "log_seq", name="pk_projection_snapshot_podgroups"),
        schema=STATE,
    )
    runtime = runtime_role()
    if runtime is not None:
        for statement in snapshot_limits(runtime):
            op.execute(statement)


def downgrade() -> None:
    op.drop_table("projection_snapshot_podgroups", schema=STATE)
    op.drop_table("projection_snapshot_tables", schema=STATE)
    op.drop_table("projection_snapshots", schema=STATE)
