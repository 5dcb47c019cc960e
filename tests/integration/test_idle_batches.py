"""A lane applies what it holds at once when nothing more is coming (issue 30, part 5).

``batch_within_seconds`` gathers records that are already on their way; on an idle consumer
(the fetcher at the end of every partition) a small batch no longer waits for it. Here the
window is an hour: the records are applied long before it, and records that arrive while
more is still to be fetched are still gathered into full batches.
"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from minruntime.ingest import InboundRecord
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.stream.consumer import BatchedConsumer, ConsumerOptions
from minruntime.topic_admin import TopicRole
from minruntime_dev.stack import StackStatus
from tests.integration.helpers import consuming, idempotent_producer, new_topic, until

pytestmark = pytest.mark.stack

AN_HOUR = 3600.0


def test_an_idle_consumer_applies_a_small_batch_without_waiting_for_the_window(
    settings: Settings, stack: StackStatus
) -> None:
    access = kafka_access(settings)

    async def scenario() -> None:
        topic = await new_topic(access, TopicRole.NODES, "idle")
        producer = await idempotent_producer(access)
        batches: list[list[int]] = []

        async def apply(role: TopicRole, records: list[InboundRecord]) -> None:
            batches.append([record.offset for record in records])

        consumer = BatchedConsumer(
            access,
            {topic: TopicRole.NODES},
            apply,
            ConsumerOptions(
                f"test-idle-{uuid.uuid4().hex[:8]}",
                batch_max_events=1000,
                batch_within_seconds=AN_HOUR,
            ),
        )
        async with consuming(access, consumer, producer, topic):
            for i in range(3):
                await producer.send_and_wait(topic, b"{}", key=f"k{i}".encode(), partition=0)
            # Well within the hour-long window: nothing else was coming.
            await until(lambda: sum(map(len, batches)) == 3, "the three records applied")
            await producer.send_and_wait(topic, b"{}", key=b"k3", partition=0)
            await until(lambda: sum(map(len, batches)) == 4, "the fourth record applied")
        assert [offset for batch in batches for offset in batch] == [0, 1, 2, 3]

    asyncio.run(scenario())
