"""Benchmark requeue planning (the pure core): one cycle at the contract's scale.

Builds a deterministic (seeded) contended cluster: nodes of 8 GPUs in several node pools,
packed with running podgroups; pending podgroups of typical gang shapes (plus some odd
fractional ones) at random priorities; a queue tree with some minimum runtimes so that part
of the candidates are protected. Then it times, on the same snapshot:

- the expected-runtime nominator over every running podgroup,
- ``collect_candidates`` (built-in plus an external nominator for 10 % of the candidates),
- ``plan_requeue_cycle`` (the figure that matters: best of ``--runs``).

    .venv/bin/python benchmarks/bench_requeue_plan.py [--nodes 2000] [--pools 4]
        [--candidates 1000] [--pending 5000] [--runs 5] [--layers]
"""

from __future__ import annotations

import argparse
import platform
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import TypeVar

from benchkit import sized_arguments
from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    ClusterState,
    CyclePlan,
    MinRuntimeConfig,
    Node,
    NodePoolConfigs,
    PendingPodGroup,
    Pod,
    Preemptibility,
    Queue,
    QueueTree,
    RunningPodGroup,
    SubGroup,
    collect_candidates,
    expected_runtime_nominations,
    plan_requeue_cycle,
)
from minruntime.core.disruption import TOP_OWNER_ANNOTATION, DisruptionHistory

T = TypeVar("T")

SEED = 20261121
NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
NODE_GPUS = 8.0
# Typical gangs (GPUs per pod), most common first; 10 % of pending podgroups get odd shapes.
SHAPES = [(1.0,), (2.0,), (4.0,), (8.0,), (0.5,), (4.0, 4.0), (8.0, 8.0), (1.0,) * 4, (2.0,) * 4]
RUNNING_SHAPES = [(1.0,), (2.0,), (4.0,), (8.0,), (0.5,), (0.5, 0.5), (2.0, 2.0), (1.0, 1.0)]


def build_tree(rng: random.Random) -> QueueTree:
    """Five departments with ten teams each; some set minimum runtimes."""
    queues = []
    for department in range(5):
        queues.append(
            Queue(
                name=f"dept{department}", reclaim_min_runtime=timedelta(minutes=rng.choice([0, 30]))
            )
        )
        for team in range(10):
            queues.append(
                Queue(
                    name=f"dept{department}-team{team}",
                    parent=f"dept{department}",
                    preempt_min_runtime=rng.choice([None, timedelta(0), timedelta(hours=3)]),
                    reclaim_min_runtime=rng.choice([None, timedelta(hours=1), timedelta(hours=4)]),
                )
            )
    return QueueTree(queues)


def build_snapshot(
    rng: random.Random,
    node_count: int,
    pools: int,
    pending_count: int,
    teams: list[str],
    odd_shapes: float,
) -> ClusterState:
    nodes = [
        Node(name=f"node-{i:05d}", gpu=NODE_GPUS, node_pool=f"pool-{i % pools}")
        for i in range(node_count)
    ]
    free = {node.name: NODE_GPUS for node in nodes}
    by_pool: dict[str, list[str]] = {}
    for node in nodes:
        by_pool.setdefault(node.node_pool, []).append(node.name)
    running: list[RunningPodGroup] = []
    # Pack every pool to ~97 %: podgroups land on random nodes that still have room.
    for pool, names in sorted(by_pool.items()):
        open_nodes = list(names)
        while sum(free[n] for n in names) > 0.03 * NODE_GPUS * len(names) and open_nodes:
            shape = rng.choice(RUNNING_SHAPES)
            pods = []
            for number, gpu in enumerate(shape):
                fitting = [
                    n for n in rng.sample(open_nodes, min(8, len(open_nodes))) if free[n] >= gpu
                ]
                if not fitting:
                    break
                where = fitting[0]
                free[where] -= gpu
                if free[where] <= 0:
                    open_nodes.remove(where)
                pods.append(Pod(name=f"p{number}", gpu=gpu, node=where, running=True))
            if not pods:
                continue
            uid = f"run-{len(running):06d}"
            running.append(
                RunningPodGroup(
                    uid=uid,
                    queue=rng.choice(teams),
                    priority=rng.randrange(0, 100),
                    start_time=NOW - timedelta(minutes=rng.randrange(10, 600)),
                    node_pool=pool,
                    annotations={EXPECTED_RUNTIME_ANNOTATION: rng.choice(["1h", "2h", "4h"])},
                    subgroups=(SubGroup(min_available=rng.choice([len(pods), 1])),),
                    pods=tuple(pods),
                )
            )
    pending = []
    for index in range(pending_count):
        if rng.random() < odd_shapes:
            shape = tuple(rng.choice([0.25, 0.5, 1.5, 3.0, 6.0]) for _ in range(rng.randint(1, 3)))
        else:
            shape = rng.choice(SHAPES)
        pending.append(
            PendingPodGroup(
                uid=f"pend-{index:06d}",
                queue=rng.choice(teams),
                priority=rng.randrange(0, 100),
                node_pool=f"pool-{rng.randrange(pools)}",
                submitted_at=NOW - timedelta(seconds=rng.randrange(0, 7200)),
                subgroups=(SubGroup(min_available=len(shape)),),
                pods=tuple(Pod(name=f"p{i}", gpu=gpu) for i, gpu in enumerate(shape)),
            )
        )
    return ClusterState(nodes=tuple(nodes), running=tuple(running), pending=tuple(pending))


