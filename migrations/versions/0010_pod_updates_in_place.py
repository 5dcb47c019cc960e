"""Pod rows are updated in place (HOT): ``pod_state`` loses its unused index on ``node``.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-25

Every allocation and release updates the ``node`` and ``allocated`` columns of its pods'
rows. The partial index ``ix_pod_state_node`` (``node`` of allocated pods) covered exactly
those columns, so each such update wrote a new entry into both of the table's indexes
instead of a heap-only tuple (HOT) on the same page. No statement of the service, of the read
surface or of the audit commands looks pods up by node (they read them by podgroup, through
the primary key), so the index only cost writes. Downgrade re-creates it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"


def upgrade() -> None:
    op.drop_index("ix_pod_state_node", table_name="pod_state", schema="minruntime_state")


def downgrade() -> None:
    op.create_index(
        "ix_pod_state_node",
        "pod_state",
        ["node"],
        schema="minruntime_state",
        postgresql_where=sa.text("allocated"),
    )
