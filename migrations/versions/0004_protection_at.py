"""The preempt protection table at any instant: ``minruntime.preempt_protection(at)``.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-21

The view ``minruntime.preempt_protection`` answers at ``now()``; the function of the same
name answers at ``at`` (PostgreSQL keeps functions and relations apart, so both names
coexist). Together with ``reclaim_protection(q, at)`` and ``is_protected(uid, q, at)`` it
lets as-of schemas made by ``minruntime replay --until T --into S`` answer at ``T``.
"""

from __future__ import annotations

from alembic import op
from revision_parts import EVICTABLE_0002, READER, preempt_protection_at

revision: str = "0004"
down_revision: str | None = "0003"

UPGRADE_SQL = f"""{preempt_protection_at(EVICTABLE_0002, "CREATE")}
REVOKE ALL ON FUNCTION minruntime.preempt_protection(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION minruntime.preempt_protection(timestamptz) TO {READER};
"""

DOWNGRADE_SQL = "DROP FUNCTION minruntime.preempt_protection(timestamptz);"


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
