"""Protection-expiry wake-ups on a real PostgreSQL: windows, checks, the outbox, failover."""

from __future__ import annotations

import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from minruntime.core import (
    ProtectedRun,
    ProtectionRule,
    ProtectionWindow,
    ProtectionWindows,
    Resolver,
)
from minruntime.events import decode_event
from minruntime.requeue import (
    ExpiryEmitter,
    ExpiryOptions,
    ProtectionExpiry,
    RequeueMetrics,
    RequeueWorker,
    WorkerOptions,
)
from minruntime.requeue.expiry import load_runs_ending
from minruntime.store.node_pools import read_node_pool_configs
from minruntime.store.queues import load_tree
from minruntime.store.schema import LIVE
from tests.cloudevents import (
    T0,
    Event,
    allocated,
    config,
    design_tree,
    queue,
    released,
    submitted,
)
from tests.integration.helpers import Feed, rows, s

TOPIC = "kai.protection"


def running(uid: str, queue_name: str, start: datetime, **kw: Any) -> list[Event]:
    return [submitted(uid, queue_name, 1, **kw), allocated(uid, 1, time=start)]


def current_windows(engine: sa.Engine) -> ProtectionWindows:
    with engine.connect() as conn:
        return ProtectionWindows(load_tree(conn, LIVE), read_node_pool_configs(conn, LIVE)[0])


def all_runs(engine: sa.Engine, windows: ProtectionWindows) -> list[ProtectedRun]:
    with engine.connect() as conn:
        return load_runs_ending(
            conn,
            windows.spans(),
            datetime(1970, 1, 1, tzinfo=UTC),
            datetime(9000, 1, 1, tzinfo=UTC),
        )


def outbox(engine: sa.Engine) -> list[Any]:
    return rows(
        engine,
        "SELECT id, topic, key, payload, headers FROM minruntime_state.outbox ORDER BY id",
    )


def check(engine: sa.Engine, expiry: ProtectionExpiry, now: datetime) -> list[ProtectionWindow]:
    """One committed check at `now`; the windows it wrote."""
    with engine.begin() as conn:
        report = expiry.check(conn, now)
    expiry.advance(report)
    return list(report.written)


def expiry(catch_up: float = 0.0, max_sleep: float = 5.0) -> ProtectionExpiry:
    return ProtectionExpiry(
        ExpiryOptions(topic=TOPIC, max_sleep_seconds=max_sleep, catch_up_seconds=catch_up)
    )


# --- the windows agree with the SQL read surface -----------------------------------------------


