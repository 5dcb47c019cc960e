"""The requeue worker survives any state (issue 12, finding 2): hostile values in the projections.

The values are written straight into the projection tables, as an older version or a restore
could have left them (ingest may refuse them today). Each cycle must not raise, must leave out
exactly what it cannot use with its reason, and must still decide for the healthy candidate.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from minruntime.requeue import (
    ExpiryOptions,
    ProtectionExpiry,
    RequeueMetrics,
    RequeueWorker,
    WorkerOptions,
)
from tests.cloudevents import T0, Event, allocated, config, node, queue, submitted
from tests.integration.helpers import NOW, OVERRUN, TOPIC, Feed, cycle, execute, gang, running_job


def healthy(feed: Feed) -> None:
    """node-1 (8 GPUs) run by the over-running ``v``; ``hi`` waits for 4 of them."""
    feed.send(
        queue("team"),
        node("node-1", gpu=8),
        *running_job("v", 8),
        gang("hi", 4, priority=100),
    )


def hostile_node(engine: sa.Engine, name: str, gpu: str) -> None:
    execute(
        engine,
        "INSERT INTO minruntime_state.node_state (name, node_pool, gpu)"
        " VALUES (:name, 'default', CAST(:gpu AS numeric))",
        name=name,
        gpu=gpu,
    )


def excluded(report: Any) -> set[tuple[str, str, str]]:
    return {(e.what, e.name, e.reason.value) for e in report.excluded}


def committed(report: Any) -> list[tuple[str, tuple[str, ...]]]:
    return [(d.uid, d.beneficiaries) for d in report.committed]


def hostile_cycle(engine: sa.Engine, feed: Feed, events: list[Event], *updates: str) -> Any:
    """The healthy cluster and ``events``, the stored state then spoiled by the SQL ``updates``,
    and one cycle, which still requeues ``v`` for ``hi``."""
    healthy(feed)
    feed.send(*events)
    for update in updates:
        execute(engine, update)
    report = cycle(engine)
    assert committed(report) == [("v", ("hi",))]
    return report


@pytest.mark.parametrize("gpu", ["1e308", "NaN", "-1", "Infinity", "1e400"])
def test_a_node_with_an_unusable_gpu_capacity_is_left_out(
    engine: sa.Engine, feed: Feed, gpu: str
) -> None:
    healthy(feed)
    # Finding 2: 1e308 killed the worker in gpu_units (OverflowError), then the standby.
    hostile_node(engine, "huge", gpu)

    report = cycle(engine)

    assert excluded(report) == {("node", "huge", "invalid_gpu")}
    assert committed(report) == [("v", ("hi",))]


def test_unusable_podgroups_are_left_out_and_their_nodes_with_them(
    engine: sa.Engine, feed: Feed
) -> None:
    report = hostile_cycle(
        engine,
        feed,
        [
            node("node-2", gpu=8),
            submitted("bad-gpu", "team", 2, priority=10),
            allocated("bad-gpu", 2, time=T0, node="node-2"),
            submitted("bad-time", "team", 1, priority=10),
            submitted("bad-annotations", "team", 1, priority=10),
        ],
        "UPDATE minruntime_state.pod_state SET gpu = 1e308 WHERE uid = 'bad-gpu'",
        # Year 10000 once in UTC: psycopg cannot even return it.
        "UPDATE minruntime_state.podgroup_state SET submitted_at = 'infinity'"
        " WHERE uid = 'bad-time'",
        "UPDATE minruntime_state.podgroup_state SET annotations = '[1, 2]'::jsonb"
        " WHERE uid = 'bad-annotations'",
    )

    assert excluded(report) == {
        ("podgroup", "bad-gpu", "invalid_gpu"),
        ("podgroup", "bad-time", "invalid_time"),
        ("podgroup", "bad-annotations", "invalid_annotations"),
        # bad-gpu runs there: how full node-2 is, nobody knows.
        ("node", "node-2", "hosts_excluded_podgroup"),
    }


def test_a_running_podgroup_with_a_start_time_past_year_9999_is_left_out(
    engine: sa.Engine, feed: Feed
) -> None:
    report = hostile_cycle(
        engine,
        feed,
        [
            node("node-2", gpu=8),
            submitted("late", "team", 1, priority=10, annotations=OVERRUN),
            allocated("late", 1, time=T0, node="node-2"),
        ],
        "UPDATE minruntime_state.podgroup_state"
        " SET start_time = '9999-12-31T23:59:59-01:00' WHERE uid = 'late'",
    )

    assert ("podgroup", "late", "invalid_time") in excluded(report)


def test_a_node_pool_with_an_unusable_config_leaves_its_podgroups_out(
    engine: sa.Engine, feed: Feed
) -> None:
    report = hostile_cycle(
        engine,
        feed,
        [
            config("gpu-b", defaultPreemptMinRuntime="1h"),
            submitted("other", "team", 1, priority=10, node_pool="gpu-b"),
        ],
        "UPDATE minruntime_state.node_pool_configs"
        " SET default_preempt_min_runtime = interval '-5 minutes' WHERE node_pool = 'gpu-b'",
    )

    assert excluded(report) == {
        ("node_pool", "gpu-b", "invalid_config"),
        ("podgroup", "other", "invalid_config"),
    }


def test_the_worker_loop_keeps_deciding_and_counts_what_it_left_out(
    engine: sa.Engine, feed: Feed
) -> None:
    healthy(feed)
    hostile_node(engine, "huge", "1e308")
    registry = CollectorRegistry()
    metrics = RequeueMetrics(registry, ())
    worker = RequeueWorker(engine, WorkerOptions(topic=TOPIC), metrics, clock=lambda: NOW)

    with engine.connect() as conn:
        report = worker.cycle(conn.execution_options(isolation_level="REPEATABLE READ"))

    assert report is not None
    assert committed(report) == [("v", ("hi",))]
    labels = {"what": "node", "reason": "invalid_gpu"}
    assert registry.get_sample_value("kai_requeue_excluded_total", labels) == 1


def test_the_expiry_check_survives_hostile_runs(engine: sa.Engine, feed: Feed) -> None:
    clock: Callable[[], datetime] = lambda: NOW  # noqa: E731
    feed.send(
        queue("team", preempt="1h"),
        node("node-1", gpu=8),
        submitted("ok", "team", 1, priority=50),
        allocated("ok", 1, time=T0),
    )
    hostile_node(engine, "huge", "1e308")
    expiry = ProtectionExpiry(ExpiryOptions(topic="kai.protection", catch_up_seconds=86400))

    with engine.connect() as conn, conn.begin():
        report = expiry.check(conn, clock())

    assert [w.run.uid for w in report.written] == ["ok"]
