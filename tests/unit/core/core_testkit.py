"""Shared helpers for the core unit tests: the design tree, naive references, strategies."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from datetime import datetime, timedelta

from hypothesis import strategies as st
from tests.cloudevents import T0

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    EXPECTED_RUNTIME_PLUGIN,
    Allocation,
    ClusterState,
    CyclePlan,
    MinRuntimeConfig,
    Node,
    NodePoolConfigs,
    PendingPodGroup,
    Pod,
    PodGroupState,
    Preemptibility,
    Queue,
    QueueTree,
    RunningPodGroup,
    SubGroup,
    Submission,
    fold,
    plan_requeue_cycle,
)


def s(seconds: float) -> timedelta:
    return timedelta(seconds=seconds)


def design_tree() -> QueueTree:
    """A -> B(600s) -> {C -> {leaf1(0s), leaf2(180s)}, D(60s) -> {leaf3}} (reclaim values)."""
    return QueueTree(
        [
            Queue(name="A"),
            Queue(name="B", parent="A", reclaim_min_runtime=s(600)),
            Queue(name="C", parent="B"),
            Queue(name="D", parent="B", reclaim_min_runtime=s(60)),
            Queue(name="leaf1", parent="C", reclaim_min_runtime=s(0)),
            Queue(name="leaf2", parent="C", reclaim_min_runtime=s(180)),
            Queue(name="leaf3", parent="D"),
        ]
    )


def with_preempt(tree: QueueTree) -> QueueTree:
    """The design tree plus SEMANTICS.md §4's preempt values: B 600s, leaf1 300s."""
    return tree.with_queue(
        Queue(name="B", parent="A", preempt_min_runtime=s(600), reclaim_min_runtime=s(600))
    ).with_queue(
        Queue(name="leaf1", parent="C", preempt_min_runtime=s(300), reclaim_min_runtime=s(0))
    )


def submission(
    pods: tuple[tuple[str, str, float], ...] = (("p0", "default", 1.0), ("p1", "default", 1.0)),
    subgroups: tuple[SubGroup, ...] = (SubGroup("default", 2),),
    annotations: dict[str, str] | None = None,
    at: datetime = T0,
    **spec: object,
) -> Submission:
    """A submission of job/ns in queue q (two pods, one subgroup needing both); `spec` replaces
    any of the other fields."""
    fields: dict[str, object] = {
        "name": "job",
        "namespace": "ns",
        "queue": "q",
        "node_pool": None,
        "priority": 5,
        "preemptibility": Preemptibility.PREEMPTIBLE,
    }
    fields.update(spec)
    return Submission(
        subgroups=subgroups,
        pods=pods,
        annotations=annotations or {},
        at=at,
        **fields,  # type: ignore[arg-type]
    )


def running(state: PodGroupState, at: datetime = T0) -> PodGroupState:
    """The podgroup with every pod allocated, on node n1, at `at`."""
    return fold(state, Allocation(tuple((name, "n1") for name in state.pods), at))


# --- naive references: written from SEMANTICS.md §4 without any caching -----------------


def naive_path(tree: QueueTree, name: str) -> list[str]:
    path = [name]
    while True:
        queue = tree.get(path[-1])
        assert queue is not None
        if queue.parent is None or queue.parent not in tree:
            return list(reversed(path))
        path.append(queue.parent)


def naive_walk(
    tree: QueueTree, start: str, field: str, default: timedelta
) -> tuple[timedelta, str | None]:
    for name in reversed(naive_path(tree, start)):
        queue = tree.get(name)
        assert queue is not None
        value = getattr(queue, field)
        if value is not None:
            return value, name
    return default, None


def naive_preempt(
    tree: QueueTree, config: MinRuntimeConfig, victim: str
) -> tuple[timedelta, str | None]:
    if victim not in tree:
        return config.default_preempt_min_runtime, None
    return naive_walk(tree, victim, "preempt_min_runtime", config.default_preempt_min_runtime)


def naive_reclaim(
    tree: QueueTree, config: MinRuntimeConfig, reclaimer: str, victim: str
) -> tuple[timedelta, str | None]:
    default = config.default_reclaim_min_runtime
    if victim not in tree or reclaimer not in tree:
        return default, None
    if config.reclaim_resolve_method == "queue":
        return naive_walk(tree, victim, "reclaim_min_runtime", default)
    victim_path = naive_path(tree, victim)
    reclaimer_path = naive_path(tree, reclaimer)
    if victim_path[0] != reclaimer_path[0]:
        root = tree.get(victim_path[0])
        assert root is not None
        if root.reclaim_min_runtime is not None:
            return root.reclaim_min_runtime, root.name
        return default, None
    lca_index = max(
        i
        for i in range(min(len(victim_path), len(reclaimer_path)))
        if victim_path[i] == reclaimer_path[i]
    )
    start_index = min(lca_index + 1, len(victim_path) - 1)
    return naive_walk(tree, victim_path[start_index], "reclaim_min_runtime", default)


# --- strategies ----------------------------------------------------------------------------

optional_runtime = st.one_of(
    st.none(), st.sampled_from([s(0), s(30), s(60), s(600)]), st.integers(0, 10**6).map(s)
)


