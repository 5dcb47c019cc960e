"""protection.expired events and the emitter's timing, without a database."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

from minruntime.core import (
    MinRuntimeConfig,
    NodePoolConfigs,
    ProtectedRun,
    ProtectionWindows,
    Queue,
    QueueTree,
)
from minruntime.events import ProtectionExpiredData, decode_event, encode_event
from minruntime.requeue import WORKER_SOURCE, ExpiryOptions, ExpiryReport, ProtectionExpiry
from minruntime.requeue.expiry import expiry_event
from tests.cloudevents import T0

TREE = QueueTree(
    [
        Queue(name="org", reclaim_min_runtime=timedelta(minutes=10)),
        Queue(name="team", parent="org", preempt_min_runtime=timedelta(minutes=5)),
        Queue(name="other", parent="org", reclaim_min_runtime=timedelta(minutes=1)),
    ]
)


def windows(method: str = "lca") -> ProtectionWindows:
    config = MinRuntimeConfig(reclaim_resolve_method=method)
    return ProtectionWindows(TREE, NodePoolConfigs({"default": config}))


def test_a_reclaim_window_under_lca_names_its_step_down_queues() -> None:
    run = ProtectedRun(uid="pg-1", start_time=T0, queue="team")
    preempt, reclaim = windows().of(run)
    event = expiry_event(reclaim)
    assert (event.type, event.id, event.subject, event.source, event.time) == (
        "protection.expired",
        reclaim.id,
        "pg-1",
        WORKER_SOURCE,
        T0 + timedelta(minutes=10),
    )
    assert json.loads(encode_event(event))["data"] == {
        "uid": "pg-1",
        "queue": "team",
        "nodePool": "default",
        "runStart": "2026-11-21T10:00:00Z",
        "rule": "reclaim",
        "minRuntime": "10m",
        "resolvedFrom": "org",
        "protectedUntil": "2026-11-21T10:10:00Z",
        "reclaimResolveMethod": "lca",
        "stepDownQueues": ["org", "team"],
    }
    assert decode_event(encode_event(event), "kai.protection") == event
    assert json.loads(encode_event(expiry_event(preempt)))["data"] == {
        "uid": "pg-1",
        "queue": "team",
        "nodePool": "default",
        "runStart": "2026-11-21T10:00:00Z",
        "rule": "preempt",
        "minRuntime": "5m",
        "resolvedFrom": "team",
        "protectedUntil": "2026-11-21T10:05:00Z",
    }


def test_a_reclaim_window_under_the_queue_method_applies_to_every_reclaimer() -> None:
    run = ProtectedRun(uid="pg-2", start_time=T0, queue="other")
    (reclaim,) = windows("queue").of(run)
    data = expiry_event(reclaim).data
    assert isinstance(data, ProtectionExpiredData)
    assert (data.reclaim_resolve_method, data.step_down_queues) == ("queue", None)


def test_a_placeholder_event_has_no_queue_and_the_default_applies() -> None:
    gpu = MinRuntimeConfig(default_preempt_min_runtime=timedelta(seconds=30))
    pools = ProtectionWindows(TREE, NodePoolConfigs({"gpu": gpu}))
    (preempt,) = pools.of(ProtectedRun(uid="pg-3", start_time=T0, node_pool="gpu"))
    data = json.loads(encode_event(expiry_event(preempt)))["data"]
    assert (data["nodePool"], data["minRuntime"]) == ("gpu", "30s")
    assert "queue" not in data
    assert "resolvedFrom" not in data


def report(until: datetime, next_end: datetime | None) -> ExpiryReport:
    return ExpiryReport(after=until, until=until, expired=(), written=(), next_end=next_end)


def test_the_emitter_sleeps_until_the_next_end_but_never_longer_than_max_sleep() -> None:
    expiry = ProtectionExpiry(ExpiryOptions(topic="t", max_sleep_seconds=0.5, catch_up_seconds=60))
    assert expiry.seconds_until_due(T0) == 0.0  # never checked: check now
    expiry.start(T0)
    assert expiry.seconds_until_due(T0) == 0.0
    expiry.advance(report(T0, T0 + timedelta(seconds=0.2)))
    assert expiry.seconds_until_due(T0) == 0.2
    expiry.advance(report(T0, None))
    assert expiry.seconds_until_due(T0) == 0.5
    expiry.advance(report(T0, T0 + timedelta(seconds=3)))
    assert expiry.seconds_until_due(T0) == 0.5
    assert expiry.seconds_until_due(T0 + timedelta(seconds=1)) == 0.0
