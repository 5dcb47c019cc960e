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

from alembic import op
from revision_parts import (
    CONFIG_JOIN,
    EVICTABLE_0002,
    PODGROUPS_VIEW_0002,
    READER,
    RESOLVE_BY_QUEUE,
    RESOLVE_CONFIG,
    RESOLVE_PREEMPT,
    preempt_protection_view,
    reclaim_protection,
)

revision: str = "0002"
down_revision: str | None = "0001"

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
{PODGROUPS_VIEW_0002}{preempt_protection_view(EVICTABLE_0002, "CREATE")}
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
    {RESOLVE_CONFIG}
      FROM (SELECT COALESCE(NULLIF(pool, ''), 'default') AS node_pool) p
      {CONFIG_JOIN};
    SELECT name, path, preempt_resolved, preempt_source, reclaim_resolved, reclaim_source
      INTO victim FROM minruntime_state.queue_nodes WHERE name = victim_queue;
    {RESOLVE_PREEMPT}
    SELECT path INTO reclaimer_path FROM minruntime_state.queue_nodes
     WHERE name = preemptor_queue;
    IF victim.name IS NULL OR reclaimer_path IS NULL THEN
        -- KAI passes a nil queue and falls back to the plugin default.
        min_runtime := cfg.reclaim_default;
        RETURN;
    END IF;
    {RESOLVE_BY_QUEUE}
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
{reclaim_protection(EVICTABLE_0002, with_semi=False, verb="CREATE")}
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