@st.composite
def random_trees(draw: st.DrawFn, max_queues: int = 25) -> QueueTree:
    """Random forests: parent always an earlier queue (acyclic), sometimes unknown or None."""
    count = draw(st.integers(1, max_queues))
    queues = []
    for index in range(count):
        parent_choice = draw(st.integers(-2, index - 1))
        if parent_choice == -2:
            parent = "ghost"  # a parent that is not in the tree: the queue is a root
        elif parent_choice == -1:
            parent = None
        else:
            parent = f"q{parent_choice}"
        queues.append(
            Queue(
                name=f"q{index}",
                parent=parent,
                preempt_min_runtime=draw(optional_runtime),
                reclaim_min_runtime=draw(optional_runtime),
            )
        )
    return QueueTree(draw(st.permutations(queues)))


configs = st.builds(
    MinRuntimeConfig,
    default_preempt_min_runtime=st.sampled_from([s(0), s(5), s(3600)]),
    default_reclaim_min_runtime=st.sampled_from([s(0), s(7), s(7200)]),
    reclaim_resolve_method=st.sampled_from(["lca", "queue"]),
)


def queue_names(tree: QueueTree) -> st.SearchStrategy[str]:
    """Names in the tree, plus one that is not."""
    return st.sampled_from([*(queue.name for queue in tree), "nowhere"])


def reclaimer_and_victim(tree: QueueTree, data: st.DataObject) -> tuple[str, str]:
    """A reclaimer's and a victim's queue, each drawn from ``queue_names(tree)``."""
    names = queue_names(tree)
    return data.draw(names), data.draw(names)


# --- requeue planning: builders with the defaults of the §9 scenarios ----------------------

EXPECTED = "1h"


def node(name: str, gpu: float = 8.0, pool: str = "default") -> Node:
    return Node(name=name, gpu=gpu, node_pool=pool)


def _pods(
    uid: str,
    gpus: Sequence[tuple[str | None, float]],
    subgroups: Sequence[SubGroup],
    pod_subgroups: Sequence[str] | None,
    *,
    running: bool,
) -> tuple[Pod, ...]:
    """One pod per (node, gpu), named ``<uid>-<i>``, in ``pod_subgroups`` (default: the first
    subgroup)."""
    names = pod_subgroups or [subgroups[0].name] * len(gpus)
    return tuple(
        Pod(name=f"{uid}-{i}", gpu=gpu, node=where, running=running, subgroup=sub)
        for i, ((where, gpu), sub) in enumerate(zip(gpus, names, strict=True))
    )


def running_pg(
    uid: str,
    *,
    gpus: Sequence[tuple[str, float]] = (("n1", 4.0),),
    queue: str = "team",
    priority: int = 0,
    start: datetime | None = T0 - timedelta(hours=2),
    annotations: Mapping[str, str] | None = None,
    pool: str = "default",
    subgroups: Sequence[SubGroup] = (SubGroup(),),
    pod_subgroups: Sequence[str] | None = None,
    preemptible: bool = True,
    preemptibility: Preemptibility | None = None,
) -> RunningPodGroup:
    """A running podgroup with one running pod per (node, gpu); over its 1h runtime by default."""
    return RunningPodGroup(
        uid=uid,
        queue=queue,
        priority=priority,
        start_time=start,
        node_pool=pool,
        preemptibility=preemptibility or Preemptibility.of_flag(preemptible),
        annotations={EXPECTED_RUNTIME_ANNOTATION: EXPECTED} if annotations is None else annotations,
        subgroups=tuple(subgroups),
        pods=_pods(uid, gpus, subgroups, pod_subgroups, running=True),
    )


def pending_pg(
    uid: str,
    *,
    gpus: Sequence[float] = (4.0,),
    queue: str = "team",
    priority: int = 10,
    pool: str = "default",
    subgroups: Sequence[SubGroup] | None = None,
    pod_subgroups: Sequence[str] | None = None,
    submitted_at: datetime | None = None,
) -> PendingPodGroup:
    """A pending podgroup with one pod per GPU request; by default one subgroup needs them all."""
    if subgroups is None:
        subgroups = (SubGroup(min_available=len(gpus)),)
    return PendingPodGroup(
        uid=uid,
        queue=queue,
        priority=priority,
        node_pool=pool,
        subgroups=tuple(subgroups),
        submitted_at=submitted_at,
        pods=_pods(uid, [(None, gpu) for gpu in gpus], subgroups, pod_subgroups, running=False),
    )


def flat_tree(
    *names: str, preempt: timedelta | None = None, reclaim: timedelta | None = None
) -> QueueTree:
    """Root queues with the same minimum runtimes."""
    return QueueTree(
        Queue(name=name, preempt_min_runtime=preempt, reclaim_min_runtime=reclaim)
        for name in names or ("team",)
    )


def plan(
    snapshot: ClusterState,
    candidates: Mapping[str, Collection[str]],
    *,
    tree: QueueTree | None = None,
    configs: NodePoolConfigs | None = None,
    now: datetime = T0,
) -> CyclePlan:
    return plan_requeue_cycle(
        snapshot,
        candidates,
        tree=tree if tree is not None else flat_tree("team", "other"),
        configs=configs if configs is not None else NodePoolConfigs(),
        now=now,
    )


def nominated(*uids: str, by: str = EXPECTED_RUNTIME_PLUGIN) -> dict[str, frozenset[str]]:
    return {uid: frozenset({by}) for uid in uids}
