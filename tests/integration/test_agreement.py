"""The SQL read surface and the Python rule engine agree on random trees, configs and times;
with queues of node pools too, each pool resolving in the tree its scheduler sees."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    MinRuntimeConfig,
    NodePoolConfigs,
    Queue,
    QueueTree,
    Resolver,
    is_protected,
    protected_until,
)
from tests.cloudevents import T0, Event, allocated, config_of, queue_deleted, queue_of, submitted
from tests.integration.helpers import (
    Feed,
    columns,
    database_examples,
    reclaim_protection,
    reset_state,
    rows,
)

NAMES = [f"q{i}" for i in range(10)]
POOLS = ["default", "p1", "p2", "p3"]
# A queue's node pool: none (every pool's tree), or one of the podgroups' pools.
QUEUE_POOLS = [None, "default", "p1", "p2"]
UNKNOWN = "unknown-q"

durations = st.one_of(
    st.none(), st.just(timedelta(0)), st.integers(1, 900).map(lambda s: timedelta(seconds=s))
)


@dataclass(frozen=True)
class World:
    queues: list[Queue]
    deleted: list[str]
    configs: dict[str, MinRuntimeConfig]
    podgroups: list[tuple[str, str, str, int]]  # uid, queue, pool, start offset seconds
    reclaimers: list[str]
    offsets: list[int]


@st.composite
def worlds(draw: st.DrawFn, pooled: bool = False) -> World:
    count = draw(st.integers(1, len(NAMES)))
    queues = []
    for index in range(count):
        parent = draw(
            st.one_of(st.none(), st.just("ghost"), st.sampled_from(NAMES[:index] or ["ghost"]))
        )
        queues.append(
            Queue(
                name=NAMES[index],
                parent=parent,
                preempt_min_runtime=draw(durations),
                reclaim_min_runtime=draw(durations),
                node_pool=draw(st.sampled_from(QUEUE_POOLS)) if pooled else None,
            )
        )
    names = [q.name for q in queues]
    deleted = draw(st.lists(st.sampled_from(names), max_size=2, unique=True))
    configs = {
        pool: MinRuntimeConfig(
            default_preempt_min_runtime=timedelta(seconds=draw(st.integers(0, 300))),
            default_reclaim_min_runtime=timedelta(seconds=draw(st.integers(0, 300))),
            reclaim_resolve_method=draw(st.sampled_from(["lca", "queue"])),
        )
        for pool in draw(st.lists(st.sampled_from(POOLS[:3]), unique=True))
    }
    podgroups = [
        (
            f"pg{i}",
            draw(st.sampled_from([*names, UNKNOWN])),
            draw(st.sampled_from(POOLS)),
            draw(st.integers(0, 600)),
        )
        for i in range(draw(st.integers(1, 8)))
    ]
    reclaimers = draw(
        st.lists(st.sampled_from([*names, UNKNOWN]), min_size=1, max_size=4, unique=True)
    )
    offsets = draw(st.lists(st.integers(0, 1500), min_size=1, max_size=3, unique=True))
    return World(queues, deleted, configs, podgroups, reclaimers, offsets)


def _feed_world(engine: sa.Engine, world: World) -> None:
    reset_state(engine)
    feed = Feed(engine)
    messages: list[Event] = [queue_of(q) for q in world.queues]
    messages += [queue_deleted(name) for name in world.deleted]
    messages += [config_of(pool, c) for pool, c in world.configs.items()]
    feed.send(*messages)
    pgs: list[Event] = []
    for uid, queue_name, pool, start in world.podgroups:
        pgs.append(submitted(uid, queue_name, 2, node_pool=pool))
        pgs.append(allocated(uid, 2, time=T0 + timedelta(seconds=start)))
    outcome = feed.send(*pgs)
    assert outcome.dead_lettered == 0


@database_examples(60)
@given(world=worlds())
def test_sql_agrees_with_the_core(engine: sa.Engine, world: World) -> None:
    _check_agreement(engine, world)


@database_examples(60)
@given(world=worlds(pooled=True))
def test_sql_agrees_with_the_core_in_each_node_pool_s_tree(engine: sa.Engine, world: World) -> None:
    _check_agreement(engine, world)


def _check_agreement(engine: sa.Engine, world: World) -> None:
    _feed_world(engine, world)
    tree = QueueTree(world.queues)
    for name in world.deleted:
        tree = tree.without_queue(name)
    configs = NodePoolConfigs(world.configs)
    # Each pool resolves in the tree its scheduler sees (the whole tree when no queue has a pool).
    resolvers = {pool: Resolver(tree.for_pool(pool), configs.for_pool(pool)) for pool in POOLS}
    starts = {uid: T0 + timedelta(seconds=s) for uid, _, _, s in world.podgroups}
    where = {uid: (q, pool) for uid, q, pool, _ in world.podgroups}

    # Preempt view (its is_protected is at now(); compare the window instead).
    got = {r.uid: r for r in rows(engine, "SELECT * FROM minruntime.preempt_protection")}
    assert set(got) == set(where)
    for uid, (q, pool) in where.items():
        expected = resolvers[pool].preempt_min_runtime(q)
        row = got[uid]
        assert (row.min_runtime, row.resolved_from) == (expected.min_runtime, expected.source), uid
        assert row.protected_until == protected_until(starts[uid], expected.min_runtime)

    for reclaimer in world.reclaimers:
        for offset in world.offsets:
            at = T0 + timedelta(seconds=offset)
            result = reclaim_protection(engine, reclaimer, at)
            assert set(result) == set(where)
            for uid, (q, pool) in where.items():
                expected = resolvers[pool].reclaim_min_runtime(reclaimer, q)
                row = result[uid]
                assert (row.min_runtime, row.resolved_from) == (
                    expected.min_runtime,
                    expected.source,
                ), (reclaimer, uid)
                assert row.is_protected == is_protected(starts[uid], expected.min_runtime, at)

    # is_protected(uid, q, at) for every reclaimer, the victim's own queue, and the exact
    # boundaries start + min (not protected) and one microsecond before (protected).
    questions: list[tuple[str, str, Any, bool]] = []
    for uid, (q, pool) in where.items():
        for preemptor in {*world.reclaimers, q}:
            resolution = resolvers[pool].resolve_for(q, preemptor)
            boundary = starts[uid] + resolution.min_runtime
            moments = [T0 + timedelta(seconds=o) for o in world.offsets]
            moments += [boundary, boundary - timedelta(microseconds=1)]
            for at in moments:
                questions.append(
                    (uid, preemptor, at, is_protected(starts[uid], resolution.min_runtime, at))
                )
    answers = rows(
        engine,
        "SELECT minruntime.is_protected(u, q, a) AS p FROM unnest(CAST(:u AS text[]),"
        " CAST(:q AS text[]), CAST(:a AS timestamptz[])) WITH ORDINALITY AS t(u, q, a, n)"
        " ORDER BY n",
        **columns(questions, "uqa"),
    )
    assert [a.p for a in answers] == [x[3] for x in questions]

    # min_runtime_for(victim queue, preemptor queue, pool): the resolution itself.
    pairs = [
        (q, preemptor, pool)
        for _, (q, pool) in where.items()
        for preemptor in {*world.reclaimers, q}
    ]
    resolved = rows(
        engine,
        "SELECT m.min_runtime, m.resolved_from FROM unnest(CAST(:v AS text[]),"
        " CAST(:p AS text[]), CAST(:n AS text[])) WITH ORDINALITY AS t(v, p, n, i)"
        " CROSS JOIN LATERAL minruntime.min_runtime_for(v, p, n) m ORDER BY i",
        **columns(pairs, "vpn"),
    )
    expected = [resolvers[pool].resolve_for(q, preemptor) for q, preemptor, pool in pairs]
    assert [(r.min_runtime, r.resolved_from) for r in resolved] == [
        (e.min_runtime, e.source) for e in expected
    ]
