"""What several revisions write alike: the read surface's pieces, a view made again, the roles.

Frozen, like the revisions that use it: a revision that has run in a database must go on
executing the very same statements, so nothing here may change what it returns or executes
for a revision already written. Each part names the revision that wrote it first; a new
revision that wants other SQL adds a new part (or writes its own) and leaves these alone.
What the revisions execute is checked statement by statement through the whole stairway
(every upgrade and downgrade step), and the schema after each step with ``pg_dump
--schema-only``, whenever a revision's text is reshaped.

Revisions import it by name: alembic puts this folder on ``sys.path`` (``prepend_sys_path``,
set by ``minruntime.store.migrate.alembic_config`` and by ``alembic.ini``).
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import context, op

STATE = "minruntime_state"
READER = "minruntime_reader"

# 0002. The config in force for a pool: its own row, else the `default` pool's, else
# built-ins (NodePoolConfigs.for_pool). Used as a LEFT JOIN pair c (own) / d (default).
CONFIG_JOIN = """
    LEFT JOIN minruntime_state.node_pool_configs c ON c.node_pool = p.node_pool
    LEFT JOIN minruntime_state.node_pool_configs d ON d.node_pool = 'default'
"""

# 0002. Pieces of the plpgsql body of ``minruntime_state.resolve_for`` (0020 writes the
# function again around them): the pool's config in force, the preempt rule (the same queue),
# the reclaim rule by the victim's queue (``reclaimResolveMethod: queue``).
RESOLVE_CONFIG = """SELECT COALESCE(c.default_preempt_min_runtime, d.default_preempt_min_runtime,
                    interval '0') AS preempt_default,
           COALESCE(c.default_reclaim_min_runtime, d.default_reclaim_min_runtime,
                    interval '0') AS reclaim_default,
           COALESCE(c.reclaim_resolve_method, d.reclaim_resolve_method, 'lca') AS method
      INTO cfg"""
RESOLVE_PREEMPT = """IF victim_queue = preemptor_queue THEN
        rule := 'preempt';
        min_runtime := COALESCE(victim.preempt_resolved, cfg.preempt_default);
        resolved_from := victim.preempt_source;
        RETURN;
    END IF;
    rule := 'reclaim-' || cfg.method;"""
RESOLVE_BY_QUEUE = """IF cfg.method = 'queue' THEN
        min_runtime := COALESCE(victim.reclaim_resolved, cfg.reclaim_default);
        resolved_from := victim.reclaim_source;
        RETURN;
    END IF;"""

# 0002. The columns of both protection functions, and how they run.
PROTECTION_RETURNS = """\
RETURNS TABLE (uid text, queue text, start_time timestamptz, min_runtime interval,
               resolved_from text, protected_until timestamptz, is_protected boolean,
               evictable_pods integer)
LANGUAGE sql STABLE SECURITY DEFINER
SET search_path = pg_catalog, pg_temp
AS $$"""

# 0002. The preempt window of a running podgroup p of queue q, and where it was resolved from.
PREEMPT_WINDOW = """CROSS JOIN LATERAL (
    SELECT COALESCE(q.preempt_resolved, c.default_preempt_min_runtime,
                    d.default_preempt_min_runtime, interval '0') AS min_runtime,
           q.preempt_source AS resolved_from
) m"""

# The pods a running podgroup may lose at instant ``{at}``: inside its window the stored
# §6 count, else all of them (0002); from 0014 also always the count for a semi-preemptible
# core (§10).
EVICTABLE_0002 = """CASE WHEN {at} < {start} + {min_runtime} THEN {protected_evictable}
            ELSE {running} END"""
EVICTABLE_0014 = """CASE WHEN {at} < {start} + {min_runtime}
                 OR {preemptibility} = 'semi-preemptible' THEN {protected_evictable}
            ELSE {running} END"""


def _evictable(template: str, at: str, prefix: str = "") -> str:
    return template.format(
        at=at,
        start=f"{prefix}start_time",
        min_runtime=f"{prefix.replace('p.', 'm.')}min_runtime",
        preemptibility=f"{prefix}preemptibility",
        protected_evictable=f"{prefix}protected_evictable_pods",
        running=f"{prefix}running_pods",
    )


def preempt_protection_view(evictable: str, verb: str = "CREATE OR REPLACE") -> str:
    """0002's view ``minruntime.preempt_protection`` (0014: with ``EVICTABLE_0014``)."""
    return f"""
{verb} VIEW minruntime.preempt_protection AS
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime AS protected_until,
       COALESCE(now() < p.start_time + m.min_runtime, false) AS is_protected,
       {_evictable(evictable, "now()", "p.")} AS evictable_pods
FROM minruntime_state.podgroup_state p
LEFT JOIN minruntime_state.queue_nodes q ON q.name = p.queue
{CONFIG_JOIN}
{PREEMPT_WINDOW}
WHERE p.status = 'running';
"""


def preempt_protection_at(evictable: str, verb: str = "CREATE OR REPLACE") -> str:
    """0004's function ``minruntime.preempt_protection(at)`` (0014: with ``EVICTABLE_0014``)."""
    return f"""
{verb} FUNCTION minruntime.preempt_protection(at timestamptz)
{PROTECTION_RETURNS}
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime,
       COALESCE(at < p.start_time + m.min_runtime, false),
       {_evictable(evictable, "at", "p.")}
FROM minruntime_state.podgroup_state p
LEFT JOIN minruntime_state.queue_nodes q ON q.name = p.queue
LEFT JOIN minruntime_state.node_pool_configs c ON c.node_pool = p.node_pool
LEFT JOIN minruntime_state.node_pool_configs d ON d.node_pool = 'default'
{PREEMPT_WINDOW}
WHERE p.status = 'running'
$$;
"""


