"""Backfill ``podgroup_state.submitted_at`` for podgroups submitted before migration 0003.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-21

Migration 0003 added the column (the event time of a podgroup's first submission, the
contenders' tie-break) but left it NULL for podgroups already stored. ``minruntime replay
--verify`` found exactly those rows: a replay sets the column from the log, the live rows
lacked it. The log has the answer, so the live rows take it from there: the ``time`` of the
first ``podgroup.submitted`` the service applied for the uid (lowest ``seq``).
"""

from __future__ import annotations

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"

UPGRADE_SQL = """
UPDATE minruntime_state.podgroup_state p
   SET submitted_at = first.event_time
  FROM (SELECT DISTINCT ON (payload -> 'data' ->> 'uid')
               payload -> 'data' ->> 'uid' AS uid, event_time
          FROM minruntime_state.event_log
         WHERE type = 'podgroup.submitted'
         ORDER BY payload -> 'data' ->> 'uid', seq) first
 WHERE p.uid = first.uid AND p.submitted_at IS NULL;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    # The values are true either way; nothing to undo.
    pass
