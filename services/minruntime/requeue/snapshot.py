"""Read one requeue cycle's inputs from the projections: the cluster, the rules, the nominations.

Everything is read in the caller's transaction (the worker uses REPEATABLE READ, so the whole
cycle sees one consistent state). Rows come straight from psycopg cursors: a cycle at the
benchmark's scale reads tens of thousands of pods, and SQLAlchemy's per-row objects would
cost more than the queries.

What counts (docs/requeue-worker.md):
- running: submitted podgroups with status ``running``; their allocated pods use capacity;
- pending: submitted podgroups with status ``pending`` (contenders);
- a podgroup known only from allocations (never submitted) has no queue, priority or GPU
  request: it is neither a candidate nor a contender, and its pods count as 0 GPUs;
- promises in force (``expires_at > now``) of beneficiaries still pending;
- external nominations that concern the current run (made at or after its start), or the
  podgroup when it is not running (the worker then records ``not_running``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.core import (
    ClusterSnapshot,
    MinRuntimeConfig,
    MinRuntimeError,
    Node,
    NodePoolConfigs,
    PendingPodGroup,
    Pod,
    QueueTree,
    RunningPodGroup,
    SubGroup,
)
from minruntime.ingest.queues import load_tree

log = logging.getLogger(__name__)

_NODES: Final = "SELECT name, node_pool, gpu FROM minruntime_state.node_state ORDER BY name"
_PODGROUPS: Final = (
    "SELECT uid, queue, node_pool, priority, preemptible, status, start_time, annotations,"
    " awaiting_release, submitted_at FROM minruntime_state.podgroup_state"
    " WHERE submitted AND status IN ('running', 'pending') ORDER BY uid"
)
_PODS: Final = (
    "SELECT p.uid, p.name, p.subgroup, p.gpu, p.node, p.allocated"
    " FROM minruntime_state.pod_state p JOIN minruntime_state.podgroup_state g USING (uid)"
    " WHERE g.submitted AND g.status IN ('running', 'pending') ORDER BY p.uid, p.name"
)
_SUBGROUPS: Final = (
    "SELECT s.uid, s.name, s.min_available FROM minruntime_state.subgroup_state s"
    " JOIN minruntime_state.podgroup_state g USING (uid)"
    " WHERE g.submitted AND g.status IN ('running', 'pending') ORDER BY s.uid, s.ctid"
)
_PROMISES: Final = (
    "SELECT r.beneficiary, r.node, sum(r.gpu) FROM minruntime_state.requeue_promises r"
    " JOIN minruntime_state.podgroup_state g ON g.uid = r.beneficiary AND g.status = 'pending'"
    " WHERE r.expires_at > %(now)s GROUP BY r.beneficiary, r.node"
)
_CONFIGS: Final = (
    "SELECT node_pool, default_preempt_min_runtime, default_reclaim_min_runtime,"
    " reclaim_resolve_method, default_requeue_delay FROM minruntime_state.node_pool_configs"
)
_NOMINATIONS: Final = (
    "SELECT n.uid, n.nominated_by FROM minruntime_state.nominations n"
    " LEFT JOIN minruntime_state.podgroup_state g USING (uid)"
    " WHERE g.start_time IS NULL OR g.start_time <= n.nominated_at ORDER BY n.uid, n.nominated_by"
)
_LAST_DECISIONS: Final = (
    "SELECT DISTINCT ON (uid) uid, outcome, reason, nominated_by, run_start"
    " FROM minruntime_state.requeue_decision_log WHERE uid = ANY(%(uids)s)"
    " ORDER BY uid, seq DESC"
)


@dataclass(frozen=True, slots=True)
class LastDecision:
    """The newest recorded decision about a podgroup: a repeat of it is not recorded again."""

    outcome: str
    reason: str | None
    nominated_by: tuple[str, ...]
    run_start: datetime | None


@dataclass(frozen=True, slots=True)
class CycleInputs:
    """What one requeue cycle reads."""

    snapshot: ClusterSnapshot
    tree: QueueTree
    configs: NodePoolConfigs
    # (uid, nominator) of the nominations other components published.
    external: tuple[tuple[str, str], ...]
    # Podgroups whose stored rows the core rejected (left out of the cycle, logged).
    rejected: tuple[str, ...] = ()


def load_cycle_inputs(conn: Connection, now: datetime) -> CycleInputs:
    """Read the snapshot, queue tree, configs and external nominations at ``now``."""
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(_NODES)
        nodes = tuple(Node(name=name, gpu=float(gpu), node_pool=pool) for name, pool, gpu in cursor)
        cursor.execute(_PODGROUPS)
        podgroups = cursor.fetchall()
        cursor.execute(_PODS)
        pods: dict[str, list[Pod]] = {}
        for uid, name, subgroup, gpu, node, allocated in cursor:
            pods.setdefault(uid, []).append(
                Pod(
                    name=name,
                    gpu=0.0 if gpu is None else float(gpu),
                    subgroup=subgroup,
                    node=node if allocated else None,
                    running=bool(allocated and node),
                )
            )
        cursor.execute(_SUBGROUPS)
        subgroups: dict[str, list[SubGroup]] = {}
        for uid, name, min_available in cursor:
            subgroups.setdefault(uid, []).append(SubGroup(name, min_available))
        cursor.execute(_PROMISES, {"now": now})
        promised: dict[str, float] = {}
        promised_to: set[str] = set()
        for beneficiary, node, gpu in cursor:
            promised[node] = promised.get(node, 0.0) + float(gpu)
            promised_to.add(beneficiary)
        cursor.execute(_CONFIGS)
        configs = _node_pool_configs(cursor)
        cursor.execute(_NOMINATIONS)
        external = tuple((uid, nominator) for uid, nominator in cursor)
    running: list[RunningPodGroup] = []
    pending: list[PendingPodGroup] = []
    awaiting: set[str] = set()
    rejected: list[str] = []
    for (
        uid,
        queue,
        pool,
        priority,
        preemptible,
        status,
        start_time,
        annotation_map,
        awaiting_release,
        submitted_at,
    ) in podgroups:
        shape = _shape(uid, pods, subgroups)
        try:
            if status == "running":
                running.append(
                    RunningPodGroup(
                        uid=uid,
                        queue=queue,
                        priority=priority,
                        start_time=start_time,
                        node_pool=pool,
                        preemptible=preemptible,
                        annotations=_string_map(annotation_map),
                        **shape,
                    )
                )
                if awaiting_release:
                    awaiting.add(uid)
            else:
                pending.append(
                    PendingPodGroup(
                        uid=uid,
                        queue=queue,
                        priority=priority,
                        node_pool=pool,
                        submitted_at=submitted_at,
                        **shape,
                    )
                )
        except MinRuntimeError as error:
            # One inconsistent row must not stop every other decision: it is left out of the
            # cycle (neither candidate nor contender) and reported.
            log.warning("podgroup %s left out of the requeue cycle: %s", uid, error)
            rejected.append(uid)
    snapshot = ClusterSnapshot(
        nodes=nodes,
        running=tuple(running),
        pending=tuple(pending),
        promised=promised,
        awaiting_release=frozenset(awaiting),
        promised_to=frozenset(promised_to),
    )
    return CycleInputs(snapshot, load_tree(conn), configs, external, tuple(rejected))


def load_node_pool_configs(conn: Connection) -> NodePoolConfigs:
    """The stored plugin arguments of every node pool."""
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(_CONFIGS)
        return _node_pool_configs(cursor)


def _node_pool_configs(rows: Iterable[tuple[Any, ...]]) -> NodePoolConfigs:
    return NodePoolConfigs(
        {
            pool: MinRuntimeConfig(
                default_preempt_min_runtime=preempt,
                default_reclaim_min_runtime=reclaim,
                reclaim_resolve_method=method,
                default_requeue_delay=delay,
            )
            for pool, preempt, reclaim, method, delay in rows
        }
    )


def last_decisions(conn: Connection, uids: list[str]) -> dict[str, LastDecision]:
    """The newest recorded decision of each of ``uids`` that has one."""
    if not uids:
        return {}
    driver = conn.connection.driver_connection
    assert driver is not None
    with driver.cursor() as cursor:
        cursor.execute(_LAST_DECISIONS, {"uids": uids})
        return {
            uid: LastDecision(outcome, reason, tuple(nominated_by), run_start)
            for uid, outcome, reason, nominated_by, run_start in cursor
        }


def _shape(
    uid: str, pods: Mapping[str, list[Pod]], subgroups: Mapping[str, list[SubGroup]]
) -> dict[str, Any]:
    declared = subgroups.get(uid)
    shape: dict[str, Any] = {"pods": tuple(pods.get(uid, ()))}
    if declared:
        shape["subgroups"] = tuple(declared)
    return shape


def _string_map(annotations: Any) -> dict[str, str]:
    return {str(key): str(value) for key, value in (annotations or {}).items()}
