"""Dead letters keep the record's headers (a binary-mode CloudEvent's attributes).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-26

Input records may be CloudEvents in binary content mode (docs/events.md, "Content modes"):
their attributes are Kafka headers. A record dead-lettered without them could not be sent
again as it came, so ``dead_letter_log`` gains ``headers`` (jsonb, NULL for a record without
headers): ``[{"name", "value", "valueEncoding"}]`` in record order, ``value`` the header's
UTF-8 text or, when it is not UTF-8 (or holds NUL), its base64 (``valueEncoding``), null for a
header without a value. The view ``minruntime.dead_letters`` shows it as its last column
(``CREATE OR REPLACE VIEW`` may only add columns at the end, and keeps the reader's grant).
Downgrade drops the view's column and the table's.
"""

from __future__ import annotations

from alembic import op
from revision_parts import view_made_again

revision: str = "0012"
down_revision: str | None = "0011"

_COLUMNS = 'seq, topic, partition, "offset", key, value, key_text, value_text, kind, message, at'

UPGRADE_SQL = f"""
ALTER TABLE minruntime_state.dead_letter_log ADD COLUMN headers jsonb;

CREATE OR REPLACE VIEW minruntime.dead_letters AS
SELECT {_COLUMNS}, headers
FROM minruntime_state.dead_letter_log;
"""

DOWNGRADE_SQL = f"""
{view_made_again("dead_letters", _COLUMNS, "minruntime_state.dead_letter_log")}

ALTER TABLE minruntime_state.dead_letter_log DROP COLUMN headers;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
