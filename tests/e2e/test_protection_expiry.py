"""Protection-expiry wake-ups end to end: events in through Kafka, `protection.expired` out.

A real processor and a real `minruntime requeue-worker` on the shared stack. A listener reads
the private `kai.protection` topic from the start in a thread and stamps each record with the
wall-clock time it arrived; windows are a few seconds long, so the test measures each
event's arrival against its `protectedUntil` (the bound is behaviour — "within a second" — not
a benchmark). Then the replica is killed while windows end, and a new one announces them late,
exactly once, without publishing anything twice.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from minruntime.kafka_access import KafkaAccess
from minruntime.settings import Settings
from minruntime.topic_admin import TopicRole, topic_specs
from minruntime_dev.stack import StackStatus
from tests import cloudevents as ce
from tests.e2e.harness import Pipeline, Worker, running_pipeline, wait_for
from tests.e2e.test_requeue_worker import Published

pytestmark = pytest.mark.stack

ORG, TEAM, FREE = "pe-org", "pe-team", "pe-free"
# (rule, minRuntime, resolvedFrom, stepDownQueues) of a run in pe-team: preempt 3s (team);
# reclaim lca: a reclaimer under another root steps into pe-org (6s), one in pe-org's subtree
# into pe-team (4s).
TEAM_WINDOWS = {
    ("preempt", "3s", TEAM, None, 3.0),
    ("reclaim", "4s", TEAM, (TEAM,), 4.0),
    ("reclaim", "6s", ORG, (ORG,), 6.0),
}
LATE = timedelta(seconds=1)


@dataclass(frozen=True)
class Arrival:
    """One record of the protection topic and when the listener received it."""

    at: datetime
    record: Published

    @property
    def event(self) -> dict[str, Any]:
        return self.record.event

    @property
    def data(self) -> dict[str, Any]:
        return self.record.data

    @property
    def lateness(self) -> timedelta:
        return self.at - datetime.fromisoformat(self.data["protectedUntil"])


class Listener:
    """Reads a topic from the beginning in a thread until stopped, stamping arrivals."""

    def __init__(self, kafka: KafkaAccess, topic: str, partitions: int) -> None:
        self.kafka = kafka
        self.topic = topic
        self.partitions = partitions
        self.arrivals: list[Arrival] = []
        self.ready = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=lambda: asyncio.run(self._consume()), daemon=True)

    def start(self) -> Listener:
        self.thread.start()
        assert self.ready.wait(30), "the listener did not start"
        return self

    def stop(self) -> None:
        self.done.set()
        self.thread.join(30)

    def of(self, uid: str) -> list[Arrival]:
        return [arrival for arrival in list(self.arrivals) if arrival.data["uid"] == uid]

    async def _consume(self) -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            **self.kafka.client_kwargs(), enable_auto_commit=False, fetch_max_wait_ms=50
        )
        await consumer.start()
        try:
            assigned = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            for partition in assigned:
                await consumer.position(partition)
            self.ready.set()
            while not self.done.is_set():
                batch = await consumer.getmany(*assigned, timeout_ms=100)
                at = datetime.now(UTC)
                for records in batch.values():
                    self.arrivals.extend(
                        Arrival(
                            at,
                            Published(
                                record.key,
                                next((v.decode() for k, v in record.headers if k == "id"), None),
                                json.loads(record.value),
                            ),
                        )
                        for record in records
                    )
        finally:
            await consumer.stop()


def leader_locks(pipeline: Pipeline) -> int:
    """Advisory locks held in the pipeline's database (1 while a replica is active)."""
    return int(
        pipeline.scalar(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted"
            " AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
    )


def start_active_worker(pipeline: Pipeline, name: str) -> Worker:
    worker = pipeline.start_worker(name)
    wait_for(lambda: leader_locks(pipeline) == 1, 60, f"worker {name} active\n{worker.log_tail()}")
    return worker


def run_in(queue: str, uid: str, start: datetime) -> list[dict[str, Any]]:
    """podgroup.submitted + podgroup.allocated with the run starting at `start`."""
    now = ce.stamp(datetime.now(UTC))
    return [
        ce.submitted(uid, queue, ["p0"], priority=50, time=now),
        ce.allocated(uid, ["p0"], ce.stamp(start), node="pe-node"),
    ]


def windows_of(arrivals: list[Arrival]) -> set[tuple[Any, ...]]:
    found = set()
    for arrival in arrivals:
        data = arrival.data
        steps = data.get("stepDownQueues")
        span = datetime.fromisoformat(data["protectedUntil"]) - datetime.fromisoformat(
            data["runStart"]
        )
        found.add(
            (
                data["rule"],
                data["minRuntime"],
                data.get("resolvedFrom"),
                None if steps is None else tuple(steps),
                span.total_seconds(),
            )
        )
    return found


def assert_well_formed(arrivals: list[Arrival], uid: str, run_start: datetime) -> None:
    for arrival in arrivals:
        event, data = arrival.event, arrival.data
        assert (arrival.record.key, event["subject"], data["uid"]) == (uid.encode(), uid, uid)
        assert arrival.record.header_id == event["id"]
        assert (event["type"], event["source"]) == (
            "protection.expired",
            "minruntime/requeue-worker",
        )
        assert event["time"] == data["protectedUntil"]
        assert datetime.fromisoformat(data["runStart"]) == run_start
        assert data["queue"] == TEAM
    assert len({arrival.event["id"] for arrival in arrivals}) == len(arrivals), "duplicates"


@pytest.fixture(scope="module")
def pipeline(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    with running_pipeline(settings, tmp_path_factory.mktemp("expiry"), "pe") as private:
        now = ce.stamp(datetime.now(UTC))
        private.produce_events(
            "queues",
            [
                ce.queue(ORG, reclaim="6s", time=now),
                ce.queue(TEAM, ORG, preempt="3s", reclaim="4s", time=now),
                ce.queue(FREE, time=now),
            ],
        )
        wait_for(
            lambda: private.scalar("SELECT count(*) FROM minruntime.queues") == 3,
            60,
            f"the queues\n{private.log_tail()}",
        )
        yield private


@pytest.fixture(scope="module")
def listener(pipeline: Pipeline) -> Iterator[Listener]:
    spec = next(s for s in topic_specs(pipeline.settings()) if s.role is TopicRole.PROTECTION)
    started = Listener(pipeline.kafka, spec.name, spec.partitions).start()
    yield started
    started.stop()


def send(pipeline: Pipeline, events: list[Mapping[str, Any]]) -> None:
    pipeline.produce_events("podgroups", events)


def wait_arrivals(listener: Listener, uid: str, count: int) -> list[Arrival]:
    found: list[Arrival] = wait_for(
        lambda: (got := listener.of(uid)) and len(got) >= count and got,
        30,
        f"{count} protection.expired event(s) of {uid}",
    )
    return found


def test_window_ends_arrive_on_kafka_within_a_second_exactly_once(
    pipeline: Pipeline, listener: Listener
) -> None:
    worker = start_active_worker(pipeline, "w1")
    start = datetime.now(UTC)
    send(
        pipeline,
        [
            *run_in(TEAM, "pe-a", start),  # windows end 3, 4 and 6 s from now
            *run_in(FREE, "pe-free", start),  # nothing protects it
            *run_in(TEAM, "pe-old", start - timedelta(hours=1)),  # ended an hour ago
            *run_in(TEAM, "pe-gone", start),  # released before its windows end
            ce.released("pe-gone", time=ce.stamp(start), reason="completed"),
        ],
    )
    arrivals = wait_arrivals(listener, "pe-a", 3)
    time.sleep(2.0)  # anything more would have arrived by now
    assert worker.alive(), worker.log_tail()

    arrivals = listener.of("pe-a")
    assert windows_of(arrivals) == TEAM_WINDOWS
    assert_well_formed(arrivals, "pe-a", start)
    lateness = sorted(arrival.lateness for arrival in arrivals)
    assert timedelta(0) <= lateness[0], f"announced before the window ended: {lateness}"
    assert lateness[-1] < LATE, f"later than a second: {lateness}"
    for uid in ("pe-free", "pe-old", "pe-gone"):
        assert listener.of(uid) == [], uid
    print(f"\n[expiry] arrival after protectedUntil: {[str(late) for late in lateness]}")
    worker.stop()


def test_ends_missed_while_no_replica_was_active_are_announced_once_on_takeover(
    pipeline: Pipeline, listener: Listener
) -> None:
    assert leader_locks(pipeline) == 0
    first = start_active_worker(pipeline, "w2")
    send(pipeline, run_in(TEAM, "pe-c", datetime.now(UTC)))
    wait_arrivals(listener, "pe-c", 3)  # the replica announces: it is up
    # The relay publishes at least once: a kill between a row's send and its mark would have
    # the processor's relay send it again (same id) while nobody is active. Kill it only when
    # every row it wrote is marked published, so the gap below is the emitter's alone.
    wait_for(
        lambda: (
            pipeline.scalar(
                "SELECT count(*) FROM minruntime_state.outbox WHERE published_at IS NULL"
            )
            == 0
        ),
        30,
        "the outbox to be published",
    )
    before = len(listener.arrivals)
    first.kill()  # SIGKILL: no replica is active until the next one starts
    wait_for(lambda: leader_locks(pipeline) == 0, 30, "the lock to be released")
    start = datetime.now(UTC)
    send(pipeline, run_in(TEAM, "pe-b", start))
    time.sleep(7.0)  # all three windows of pe-b end while nobody is active
    assert len(listener.arrivals) == before

    second = start_active_worker(pipeline, "w3")
    arrivals = wait_arrivals(listener, "pe-b", 3)
    time.sleep(2.0)
    arrivals = listener.of("pe-b")
    assert windows_of(arrivals) == TEAM_WINDOWS
    assert_well_formed(arrivals, "pe-b", start)
    assert all(arrival.lateness > LATE for arrival in arrivals)  # late, by design

    # Each takeover looked back over the windows announced before (pe-c's ended while the
    # first replica was active) and published none of them again.
    second.stop()
    start_active_worker(pipeline, "w4")
    time.sleep(2.0)
    ids = [arrival.event["id"] for arrival in listener.arrivals]
    assert len(ids) == len(set(ids)), "a window was published twice"
    assert len(listener.of("pe-c")) == 3
    assert len(listener.of("pe-b")) == 3
