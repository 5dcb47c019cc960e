"""SEMANTICS.md worked examples: events in through apply_batch, SQL answers out."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from tests.cloudevents import T0, allocated, config, design_tree, submitted
from tests.integration.helpers import Feed, rows, scalar

S = timedelta(seconds=1)


def run_in(feed: Feed, uid: str, queue_name: str, pods: int = 1) -> None:
    feed.send(submitted(uid, queue_name, pods), allocated(uid, pods, time=T0))


def test_the_queues_view_shows_the_tree(engine: sa.Engine, feed: Feed) -> None:
    feed.send(*design_tree())
    got = {
        r.name: (r.parent, r.reclaim_min_runtime)
        for r in rows(engine, "SELECT * FROM minruntime.queues")
    }
    assert got["leaf1"] == ("C", timedelta(0))
    assert got["C"] == ("B", None)
    assert got["A"] == (None, None)
    assert scalar(engine, "SELECT path FROM minruntime.queues WHERE name = 'leaf3'") == [
        "A",
        "B",
        "D",
        "leaf3",
    ]


def test_lca_worked_examples(engine: sa.Engine, feed: Feed) -> None:
    feed.send(*design_tree())
    for uid, where in (("v3", "leaf3"), ("v2", "leaf2"), ("v1", "leaf1")):
        run_in(feed, uid, where)

    def reclaim(reclaimer: str, uid: str) -> tuple[timedelta, str | None]:
        (row,) = rows(
            engine,
            "SELECT min_runtime, resolved_from FROM minruntime.reclaim_protection(:q, :at)"
            " WHERE uid = :uid",
            q=reclaimer,
            uid=uid,
            at=T0,
        )
        return row.min_runtime, row.resolved_from

    assert reclaim("leaf1", "v3") == (60 * S, "D")
    assert reclaim("leaf1", "v2") == (180 * S, "leaf2")
    assert reclaim("leaf3", "v1") == (600 * S, "B")


def test_preempt_worked_examples(engine: sa.Engine, feed: Feed) -> None:
    feed.send(*design_tree())
    run_in(feed, "p1", "leaf1")
    run_in(feed, "p2", "leaf2")
    got = {
        r.uid: (r.min_runtime, r.resolved_from, r.protected_until)
        for r in rows(engine, "SELECT * FROM minruntime.preempt_protection")
    }
    assert got == {
        "p1": (300 * S, "leaf1", T0 + 300 * S),
        "p2": (600 * S, "B", T0 + 600 * S),
    }


def test_is_protected_uses_preempt_in_the_same_queue_and_reclaim_otherwise(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    feed.send(*design_tree())
    run_in(feed, "v3", "leaf3")  # preempt: B's 600s; reclaim from leaf1: D's 60s

    def protected(preemptor: str, at: timedelta) -> bool:
        return bool(
            scalar(
                engine,
                "SELECT minruntime.is_protected('v3', :q, :at)",
                q=preemptor,
                at=T0 + at,
            )
        )

    assert protected("leaf3", 599 * S)
    assert not protected("leaf3", 600 * S)  # strict boundary
    assert protected("leaf1", 59 * S)
    assert not protected("leaf1", 60 * S)
    assert not scalar(engine, "SELECT minruntime.is_protected('nobody', 'leaf1', now())")


def test_node_pool_config_default_and_method(engine: sa.Engine, feed: Feed) -> None:
    feed.send(*design_tree())
    feed.send(submitted("g", "leaf3", node_pool="gpu-a"), allocated("g", 1))
    # No config at all: built-in defaults; leaf3 in lca from leaf1 is D's 60s.
    query = (
        "SELECT min_runtime, resolved_from FROM minruntime.reclaim_protection(:q) WHERE uid = 'g'"
    )
    assert tuple(rows(engine, query, q="leaf1")[0]) == (60 * S, "D")
    # Unknown reclaimer: the default pool's default.
    feed.send(config("default", defaultReclaimMinRuntime="7s"))
    assert tuple(rows(engine, query, q="nope")[0]) == (7 * S, None)
    # The pool's own config wins over the default pool's.
    feed.send(config("gpu-a", defaultReclaimMinRuntime="9s", reclaimResolveMethod="queue"))
    assert tuple(rows(engine, query, q="nope")[0]) == (9 * S, None)
    # Method queue: the victim's own walk (leaf3 → D), whatever the reclaimer.
    assert tuple(rows(engine, query, q="A")[0]) == (60 * S, "D")


def test_evictable_pods_of_a_protected_elastic_podgroup(engine: sa.Engine, feed: Feed) -> None:
    feed.send(config(defaultPreemptMinRuntime="1h"))
    now_ = scalar(engine, "SELECT now()")
    workers = [{"name": f"p{i}", "subGroup": "workers", "gpu": 1} for i in range(4)]
    feed.send(
        submitted("e", "q", workers, sub_groups=[{"name": "workers", "minAvailable": 2}]),
        allocated("e", ["p0", "p1", "p2"], time=now_),
        submitted("rigid", "q", 3, sub_groups=[{"name": "default", "minAvailable": 3}]),
        allocated("rigid", 3, time=now_),
        submitted("old", "q", 3),
        allocated("old", 3, time=now_ - 2 * timedelta(hours=1)),
    )
    got = {
        r.uid: (r.is_protected, r.evictable_pods)
        for r in rows(engine, "SELECT * FROM minruntime.preempt_protection")
    }
    # Protected elastic: running - minAvailable; protected rigid: 0; unprotected: all running.
    assert got == {"e": (True, 1), "rigid": (True, 0), "old": (False, 3)}
    elastic = rows(engine, "SELECT uid, is_elastic, running_pods FROM minruntime.podgroups")
    assert sorted(tuple(r) for r in elastic) == [
        ("e", True, 3),
        ("old", True, 3),
        ("rigid", False, 3),
    ]
