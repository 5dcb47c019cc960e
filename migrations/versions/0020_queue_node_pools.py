"""Queues of a node pool: each pool resolves in the tree its KAI scheduler sees.

Revision ID: 0020
Revises: 0019
Create Date: 2026-11-29

KAI runs one scheduler per node pool (a shard), and a shard lists only the Queues of its pool
(docs/kubernetes.md, "Node pools are KAI's shards"). ``queue_nodes.node_pool`` (NULL = every
pool, as every queue stored before) says whose a queue is; the tree of pool P is the queues of
P and the queues of no pool (``QueueTree.for_pool``), a queue whose parent is not among them
being a root there.

The maintained columns of a queue's row (``path``, the walks) are its own pool's tree's (a
queue of no pool: the tree of the queues of no pool, which every pool no queue names sees). A
queue of no pool that a pool sees differently, because a queue of that pool is above it, has a
row of ``queue_nodes_in_pool`` for that pool with its path and walks there; the projection
writes both with the core. Every function and view of the read surface that walks the tree now
reads a podgroup's queue as the podgroup's pool sees it: the view ``preempt_protection``, the
functions ``preempt_protection(at)``, ``reclaim_protection(q, at)`` and, through
``minruntime_state.resolve_for``, ``is_protected`` and ``min_runtime_for`` (same signatures and
columns; grants kept). A queue of another pool is, for a podgroup, a queue the tree does not
know: the pool's default applies, as for an unknown queue. ``minruntime.queues`` gains
``node_pool`` as its last column (after 0019's ``priority, resources``).

With every queue of no pool (every database before this revision) each answer is the same as
before. Downgrade restores the definitions of 0002/0014 (and 0019's view of the queues) and
drops the table and the column (the queues then belong to every pool again).
"""

from __future__ import annotations

from alembic import op
from revision_parts import (
    CONFIG_JOIN,
    PREEMPT_WINDOW,
    PROTECTION_RETURNS,
    RESOLVE_BY_QUEUE,
    RESOLVE_CONFIG,
    RESOLVE_PREEMPT,
    STATE,
    view_made_again,
)

revision: str = "0020"
down_revision: str | None = "0019"

# The pods a running podgroup may lose at ``{at}`` (as 0014 wrote it).
_EVICTABLE = """CASE WHEN {at} < {p}start_time + m.min_runtime
                 OR {p}preemptibility = 'semi-preemptible' THEN {p}protected_evictable_pods
            ELSE {p}running_pods END"""


def _seen(column: str, h: str = "h", o: str = "o") -> str:
    """A maintained column of a queue as one pool sees it: its row in queue_nodes_in_pool
    when it has one for that pool, else its queue_nodes row."""
    return f"CASE WHEN {o}.name IS NULL THEN {h}.{column} ELSE {o}.{column} END"


# The running podgroup p's queue as p's pool sees it (q.*: NULLs when the pool does not).
_PODGROUP_QUEUE = {
    True: f"""
LEFT JOIN minruntime_state.queue_nodes h
       ON h.name = p.queue AND (h.node_pool IS NULL OR h.node_pool = p.node_pool)
LEFT JOIN minruntime_state.queue_nodes_in_pool o
       ON o.node_pool = p.node_pool AND o.name = p.queue
CROSS JOIN LATERAL (
    SELECT {_seen("preempt_resolved")} AS preempt_resolved,
           {_seen("preempt_source")} AS preempt_source
) q""",
    False: """
LEFT JOIN minruntime_state.queue_nodes q ON q.name = p.queue""",
}


def _preempt_protection(pools: bool) -> str:
    body = f"""
FROM minruntime_state.podgroup_state p{_PODGROUP_QUEUE[pools]}
{CONFIG_JOIN}
{PREEMPT_WINDOW}
WHERE p.status = 'running'"""
    return f"""
CREATE OR REPLACE VIEW minruntime.preempt_protection AS
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime AS protected_until,
       COALESCE(now() < p.start_time + m.min_runtime, false) AS is_protected,
       {_EVICTABLE.format(at="now()", p="p.")} AS evictable_pods{body};

CREATE OR REPLACE FUNCTION minruntime.preempt_protection(at timestamptz)
{PROTECTION_RETURNS}
SELECT p.uid, p.queue, p.start_time, m.min_runtime, m.resolved_from,
       p.start_time + m.min_runtime,
       COALESCE(at < p.start_time + m.min_runtime, false),
       {_EVICTABLE.format(at="at", p="p.")}{body}
$$;
"""


