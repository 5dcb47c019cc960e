"""Properties of KAI's share rules (core.proportion) and of the planner that applies them."""

from __future__ import annotations

from dataclasses import dataclass, replace

from core_testkit import T0, random_trees
from hypothesis import given
from hypothesis import strategies as st
from test_core_requeue_properties import Case, cases

from minruntime.core import Queue, QueueTree, RequeueOutcome, RequeueReason, plan_requeue_cycle
from minruntime.core.proportion import fair_shares, with_ancestors
from minruntime.core.queue_quota import UNLIMITED, QueueResources, ResourceQuota

EPSILON = 1e-6
AMOUNTS = st.sampled_from([0.0, 0.5, 1.0, 2.0, 4.0, 8.0])


@st.composite
def quotas(draw: st.DrawFn) -> ResourceQuota:
    return ResourceQuota(
        quota=draw(st.one_of(AMOUNTS, st.just(UNLIMITED))),
        limit=draw(st.one_of(AMOUNTS, st.just(UNLIMITED))),
        over_quota_weight=draw(st.sampled_from([0.0, 1.0, 2.0, 3.0])),
    )


@st.composite
def share_trees(draw: st.DrawFn) -> QueueTree:
    tree = draw(random_trees(max_queues=6))
    return QueueTree(
        replace(
            queue,
            priority=draw(st.sampled_from([None, 50, 100, 200])),
            resources=draw(st.one_of(st.none(), quotas().map(lambda q: QueueResources(gpu=q)))),
        )
        for queue in tree
    )


@st.composite
def divisions(draw: st.DrawFn) -> tuple[QueueTree, float, dict[str, float]]:
    tree = draw(share_trees())
    requested = {queue.name: draw(AMOUNTS) for queue in tree if draw(st.booleans())}
    return tree, draw(st.sampled_from([0.0, 1.0, 4.0, 8.0, 12.5])), requested


@dataclass(frozen=True)
class Level:
    """Sibling queues, what they divide (their parent's fair share, or the total), and what
    each is guaranteed first: min(deserved, requested, limit)."""

    budget: float
    guaranteed: dict[str, float]
    fair: dict[str, float]


def _levels(case: tuple[QueueTree, float, dict[str, float]]) -> list[Level]:
    tree, total, requested = case
    shares = fair_shares(tree, total, {}, requested)
    up = with_ancestors(tree, requested)
    siblings: list[tuple[str | None, tuple[str, ...]]] = [(None, tree.roots())]
    siblings.extend((queue.name, tree.children_of(queue.name)) for queue in tree)
    levels = []
    for parent, names in siblings:
        if not names:
            continue
        budget = total if parent is None else shares[parent].fair_share
        guaranteed = {}
        for name in names:
            share = shares[name]
            requestable = up.get(name, 0.0)
            if share.limit != UNLIMITED:
                requestable = min(requestable, share.limit)
            deserved = budget if share.deserved == UNLIMITED else share.deserved
            guaranteed[name] = min(deserved, requestable)
        levels.append(Level(budget, guaranteed, {n: shares[n].fair_share for n in names}))
    return levels


@given(case=divisions())
def test_beyond_quotas_no_level_divides_more_than_it_has(
    case: tuple[QueueTree, float, dict[str, float]],
) -> None:
    # Quotas may add up to more than a level has (KAI allows it: deserved is promised);
    # what is shared out over quota never exceeds what is left.
    for level in _levels(case):
        given_out = sum(level.fair.values())
        assert given_out <= max(level.budget, sum(level.guaranteed.values())) + EPSILON


@given(case=divisions())
def test_every_queue_gets_its_deserved_part_when_quotas_fit(
    case: tuple[QueueTree, float, dict[str, float]],
) -> None:
    for level in _levels(case):
        if sum(level.guaranteed.values()) <= level.budget:
            for name, amount in level.guaranteed.items():
                assert level.fair[name] >= amount - EPSILON


