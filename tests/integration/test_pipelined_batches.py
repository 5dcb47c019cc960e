"""The processor decodes a topic's next batch while the current one is written (issue 30).

Against the real broker and PostgreSQL, with the processor's pieces as ``stream.app`` wires
them (the batched consumer, ``BatchSink.decode`` as its ``prepare``, the sink as its apply):
while batch N is being written, batch N+1 is taken and decoded; then the write of batch N
fails. Whether the process dies (the transaction rolled back, a restart reads on from Kafka's
committed offset) or the failure is transient (the sink retries N, then applies N+1 as it
was decoded), every event is applied exactly once and in offset order per partition.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from aiokafka import AIOKafkaProducer

from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch
from minruntime.ingest.batch import DecodedAhead, decode_ahead
from minruntime.kafka_access import KafkaAccess, kafka_access, start_client
from minruntime.settings import Settings
from minruntime.stream.consumer import ApplyBatch, BatchedConsumer, ConsumerOptions
from minruntime.stream.sink import BatchSink
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, ensure_topics
from minruntime_dev.stack import StackStatus
from tests.cloudevents import allocated, queue, raw, released, submitted, wire
from tests.integration.helpers import ROLES, Feed, kafka_admin, rows, until

pytestmark = pytest.mark.stack

PODGROUPS = 30  # three events each, on two partitions: 45 records a partition
PARTITIONS = 2
BATCH = 10
FAILING = 3  # the batch whose write fails (the first is 1)


@contextlib.asynccontextmanager
async def _topic(access: KafkaAccess) -> AsyncIterator[str]:
    """A fresh podgroups topic holding the lives of PODGROUPS podgroups; deleted after."""
    topic = f"test.pipelined.{uuid.uuid4().hex[:8]}"
    await ensure_topics(access, [TopicSpec(TopicRole.PODGROUPS, topic, PARTITIONS, FOREVER)])
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    await start_client(producer, access)
    try:
        for i in range(PODGROUPS):
            uid = f"pg-{i:02d}"
            for document in (submitted(uid, "q", 2), allocated(uid, 2), released(uid)):
                await producer.send(
                    topic, wire(document), key=uid.encode(), partition=i % PARTITIONS
                )
        await producer.flush()
    finally:
        await producer.stop()
    try:
        yield topic
    finally:
        async with kafka_admin(access) as admin:
            await admin.delete_topics([topic])


class Pipeline:
    """The processor's consumer, sink and decode-ahead, with hooks on batch ``FAILING``."""

    def __init__(self, access: KafkaAccess, topic: str, group: str, sink: BatchSink) -> None:
        self.sink = sink
        self.applied: list[int] = []  # first offset of each batch applied, in order
        self.outcome = BatchOutcome()
        self.prepared = 0  # batches decoded ahead
        self.next_prepared = asyncio.Event()  # the batch after FAILING was decoded ahead
        self.calls = 0
        # Called instead of the sink for batch FAILING (None: the sink, as every other).
        self.failing: Callable[[list[InboundRecord], DecodedAhead | None], Any] | None = None

        async def apply(
            role: TopicRole, records: list[InboundRecord], ahead: DecodedAhead | None = None
        ) -> None:
            self.calls += 1
            if self.calls == FAILING:
                # Batch N+1 is taken and decoded while N is being written (the tests assert
                # it did; raising here would stop the process, as the processor does).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.next_prepared.wait(), 10)
                if self.failing is not None:
                    await self.failing(records, ahead)
                    return
            outcome = await asyncio.to_thread(self.sink, records, None, ahead)
            self.outcome.add(outcome)

        async def prepare(role: TopicRole, records: list[InboundRecord]) -> ApplyBatch:
            ahead = await asyncio.to_thread(self.sink.decode, records)
            self.prepared += 1
            if self.calls >= FAILING:
                self.next_prepared.set()

            async def apply_ahead(role: TopicRole, records: list[InboundRecord]) -> None:
                await apply(role, records, ahead)

            return apply_ahead

        self.consumer = BatchedConsumer(
            access,
            {topic: TopicRole.PODGROUPS},
            apply,
            ConsumerOptions(group, batch_max_events=BATCH, batch_within_seconds=0.05),
            prepare=prepare,
        )


def _sink(engine: Any, topic: str, group: str) -> BatchSink:
    return BatchSink(
        engine,
        consumer_group=group,
        topic_roles={topic: "podgroups"},
        dead_letter_topic="kai.dead-letter",
        first_backoff=0.01,
        max_backoff=0.05,
    )


