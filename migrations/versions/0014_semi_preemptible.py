"""Semi-preemptible podgroups: ``preemptibility`` stored, and a core never evictable.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-27

``podgroup_state.preemptibility`` holds one of ``preemptible``, ``non-preemptible`` or
``semi-preemptible`` (SEMANTICS.md §10). The rows stored before keep meaning what their
``preemptible`` flag said (true: preemptible, false: non-preemptible); the flag stays, written
as ``preemptibility <> 'non-preemptible'`` (some of its pods may be evicted).

A semi-preemptible podgroup's core — each subgroup's minAvailable running pods — is never
evictable, protected or not: ``evictable_pods`` of the ``preempt_protection`` view and of the
``preempt_protection(at)`` and ``reclaim_protection(q, at)`` functions is then the stored
``protected_evictable_pods`` (Σ max(0, running − minAvailable): the pods above the core) at
every instant. ``is_protected`` stays the minimum-runtime window: the core is not a window.

``run_log.core_pods``: the core a run still held when it ended (0 for the runs before: no
podgroup was semi-preemptible). ``minruntime.podgroups`` gains ``preemptibility`` and
``minruntime.runs`` gains ``core_pods``, both at the end. Downgrade restores the 0013 read
surface and drops the columns (a semi-preemptible podgroup then reads as preemptible).
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

STATE = "minruntime_state"

_CONFIG_JOIN = """
    LEFT JOIN minruntime_state.node_pool_configs c ON c.node_pool = p.node_pool
    LEFT JOIN minruntime_state.node_pool_configs d ON d.node_pool = 'default'
"""
# The pods a running podgroup may lose at instant ``{at}``: inside its window (or always,
# for a semi-preemptible core) the stored §6/§10 count, else all of them.
_EVICTABLE = """CASE WHEN {at} < {start} + {min_runtime}
                 OR {preemptibility} = 'semi-preemptible' THEN {protected_evictable}
            ELSE {running} END"""
_EVICTABLE_0002 = """CASE WHEN {at} < {start} + {min_runtime} THEN {protected_evictable}
            ELSE {running} END"""


# The columns of both protection functions, and how they run (as 0002 and 0004 made them).
_RETURNS = """RETURNS TABLE (uid text, queue text, start_time timestamptz, min_runtime interval,
               resolved_from text, protected_until timestamptz, is_protected boolean,
               evictable_pods integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$"""


def _evictable(template: str, at: str, prefix: str = "") -> str:
    return template.format(
        at=at,
        start=f"{prefix}start_time",
        min_runtime=f"{prefix.replace('p.', 'm.')}min_runtime",
        preemptibility=f"{prefix}preemptibility",
        protected_evictable=f"{prefix}protected_evictable_pods",
        running=f"{prefix}running_pods",
    )


def _preempt_protection_view(evictable: str) -> str:
    return f"""
CREATE OR REPLACE VIEW minruntime.preempt_protection AS
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime AS protected_until,
       COALESCE(now() < p.start_time + m.min_runtime, false) AS is_protected,
       {_evictable(evictable, "now()", "p.")} AS evictable_pods
FROM minruntime_state.podgroup_state p
LEFT JOIN minruntime_state.queue_nodes q ON q.name = p.queue
{_CONFIG_JOIN}
CROSS JOIN LATERAL (
    SELECT COALESCE(q.preempt_resolved, c.default_preempt_min_runtime,
                    d.default_preempt_min_runtime, interval '0') AS min_runtime,
           q.preempt_source AS resolved_from
) m
WHERE p.status = 'running';
"""


def _preempt_protection_at(evictable: str) -> str:
    return f"""
CREATE OR REPLACE FUNCTION minruntime.preempt_protection(at timestamptz)
{_RETURNS}
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime,
       COALESCE(at < p.start_time + m.min_runtime, false),
       {_evictable(evictable, "at", "p.")}
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
"""


def _reclaim_protection(evictable: str, with_semi: bool) -> str:
    semi_column = " p.preemptibility," if with_semi else ""
    return f"""
CREATE OR REPLACE FUNCTION minruntime.reclaim_protection(
    reclaimer_queue text, at timestamptz DEFAULT now())
{_RETURNS}
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
    SELECT p.uid, p.queue, p.start_time, p.running_pods, p.protected_evictable_pods,{semi_column}
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
       {_evictable(evictable, "at")}
  FROM resolved
$$;
"""


_PODGROUPS_COLUMNS = """uid, name, namespace, queue, node_pool, priority, preemptible, status,
       start_time, running_pods, is_elastic, expected_runtime, requeue_not_before,
       last_start_time, ended_at, annotations, submitted, updated_at,
       submitted_at, awaiting_release"""
_RUNS_COLUMNS = """uid, queue, node_pool, preemptibility, run_start, run_end, ended_by, eviction,
       run_end - run_start AS ran, gpus, gpu_seconds,
       preempt_min_runtime, preempt_resolved_from,
       run_start + preempt_min_runtime AS preempt_protected_until,
       shortest_reclaim_min_runtime, longest_reclaim_min_runtime,
       CAST(windows AS jsonb) AS windows,
       protection <> 'none' AS ended_inside_protection, protection,
       CASE WHEN eviction AND protection <> 'none' THEN protection END AS violation,
       cut_short, end_source, end_event_id, windows AS windows_text"""

UPGRADE_SQL = f"""
ALTER TABLE {STATE}.podgroup_state
    ADD COLUMN preemptibility text NOT NULL DEFAULT 'preemptible',
    ADD CONSTRAINT ck_podgroup_state_preemptibility
        CHECK (preemptibility IN ('preemptible', 'non-preemptible', 'semi-preemptible'));
-- The rows before: what their flag said (the new column's default covers the preemptible ones).
UPDATE {STATE}.podgroup_state SET preemptibility = 'non-preemptible' WHERE NOT preemptible;

ALTER TABLE {STATE}.run_log ADD COLUMN core_pods integer NOT NULL DEFAULT 0;

CREATE OR REPLACE VIEW minruntime.podgroups AS
SELECT {_PODGROUPS_COLUMNS},
       preemptibility
FROM {STATE}.podgroup_state;

CREATE OR REPLACE VIEW minruntime.runs AS
SELECT {_RUNS_COLUMNS},
       core_pods
FROM {STATE}.run_log;
{_preempt_protection_view(_EVICTABLE)}
{_preempt_protection_at(_EVICTABLE)}
{_reclaim_protection(_EVICTABLE, with_semi=True)}
"""

# Views lose columns only by being made again (grants go with them).
DOWNGRADE_SQL = f"""
DROP VIEW minruntime.podgroups;
CREATE VIEW minruntime.podgroups AS
SELECT {_PODGROUPS_COLUMNS}
FROM {STATE}.podgroup_state;
GRANT SELECT ON minruntime.podgroups TO minruntime_reader;

DROP VIEW minruntime.runs;
CREATE VIEW minruntime.runs AS
SELECT {_RUNS_COLUMNS}
FROM {STATE}.run_log;
GRANT SELECT ON minruntime.runs TO minruntime_reader;
{_preempt_protection_view(_EVICTABLE_0002)}
{_preempt_protection_at(_EVICTABLE_0002)}
{_reclaim_protection(_EVICTABLE_0002, with_semi=False)}
ALTER TABLE {STATE}.run_log DROP COLUMN core_pods;
ALTER TABLE {STATE}.podgroup_state DROP COLUMN preemptibility;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