def with_layers(snapshot: ClusterState, rng: random.Random) -> tuple[ClusterState, NodePoolConfigs]:
    """The same cluster with the anti-thrash layers of SEMANTICS.md §10 switched on.

    A fifth of the pending podgroups carry a preemption delay (half of the windows still open);
    one running podgroup in twenty is semi-preemptible; a third of the running ones have one to
    three committed requeues in the last two hours, under a cap of 2 per hour in every pool.
    Drawn from their own generator, so the cluster itself is the one without ``--layers``.
    """
    pending = tuple(
        replace(pg, delay_ends_at=NOW + timedelta(minutes=rng.randrange(-30, 30)))
        if rng.random() < 0.2
        else pg
        for pg in snapshot.pending
    )
    running = tuple(
        replace(pg, preemptibility=Preemptibility.SEMI_PREEMPTIBLE) if rng.random() < 0.05 else pg
        for pg in snapshot.running
    )
    history = {
        pg.uid: tuple(
            NOW - timedelta(minutes=rng.randrange(1, 120)) for _ in range(rng.randint(1, 3))
        )
        for pg in snapshot.running
        if rng.random() < 1 / 3
    }
    configs = NodePoolConfigs(
        {
            "default": MinRuntimeConfig(
                default_preempt_min_runtime=timedelta(0),
                max_requeues=2,
                max_requeues_window=timedelta(hours=1),
            )
        }
    )
    layered = replace(snapshot, pending=pending, running=running, requeue_history=history)
    return layered, configs


def with_disruption(
    snapshot: ClusterState, configs: NodePoolConfigs, rng: random.Random
) -> tuple[ClusterState, NodePoolConfigs]:
    """The same cluster with disruption budgets and pacing on (issue 28).

    Every pool: at most 25 evictions per queue per hour, 5 minutes between two evictions of
    one top owner; half the running podgroups carry KAI's top-owner metadata (four gangs per
    owner); every queue has up to 20 evictions in the last hour, each owner one in the last
    ten minutes with probability 1/4.
    """
    running = []
    owners: list[str] = []
    for index, pg in enumerate(snapshot.running):
        if rng.random() < 0.5:
            owner = f"js-{index // 4}"
            owners.append(owner)
            metadata = f"name: {owner}\nuid: {owner}\nkind: JobSet\n"
            pg = replace(pg, annotations={**pg.annotations, TOP_OWNER_ANNOTATION: metadata})
        running.append(pg)
    queues = sorted({pg.queue for pg in snapshot.running})
    history = DisruptionHistory(
        by_queue={
            queue: tuple(
                NOW - timedelta(minutes=rng.randrange(1, 60)) for _ in range(rng.randint(0, 20))
            )
            for queue in queues
        },
        by_owner={
            owner: (NOW - timedelta(minutes=rng.randrange(1, 10)),)
            for owner in sorted(set(owners))
            if rng.random() < 0.25
        },
    )
    budgeted = NodePoolConfigs(
        {
            pool: replace(
                config,
                max_evictions_per_window=25,
                eviction_window=timedelta(hours=1),
                min_eviction_gap=timedelta(minutes=5),
            )
            for pool, config in configs.by_pool.items()
        }
    )
    return replace(snapshot, running=tuple(running), disruption_history=history), budgeted