def _all_stored(engine: sa.Engine, topic: str, group: str) -> bool:
    stored = rows(
        engine,
        "SELECT partition, next_offset FROM minruntime_state.consumer_offsets"
        " WHERE consumer_group = :g AND topic = :t",
        g=group,
        t=topic,
    )
    per_partition = 3 * PODGROUPS // PARTITIONS
    return sorted(stored) == [(p, per_partition) for p in range(PARTITIONS)]


def _assert_once_and_in_order(engine: sa.Engine, topic: str) -> None:
    logged = rows(
        engine,
        'SELECT partition, "offset", id FROM minruntime.event_log WHERE topic = :t ORDER BY seq',
        t=topic,
    )
    per_partition = 3 * PODGROUPS // PARTITIONS
    for partition in range(PARTITIONS):
        offsets = [offset for p, offset, _ in logged if p == partition]
        assert offsets == list(range(per_partition)), f"partition {partition}: {offsets}"
    assert len({event_id for _, _, event_id in logged}) == len(logged) == 3 * PODGROUPS
    statuses = rows(
        engine,
        "SELECT status, count(*) FROM minruntime.podgroups WHERE uid LIKE 'pg-%' GROUP BY 1",
    )
    assert [count for _, count in statuses] == [PODGROUPS]
    assert len(statuses) == 1
    assert statuses[0][0] != "running"


@pytest.fixture
def access(settings: Settings, stack: StackStatus) -> KafkaAccess:
    """The local stack's broker."""
    return kafka_access(settings)


@pytest.fixture
def group(engine: sa.Engine) -> str:
    """A fresh consumer group, and the podgroups' queue applied as any other event."""
    name = f"test-pipelined-{uuid.uuid4().hex[:8]}"
    record = InboundRecord("kai.queues", 0, 0, b"q", wire(queue("q")), None)
    with engine.begin() as conn:
        apply_batch(conn, [record], consumer_group=name)
    return name


async def _run_until_stored(pipeline: Pipeline, engine: sa.Engine, topic: str, group: str) -> None:
    """Run the pipeline's consumer until every record of ``topic`` is stored, then stop it."""
    run = asyncio.create_task(pipeline.consumer.run())
    try:
        await until(lambda: _all_stored(engine, topic, group), "every record stored", 90.0)
    finally:
        await pipeline.consumer.stop()
        await run


def test_a_crash_in_batch_n_s_write_with_n_plus_1_decoded_loses_and_repeats_nothing(
    access: KafkaAccess, engine: sa.Engine, group: str
) -> None:
    async def scenario() -> None:
        async with _topic(access) as topic:
            crashed = asyncio.Event()
            in_flight: list[int] = []

            async def crash(records: list[InboundRecord], ahead: DecodedAhead | None) -> None:
                # The process dies in the middle of batch N's transaction: everything it wrote
                # is rolled back (as PostgreSQL does for a lost session), nothing more happens.
                def write_then_die() -> None:
                    with engine.connect() as conn, conn.begin() as transaction:
                        apply_batch(
                            conn,
                            records,
                            consumer_group=group,
                            topic_roles={topic: "podgroups"},
                            ahead=ahead,
                        )
                        transaction.rollback()

                await asyncio.to_thread(write_then_die)
                in_flight.append(len(records))
                crashed.set()
                await asyncio.Event().wait()  # dead: never returns

            first = Pipeline(access, topic, group, _sink(engine, topic, group))
            first.failing = crash
            run = asyncio.create_task(first.consumer.run())
            await asyncio.wait_for(crashed.wait(), 90)
            assert first.prepared >= 1
            assert first.next_prepared.is_set()
            applied_before = first.outcome.applied
            assert applied_before >= FAILING - 1  # batches 1 and 2 (of one record at least)
            # The lag counts the batch decoded ahead: it is not applied yet.
            behind = first.consumer.behind(topic, range(PARTITIONS))
            assert sum(behind.values()) == 3 * PODGROUPS - applied_before - in_flight[0]
            await first.consumer.stop(wait_seconds=0.5)  # the dead process's batch never ends
            await run

            # The restart: the same group reads on from Kafka's committed offsets.
            second = Pipeline(access, topic, group, _sink(engine, topic, group))
            await _run_until_stored(second, engine, topic, group)
            assert second.outcome.applied == 3 * PODGROUPS - applied_before
            assert second.outcome.dead_lettered == 0
            _assert_once_and_in_order(engine, topic)

    asyncio.run(scenario())


