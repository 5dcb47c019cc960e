"""The processor's fetches are paced while records flow and long-poll when idle (issue 30,
part 5; stream/fetch_pace.py), against the real broker and the installed aiokafka."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from minruntime.ingest import InboundRecord
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.stream.consumer import BatchedConsumer, ConsumerOptions
from minruntime.stream.fetch_pace import LIVE_MIN_BYTES
from minruntime.topic_admin import TopicRole
from minruntime_dev.stack import StackStatus
from tests.integration.helpers import consuming, idempotent_producer, new_topic, until

pytestmark = pytest.mark.stack

RECORDS = 40
# aiokafka's (and Kafka's) defaults: an idle consumer's long poll.
IDLE_ASKS = (1, 500)


@pytest.mark.parametrize("linger_ms", [5, 0])
def test_a_live_stream_is_fetched_paced_and_an_idle_one_long_polls(
    settings: Settings, stack: StackStatus, linger_ms: int
) -> None:
    access = kafka_access(settings)

    async def scenario() -> None:
        topic = await new_topic(access, TopicRole.NODES, "pace")
        producer = await idempotent_producer(access)
        applied: list[int] = []
        asked_while_applying: set[tuple[int, int] | None] = set()
        consumer: BatchedConsumer

        async def apply(role: TopicRole, records: list[InboundRecord]) -> None:
            pace = consumer.fetch_pace
            asked_while_applying.add(None if pace is None else pace.asks())
            applied.extend(record.offset for record in records)

        consumer = BatchedConsumer(
            access,
            {topic: TopicRole.NODES},
            apply,
            ConsumerOptions(
                f"test-pace-{uuid.uuid4().hex[:8]}",
                batch_max_events=1000,
                batch_within_seconds=0.05,
                fetch_linger_ms=linger_ms,
            ),
        )
        async with consuming(access, consumer, producer, topic):
            await until(lambda: consumer.fetch_pace is not None, "the consumer fetching")
            pace = consumer.fetch_pace
            assert pace is not None
            assert pace.active is (linger_ms > 0)
            assert pace.asks() == (IDLE_ASKS if linger_ms else None)
            # A stream: one record every 20 ms, each sent alone.
            for i in range(RECORDS):
                await producer.send_and_wait(topic, b"{}", key=f"k{i}".encode(), partition=0)
                await asyncio.sleep(0.02)
            await until(lambda: len(applied) == RECORDS, "every record applied")
            # Idle again: the next fetch is a long poll with the client's own settings.
            await until(lambda: not pace.live, "the consumer idle")
            assert pace.asks() == (IDLE_ASKS if linger_ms else None)
        assert applied == list(range(RECORDS))
        if linger_ms:
            # While the stream flowed, fetches asked the broker to wait for more.
            assert (LIVE_MIN_BYTES, linger_ms) in asked_while_applying
        else:
            assert asked_while_applying == {None}

    asyncio.run(scenario())
