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

from collections.abc import Sequence

from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READER = "minruntime_reader"

UPGRADE_SQL = f"""
CREATE FUNCTION minruntime.preempt_protection(at timestamptz)
RETURNS TABLE (uid text, queue text, start_time timestamptz, min_runtime interval,
               resolved_from text, protected_until timestamptz, is_protected boolean,
               evictable_pods integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime,
       COALESCE(at < p.start_time + m.min_runtime, false),
       CASE WHEN at < p.start_time + m.min_runtime THEN p.protected_evictable_pods
            ELSE p.running_pods END
FROM minruntime_state.podgroup_state p
LEFT JOIN minruntime_state.queue_nodes q ON q.name = p.queue
LEFT JOIN minruntime_state.node_pool_configs c ON c.node_pool = p.node_pool
LEFT JOIN minruntime_state.node_pool_configs d ON d.node_pool = 'default'
CROSS JOIN LATERAL (
    SELECT COALESCE(q.preempt_resolved, c.default_preempt_min_runtime,
                    d.default_preempt_min_runtime, interval '0') AS min_runtime,
           q.preempt_source AS resolved_from
) m
WHERE p.status = 'running'
$$;

REVOKE ALL ON FUNCTION minruntime.preempt_protection(timestamptz) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION minruntime.preempt_protection(timestamptz) TO {READER};
"""

DOWNGRADE_SQL = "DROP FUNCTION minruntime.preempt_protection(timestamptz);"


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
