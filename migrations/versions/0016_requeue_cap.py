"""The requeue cap per node pool (SEMANTICS.md §10): ``maxRequeues`` within ``maxRequeuesWindow``.

Revision ID: 0016
Revises: 0013
Create Date: 2026-11-28

``node_pool_configs`` gains ``max_requeues`` (integer, NULL = unlimited) and
``max_requeues_window`` (interval, NULL = a podgroup's whole life). Rows stored before have
both NULL: the pools stay unlimited, as they were. The view ``minruntime.node_pool_configs``
shows them as its last columns (``CREATE OR REPLACE VIEW`` may only add columns at the end, and
keeps the reader's grant). The requeue worker counts a podgroup's newest committed requeues
through a partial index on ``requeue_decision_log (uid, decided_at DESC) WHERE outcome =
'committed'``. Downgrade drops the index, the view's columns and the table's.
"""

from __future__ import annotations

from alembic import op
from revision_parts import view_made_again

revision: str = "0016"
down_revision: str | None = "0015"

_COLUMNS = (
    "node_pool, default_preempt_min_runtime, default_reclaim_min_runtime,"
    " reclaim_resolve_method, default_requeue_delay, updated_at"
)

UPGRADE_SQL = f"""
ALTER TABLE minruntime_state.node_pool_configs
    ADD COLUMN max_requeues integer,
    ADD COLUMN max_requeues_window interval;

CREATE INDEX ix_requeue_decision_log_committed
    ON minruntime_state.requeue_decision_log (uid, decided_at DESC)
    WHERE outcome = 'committed';

CREATE OR REPLACE VIEW minruntime.node_pool_configs AS
SELECT {_COLUMNS}, max_requeues, max_requeues_window
FROM minruntime_state.node_pool_configs;
"""

DOWNGRADE_SQL = f"""
{view_made_again("node_pool_configs", _COLUMNS, "minruntime_state.node_pool_configs")}

DROP INDEX minruntime_state.ix_requeue_decision_log_committed;
ALTER TABLE minruntime_state.node_pool_configs
    DROP COLUMN max_requeues,
    DROP COLUMN max_requeues_window;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