def timed(action: Callable[[], T]) -> tuple[float, T]:
    started = time.perf_counter()
    result = action()
    return time.perf_counter() - started, result


def cluster_arguments(description: str) -> argparse.ArgumentParser:
    """A command line with the cluster's size (``build_snapshot``), the candidates, the runs."""
    parser = sized_arguments(
        description, nodes=2000, pools=4, candidates=1000, pending=5000, runs=5
    )
    parser.add_argument("--odd-shapes", type=float, default=0.1)
    return parser


def outcome_counts(plan: CyclePlan) -> Counter[str]:
    """How many decisions of each outcome (``outcome/reason``) the plan holds."""
    return Counter(f"{d.outcome}" + (f"/{d.reason}" if d.reason else "") for d in plan.decisions)


def main() -> None:
    parser = cluster_arguments(__doc__.split("\n")[0])
    parser.add_argument(
        "--layers",
        action="store_true",
        help="switch on the preemption delay, the semi-preemptible core and the requeue cap",
    )
    parser.add_argument(
        "--disruption",
        action="store_true",
        help="switch on disruption budgets per queue and the eviction gap per top owner",
    )
    args = parser.parse_args()

    rng = random.Random(SEED)
    tree = build_tree(rng)
    teams = sorted(queue.name for queue in tree if "-team" in queue.name)
    build_seconds, snapshot = timed(
        lambda: build_snapshot(rng, args.nodes, args.pools, args.pending, teams, args.odd_shapes)
    )
    configs = NodePoolConfigs(
        {"default": MinRuntimeConfig(default_preempt_min_runtime=timedelta(0))}
    )
    if args.layers:
        snapshot, configs = with_layers(snapshot, random.Random(SEED + 1))
    if args.disruption:
        snapshot, configs = with_disruption(snapshot, configs, random.Random(SEED + 2))

    nominate_seconds, report = timed(lambda: expected_runtime_nominations(snapshot.running, NOW))
    nominated = list(report.nominated)
    chosen = sorted(rng.sample(nominated, min(args.candidates, len(nominated))))
    external = [(uid, "proportion") for uid in chosen[::10]]
    collect_seconds, candidates = timed(lambda: collect_candidates(chosen, external))

    plans: list[CyclePlan] = []
    seconds: list[float] = []
    for _ in range(args.runs):
        elapsed, plan = timed(
            lambda: plan_requeue_cycle(
                snapshot,
                candidates,
                tree=tree,
                configs=configs,
                now=NOW,
            )
        )
        seconds.append(elapsed)
        plans.append(plan)
    assert all(plan == plans[0] for plan in plans), "the plan must be deterministic"
    plan = plans[0]
    outcomes = outcome_counts(plan)
    best, median = min(seconds), statistics.median(seconds)
    pods = sum(len(pg.pods) for pg in snapshot.running)

    print(f"python {platform.python_version()} on {platform.machine()}")
    print(f"anti-thrash layers (delay, semi-preemptible, cap): {'on' if args.layers else 'off'}")
    print(f"disruption budgets and gaps: {'on' if args.disruption else 'off'}")
    print(
        f"cluster: {len(snapshot.nodes):,} nodes in {args.pools} pools, "
        f"{len(snapshot.running):,} running podgroups ({pods:,} pods), "
        f"{len(snapshot.pending):,} pending, {len(candidates):,} candidates"
    )
    print(f"snapshot construction (validation included): {build_seconds:.3f} s")
    print(f"expected_runtime_nominations over all running: {nominate_seconds * 1000:.1f} ms")
    print(f"collect_candidates: {collect_seconds * 1000:.2f} ms")
    print(
        f"plan_requeue_cycle: best {best:.3f} s, median {median:.3f} s of {args.runs} runs; "
        f"{len(plan.decisions) / best:,.0f} decisions/s (best); target < 2 s, "
        f"ratio {best / 2:.2f}x"
    )
    for label, count in sorted(outcomes.items()):
        print(f"  {label}: {count}")
    print(f"  beneficiaries: {sum(len(d.beneficiaries) for d in plan.committed())}")


if __name__ == "__main__":
    main()