# reclaim_protection: every tree in use, by ``seen`` (a pool that some queue names, or '' for
# the tree of the queues of no pool, which every other pool sees), and each queue in it.
_RECLAIM_TREES = {
    True: f"""
WITH named AS (
    -- The pools some queue belongs to: each sees a tree of its own. Every other pool sees the
    -- tree of the queues of no pool: '' below (a pool's name is never empty).
    SELECT DISTINCT node_pool FROM minruntime_state.queue_nodes WHERE node_pool IS NOT NULL
), nodes AS (
    -- Every queue of every tree, as that tree sees it.
    SELECT t.seen, h.name,
           {_seen("path")} AS path,
           {_seen("reclaim_resolved")} AS reclaim_resolved,
           {_seen("reclaim_source")} AS reclaim_source
      FROM (SELECT '' AS seen UNION ALL SELECT node_pool FROM named) t
      JOIN minruntime_state.queue_nodes h ON h.node_pool IS NULL OR h.node_pool = t.seen
      LEFT JOIN minruntime_state.queue_nodes_in_pool o
        ON o.node_pool = t.seen AND o.name = h.name
), reclaimer AS (
    SELECT seen, path FROM nodes WHERE name = reclaimer_queue
),""",
    False: """
WITH nodes AS (
    SELECT '' AS seen, name, path, reclaim_resolved, reclaim_source
      FROM minruntime_state.queue_nodes
), reclaimer AS (
    SELECT seen, path FROM nodes WHERE name = reclaimer_queue
),""",
}
# The tree a running podgroup p is resolved in.
_PODGROUP_TREE = {
    True: """
      LEFT JOIN named n ON n.node_pool = p.node_pool
      LEFT JOIN walk w ON w.seen = COALESCE(n.node_pool, '') AND w.name = p.queue""",
    False: """
      LEFT JOIN walk w ON w.name = p.queue""",
}


def _reclaim_protection(pools: bool) -> str:
    method = "COALESCE(c.reclaim_resolve_method, d.reclaim_resolve_method, 'lca')"
    # Its estimates (a tree per pool in use) cross the JIT threshold even on a few rows, where
    # compiling takes seconds and the query itself milliseconds: planned without JIT.
    returns = (
        PROTECTION_RETURNS.replace("SET search_path", "SET jit = off\nSET search_path")
        if pools
        else PROTECTION_RETURNS
    )
    return f"""
CREATE OR REPLACE FUNCTION minruntime.reclaim_protection(
    reclaimer_queue text, at timestamptz DEFAULT now())
{returns}{_RECLAIM_TREES[pools]} walk AS (
    -- Per victim queue V of a tree: where the lca walk starts (path_V[k+1], k = the common
    -- prefix with the reclaimer's path, clamped to V), and that start's walk result.
    SELECT v.seen, v.name, v.reclaim_resolved AS queue_value, v.reclaim_source AS queue_source,
           s.reclaim_resolved AS lca_value, s.reclaim_source AS lca_source
      FROM reclaimer r
      JOIN nodes v ON v.seen = r.seen
     CROSS JOIN LATERAL (
         -- Paths are unique in a tree: equal names at a depth mean equal prefixes down to it.
         SELECT count(*)::int AS common FROM generate_subscripts(v.path, 1) i
          WHERE v.path[i] = r.path[i]) k
      JOIN nodes s
        ON s.seen = v.seen AND s.name = v.path[LEAST(cardinality(v.path), k.common + 1)]
), resolved AS (
    SELECT p.uid, p.queue, p.start_time, p.running_pods, p.protected_evictable_pods,
           p.preemptibility,
           CASE WHEN w.name IS NULL
                    THEN COALESCE(c.default_reclaim_min_runtime, d.default_reclaim_min_runtime,
                                  interval '0')
                ELSE COALESCE(
                    CASE WHEN {method} = 'lca' THEN w.lca_value ELSE w.queue_value END,
                    c.default_reclaim_min_runtime, d.default_reclaim_min_runtime,
                    interval '0')
           END AS min_runtime,
           CASE WHEN {method} = 'lca' THEN w.lca_source ELSE w.queue_source END AS resolved_from
      FROM minruntime_state.podgroup_state p{_PODGROUP_TREE[pools]}
      {CONFIG_JOIN}
     WHERE p.status = 'running'
)
SELECT uid, queue, start_time, min_runtime, resolved_from,
       start_time + min_runtime,
       COALESCE(at < start_time + min_runtime, false),
       {_EVICTABLE.format(at="at", p="").replace("m.min_runtime", "min_runtime")}
  FROM resolved
$$;
"""