def test_windows_agree_with_preempt_protection_and_reclaim_protection(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(
        *design_tree(),
        config("default", defaultPreemptMinRuntime="45s", defaultReclaimMinRuntime="30s"),
        config("flat", reclaimResolveMethod="queue"),
    )
    feed.send(
        *running("in-leaf1", "leaf1", T0),
        *running("in-leaf2", "leaf2", T0 + s(1)),
        *running("in-leaf3", "leaf3", T0 + s(2)),
        *running("in-b", "B", T0 + s(3)),
        *running("flat-leaf3", "leaf3", T0 + s(4), node_pool="flat"),
        *running("nowhere", "not-a-queue", T0 + s(5)),
        allocated("placeholder", 1, time=T0 + s(6)),
    )
    windows = current_windows(engine)
    by_uid = {run.uid: windows.of(run) for run in all_runs(engine, windows)}
    assert len(by_uid) == 7

    preempt = rows(
        engine,
        "SELECT uid, min_runtime, resolved_from, protected_until"
        " FROM minruntime.preempt_protection",
    )
    assert len(preempt) == 7
    for uid, min_runtime, source, until in preempt:
        found = [w for w in by_uid[uid] if w.rule is ProtectionRule.PREEMPT]
        expected = [(min_runtime, source, until)] if min_runtime > timedelta(0) else []
        assert [(w.min_runtime, w.resolved_from, w.protected_until) for w in found] == expected

    runs = {run.uid: run for run in all_runs(engine, windows)}
    compared = 0
    for reclaimer in ("A", "B", "C", "D", "leaf1", "leaf2", "leaf3"):
        for uid, victim_queue, min_runtime, source, until in rows(
            engine,
            "SELECT uid, queue, min_runtime, resolved_from, protected_until"
            " FROM minruntime.reclaim_protection(:q)",
            q=reclaimer,
        ):
            if victim_queue == reclaimer:
                continue  # the preempt rule applies between the same queue
            run = runs[uid]
            resolver = Resolver(windows.tree, windows.configs.for_pool(run.node_pool))
            start = resolver.reclaim_min_runtime(reclaimer, run.queue or "").start
            found = [
                w
                for w in by_uid[uid]
                if w.rule is ProtectionRule.RECLAIM
                and (w.step_down_queues is None or start in w.step_down_queues)
            ]
            expected = [(min_runtime, source, until)] if min_runtime > timedelta(0) else []
            assert [(w.min_runtime, w.resolved_from, w.protected_until) for w in found] == expected
            compared += 1
    assert compared > 40


# --- checks, the outbox, idempotence ------------------------------------------------------------


def test_a_check_announces_each_window_once_when_it_ends(engine: sa.Engine) -> None:
    Feed(engine).send(*design_tree(), *running("j", "leaf3", T0))
    emitter = expiry()
    emitter.start(T0 + s(30))
    assert check(engine, emitter, T0 + s(59)) == []
    assert emitter.seconds_until_due(T0 + s(59)) == 1.0  # woken exactly at the 60s window's end
    assert outbox(engine) == []

    (window,) = check(engine, emitter, T0 + s(60))
    assert (window.rule, window.min_runtime, window.step_down_queues) == (
        ProtectionRule.RECLAIM,
        s(60),
        ("D", "leaf3"),
    )
    ((row_id, topic, key, payload, headers),) = outbox(engine)
    event = decode_event(bytes(payload), TOPIC)
    assert (str(row_id), topic, bytes(key), headers) == (
        window.id,
        TOPIC,
        b"j",
        {"id": window.id, "type": "protection.expired"},
    )
    assert (event.id, event.type, event.time) == (window.id, "protection.expired", T0 + s(60))

    assert check(engine, emitter, T0 + s(599)) == []
    ends = check(engine, emitter, T0 + s(601))
    assert sorted((w.rule.value, w.resolved_from) for w in ends) == [
        ("preempt", "B"),
        ("reclaim", "B"),
    ]
    assert len(outbox(engine)) == 3

    # A restarted replica looks back and finds every window announced already.
    again = expiry(catch_up=3600)
    again.start(T0 + s(602))
    with engine.begin() as conn:
        report = again.check(conn, T0 + s(602))
    assert (len(report.expired), report.written) == (3, ())
    assert len(outbox(engine)) == 3


def test_failover_announces_missed_ends_within_the_catch_up_only(engine: sa.Engine) -> None:
    Feed(engine).send(*design_tree(), *running("j", "leaf3", T0))
    # The 60s window ended at T0+60 while no replica was active.
    late = expiry(catch_up=30)
    late.start(T0 + s(100))
    assert check(engine, late, T0 + s(100)) == []  # ended 40 s ago: older than the catch-up
    within = expiry(catch_up=45)
    within.start(T0 + s(100))
    assert [w.protected_until for w in check(engine, within, T0 + s(100))] == [T0 + s(60)]


def test_finished_and_unprotected_runs_are_not_announced(engine: sa.Engine, feed: Feed) -> None:
    feed.send(
        *design_tree(),
        *running("done", "leaf3", T0),
        *running("free", "not-a-queue", T0),
        *running("root", "A", T0),  # nothing set on its path, defaults 0
    )
    feed.send(released("done", time=T0 + s(30)))
    emitter = expiry()
    emitter.start(T0)
    assert check(engine, emitter, T0 + s(1000)) == []


def test_a_changed_window_is_announced_when_it_ends(engine: sa.Engine, feed: Feed) -> None:
    feed.send(*design_tree(), *running("j", "leaf2", T0))
    emitter = expiry()
    emitter.start(T0)
    assert [w.min_runtime for w in check(engine, emitter, T0 + s(200))] == [s(180)]
    feed.send(queue("leaf2", "C", reclaim="300s"))  # protected again until T0+300
    assert check(engine, emitter, T0 + s(299)) == []
    assert [w.min_runtime for w in check(engine, emitter, T0 + s(300))] == [s(300)]


def test_a_day_long_window_ends_after_24_hours_whatever_the_session_time_zone(
    engine: sa.Engine,
) -> None:
    # Europe/Berlin moves its clocks on 2026-03-29: that calendar day has 23 hours there.
    start = datetime(2026, 3, 28, 12, 0, tzinfo=UTC)
    Feed(engine).send(queue("daily", preempt="1d"), *running("j", "daily", start))
    emitter = expiry(max_sleep=0.5)
    emitter.start(start + s(86399.5))
    with engine.begin() as conn:
        conn.exec_driver_sql("SET LOCAL TIME ZONE 'Europe/Berlin'")
        report = emitter.check(conn, start + s(86400))
    assert [w.protected_until for w in report.written] == [start + s(86400)]


# --- the emitter thread on the active replica -------------------------------------------------


class Replica:
    """A worker and its expiry emitter in threads, as `run_requeue_worker` composes them."""

    def __init__(self, engine: sa.Engine) -> None:
        self.registry = CollectorRegistry()
        metrics = RequeueMetrics(self.registry, [])
        self.worker = RequeueWorker(
            engine,
            WorkerOptions(topic="kai.requeue-decisions", standby_poll_seconds=0.1),
            metrics,
        )
        self.woken = threading.Event()
        self.emitter = ExpiryEmitter(
            engine,
            ExpiryOptions(topic=TOPIC),
            metrics,
            self.worker.leading,
            on_written=self.woken.set,
        )
        self.threads = [
            threading.Thread(target=self.worker.run, daemon=True),
            threading.Thread(target=self.emitter.run, daemon=True),
        ]

    def start(self) -> Replica:
        for thread in self.threads:
            thread.start()
        return self

    def stop(self) -> None:
        self.worker.stop.set()
        self.emitter.stop.set()
        for thread in self.threads:
            thread.join(30)
            assert not thread.is_alive()

    def expired(self, rule: str) -> float:
        value = self.registry.get_sample_value(
            "minruntime_protection_expired_total", {"rule": rule}
        )
        return value or 0.0


def test_only_the_active_replica_announces_and_on_time(engine: sa.Engine) -> None:
    first = Replica(engine).start()
    second: Replica | None = None
    try:
        deadline = time.monotonic() + 20
        while not first.worker.leading.is_set():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        second = Replica(engine).start()

        start = datetime.now(UTC) - s(58.5)  # the 60s window of leaf3 ends 1.5 s from now
        Feed(engine).send(*design_tree(), *running("j", "leaf3", start))
        assert first.woken.wait(10)
        written_at = datetime.now(UTC)
        ((row_id, created_at),) = rows(engine, "SELECT id, created_at FROM minruntime_state.outbox")
        until = start + s(60)
        assert timedelta(0) <= created_at - until < s(1)
        assert timedelta(0) <= written_at - until < s(1)
        assert uuid.UUID(str(row_id)).version == 5
        assert (first.expired("reclaim"), second.expired("reclaim")) == (1.0, 0.0)
        assert not second.woken.is_set()
    finally:
        for replica in (first, second):
            if replica is not None:
                replica.stop()
