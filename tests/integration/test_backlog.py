"""The lag an operator reads is true with a transactional producer (issue 30, part 6).

The bridge produces in Kafka transactions: each one ends with a commit marker, a control
record that takes an offset but is no event. A processor that applied everything stores the
last record's offset + 1, one short of the log end; the lag it reports (the metric and
`offsets show`) must still be 0: it counts records the processor can apply, not offsets.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaProducer

from minruntime.ingest import InboundRecord
from minruntime.kafka_access import KafkaAccess, kafka_access, start_client
from minruntime.settings import Settings
from minruntime.stream.backlog import Behind, records_behind
from minruntime.stream.consumer import BatchedConsumer, ConsumerOptions
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, ensure_topics
from minruntime_dev.stack import StackStatus
from tests.integration.helpers import kafka_admin, until

pytestmark = pytest.mark.stack

PER_TRANSACTION = 5
TRANSACTIONS = 3


async def _produce_in_transactions(access: KafkaAccess, topic: str, transactions: int) -> None:
    """``transactions`` committed transactions of PER_TRANSACTION records to partition 0."""
    producer = AIOKafkaProducer(
        **access.client_kwargs(), transactional_id=f"test-backlog-{uuid.uuid4().hex[:8]}"
    )
    await start_client(producer, access)
    try:
        for t in range(transactions):
            async with producer.transaction():
                for i in range(PER_TRANSACTION):
                    await producer.send(topic, b"{}", key=f"k{t}.{i}".encode(), partition=0)
    finally:
        await producer.stop()


def test_a_partition_applied_to_its_commit_marker_is_zero_records_behind(
    settings: Settings, stack: StackStatus
) -> None:
    access = kafka_access(settings)
    topic = f"test.backlog.{uuid.uuid4().hex[:8]}"
    records = PER_TRANSACTION * TRANSACTIONS

    async def scenario() -> None:
        await ensure_topics(access, [TopicSpec(TopicRole.QUEUES, topic, 1, FOREVER)])
        try:
            await _produce_in_transactions(access, topic, TRANSACTIONS)
            applied: list[int] = []
            lags: list[dict[int, int]] = []
            consumer: BatchedConsumer | None = None

            async def apply(role: TopicRole, batch: list[InboundRecord]) -> None:
                applied.extend(record.offset for record in batch)
                assert consumer is not None
                lags.append(consumer.behind(topic, {0}))

            consumer = BatchedConsumer(
                access,
                {topic: TopicRole.QUEUES},
                apply,
                ConsumerOptions(
                    f"test-backlog-{uuid.uuid4().hex[:8]}",
                    batch_max_events=100,
                    batch_within_seconds=0.05,
                ),
            )
            run = asyncio.create_task(consumer.run())
            try:
                await until(lambda: len(applied) == records, "every record applied")
                await asyncio.sleep(0.3)
                behind_now = consumer.behind(topic, {0})
                highwater = consumer.highwaters(topic, [0])[0]
            finally:
                await consumer.stop()
                await run
            # Every transaction's marker took an offset: the last record is not the log's end.
            next_offset = applied[-1] + 1
            assert next_offset == records + TRANSACTIONS - 1
            assert highwater == next_offset + 1  # what "log end - next offset" called lag 1
            assert lags[-1] == {0: 0}  # what the lag metric is set to after the last batch
            assert behind_now == {0: 0}

            # `offsets show`'s count from the stored next offset: 0 records, not 1 offset ...
            counted = await records_behind(access, {(topic, 0): next_offset})
            assert counted == {(topic, 0): Behind(0, exact=True)}
            # ... and from the start, the records (not the markers) ...
            assert await records_behind(access, {(topic, 0): 0}) == {
                (topic, 0): Behind(records, exact=True)
            }
            # ... and past its bound an upper bound, never fewer than are there.
            bounded = (await records_behind(access, {(topic, 0): 0}, most=1))[(topic, 0)]
            assert not bounded.exact or bounded.records == records
            assert bounded.records >= records
        finally:
            async with kafka_admin(access) as admin:
                await admin.delete_topics([topic])

    asyncio.run(scenario())