def _queue_row(name: str, columns: str, target: str, pools: bool) -> str:
    """plpgsql: SELECT ``columns`` of queue ``name`` as pool ``seen`` sees it INTO ``target``."""
    if not pools:
        return (
            f"SELECT {columns} INTO {target} FROM minruntime_state.queue_nodes WHERE name = {name};"
        )
    seen = ", ".join(
        f"{_seen(column)} AS {column}" if column != "name" else "h.name"
        for column in columns.split(", ")
    )
    return f"""SELECT {seen} INTO {target}
      FROM minruntime_state.queue_nodes h
      LEFT JOIN minruntime_state.queue_nodes_in_pool o
        ON o.node_pool = seen AND o.name = h.name
     WHERE h.name = {name} AND (h.node_pool IS NULL OR h.node_pool = seen);"""


def _resolve_for(pools: bool) -> str:
    victim = "name, path, preempt_resolved, preempt_source, reclaim_resolved, reclaim_source"
    return f"""
-- Resolution of one (victim queue, preemptor queue) pair in a node pool: the preempt rule
-- when both queues are the same, the reclaim rule otherwise (Resolver.resolve_for), in the
-- tree the pool sees.
CREATE OR REPLACE FUNCTION minruntime_state.resolve_for(
    victim_queue text, preemptor_queue text, pool text,
    OUT min_runtime interval, OUT resolved_from text, OUT rule text)
LANGUAGE plpgsql STABLE
SET search_path = pg_catalog, pg_temp
AS $$
DECLARE
    seen text := COALESCE(NULLIF(pool, ''), 'default');
    cfg record;
    victim record;
    reclaimer record;
    walk_start record;
    common int;
BEGIN
    {RESOLVE_CONFIG}
      FROM (SELECT seen AS node_pool) p
      {CONFIG_JOIN};
    {_queue_row("victim_queue", victim, "victim", pools)}
    {RESOLVE_PREEMPT}
    {_queue_row("preemptor_queue", "name, path", "reclaimer", pools)}
    IF victim.name IS NULL OR reclaimer.name IS NULL THEN
        -- KAI passes a nil queue and falls back to the plugin default.
        min_runtime := cfg.reclaim_default;
        RETURN;
    END IF;
    {RESOLVE_BY_QUEUE}
    -- Paths are unique in a tree, so equal names at a depth mean equal prefixes down to it.
    SELECT count(*)::int INTO common FROM generate_subscripts(victim.path, 1) i
     WHERE victim.path[i] = reclaimer.path[i];
    {
        _queue_row(
            "victim.path[LEAST(common + 1, cardinality(victim.path))]",
            "name, reclaim_resolved, reclaim_source",
            "walk_start",
            pools,
        )
    }
    min_runtime := COALESCE(walk_start.reclaim_resolved, cfg.reclaim_default);
    resolved_from := walk_start.reclaim_source;
END
$$;
"""


_QUEUES_COLUMNS = "name, parent, preempt_min_runtime, reclaim_min_runtime, path"

UPGRADE_SQL = f"""
ALTER TABLE {STATE}.queue_nodes ADD COLUMN node_pool text;

CREATE TABLE {STATE}.queue_nodes_in_pool (
    node_pool text NOT NULL,
    name text NOT NULL,
    path text[] NOT NULL,
    preempt_resolved interval,
    preempt_source text,
    reclaim_resolved interval,
    reclaim_source text,
    CONSTRAINT pk_queue_nodes_in_pool PRIMARY KEY (node_pool, name)
);

CREATE OR REPLACE VIEW minruntime.queues AS
SELECT {_QUEUES_COLUMNS}, priority, resources, node_pool
FROM {STATE}.queue_nodes;
{_preempt_protection(pools=True)}
{_reclaim_protection(pools=True)}
{_resolve_for(pools=True)}
"""

# Views lose columns only by being made again (grants go with them).
DOWNGRADE_SQL = f"""
{view_made_again("queues", f"{_QUEUES_COLUMNS}, priority, resources", f"{STATE}.queue_nodes")}
{_preempt_protection(pools=False)}
{_reclaim_protection(pools=False)}
{_resolve_for(pools=False)}
DROP TABLE {STATE}.queue_nodes_in_pool;
ALTER TABLE {STATE}.queue_nodes DROP COLUMN node_pool;
"""


def upgrade() -> None:
    op.execute(UPGRADE_SQL)


def downgrade() -> None:
    op.execute(DOWNGRADE_SQL)
