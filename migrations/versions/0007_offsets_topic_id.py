"""Stored offsets belong to one life of a topic: ``consumer_offsets.topic_id``.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-24

Kafka's topic ID (a UUID given at creation) is stored with each partition's next offset; the
processor refuses a batch whose topic now has another ID (deleted and recreated, a new
cluster) instead of skipping its records as already applied. NULL: not tied yet (rows from
before this revision are tied to the topic ID the processor sees on its next batch).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"


def upgrade() -> None:
    op.add_column(
        "consumer_offsets",
        sa.Column("topic_id", sa.Text, nullable=True),
        schema="minruntime_state",
    )


def downgrade() -> None:
    op.drop_column("consumer_offsets", "topic_id", schema="minruntime_state")