def reclaim_protection(evictable: str, with_semi: bool, verb: str = "CREATE OR REPLACE") -> str:
    """0002's function ``minruntime.reclaim_protection(q, at)`` (0014: with the semi core)."""
    semi_column = " p.preemptibility," if with_semi else ""
    return f"""
{verb} FUNCTION minruntime.reclaim_protection(
    reclaimer_queue text, at timestamptz DEFAULT now())
{PROTECTION_RETURNS}
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
      {CONFIG_JOIN}
     WHERE p.status = 'running'
)
SELECT uid, queue, start_time, min_runtime, resolved_from,
       start_time + min_runtime,
       COALESCE(at < start_time + min_runtime, false),
       {_evictable(evictable, "at")}
  FROM resolved
$$;
"""


# 0002's views, as 0003 made them again on its way down.
PODGROUPS_VIEW_0002 = """
CREATE VIEW minruntime.podgroups AS
SELECT uid, name, namespace, queue, node_pool, priority, preemptible, status, start_time,
       running_pods, is_elastic, expected_runtime, requeue_not_before,
       last_start_time, ended_at, annotations, submitted, updated_at
FROM minruntime_state.podgroup_state;
"""
DECISIONS_VIEW_0002 = """
CREATE VIEW minruntime.requeue_decisions AS
SELECT uid, decided_at, outcome, reason, nominated_by, beneficiaries, requeue_not_before, seq
FROM minruntime_state.requeue_decision_log;
"""

# 0013's columns of ``run_log`` (what its backfill copies, whatever later code adds).
RUN_LOG_COLUMNS_0013 = (
    "uid",
    "end_source",
    "end_event_id",
    "queue",
    "node_pool",
    "preemptibility",
    "run_start",
    "run_end",
    "ended_by",
    "eviction",
    "gpus",
    "gpu_seconds",
    "preempt_min_runtime",
    "preempt_resolved_from",
    "shortest_reclaim_min_runtime",
    "longest_reclaim_min_runtime",
    "windows",
    "protection",
    "cut_short",
)

# 0013's columns of ``minruntime.runs`` around ``violation`` (whose expression 0018 changes).
RUNS_HEAD_0013 = """uid, queue, node_pool, preemptibility, run_start, run_end, ended_by, eviction,
       run_end - run_start AS ran, gpus, gpu_seconds,
       preempt_min_runtime, preempt_resolved_from,
       run_start + preempt_min_runtime AS preempt_protected_until,
       shortest_reclaim_min_runtime, longest_reclaim_min_runtime,
       CAST(windows AS jsonb) AS windows,
       protection <> 'none' AS ended_inside_protection, protection,"""
VIOLATION_0013 = "CASE WHEN eviction AND protection <> 'none' THEN protection END AS violation"
RUNS_TAIL_0013 = "cut_short, end_source, end_event_id, windows AS windows_text"
RUNS_COLUMNS_0013 = f"""{RUNS_HEAD_0013}
       {VIOLATION_0013},
       {RUNS_TAIL_0013}"""


def view_made_again(view: str, columns: str, source: str) -> str:
    """0012: a view loses columns only by being made again, its grant with it (SQL text)."""
    return f"""DROP VIEW minruntime.{view};
CREATE VIEW minruntime.{view} AS
SELECT {columns}
FROM {source};
GRANT SELECT ON minruntime.{view} TO {READER};"""


def remake_view(view: str, select: str) -> None:
    """0015: a view loses columns only by being made again; its grant goes with it."""
    op.execute(f"DROP VIEW minruntime.{view}")
    op.execute(f"CREATE VIEW minruntime.{view} AS" + select)
    op.execute(f"GRANT SELECT ON minruntime.{view} TO {READER}")


_RUNS_FROM = f"FROM {STATE}.run_log"


def runs_definition() -> str:
    """0021: the SELECT of ``minruntime.runs`` as the server prints it, without its semicolon."""
    found = (
        op.get_bind()
        .execute(sa.text("SELECT pg_get_viewdef('minruntime.runs'::regclass)"))
        .scalar_one()
    )
    return str(found).strip().rstrip(";")


def add_runs_columns(columns: str) -> None:
    """0021: ``minruntime.runs`` with ``columns`` at its end (the grants and the readers'
    columns stay as they were)."""
    head, _, _ = runs_definition().rpartition(_RUNS_FROM)
    op.execute(f"CREATE OR REPLACE VIEW minruntime.runs AS {head.rstrip()}, {columns} {_RUNS_FROM}")


def remake_runs(definition: str) -> None:
    """0021: ``minruntime.runs`` made again from ``definition`` (columns removed from it)."""
    remake_view("runs", f" {definition}")


def log_is_empty() -> bool:
    """0013: nothing in the event log, so a backfill has nothing to replay."""
    query = sa.text(f"SELECT NOT EXISTS (SELECT FROM {STATE}.event_log)")
    return bool(op.get_bind().execute(query).scalar())


def runtime_role() -> str | None:
    """0008: the runtime role to grant to, if it exists and is not the migrating role itself."""
    role = context.config.attributes.get("runtime_role")
    if role is None:
        from minruntime.settings import Settings

        role = Settings().database_parts.user
    found = (
        op.get_bind()
        .execute(
            sa.text("SELECT rolname <> current_user FROM pg_roles WHERE rolname = :role"),
            {"role": role},
        )
        .scalar()
    )
    return str(role) if found else None
