"""The SQL read surface of CONTRACT.md §2: views, functions and the read-only role.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-21

Every function reads the maintained columns of ``minruntime_state.queue_nodes`` (the path
and, per field, the result of the upward walk starting at each queue — computed by the
projector with ``minruntime.core``), so the SQL never re-implements a walk: it only picks
the queue where the walk starts, exactly as ``Resolver`` does.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

READER = "minruntime_reader"
ROLE_MARKER = "created by minruntime migration 0002"

VIEWS = (
    "queues",
    "node_pool_configs",
    "nodes",
    "podgroups",
    "preempt_protection",
    "nominations",
    "requeue_decisions",
    "event_log",
    "dead_letters",
)
PUBLIC_FUNCTIONS = (
    "minruntime.min_runtime_for(text, text, text)",
    "minruntime.reclaim_protection(text, timestamptz)",
    "minruntime.is_protected(text, text, timestamptz)",
)
INTERNAL_FUNCTIONS = ("minruntime_state.resolve_for(text, text, text)",)

# The config in force for a pool: its own row, else the `default` pool's, else built-ins
# (NodePoolConfigs.for_pool). Used as a LEFT JOIN pair c (own) / d (default).
_CONFIG_JOIN = """
    LEFT JOIN minruntime_state.node_pool_configs c ON c.node_pool = p.node_pool
    LEFT JOIN minruntime_state.node_pool_configs d ON d.node_pool = 'default'
"""

UPGRADE_SQL = f"""
CREATE SCHEMA IF NOT EXISTS minruntime;

CREATE VIEW minruntime.queues AS
SELECT name, parent, preempt_min_runtime, reclaim_min_runtime, path
FROM minruntime_state.queue_nodes;

CREATE VIEW minruntime.node_pool_configs AS
SELECT node_pool, default_preempt_min_runtime, default_reclaim_min_runtime,
       reclaim_resolve_method, default_requeue_delay, updated_at
FROM minruntime_state.node_pool_configs;

CREATE VIEW minruntime.nodes AS
SELECT name, node_pool, gpu, updated_at FROM minruntime_state.node_state;

CREATE VIEW minruntime.podgroups AS
SELECT uid, name, namespace, queue, node_pool, priority, preemptible, status, start_time,
       running_pods, is_elastic, expected_runtime, requeue_not_before,
       last_start_time, ended_at, annotations, submitted, updated_at
FROM minruntime_state.podgroup_state;

CREATE VIEW minruntime.preempt_protection AS
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime AS protected_until,
       COALESCE(now() < p.start_time + m.min_runtime, false) AS is_protected,
       CASE WHEN now() < p.start_time + m.min_runtime THEN p.protected_evictable_pods
            ELSE p.running_pods END AS evictable_pods
FROM minruntime_state.podgroup_state p
LEFT JOIN minruntime_state.queue_nodes q ON q.name = p.queue
{_CONFIG_JOIN}
CROSS JOIN LATERAL (
    SELECT COALESCE(q.preempt_resolved, c.default_preempt_min_runtime,
                    d.default_preempt_min_runtime, interval '0') AS min_runtime,
           q.preempt_source AS resolved_from
) m
WHERE p.status = 'running';

CREATE VIEW minruntime.nominations AS
SELECT uid, nominated_by, reason, nominated_at FROM minruntime_state.nominations;

CREATE VIEW minruntime.requeue_decisions AS
SELECT uid, decided_at, outcome, reason, nominated_by, beneficiaries, requeue_not_before, seq
FROM minruntime_state.requeue_decision_log;

CREATE VIEW minruntime.event_log AS
SELECT seq, topic, partition, "offset", event_id AS id, source, type, subject, event_time,
       payload, applied_at
FROM minruntime_state.event_log;

CREATE VIEW minruntime.dead_letters AS
SELECT seq, topic, partition, "offset", key, value, key_text, value_text, kind, message, at
FROM minruntime_state.dead_letter_log;

