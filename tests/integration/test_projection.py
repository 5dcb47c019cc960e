"""Start times, annotations, deletion, nodes, and events that arrive out of order."""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from tests.cloudevents import (
    T0,
    allocated,
    annotated,
    deleted,
    node,
    node_deleted,
    nominated,
    queue,
    queue_deleted,
    released,
    submitted,
)
from tests.integration.helpers import Feed, rows, scalar

M = timedelta(minutes=1)


def podgroup(engine: sa.Engine, uid: str) -> sa.Row[tuple[object, ...]]:
    (row,) = rows(engine, "SELECT * FROM minruntime.podgroups WHERE uid = :u", u=uid)
    return row


def test_start_time_rules(engine: sa.Engine, feed: Feed) -> None:
    feed.send(submitted("u", "a", 3))
    assert (podgroup(engine, "u").status, podgroup(engine, "u").start_time) == ("pending", None)
    feed.send(allocated("u", ["u-0"], time=T0))
    assert (podgroup(engine, "u").status, podgroup(engine, "u").start_time) == ("running", T0)
    # Scale-up keeps the start; a partial release keeps it too.
    feed.send(allocated("u", ["u-1", "u-2"], time=T0 + M), released("u", ["u-0"], time=T0 + 2 * M))
    row = podgroup(engine, "u")
    assert (row.start_time, row.running_pods) == (T0, 2)
    # Releasing everything ends the run; a new allocation starts a new one.
    feed.send(released("u", time=T0 + 3 * M))
    row = podgroup(engine, "u")
    assert (row.status, row.start_time, row.last_start_time, row.ended_at) == (
        "finished",
        None,
        T0,
        T0 + 3 * M,
    )
    feed.send(allocated("u", ["u-2"], time=T0 + 5 * M))
    assert (podgroup(engine, "u").status, podgroup(engine, "u").start_time) == (
        "running",
        T0 + 5 * M,
    )
    pods = rows(
        engine, "SELECT name, node, allocated FROM minruntime_state.pod_state ORDER BY name"
    )
    assert [tuple(p) for p in pods] == [
        ("u-0", None, False),
        ("u-1", None, False),
        ("u-2", "node-1", True),
    ]


def test_start_time_uses_event_time_in_partition_order(engine: sa.Engine, feed: Feed) -> None:
    # An allocation stamped earlier than a preceding one: the log order is the truth.
    feed.send(submitted("u", "a", 2), allocated("u", ["u-0"], time=T0 + M))
    feed.send(allocated("u", ["u-1"], time=T0))
    assert podgroup(engine, "u").start_time == T0 + M


def test_annotations_merge_remove_and_are_parsed(engine: sa.Engine, feed: Feed) -> None:
    feed.send(submitted("u", "a", annotations={"x": "1", "kai.scheduler/expected-runtime": "2h"}))
    feed.send(
        annotated(
            "u",
            {
                "x": None,
                "y": "2",
                "kai.scheduler/requeue-not-before": "2026-11-21T12:00:00+01:00",
            },
        )
    )
    row = podgroup(engine, "u")
    assert row.annotations == {
        "kai.scheduler/expected-runtime": "2h",
        "y": "2",
        "kai.scheduler/requeue-not-before": "2026-11-21T12:00:00+01:00",
    }
    assert row.expected_runtime == timedelta(hours=2)
    assert row.requeue_not_before == T0 + timedelta(hours=1)
    feed.send(annotated("u", {"kai.scheduler/expected-runtime": "soon"}))
    feed.send(annotated("u", {"kai.scheduler/requeue-not-before": "tomorrow"}))
    row = podgroup(engine, "u")
    assert (row.expected_runtime, row.requeue_not_before) == (None, None)


