"""Read one requeue cycle's inputs from the projections: the cluster, the rules, the nominations.

Everything is read in the caller's transaction (the worker uses REPEATABLE READ, so the whole
cycle sees one consistent state), by ``store.requeue.read_cycle_rows`` from one schema: the
live one, or the shadow a ``StateTables`` names.

What counts (docs/requeue-worker.md):
- running: submitted podgroups with status ``running``; their allocated pods use capacity;
- pending: submitted podgroups with status ``pending`` (contenders), with the end of their
  preemption-delay window as the projection stored it (``preemption_delay_ends_at``);
- a podgroup known only from allocations (never submitted) has no queue, priority or GPU
  request: it is neither a candidate nor a contender, and its pods count as 0 GPUs;
- promises in force (``expires_at > now``) of beneficiaries still pending;
- external nominations that concern the current run (made at or after its start), or the
  podgroup when it is not running (the worker then records ``not_running``).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any, NamedTuple

from sqlalchemy import Connection

from minruntime.core import (
    DEFAULT_NODE_POOL,
    MAX_GPUS_IN_PLAN,
    ClusterState,
    Exclusion,
    ExclusionReason,
    MinRuntimeError,
    Node,
    NodePoolConfigs,
    PendingPodGroup,
    Pod,
    Preemptibility,
    QueueTree,
    RunningPodGroup,
    SubGroup,
    exclusion_reason,
    requeue_cap,
)
from minruntime.core.disruption import (
    DisruptionHistory,
    DisruptionPolicy,
    TopOwner,
    owner_uid,
    queue_policy,
)
from minruntime.store.queues import load_tree
from minruntime.store.requeue import (
    disruption_rows,
    last_decision_rows,
    read_cycle_rows,
    requeue_history_rows,
)
from minruntime.store.schema import LIVE, StateTables

log = logging.getLogger(__name__)


class LastDecision(NamedTuple):
    """The newest recorded decision about a podgroup: a repeat of it is not recorded again."""

    outcome: str
    reason: str | None
    nominated_by: tuple[str, ...]
    run_start: datetime | None


class CycleInputs(NamedTuple):
    """What one requeue cycle reads."""

    cluster: ClusterState
    tree: QueueTree
    configs: NodePoolConfigs
    # (uid, nominator) of the nominations other components published.
    external: tuple[tuple[str, str], ...]
    # What the stored rows hold that the planner cannot use: left out of the cycle, logged.
    excluded: tuple[Exclusion, ...] = ()


class _Row(NamedTuple):
    """One stored podgroup as read, before the core's checks (a tuple: cheap per row)."""

    uid: str
    queue: str
    pool: str
    priority: int
    preemptibility: str
    status: str
    start_time: datetime | None
    bad_start: bool
    annotations: Any
    awaiting_release: bool
    submitted_at: datetime | None
    bad_submitted: bool
    delay_ends_at: datetime | None
    bad_delay_ends: bool
    owner_kind: str | None
    owner_name: str | None
    owner_uid: str | None


