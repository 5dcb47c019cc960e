"""Outbox rows the broker refuses for good are set aside, not retried forever (issue 12).

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-24

A row whose publish fails for a reason that will not change (too large for the broker, an
invalid topic, ...) used to fail its whole batch on every try, so nothing behind it was ever
published. The relay now sets such a row aside: ``failed_at`` and ``failure`` say when and
why, ``attempts`` counts failed publishes of the row (retriable ones too). Set-aside rows are
skipped by the relay until an operator retries them (``minruntime outbox retry``), which
clears ``failed_at``.

The read surface gains ``minruntime.outbox_set_aside`` (readable by ``minruntime_reader``):
the set-aside rows without their payload bytes.
"""

from __future__ import annotations

from alembic import op
from revision_parts import READER

revision: str = "0006"
down_revision: str | None = "0005"

UPGRADE_SQL = f"""
ALTER TABLE minruntime_state.outbox
    ADD COLUMN failed_at timestamptz,
    ADD COLUMN failure text,
    ADD COLUMN attempts integer NOT NULL DEFAULT 0;

-- What the relay claims: unpublished and not set aside, oldest first.
CREATE INDEX ix_outbox_pending ON minruntime_state.outbox (created_at)
    WHERE published_at IS NULL AND failed_at IS NULL;

CREATE VIEW minruntime.outbox_set_aside AS
SELECT id, topic, key, octet_length(payload) AS payload_bytes, headers, created_at, failed_at,
       failure, attempts
FROM minruntime_state.outbox
WHERE published_at IS NULL AND failed_at IS NOT NULL;

GRANT SELECT ON minruntime.outbox_set_aside TO {READER};
"""

DOWNGRADE_SQL = """
DROP VIEW minruntime.outbox_set_aside;
DROP INDEX minruntime_state.ix_outbox_pending;
ALTER TABLE minruntime_state.outbox
    DROP COLUMN failed_at,
    DROP COLUMN failure,
    DROP COLUMN attempts;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