class _FailsAtCommitOnce:
    """An engine whose next transaction writes everything, then loses its connection at the
    commit (rolled back, a transient error): what the sink retries."""

    def __init__(self, engine: sa.Engine) -> None:
        self.engine = engine
        self.armed = False
        self.failed = 0

    @contextlib.contextmanager
    def begin(self) -> Iterator[sa.Connection]:
        with self.engine.connect() as conn:
            transaction = conn.begin()
            try:
                yield conn
            except BaseException:
                transaction.rollback()
                raise
            if self.armed:
                self.armed = False
                self.failed += 1
                transaction.rollback()
                raise psycopg.OperationalError("the connection was lost at the commit (test)")
            transaction.commit()


def test_a_failed_write_of_batch_n_is_retried_before_the_decoded_n_plus_1_applies(
    access: KafkaAccess, engine: sa.Engine, group: str
) -> None:
    async def scenario() -> None:
        async with _topic(access) as topic:
            failing_engine = _FailsAtCommitOnce(engine)
            sink = _sink(failing_engine, topic, group)
            pipeline = Pipeline(access, topic, group, sink)

            async def fail_once(records: list[InboundRecord], ahead: DecodedAhead | None) -> None:
                failing_engine.armed = True
                pipeline.outcome.add(await asyncio.to_thread(sink, records, None, ahead))

            pipeline.failing = fail_once
            await _run_until_stored(pipeline, engine, topic, group)
            assert failing_engine.failed == 1
            assert pipeline.next_prepared.is_set()
            assert pipeline.outcome.applied == 3 * PODGROUPS
            assert pipeline.outcome.skipped_offsets == pipeline.outcome.duplicate_ids == 0
            _assert_once_and_in_order(engine, topic)

    asyncio.run(scenario())


def test_the_next_batch_is_decoded_while_the_current_one_is_written(
    access: KafkaAccess, engine: sa.Engine, group: str
) -> None:
    """The overlap itself: batch N+1's decoding starts before batch N's write ends, and
    batches still apply one at a time, in order."""

    async def scenario() -> None:
        async with _topic(access) as topic:
            sink = _sink(engine, topic, group)
            pipeline = Pipeline(access, topic, group, sink)
            events: list[str] = []
            writing = 0
            overlapping: list[bool] = []

            def write(records: list[InboundRecord], ahead: DecodedAhead | None) -> BatchOutcome:
                nonlocal writing
                writing += 1
                events.append(f"write {records[0].partition}@{records[0].offset}")
                try:
                    time.sleep(0.05)  # a slow PostgreSQL
                    return sink(records, None, ahead)
                finally:
                    writing -= 1

            decode = sink.decode

            def decoding(records: list[InboundRecord]) -> DecodedAhead:
                overlapping.append(writing > 0)
                return decode(records)

            pipeline.sink = _Recording(write, decoding)  # type: ignore[assignment]
            await _run_until_stored(pipeline, engine, topic, group)
            # Decoded ahead only while a batch is being written (a batch of an idle lane is
            # decoded by its apply); the write sleeps, so most decodes start inside it.
            assert sum(overlapping) >= 2, overlapping
            assert pipeline.outcome.applied == 3 * PODGROUPS
            _assert_once_and_in_order(engine, topic)

    asyncio.run(scenario())


class _Recording:
    def __init__(self, write: Callable[..., BatchOutcome], decode: Callable[..., Any]) -> None:
        self._write = write
        self.decode = decode

    def __call__(self, records: list[InboundRecord], _lives: Any, ahead: Any) -> BatchOutcome:
        return self._write(records, ahead)


def test_a_batch_decoded_ahead_applies_as_one_decoded_in_its_transaction(
    engine: sa.Engine,
) -> None:
    """Decoding ahead decides nothing: records at offsets already applied are skipped (their
    rejection too: no dead letter twice), a record not decoded ahead is decoded in the batch."""
    feed = Feed(engine)
    records = feed.records(
        queue("a"), raw("kai.queues", b"not json"), queue("b"), raw("kai.queues", b"{}")
    )
    first = feed.apply(records[:2], ahead=decode_ahead(records[:2], ROLES))
    assert (first.applied, first.dead_lettered) == (1, 1)
    again = feed.apply(records, ahead=decode_ahead(records[:3], ROLES))  # the last: not ahead
    assert (again.skipped_offsets, again.applied, again.dead_lettered) == (2, 1, 1)
    assert rows(engine, "SELECT name FROM minruntime.queues ORDER BY name") == [("a",), ("b",)]
    assert len(rows(engine, "SELECT kind FROM minruntime.dead_letters")) == 2
