"""The bridge's records sent a batch at a time (``cluster.sending``) arrive as aiokafka's
per-record ``send`` puts them: each in its key's partition (the default partitioner's),
in order within a partition, with its key, value and headers, in one transaction; a batch
too small for the transaction is followed by the next."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from minruntime.cluster.partitioner import KeyPartitioner
from minruntime.cluster.sending import KafkaRecord, send_records
from minruntime.kafka_access import kafka_access, start_client
from minruntime.settings import Settings
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, ensure_topics
from minruntime_dev.stack import StackStatus
from tests.integration.helpers import kafka_admin

pytestmark = pytest.mark.stack


def test_records_sent_in_batches_land_as_the_default_partitioner_puts_them(
    settings: Settings, stack: StackStatus
) -> None:
    access = kafka_access(settings)
    suffix = uuid.uuid4().hex[:8]
    events, ledger = f"test.sending.events.{suffix}", f"test.sending.ledger.{suffix}"
    records: list[KafkaRecord] = []
    for i in range(3_000):  # gangs of 5 events with one key, and a ledger record each
        key = f"podgroup-{i // 5:05d}".encode()
        value = (f'{{"n":{i},"pad":"' + "x" * (i % 700) + '"}').encode()
        records.append((events, key, value, [("id", str(i).encode()), ("who", b"me")]))
        records.append((ledger, f"pod/{i}".encode(), None if i % 97 == 0 else value, []))

    async def scenario() -> None:
        await ensure_topics(
            access,
            [
                TopicSpec(TopicRole.PODGROUPS, events, 5, FOREVER),
                TopicSpec(TopicRole.LEDGER, ledger, 1, FOREVER),
            ],
        )
        producer = AIOKafkaProducer(
            **access.client_kwargs(),
            transactional_id=f"test-sending-{suffix}",
            max_batch_size=16 * 1024,  # many batches a partition
        )
        await start_client(producer, access)
        try:
            async with producer.transaction():
                await send_records(producer, records, KeyPartitioner())
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            **access.client_kwargs(), isolation_level="read_committed", enable_auto_commit=False
        )
        await start_client(consumer, access)
        try:
            partitions = [TopicPartition(events, p) for p in range(5)]
            partitions.append(TopicPartition(ledger, 0))
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            got: dict[TopicPartition, list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]]
            got = {tp: [] for tp in partitions}
            while sum(map(len, got.values())) < len(records):
                batches = await consumer.getmany(timeout_ms=2000)
                assert batches, "records missing"
                for tp, messages in batches.items():
                    got[tp] += [(m.key, m.value, list(m.headers)) for m in messages]
        finally:
            await consumer.stop()
            async with kafka_admin(access) as admin:
                await admin.delete_topics([events, ledger])
        default = DefaultPartitioner()
        expected: dict[TopicPartition, list[tuple[bytes, bytes | None, list[tuple[str, bytes]]]]]
        expected = {tp: [] for tp in partitions}
        for topic, key, value, headers in records:
            count = 5 if topic == events else 1
            partition = default(key, list(range(count)), list(range(count)))
            expected[TopicPartition(topic, partition)].append((key, value, headers))
        assert got == expected
        assert sum(1 for tp in partitions[:5] if got[tp]) > 1  # spread over partitions

    asyncio.run(scenario())
