"""Two node pools whose queue trees differ: the SQL read surface and the core agree.

The example of docs/rule-engine.md ("Node pools: one tree per KAI shard"): `org` belongs to
no pool (every pool's tree), `vision` and `speech` to a100, `serving` to h100, and `canary`
(no pool) hangs under `serving` — in h100's tree only; elsewhere it is a root.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from minruntime.core import (
    MinRuntimeConfig,
    NodePoolConfigs,
    PoolResolvers,
    Queue,
    QueueTree,
    is_protected,
    protected_until,
)
from tests.cloudevents import T0, allocated, config, queue, submitted
from tests.integration.helpers import Feed, reclaim_protection, rows

QUEUES = [
    Queue(name="org", reclaim_min_runtime=timedelta(hours=2)),
    Queue(
        name="vision",
        parent="org",
        node_pool="a100",
        preempt_min_runtime=timedelta(hours=1),
        reclaim_min_runtime=timedelta(minutes=30),
    ),
    Queue(name="speech", parent="org", node_pool="a100"),
    Queue(
        name="serving", parent="org", node_pool="h100", preempt_min_runtime=timedelta(minutes=15)
    ),
    Queue(name="canary", parent="serving", reclaim_min_runtime=timedelta(minutes=5)),
]
# uid -> (queue, node pool)
PODGROUPS = {
    "a-vision": ("vision", "a100"),
    "a-speech": ("speech", "a100"),
    "a-canary": ("canary", "a100"),
    "a-serving": ("serving", "a100"),  # a queue of another pool: unknown in a100
    "h-serving": ("serving", "h100"),
    "h-canary": ("canary", "h100"),
    "h-vision": ("vision", "h100"),
    "d-canary": ("canary", "default"),
}
RECLAIMERS = ["vision", "speech", "serving", "canary", "org", "nowhere"]
AT = T0 + timedelta(minutes=20)


def _feed(engine: sa.Engine) -> None:
    feed = Feed(engine)
    feed.send(
        *(
            queue(q.name, q.parent, q.preempt_min_runtime, q.reclaim_min_runtime, q.node_pool)
            for q in QUEUES
        ),
        config(defaultReclaimMinRuntime="1m", defaultPreemptMinRuntime="2m"),
    )
    events = []
    for uid, (name, pool) in PODGROUPS.items():
        events += [submitted(uid, name, 1, node_pool=pool), allocated(uid, 1, time=T0)]
    assert feed.send(*events).dead_lettered == 0


def _resolvers() -> PoolResolvers:
    configs = NodePoolConfigs(
        {
            "default": MinRuntimeConfig(
                default_reclaim_min_runtime=timedelta(minutes=1),
                default_preempt_min_runtime=timedelta(minutes=2),
            )
        }
    )
    return PoolResolvers(QueueTree(QUEUES), configs)


def test_the_stored_trees_are_the_pools_trees(engine: sa.Engine) -> None:
    _feed(engine)
    stored = {
        r.name: (r.node_pool, r.path) for r in rows(engine, "SELECT * FROM minruntime.queues")
    }
    assert stored["vision"] == ("a100", ["org", "vision"])
    assert stored["serving"] == ("h100", ["org", "serving"])
    # canary's own row: the tree of the queues of no pool (where serving is not); h100 sees it
    # below serving, a row of queue_nodes_in_pool.
    assert stored["canary"] == (None, ["canary"])
    seen = rows(engine, "SELECT node_pool, name, path FROM minruntime_state.queue_nodes_in_pool")
    assert [(r.node_pool, r.name, r.path) for r in seen] == [
        ("h100", "canary", ["org", "serving", "canary"])
    ]


def test_preempt_protection_follows_each_pool_s_tree(engine: sa.Engine) -> None:
    _feed(engine)
    resolvers = _resolvers()
    got = {r.uid: r for r in rows(engine, "SELECT * FROM minruntime.preempt_protection")}
    for uid, (name, pool) in PODGROUPS.items():
        expected = resolvers(pool).preempt_min_runtime(name)
        assert (got[uid].min_runtime, got[uid].resolved_from) == (
            expected.min_runtime,
            expected.source,
        ), uid
        assert got[uid].protected_until == protected_until(T0, expected.min_runtime)
    # The worked values of the docs' example.
    assert got["a-vision"].resolved_from == "vision"
    assert (got["h-canary"].min_runtime, got["h-canary"].resolved_from) == (
        timedelta(minutes=15),
        "serving",
    )
    # Not seen by the pool's scheduler: the pool's default (2m), as for an unknown queue.
    assert (got["a-serving"].min_runtime, got["a-serving"].resolved_from) == (
        timedelta(minutes=2),
        None,
    )
    assert got["a-canary"].resolved_from is None  # a root of its own in a100: nothing set


def test_reclaim_protection_and_is_protected_follow_each_pool_s_tree(engine: sa.Engine) -> None:
    _feed(engine)
    resolvers = _resolvers()
    for reclaimer in RECLAIMERS:
        result = reclaim_protection(engine, reclaimer, AT)
        assert set(result) == set(PODGROUPS)
        for uid, (name, pool) in PODGROUPS.items():
            expected = resolvers(pool).reclaim_min_runtime(reclaimer, name)
            row = result[uid]
            assert (row.min_runtime, row.resolved_from) == (
                expected.min_runtime,
                expected.source,
            ), (reclaimer, uid)
            protected = rows(
                engine,
                "SELECT minruntime.is_protected(:u, :q, :at) AS p",
                u=uid,
                q=reclaimer,
                at=AT,
            )[0].p
            rule = resolvers(pool).resolve_for(name, reclaimer)
            assert protected == is_protected(T0, rule.min_runtime, AT), (reclaimer, uid)
    # speech reclaiming from vision in a100: siblings, vision's own 30m. serving (h100's)
    # reclaiming there: unknown to a100's scheduler, the default 1m.
    by_speech = {
        r.uid: r for r in rows(engine, "SELECT * FROM minruntime.reclaim_protection('speech')")
    }
    assert by_speech["a-vision"].min_runtime == timedelta(minutes=30)
    by_serving = {
        r.uid: r for r in rows(engine, "SELECT * FROM minruntime.reclaim_protection('serving')")
    }
    assert (by_serving["a-vision"].min_runtime, by_serving["a-vision"].resolved_from) == (
        timedelta(minutes=1),
        None,
    )
    # In h100, serving reclaiming from canary below it: canary's own 5m.
    assert by_serving["h-canary"].resolved_from == "canary"


def test_min_runtime_for_names_the_pool(engine: sa.Engine) -> None:
    _feed(engine)
    resolvers = _resolvers()
    for victim in ("vision", "canary", "serving"):
        for preemptor in RECLAIMERS:
            for pool in ("a100", "h100", "default", "v100"):
                [row] = rows(
                    engine,
                    "SELECT * FROM minruntime.min_runtime_for(:v, :p, :n)",
                    v=victim,
                    p=preemptor,
                    n=pool,
                )
                expected = resolvers(pool).resolve_for(victim, preemptor)
                assert (row.min_runtime, row.resolved_from) == (
                    expected.min_runtime,
                    expected.source,
                ), (victim, preemptor, pool)
