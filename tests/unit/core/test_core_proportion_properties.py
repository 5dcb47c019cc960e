"""Properties of KAI's share rules (core.proportion) and of the planner that applies them."""

from __future__ import annotations

from dataclasses import replace

from core_testkit import T0, random_trees
from hypothesis import given
from hypothesis import strategies as st
from test_core_requeue_properties import Case, cases

from minruntime.core import Queue, QueueTree, RequeueOutcome, plan_requeue_cycle
from minruntime.core.proportion import QueueShare, fair_shares, with_ancestors
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


def _levels(tree: QueueTree) -> list[tuple[str | None, tuple[str, ...]]]:
    levels: list[tuple[str | None, tuple[str, ...]]] = [(None, tree.roots())]
    levels.extend((queue.name, tree.children_of(queue.name)) for queue in tree)
    return [(parent, names) for parent, names in levels if names]


def _deserved_parts(
    tree: QueueTree,
    shares: dict[str, QueueShare],
    up: dict[str, float],
    budget: float,
    names: tuple[str, ...],
) -> dict[str, float]:
    """What each queue of a level is guaranteed first: min(deserved, requested, limit)."""
    parts = {}
    for name in names:
        share = shares[name]
        requestable = up.get(name, 0.0)
        if share.limit != UNLIMITED:
            requestable = min(requestable, share.limit)
        deserved = budget if share.deserved == UNLIMITED else share.deserved
        parts[name] = min(deserved, requestable)
    return parts


@given(case=divisions())
def test_beyond_quotas_no_level_divides_more_than_it_has(
    case: tuple[QueueTree, float, dict[str, float]],
) -> None:
    # Quotas may add up to more than a level has (KAI allows it: deserved is promised);
    # what is shared out over quota never exceeds what is left.
    tree, total, requested = case
    shares = fair_shares(tree, total, {}, requested)
    up = with_ancestors(tree, requested)
    for parent, names in _levels(tree):
        budget = total if parent is None else shares[parent].fair_share
        guaranteed = sum(_deserved_parts(tree, shares, up, budget, names).values())
        given_out = sum(shares[name].fair_share for name in names)
        assert given_out <= max(budget, guaranteed) + EPSILON


@given(case=divisions())
def test_every_queue_gets_its_deserved_part_when_quotas_fit(
    case: tuple[QueueTree, float, dict[str, float]],
) -> None:
    tree, total, requested = case
    shares = fair_shares(tree, total, {}, requested)
    up = with_ancestors(tree, requested)
    for parent, names in _levels(tree):
        budget = total if parent is None else shares[parent].fair_share
        wanted = _deserved_parts(tree, shares, up, budget, names)
        if sum(wanted.values()) <= budget:
            for name, amount in wanted.items():
                assert shares[name].fair_share >= amount - EPSILON


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
    held: dict[str, float] = {}
    for pg in case.snapshot.running:
        if pg.uid not in case.snapshot.awaiting_release:
            held[pg.queue] = held.get(pg.queue, 0.0) + sum(p.gpu for p in pg.pods if p.running)
    for uid in case.snapshot.promised_to:
        if uid in pending:
            gang = pending[uid].required_pods() or ()
            held[pending[uid].queue] = held.get(pending[uid].queue, 0.0) + sum(p.gpu for p in gang)
    for decision in result.decisions:
        if decision.outcome is not RequeueOutcome.COMMITTED:
            continue
        victim = running[decision.uid]
        held[victim.queue] -= sum(p.gpu for p in victim.pods if p.running)
        for uid in decision.beneficiaries:
            gang = pending[uid].required_pods() or ()
            held[pending[uid].queue] = held.get(pending[uid].queue, 0.0) + sum(p.gpu for p in gang)
            if pending[uid].queue in tree:
                for name in tree.path(pending[uid].queue):
                    total = sum(
                        amount
                        for queue, amount in held.items()
                        if queue in tree and name in tree.path(queue)
                    )
                    if limits[name] != UNLIMITED:
                        assert total <= limits[name] + EPSILON


def test_a_queue_without_resources_is_unchanged_by_the_new_fields() -> None:
    assert Queue(name="q") == Queue(name="q", priority=None, resources=None)