def test_deletion_and_queue_deletion(engine: sa.Engine, feed: Feed) -> None:
    feed.send(queue("root", reclaim="60s"), queue("leaf", "root"))
    feed.send(submitted("u", "leaf"), allocated("u", 1), deleted("u"))
    assert podgroup(engine, "u").status == "deleted"
    assert scalar(engine, "SELECT count(*) FROM minruntime.preempt_protection") == 0
    feed.send(queue_deleted("root"))
    got = rows(engine, "SELECT name, parent, path FROM minruntime.queues")
    # The child becomes a root but still names its parent; it re-attaches if it comes back.
    assert [tuple(r) for r in got] == [("leaf", "root", ["leaf"])]
    feed.send(queue("root", reclaim="60s"))
    assert scalar(engine, "SELECT path FROM minruntime.queues WHERE name = 'leaf'") == [
        "root",
        "leaf",
    ]


def test_nodes_and_nominations(engine: sa.Engine, feed: Feed) -> None:
    feed.send(node("n1", 8, "pool-a"), node("n2", 4), node("n1", 16, "pool-a"), node_deleted("n2"))
    assert [
        tuple(r) for r in rows(engine, "SELECT name, node_pool, gpu FROM minruntime.nodes")
    ] == [("n1", "pool-a", 16)]
    feed.send(submitted("u", "a"), nominated("u", "proportion"), nominated("u", "expectedruntime"))
    assert {r.nominated_by for r in rows(engine, "SELECT * FROM minruntime.nominations")} == {
        "proportion",
        "expectedruntime",
    }


def test_allocation_before_submission_makes_a_placeholder(engine: sa.Engine, feed: Feed) -> None:
    feed.send(allocated("u", ["p0", "p1"], time=T0))
    row = podgroup(engine, "u")
    assert (row.status, row.start_time, row.running_pods, row.queue) == ("running", T0, 2, None)
    assert row.submitted is False
    # Not yet submitted: resolves with the node-pool default, treated as a rigid gang.
    (protection,) = rows(engine, "SELECT * FROM minruntime.preempt_protection")
    assert (protection.min_runtime, protection.resolved_from) == (timedelta(0), None)
    # The submission arrives later: fills the spec in, keeps the start time and the pods.
    feed.send(
        submitted(
            "u",
            "late-queue",
            [{"name": "p0", "gpu": 1}, {"name": "p1", "gpu": 1}, {"name": "p2", "gpu": 1}],
            time=T0 + M,
        )
    )
    row = podgroup(engine, "u")
    assert (row.status, row.start_time, row.running_pods, row.queue, row.submitted) == (
        "running",
        T0,
        2,
        "late-queue",
        True,
    )
    assert row.is_elastic
    # The queue appears later still: the podgroup resolves to it automatically.
    feed.send(queue("late-queue", preempt="5m"))
    (protection,) = rows(engine, "SELECT * FROM minruntime.preempt_protection")
    assert (protection.min_runtime, protection.resolved_from) == (5 * M, "late-queue")


def test_annotation_and_nomination_before_submission(engine: sa.Engine, feed: Feed) -> None:
    feed.send(annotated("u", {"kai.scheduler/requeue-not-before": "2026-11-21T10:00:00Z"}))
    feed.send(nominated("v"))
    assert {r.uid: r.status for r in rows(engine, "SELECT * FROM minruntime.podgroups")} == {
        "u": "pending",
        "v": "pending",
    }
    feed.send(submitted("u", "a", annotations={"team": "x"}))
    row = podgroup(engine, "u")
    assert row.annotations == {
        "kai.scheduler/requeue-not-before": "2026-11-21T10:00:00Z",
        "team": "x",
    }
    assert row.requeue_not_before == T0


def test_allocation_on_an_unknown_node_keeps_the_node_name(engine: sa.Engine, feed: Feed) -> None:
    feed.send(submitted("u", "a"), allocated("u", 1))
    assert scalar(engine, "SELECT node FROM minruntime_state.pod_state") == "node-1"
    assert scalar(engine, "SELECT count(*) FROM minruntime.nodes") == 0


def test_a_podgroup_in_an_unknown_queue_uses_the_default(engine: sa.Engine, feed: Feed) -> None:
    feed.send(queue("known", reclaim="1m", preempt="1m"))
    feed.send(submitted("u", "ghost"), allocated("u", 1))
    (row,) = rows(engine, "SELECT * FROM minruntime.reclaim_protection('known', :at)", at=T0)
    assert (row.min_runtime, row.resolved_from, row.is_protected) == (timedelta(0), None, False)
