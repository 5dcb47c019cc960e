"""Properties of requeue planning over random clusters (hypothesis)."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import timedelta

from core_testkit import T0, configs, random_trees
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    EXPECTED_RUNTIME_PLUGIN,
    REQUEUE_DELAY_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    ClusterState,
    CyclePlan,
    Node,
    NodePoolConfigs,
    PendingPodGroup,
    Pod,
    Preemptibility,
    QueueTree,
    RequeueOutcome,
    RequeueReason,
    Resolver,
    RunningPodGroup,
    SubGroup,
    VictimEviction,
    format_rfc3339,
    is_protected,
    plan_requeue_cycle,
    validate_scenario,
)

POOLS = ("default", "b")
GPUS = (0.25, 0.5, 1.0, 2.0, 4.0)
EPSILON = 1e-9


@dataclass(frozen=True)
class Case:
    snapshot: ClusterState
    candidates: dict[str, frozenset[str]]
    tree: QueueTree
    configs: NodePoolConfigs

    def plan(self) -> CyclePlan:
        return plan_requeue_cycle(
            self.snapshot, self.candidates, tree=self.tree, configs=self.configs, now=T0
        )


def _annotations(draw: st.DrawFn) -> dict[str, str]:
    annotations: dict[str, str] = {}
    if draw(st.booleans()):
        annotations[EXPECTED_RUNTIME_ANNOTATION] = draw(st.sampled_from(["30m", "1h", "bad"]))
    if draw(st.integers(0, 3)) == 0:
        annotations[REQUEUE_DELAY_ANNOTATION] = draw(st.sampled_from(["1m", "0", "x", "2h"]))
    if draw(st.integers(0, 3)) == 0:
        offset = draw(st.sampled_from([-60, 0, 60]))
        annotations[REQUEUE_NOT_BEFORE_ANNOTATION] = format_rfc3339(T0 + timedelta(seconds=offset))
    return annotations


@st.composite
def cases(draw: st.DrawFn) -> Case:
    tree = draw(random_trees(max_queues=5))
    queues = st.sampled_from([*(queue.name for queue in tree), "nowhere"])
    nodes = [
        Node(name=f"n{i}", gpu=draw(st.sampled_from([8.0, 4.0, 2.0, 1.0])), node_pool=pool)
        for i, pool in enumerate(draw(st.lists(st.sampled_from(POOLS), min_size=1, max_size=4)))
    ]
    free = {node.name: node.gpu for node in nodes}
    pools = sorted({node.node_pool for node in nodes})
    running: list[RunningPodGroup] = []
    for index in range(draw(st.integers(1, 6))):
        pool = draw(st.sampled_from(pools))
        sizes = draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=2))
        # Packed clusters (contention): a pod runs wherever it fits and is left out where it
        # does not; now and then a podgroup holds nothing at all.
        idle = draw(st.integers(0, 9)) == 0
        pods = []
        for number, gpu in enumerate(sizes):
            fitting = [n.name for n in nodes if n.node_pool == pool and free[n.name] >= gpu]
            if idle or not fitting:
                continue
            where = draw(st.sampled_from(fitting))
            free[where] -= gpu
            pods.append(Pod(name=f"p{number}", gpu=gpu, node=where, running=True))
        if not pods:
            pods.append(Pod(name="p0", gpu=sizes[0]))
        running.append(
            RunningPodGroup(
                uid=f"r{index}",
                queue=draw(queues),
                priority=draw(st.integers(0, 3)),
                start_time=T0 - timedelta(minutes=draw(st.sampled_from([240, 90, 60, 10]))),
                node_pool=pool,
                annotations=_annotations(draw),
                preemptibility=draw(
                    st.sampled_from(
                        [Preemptibility.PREEMPTIBLE] * 8
                        + [Preemptibility.NON_PREEMPTIBLE, Preemptibility.SEMI_PREEMPTIBLE]
                    )
                ),
                subgroups=(SubGroup(min_available=draw(st.integers(0, len(pods)))),),
                pods=tuple(pods),
            )
        )
    # Usually the rest of each node is taken by a filler nobody nominates: contention.
    for node in nodes:
        if free[node.name] > 0 and draw(st.integers(0, 3)) > 0:
            pod = Pod(name="all", gpu=free[node.name], node=node.name, running=True)
            free[node.name] = 0.0
            running.append(
                RunningPodGroup(
                    uid=f"fill-{node.name}",
                    queue="nowhere",
                    priority=0,
                    start_time=T0,
                    node_pool=node.node_pool,
                    pods=(pod,),
                )
            )
    awaiting = {pg.uid for pg in running if draw(st.integers(0, 5)) == 0}
    for podgroup in running:
        if podgroup.uid in awaiting:
            for pod in podgroup.pods:
                if pod.node is not None:
                    free[pod.node] += pod.gpu
    promised = {
        name: draw(st.sampled_from([0.0, 0.25, 1.0, amount]))
        for name, amount in free.items()
        if draw(st.booleans())
    }
    promised = {name: gpus for name, gpus in promised.items() if gpus <= free[name]}
    pending = []
    for index in range(draw(st.integers(1, 6))):
        sizes = draw(st.lists(st.sampled_from(GPUS), min_size=1, max_size=2))
        # Usually a plain gang; sometimes elastic, sometimes short of its minimum.
        minimum = draw(st.sampled_from([len(sizes)] * 4 + list(range(len(sizes) + 2))))
        pending.append(
            PendingPodGroup(
                uid=f"w{index}",
                queue=draw(queues),
                priority=5 - draw(st.integers(0, 5)),
                node_pool=draw(st.sampled_from([*pools, *pools, "empty"])),
                subgroups=(SubGroup(min_available=minimum),),
                pods=tuple(Pod(name=f"p{i}", gpu=gpu) for i, gpu in enumerate(sizes)),
            )
        )
    promised_to = {pg.uid for pg in pending if draw(st.integers(0, 5)) == 0}
    nominators = st.frozensets(st.sampled_from([EXPECTED_RUNTIME_PLUGIN, "proportion"]), min_size=1)
    uids = [pg.uid for pg in running if pg.uid.startswith("r")] * 3 + ["ghost"]
    candidates = {
        uid: draw(nominators) for uid in draw(st.lists(st.sampled_from(uids), min_size=1))
    }
    snapshot = ClusterState(
        nodes=tuple(nodes),
        running=tuple(running),
        pending=tuple(pending),
        promised=promised,
        awaiting_release=frozenset(awaiting),
        promised_to=frozenset(promised_to),
    )
    return Case(snapshot, candidates, tree, NodePoolConfigs({"default": draw(configs)}))


def _committed(result: CyclePlan) -> list[str]:
    return [d.uid for d in result.committed()]


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_no_node_is_ever_over_capacity(case: Case) -> None:
    result = case.plan()
    snapshot = case.snapshot
    gone = snapshot.awaiting_release | set(_committed(result))
    capacity = {node.name: node.gpu for node in snapshot.nodes}
    # Replayed decision by decision: the victim's pods leave, the beneficiaries' pods arrive.
    free = dict(capacity)
    for node, gpus in snapshot.promised.items():
        if node in free:
            free[node] -= gpus
    for podgroup in snapshot.running:
        if podgroup.uid not in snapshot.awaiting_release:
            for pod in podgroup.pods:
                if pod.running and pod.node in free:
                    free[pod.node] -= pod.gpu
    running = {pg.uid: pg for pg in snapshot.running}
    for decision in result.committed():
        for pod in running[decision.uid].pods:
            if pod.running and pod.node in free:
                free[pod.node] += pod.gpu
        for placement in decision.placements:
            free[placement.node] -= placement.gpu
        assert all(value >= -EPSILON for value in free.values()), decision
    # The final ledger says the same.
    for name, cap in capacity.items():
        used = sum(
            pod.gpu
            for pg in snapshot.running
            if pg.uid not in gone
            for pod in pg.pods
            if pod.running and pod.node == name
        )
        assert used + result.promised.get(name, 0.0) <= cap + EPSILON


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_every_beneficiary_really_fits_and_outranks_its_victim(case: Case) -> None:
    result = case.plan()
    snapshot = case.snapshot
    pools = {node.name: node.node_pool for node in snapshot.nodes}
    running = {pg.uid: pg for pg in snapshot.running}
    pending = {pg.uid: pg for pg in snapshot.pending}
    served: list[str] = []
    for decision in result.committed():
        victim = running[decision.uid]
        assert decision.beneficiaries
        assert decision.requeue_not_before is not None
        assert decision.requeue_not_before > decision.decided_at == T0
        reserved: dict[str, float] = defaultdict(float)
        for uid in decision.beneficiaries:
            beneficiary = pending[uid]
            assert beneficiary.node_pool == victim.node_pool
            assert beneficiary.priority > victim.priority
            assert uid not in snapshot.promised_to
            gang = beneficiary.required_pods()
            assert gang is not None
            placed = [p for p in decision.placements if p.podgroup == uid]
            assert sorted(p.pod for p in placed) == sorted(pod.name for pod in gang)
            for placement in placed:
                assert pools[placement.node] == victim.node_pool
                reserved[placement.node] += placement.gpu
        assert dict(decision.reservations) == {n: g for n, g in reserved.items() if g}
        served.extend(decision.beneficiaries)
    assert len(served) == len(set(served))


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_no_committed_victim_is_protected_against_its_beneficiary_or_pinned(case: Case) -> None:
    result = case.plan()
    running = {pg.uid: pg for pg in case.snapshot.running}
    pending = {pg.uid: pg for pg in case.snapshot.pending}
    for decision in result.committed():
        victim = running[decision.uid]
        assert victim.preemptibility is Preemptibility.PREEMPTIBLE
        resolver = Resolver(case.tree, case.configs.for_pool(victim.node_pool))
        for uid in decision.beneficiaries:
            minimum = resolver.resolve_for(victim.queue, pending[uid].queue).min_runtime
            if is_protected(victim.start_time, minimum, T0):
                whole = VictimEviction.whole(victim.pod_set, True)
                assert validate_scenario([whole]).valid


@settings(max_examples=300, deadline=None)
@given(case=cases())
def test_rolled_back_and_skipped_candidates_leave_no_trace(case: Case) -> None:
    result = case.plan()
    committed = set(_committed(result))
    only_committed = {uid: case.candidates[uid] for uid in committed}
    again = replace(case, candidates=only_committed).plan()
    assert again.committed() == result.committed()
    assert again.promised == result.promised
    if not committed:
        expected = {node: gpus for node, gpus in sorted(case.snapshot.promised.items()) if gpus}
        assert dict(result.promised) == expected


@settings(max_examples=300, deadline=None)
@given(case=cases(), data=st.data())
def test_the_plan_is_deterministic(case: Case, data: st.DataObject) -> None:
    first = case.plan()
    assert case.plan() == first
    snapshot = case.snapshot
    shuffled = replace(
        case,
        snapshot=replace(
            snapshot,
            nodes=tuple(data.draw(st.permutations(snapshot.nodes))),
            running=tuple(data.draw(st.permutations(snapshot.running))),
            pending=tuple(data.draw(st.permutations(snapshot.pending))),
        ),
        candidates=dict(data.draw(st.permutations(list(case.candidates.items())))),
    )
    assert shuffled.plan() == first


@settings(max_examples=200, deadline=None)
@given(case=cases())
def test_decisions_are_complete_and_consistent(case: Case) -> None:
    result = case.plan()
    assert sorted(d.uid for d in result.decisions) == sorted(case.candidates)
    for decision in result.decisions:
        assert decision.nominated_by == tuple(sorted(case.candidates[decision.uid]))
        if decision.outcome is RequeueOutcome.COMMITTED:
            assert decision.reason is None
        else:
            assert isinstance(decision.reason, RequeueReason)
            assert decision.requeue_not_before is None
            assert not decision.beneficiaries
            assert not decision.reservations