@given(case=divisions())
def test_shares_do_not_depend_on_the_order_queues_arrive(
    case: tuple[QueueTree, float, dict[str, float]],
) -> None:
    tree, total, requested = case
    backwards = QueueTree(reversed(list(tree)))
    assert fair_shares(tree, total, {}, requested) == fair_shares(backwards, total, {}, requested)


def _unlimited(tree: QueueTree) -> QueueTree:
    everything = ResourceQuota(quota=UNLIMITED, limit=UNLIMITED)
    return QueueTree(replace(q, resources=QueueResources(gpu=everything)) for q in tree)


@given(case=cases())
def test_unlimited_quotas_plan_exactly_as_no_quotas(case: Case) -> None:
    gated = plan_requeue_cycle(
        case.snapshot, case.candidates, tree=_unlimited(case.tree), configs=case.configs, now=T0
    )
    assert gated == case.plan()


@given(case=cases(), data=st.data())
def test_no_commit_puts_a_beneficiarys_queue_over_its_limit(
    case: Case, data: st.DataObject
) -> None:
    limits = {
        queue.name: data.draw(st.sampled_from([UNLIMITED, 0.0, 1.0, 4.0])) for queue in case.tree
    }
    tree = QueueTree(
        replace(q, resources=QueueResources(gpu=ResourceQuota(quota=0.0, limit=limits[q.name])))
        for q in case.tree
    )
    result = plan_requeue_cycle(
        case.snapshot, case.candidates, tree=tree, configs=case.configs, now=T0
    )
    running = {pg.uid: pg for pg in case.snapshot.running}
    pending = {pg.uid: pg for pg in case.snapshot.pending}
    # GPUs held per (node pool, queue): KAI's scheduler of a shard counts its own pool's.
    held: dict[tuple[str, str], float] = {}

    def hold(pool: str, queue: str, gpus: float) -> None:
        held[pool, queue] = held.get((pool, queue), 0.0) + gpus

    def gang(uid: str) -> float:
        return sum(p.gpu for p in pending[uid].required_pods() or ())

    for pg in case.snapshot.running:
        if pg.uid not in case.snapshot.awaiting_release:
            hold(pg.node_pool, pg.queue, sum(p.gpu for p in pg.pods if p.running))
    for uid in case.snapshot.promised_to & set(pending):
        hold(pending[uid].node_pool, pending[uid].queue, gang(uid))
    for decision in result.decisions:
        if decision.outcome is not RequeueOutcome.COMMITTED:
            continue
        victim = running[decision.uid]
        hold(victim.node_pool, victim.queue, -sum(p.gpu for p in victim.pods if p.running))
        for uid in decision.beneficiaries:
            pool, queue = pending[uid].node_pool, pending[uid].queue
            hold(pool, queue, gang(uid))
            for name in tree.path(queue) if queue in tree else ():
                if limits[name] == UNLIMITED:
                    continue
                total = sum(
                    gpus
                    for (where, held_queue), gpus in held.items()
                    if where == pool and held_queue in tree and name in tree.path(held_queue)
                )
                assert total <= limits[name] + EPSILON


def test_a_queue_without_resources_is_unchanged_by_the_new_fields() -> None:
    assert Queue(name="q") == Queue(name="q", priority=None, resources=None)


@given(case=cases(), data=st.data())
def test_any_shares_plan_without_error_and_say_why(case: Case, data: st.DataObject) -> None:
    tree = QueueTree(
        replace(
            q,
            priority=data.draw(st.sampled_from([None, 50, 200])),
            resources=data.draw(
                st.one_of(st.none(), quotas().map(lambda g: QueueResources(gpu=g)))
            ),
        )
        for q in case.tree
    )
    plan = plan_requeue_cycle(
        case.snapshot, case.candidates, tree=tree, configs=case.configs, now=T0
    )
    again = plan_requeue_cycle(
        case.snapshot, case.candidates, tree=tree, configs=case.configs, now=T0
    )
    assert plan == again
    assert not plan.excluded or all(e.reason.value != "planner_error" for e in plan.excluded)
    for decision in plan.decisions:
        over_quota = decision.reason is RequeueReason.BENEFICIARY_OVER_QUOTA
        assert (decision.quota is not None) == over_quota