class _Reader:
    """Builds the cluster state row by row; what the core refuses is excluded with its reason."""

    def __init__(self) -> None:
        self.excluded: list[Exclusion] = []
        # Nodes whose free capacity is unknown (a bad promise, an excluded podgroup's pods).
        self.doubtful_nodes: dict[str, ExclusionReason] = {}
        # uid -> the first error its pods or subgroups raised (the podgroup is excluded).
        self.pod_errors: dict[str, MinRuntimeError] = {}
        # uid -> nodes its allocated pods are on, whatever their values.
        self.pod_nodes: dict[str, set[str]] = {}

    def exclude(self, what: str, name: str, reason: ExclusionReason, detail: str = "") -> None:
        self.excluded.append(Exclusion(what, name, reason, detail))
        log.warning("requeue cycle leaves out %s %s (%s): %s", what, name, reason.value, detail)

    def nodes(self, rows: Iterable[tuple[Any, ...]]) -> list[Node]:
        nodes: list[Node] = []
        for name, pool, gpu in rows:
            try:
                nodes.append(Node(name=name, gpu=_number(gpu), node_pool=pool))
            except MinRuntimeError as error:
                self.exclude("node", name, exclusion_reason(error), str(error))
        return nodes

    def pods(self, rows: Iterable[tuple[Any, ...]]) -> dict[str, list[Pod]]:
        """Pods by uid (a pod the core refuses is in ``pod_errors`` instead)."""
        pods: dict[str, list[Pod]] = {}
        for uid, name, subgroup, gpu, node, allocated in rows:
            if allocated and node:
                self.pod_nodes.setdefault(uid, set()).add(node)
            try:
                pod = Pod(
                    name=name,
                    gpu=0.0 if gpu is None else _number(gpu),
                    subgroup=subgroup,
                    node=node if allocated else None,
                    running=bool(allocated and node),
                )
            except MinRuntimeError as error:
                self.pod_errors.setdefault(uid, error)
                continue
            pods.setdefault(uid, []).append(pod)
        return pods

    def subgroups(self, rows: Iterable[tuple[Any, ...]]) -> dict[str, list[SubGroup]]:
        subgroups: dict[str, list[SubGroup]] = {}
        for uid, name, min_available in rows:
            try:
                subgroups.setdefault(uid, []).append(SubGroup(name, min_available))
            except MinRuntimeError as error:
                self.pod_errors.setdefault(uid, error)
        return subgroups

    def certain(self, nodes: Iterable[Node]) -> list[Node]:
        """The nodes whose free capacity is known (the others are excluded)."""
        kept: list[Node] = []
        for node in nodes:
            reason = self.doubtful_nodes.get(node.name)
            if reason is None:
                kept.append(node)
            else:
                self.exclude("node", node.name, reason, "its free capacity is unknown")
        return kept

    def external(self, nominations: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
        """The usable external nominations of podgroups that are not excluded."""
        excluded = {e.name for e in self.excluded if e.what == "podgroup"}
        external: list[tuple[str, str]] = []
        for uid, nominator in nominations:
            if uid in excluded:
                continue
            if not nominator:
                # This nomination only: the podgroup's other nominations still count.
                self.exclude("nomination", uid, ExclusionReason.INVALID_NOMINATION, "no nominator")
                continue
            external.append((uid, nominator))
        return external

    def promises(self, rows: Iterable[tuple[Any, ...]]) -> tuple[dict[str, float], set[str]]:
        promised: dict[str, float] = {}
        promised_to: set[str] = set()
        for beneficiary, node, gpu in rows:
            amount = _number(gpu)
            total = promised.get(node, 0.0) + amount
            if not (math.isfinite(total) and 0 <= total <= MAX_GPUS_IN_PLAN):
                self.doubtful_nodes[node] = ExclusionReason.INVALID_GPU
                continue
            promised[node] = total
            promised_to.add(beneficiary)
        return promised, promised_to


def load_cycle_inputs(conn: Connection, now: datetime, tables: StateTables = LIVE) -> CycleInputs:
    """Read the cluster state, queue tree, configs and external nominations at ``now``.

    Every row comes from ``tables`` (the live schema unless a shadow's is given). Never raises
    for what the projections hold: a node, podgroup, node pool or the queue tree the planner
    cannot use is left out, with its reason in ``excluded``.
    """
    reader = _Reader()
    stored = read_cycle_rows(conn, tables, now)
    nodes = reader.nodes(stored.nodes)
    rows = [_Row._make(row) for row in stored.podgroups]
    pods = reader.pods(stored.pods)
    subgroups = reader.subgroups(stored.subgroups)
    promised, promised_to = reader.promises(stored.promises)
    configs, bad_pools = stored.configs, stored.bad_pools
    tree: QueueTree | None
    try:
        tree = load_tree(conn, tables)
    except MinRuntimeError as error:
        reader.exclude("queue_tree", "queues", ExclusionReason.INVALID_QUEUE_TREE, str(error))
        tree = None
    for pool in sorted(bad_pools):
        reader.exclude("node_pool", pool, ExclusionReason.INVALID_CONFIG, "unusable stored config")
    running: list[RunningPodGroup] = []
    pending: list[PendingPodGroup] = []
    awaiting: set[str] = set()
    for row in rows:
        unusable = pool_unusable(row.pool, bad_pools, configs)
        built = _podgroup(reader, row, pods, subgroups, tree, unusable)
        if isinstance(built, RunningPodGroup):
            running.append(built)
            if row.awaiting_release:
                awaiting.add(row.uid)
        elif isinstance(built, PendingPodGroup):
            pending.append(built)
        elif row.status == "running":
            # Its pods hold capacity nobody can measure now: their nodes are left out too.
            for name in reader.pod_nodes.get(row.uid, ()):
                reader.doubtful_nodes.setdefault(name, ExclusionReason.HOSTS_EXCLUDED_PODGROUP)
    kept_nodes = reader.certain(nodes)
    external = reader.external(stored.nominations)
    kept = {node.name for node in kept_nodes}
    overrides = queue_overrides(tree)
    cluster = ClusterState(
        nodes=tuple(kept_nodes),
        running=tuple(running),
        pending=tuple(pending),
        promised={node: gpu for node, gpu in promised.items() if node in kept},
        awaiting_release=frozenset(awaiting),
        promised_to=frozenset(promised_to),
        requeue_history=requeue_history(conn, tables, running, configs, now),
        disruption_history=disruption_history(conn, tables, configs, now, overrides),
        queue_annotations=overrides,
    )
    return CycleInputs(
        cluster,
        QueueTree(()) if tree is None else tree,
        configs,
        tuple(external),
        tuple(reader.excluded),
    )


def _podgroup(
    reader: _Reader,
    row: _Row,
    pods: Mapping[str, list[Pod]],
    subgroups: Mapping[str, list[SubGroup]],
    tree: QueueTree | None,
    pool_unusable: bool,
) -> RunningPodGroup | PendingPodGroup | None:
    """The podgroup as the core sees it, or None (excluded, with its reason)."""
    uid = row.uid
    problem: tuple[ExclusionReason, str] | None = None
    if tree is None:
        problem = (ExclusionReason.INVALID_QUEUE_TREE, "the queue tree is unusable")
    elif pool_unusable:
        problem = (ExclusionReason.INVALID_CONFIG, f"node pool {row.pool} has an unusable config")
    elif row.bad_start or row.bad_submitted:
        problem = (ExclusionReason.INVALID_TIME, "a start or submission time outside years 1-9999")
    elif row.bad_delay_ends and row.status == "pending":
        problem = (ExclusionReason.INVALID_TIME, "a preemption-delay end outside years 1-9999")
    elif not isinstance(row.annotations, dict | None):
        problem = (ExclusionReason.INVALID_ANNOTATIONS, "annotations are not a map")
    elif uid in reader.pod_errors:
        error = reader.pod_errors[uid]
        problem = (exclusion_reason(error), str(error))
    if problem is not None:
        reader.exclude("podgroup", uid, *problem)
        return None
    shared = _shared(row, pods, subgroups)
    try:
        if row.status == "running":
            return RunningPodGroup(
                start_time=row.start_time,
                preemptibility=Preemptibility(row.preemptibility),
                annotations={str(k): str(v) for k, v in (row.annotations or {}).items()},
                owner=_stored_owner(row),
                **shared,
            )
        return PendingPodGroup(
            submitted_at=row.submitted_at, delay_ends_at=row.delay_ends_at, **shared
        )
    except MinRuntimeError as error:
        # One inconsistent row must not stop every other decision: it is left out of the
        # cycle (neither candidate nor contender) and reported.
        reader.exclude("podgroup", uid, exclusion_reason(error), str(error))
        return None


def requeue_history(
    conn: Connection,
    tables: StateTables,
    running: Iterable[RunningPodGroup],
    configs: NodePoolConfigs,
    now: datetime,
) -> dict[str, tuple[datetime, ...]]:
    """The committed requeues the cap counts of each running podgroup with a cap (§10).

    An invalid max-requeues annotation is ignored here as in the planner (the pool's cap
    applies); ``explain`` shows why.
    """
    asks = []
    for podgroup in running:
        cap = requeue_cap(configs.for_pool(podgroup.node_pool), podgroup.annotations)
        if cap is not None:
            asks.append((podgroup.uid, cap.limit, cap.window_start(now)))
    history: dict[str, list[datetime]] = {}
    for uid, decided_at in requeue_history_rows(conn, tables, asks):
        history.setdefault(uid, []).append(decided_at)
    return {uid: tuple(times) for uid, times in history.items()}


def queue_overrides(tree: QueueTree | None) -> dict[str, dict[str, str]]:
    """Queue name -> its disruption annotations (only the queues that carry some)."""
    if tree is None:
        return {}
    return {queue.name: dict(queue.disruption) for queue in tree if queue.disruption}


def disruption_history(
    conn: Connection,
    tables: StateTables,
    configs: NodePoolConfigs,
    now: datetime,
    overrides: Mapping[str, Mapping[str, str]] | None = None,
) -> DisruptionHistory:
    """The evictions the disruption budgets and gaps count: since the longest window or gap
    any node pool or queue sets (nothing read when none sets one)."""
    spans = [
        span
        for config in configs.by_pool.values()
        for span in (config.eviction_window, config.min_eviction_gap)
        if span is not None
    ]
    for overridden in (overrides or {}).values():
        policy = queue_policy(DisruptionPolicy(), overridden).policy
        spans += [s for s in (policy.eviction_window, policy.min_eviction_gap) if s is not None]
    if not spans:
        return DisruptionHistory()
    since = now - max(spans)
    by_queue: dict[str, list[datetime]] = {}
    by_owner: dict[str, list[datetime]] = {}
    for queue, stored, annotation, moment in disruption_rows(conn, tables, since):
        if queue is not None:
            by_queue.setdefault(queue, []).append(moment)
        owner = owner_uid(stored, annotation)
        if owner is not None:
            by_owner.setdefault(owner, []).append(moment)
    return DisruptionHistory(
        {queue: tuple(times) for queue, times in by_queue.items()},
        {owner: tuple(times) for owner, times in by_owner.items()},
    )


def _stored_owner(row: _Row) -> TopOwner | None:
    """The top owner the submission carried (None: not carried; the planner reads the
    annotation instead)."""
    if row.owner_kind and row.owner_name and row.owner_uid:
        return TopOwner(row.owner_kind, row.owner_name, row.owner_uid)
    return None


def _number(value: Any) -> float:
    """A stored number as a float (NaN when it is not one: the core refuses NaN)."""
    try:
        return float(value)
    except (TypeError, ValueError, OverflowError):
        return math.nan


def pool_unusable(pool: str, bad_pools: set[str], configs: NodePoolConfigs) -> bool:
    """True if ``pool``'s podgroups cannot be judged: its config (or the default's) is bad."""
    if pool in bad_pools:
        return True
    return pool not in configs.by_pool and DEFAULT_NODE_POOL in bad_pools


def last_decisions(
    conn: Connection, uids: list[str], tables: StateTables = LIVE
) -> dict[str, LastDecision]:
    """The newest recorded decision of each of ``uids`` that has one."""
    return {
        uid: LastDecision(outcome, reason, tuple(nominated_by), run_start)
        for uid, outcome, reason, nominated_by, run_start in last_decision_rows(conn, tables, uids)
    }


def _shared(
    row: _Row, pods: Mapping[str, list[Pod]], subgroups: Mapping[str, list[SubGroup]]
) -> dict[str, Any]:
    """What a running and a pending podgroup are both built with: who it is, and its shape."""
    uid = row.uid
    shared: dict[str, Any] = {
        "uid": uid,
        "queue": row.queue,
        "priority": row.priority,
        "node_pool": row.pool,
        "pods": tuple(pods.get(uid, ())),
    }
    declared = subgroups.get(uid)
    if declared:
        shared["subgroups"] = tuple(declared)
    return shared
