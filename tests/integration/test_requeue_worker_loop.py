"""The worker loop on a real PostgreSQL: one active replica, takeover, nomination wake-ups."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from minruntime.requeue import LEADER_LOCK_KEY, RequeueMetrics, RequeueWorker, WorkerOptions
from tests.cloudevents import allocated, node, nominated, queue, submitted
from tests.e2e.harness import wait_for
from tests.integration.helpers import TOPIC, Feed, rows


class Replica:
    """A RequeueWorker running in a thread, with its own metrics registry."""

    def __init__(self, engine: sa.Engine, **options: Any) -> None:
        self.registry = CollectorRegistry()
        self.worker = RequeueWorker(
            engine,
            WorkerOptions(topic=TOPIC, **options),
            RequeueMetrics(self.registry, ["proportion"]),
        )
        self.thread = threading.Thread(target=self.worker.run, daemon=True)

    def start(self) -> Replica:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.worker.stop.set()
        self.thread.join(30)
        assert not self.thread.is_alive()

    @property
    def active(self) -> bool:
        return self.registry.get_sample_value("minruntime_requeue_worker_active") == 1


@pytest.fixture
def replicas(engine: sa.Engine) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.stop()


def test_exactly_one_replica_is_active_and_a_standby_takes_over(
    engine: sa.Engine, replicas: list[Replica]
) -> None:
    options = {"interval_seconds": 0.2, "standby_poll_seconds": 0.1}
    first = Replica(engine, **options).start()
    replicas.append(first)
    wait_for(lambda: first.active, 20)
    second = Replica(engine, **options).start()
    replicas.append(second)
    time.sleep(1.0)

    assert (first.active, second.active) == (True, False)
    assert first.worker.cycles > 0
    assert second.worker.cycles == 0

    first.stop()
    wait_for(lambda: second.active, 20)
    cycles = second.worker.cycles
    wait_for(lambda: second.worker.cycles > cycles, 20)
    assert not first.active


def test_a_stopped_worker_leaves_the_leadership_free_at_once(engine: sa.Engine) -> None:
    # The lock is the session's: a session that went back to the pool would keep it, and a
    # replica whose pool handed it that very session would "take over" a lock it re-entered.
    replica = Replica(engine, interval_seconds=0.2, standby_poll_seconds=0.1).start()
    try:
        wait_for(lambda: replica.active, 20)
    finally:
        replica.stop()
    other = sa.create_engine(engine.url, poolclass=sa.NullPool)
    try:
        with other.connect() as conn:
            taken = conn.execute(
                sa.text("SELECT pg_try_advisory_lock(:key)"), {"key": LEADER_LOCK_KEY}
            ).scalar_one()
            assert taken, "the stopped worker's session still holds the leader lock"
            conn.execute(sa.text("SELECT pg_advisory_unlock(:key)"), {"key": LEADER_LOCK_KEY})
    finally:
        other.dispose()


def test_a_nomination_wakes_the_active_worker_before_its_interval(
    engine: sa.Engine, replicas: list[Replica]
) -> None:
    now = datetime.now(UTC)
    Feed(engine).send(
        queue("team"),
        node("node-1"),
        submitted("j", "team", 1),
        allocated("j", 1, time=now - timedelta(hours=1)),
    )
    replica = Replica(engine, interval_seconds=600, settle_seconds=0.05).start()
    replicas.append(replica)
    wait_for(lambda: replica.worker.cycles == 1, 20)

    Feed(engine, group="other").send(nominated("j", "proportion", time=now))

    wait_for(
        lambda: rows(engine, "SELECT outcome, reason FROM minruntime.requeue_decisions"),
        timeout=10,
    )
    assert rows(engine, "SELECT uid, outcome, reason FROM minruntime.requeue_decisions") == [
        ("j", "rolled_back", "no_higher_priority_pending")
    ]
    assert replica.worker.cycles == 2