-- Resolution of one (victim queue, preemptor queue) pair in a node pool: the preempt rule
-- when both queues are the same, the reclaim rule otherwise (Resolver.resolve_for).
CREATE FUNCTION minruntime_state.resolve_for(
    victim_queue text, preemptor_queue text, pool text,
    OUT min_runtime interval, OUT resolved_from text, OUT rule text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    cfg record;
    victim record;
    reclaimer_path text[];
    walk_start record;
    common int;
BEGIN
    SELECT COALESCE(c.default_preempt_min_runtime, d.default_preempt_min_runtime,
                    interval '0') AS preempt_default,
           COALESCE(c.default_reclaim_min_runtime, d.default_reclaim_min_runtime,
                    interval '0') AS reclaim_default,
           COALESCE(c.reclaim_resolve_method, d.reclaim_resolve_method, 'lca') AS method
      INTO cfg
      FROM (SELECT COALESCE(NULLIF(pool, ''), 'default') AS node_pool) p
      {_CONFIG_JOIN};
    SELECT name, path, preempt_resolved, preempt_source, reclaim_resolved, reclaim_source
      INTO victim FROM minruntime_state.queue_nodes WHERE name = victim_queue;
    IF victim_queue = preemptor_queue THEN
        rule := 'preempt';
        min_runtime := COALESCE(victim.preempt_resolved, cfg.preempt_default);
        resolved_from := victim.preempt_source;
        RETURN;
    END IF;
    rule := 'reclaim-' || cfg.method;
    SELECT path INTO reclaimer_path FROM minruntime_state.queue_nodes
     WHERE name = preemptor_queue;
    IF victim.name IS NULL OR reclaimer_path IS NULL THEN
        -- KAI passes a nil queue and falls back to the plugin default.
        min_runtime := cfg.reclaim_default;
        RETURN;
    END IF;
    IF cfg.method = 'queue' THEN
        min_runtime := COALESCE(victim.reclaim_resolved, cfg.reclaim_default);
        resolved_from := victim.reclaim_source;
        RETURN;
    END IF;
    -- Paths are unique, so equal names at a depth mean equal prefixes down to it.
    SELECT count(*)::int INTO common FROM generate_subscripts(victim.path, 1) i
     WHERE victim.path[i] = reclaimer_path[i];
    SELECT reclaim_resolved, reclaim_source INTO walk_start FROM minruntime_state.queue_nodes
     WHERE name = victim.path[LEAST(common + 1, cardinality(victim.path))];
    min_runtime := COALESCE(walk_start.reclaim_resolved, cfg.reclaim_default);
    resolved_from := walk_start.reclaim_source;
END
$$;

CREATE FUNCTION minruntime.min_runtime_for(
    victim_queue text, preemptor_queue text, node_pool text DEFAULT 'default',
    OUT min_runtime interval, OUT resolved_from text, OUT rule text)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$ SELECT * FROM minruntime_state.resolve_for(victim_queue, preemptor_queue, node_pool) $$;

CREATE FUNCTION minruntime.is_protected(
    victim_uid text, preemptor_queue text, at timestamptz DEFAULT now())
RETURNS boolean
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
SELECT COALESCE((
    SELECT at < p.start_time + m.min_runtime
      FROM minruntime_state.podgroup_state p
     CROSS JOIN LATERAL minruntime_state.resolve_for(p.queue, preemptor_queue, p.node_pool) m
     WHERE p.uid = victim_uid AND p.status = 'running'
), false)
$$;

CREATE FUNCTION minruntime.reclaim_protection(
    reclaimer_queue text, at timestamptz DEFAULT now())
RETURNS TABLE (uid text, queue text, start_time timestamptz, min_runtime interval,
               resolved_from text, protected_until timestamptz, is_protected boolean,
               evictable_pods integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$
WITH reclaimer AS (
    SELECT path FROM minruntime_state.queue_nodes WHERE name = reclaimer_queue
), walk AS (
    -- Per known victim queue V: where the lca walk starts (path_V[k+1], k = the common
    -- prefix with the reclaimer's path, clamped to V), and that start's walk result.
    SELECT v.name, v.reclaim_resolved AS queue_value, v.reclaim_source AS queue_source,
           s.reclaim_resolved AS lca_value, s.reclaim_source AS lca_source
      FROM reclaimer r
     CROSS JOIN minruntime_state.queue_nodes v
     CROSS JOIN LATERAL (
         -- Paths are unique: equal names at a depth mean equal prefixes down to it.
         SELECT count(*)::int AS common FROM generate_subscripts(v.path, 1) i
          WHERE v.path[i] = r.path[i]) k
      JOIN minruntime_state.queue_nodes s
        ON s.name = v.path[LEAST(cardinality(v.path), k.common + 1)]
), resolved AS (
    SELECT p.uid, p.queue, p.start_time, p.running_pods, p.protected_evictable_pods,
           CASE WHEN w.name IS NULL
                    THEN COALESCE(c.default_reclaim_min_runtime, d.default_reclaim_min_runtime,
                                  interval '0')
                ELSE COALESCE(
                    CASE WHEN COALESCE(c.reclaim_resolve_method, d.reclaim_resolve_method,
                                       'lca') = 'lca'
                         THEN w.lca_value ELSE w.queue_value END,
                    c.default_reclaim_min_runtime, d.default_reclaim_min_runtime,
                    interval '0')
           END AS min_runtime,
           CASE WHEN COALESCE(c.reclaim_resolve_method, d.reclaim_resolve_method,
                              'lca') = 'lca'
                THEN w.lca_source ELSE w.queue_source END AS resolved_from
      FROM minruntime_state.podgroup_state p
      LEFT JOIN walk w ON w.name = p.queue
      {_CONFIG_JOIN}
     WHERE p.status = 'running'
)
SELECT uid, queue, start_time, min_runtime, resolved_from,
       start_time + min_runtime,
       COALESCE(at < start_time + min_runtime, false),
       CASE WHEN at < start_time + min_runtime THEN protected_evictable_pods
            ELSE running_pods END
  FROM resolved
$$;

DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{READER}') THEN
        CREATE ROLE {READER} LOGIN PASSWORD '{READER}';
        COMMENT ON ROLE {READER} IS '{ROLE_MARKER}';
    END IF;
END
$$;

GRANT USAGE ON SCHEMA minruntime TO {READER};
GRANT SELECT ON {", ".join(f"minruntime.{view}" for view in VIEWS)} TO {READER};
REVOKE ALL ON FUNCTION {", ".join(PUBLIC_FUNCTIONS + INTERNAL_FUNCTIONS)} FROM PUBLIC;
GRANT EXECUTE ON FUNCTION {", ".join(PUBLIC_FUNCTIONS)} TO {READER};
"""

DOWNGRADE_SQL = f"""
DROP FUNCTION {", ".join(PUBLIC_FUNCTIONS + INTERNAL_FUNCTIONS)};
DROP VIEW {", ".join(f"minruntime.{view}" for view in VIEWS)};
REVOKE ALL ON SCHEMA minruntime FROM {READER};
DROP SCHEMA minruntime;
DO $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_roles
                WHERE rolname = '{READER}'
                  AND shobj_description(oid, 'pg_authid') = '{ROLE_MARKER}') THEN
        BEGIN
            DROP ROLE {READER};
        EXCEPTION WHEN dependent_objects_still_exist OR object_in_use THEN
            -- Roles are cluster-wide: another database migrated to 0002 still uses it.
            RAISE NOTICE 'role {READER} kept: it still holds privileges elsewhere';
        END;
    END IF;
END
$$;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
