"""Each snapshot records the earliest ``applied_at`` of the entries it added (issue 30).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-29

An answer at an instant T replays the entries after its snapshot applied by T
(``seq > S AND applied_at <= T``). ``applied_at`` is the writer's transaction start, so a
later ``seq`` may carry an earlier time and the read scanned the log from the snapshot to its
end (no index on ``applied_at``): 0.25-0.46 s of an answer early in a log of a million
entries. ``projection_snapshots.applied_from`` is the earliest ``applied_at`` of the entries
with a ``seq`` in (``since_seq``, ``log_seq``]: ``since_seq`` is the taker's previous
snapshot's position (0: none). A snapshot sees every entry up to its position and no later
entry takes a ``seq`` at or below it, so no entry in that range was applied before
``applied_from``, ever: an answer at an earlier instant skips the range
(``store.snapshots.quiet_spans``). NULL: not known, never skipped.

The snapshots already stored get both from the log, each over the entries after the snapshot
before it (the oldest one: from the log's start); one pass over the log up to the newest
snapshot, by the primary key. The runtime role inserts them with a snapshot and, as before,
can change none. Downgrade drops the columns.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"

SCHEMA = "minruntime_state"
BACKFILL = """
UPDATE minruntime_state.projection_snapshots s
   SET since_seq = p.previous,
       applied_from = (SELECT min(e.applied_at) FROM minruntime_state.event_log e
                        WHERE e.seq > p.previous AND e.seq <= s.log_seq)
  FROM (SELECT id, COALESCE(lag(log_seq) OVER (ORDER BY log_seq), 0) AS previous
          FROM minruntime_state.projection_snapshots) p
 WHERE p.id = s.id
"""


def upgrade() -> None:
    op.add_column("projection_snapshots", sa.Column("since_seq", sa.BigInteger), schema=SCHEMA)
    op.add_column(
        "projection_snapshots",
        sa.Column("applied_from", sa.DateTime(timezone=True)),
        schema=SCHEMA,
    )
    op.execute(BACKFILL)


def downgrade() -> None:
    op.drop_column("projection_snapshots", "applied_from", schema=SCHEMA)
    op.drop_column("projection_snapshots", "since_seq", schema=SCHEMA)
