"""What tells that a broker (or a cluster) works: a produce/consume round trip through a
consumer group, and a metadata request."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

from minruntime.errors import StackError
from minruntime.kafka_access import KafkaAccess, start_client

HEALTHCHECK_TOPIC = "minruntime_dev.stack-healthcheck"


def checked_round_trip(access: KafkaAccess, timeout: float, replicas: int = 1) -> None:
    """`round_trip`, its failure one StackError line."""
    # The group coordinator is created on first use; aiokafka logs that wait as errors.
    aiokafka_log = logging.getLogger("aiokafka")
    level = aiokafka_log.level
    aiokafka_log.setLevel(logging.CRITICAL)
    try:
        asyncio.run(asyncio.wait_for(round_trip(access, replicas), timeout))
    except (TimeoutError, OSError, RuntimeError) as exc:
        raise StackError(f"Kafka is up but a produce/consume round trip failed: {exc!r}") from exc
    finally:
        aiokafka_log.setLevel(level)


async def round_trip(access: KafkaAccess, replicas: int = 1) -> None:
    """Produce a unique record and read it back through a consumer group (the health-check
    topic made with `replicas` replicas, so a cluster's check survives one broker's loss)."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        if HEALTHCHECK_TOPIC not in await admin.list_topics():
            configs = {"retention.ms": "3600000"}
            topic = NewTopic(HEALTHCHECK_TOPIC, 1, replicas, topic_configs=configs)
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics([topic])
    finally:
        await admin.close()

    marker = uuid.uuid4().hex.encode()
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    await start_client(producer, access)
    try:
        sent = await producer.send_and_wait(HEALTHCHECK_TOPIC, marker, key=b"stack")
    finally:
        await producer.stop()

    partition = TopicPartition(HEALTHCHECK_TOPIC, sent.partition)
    consumer = AIOKafkaConsumer(
        **access.client_kwargs(), group_id="minruntime-stack-healthcheck", enable_auto_commit=False
    )
    await start_client(consumer, access)
    try:
        consumer.assign([partition])
        consumer.seek(partition, sent.offset)
        record = await consumer.getone()
        if record.value != marker:
            raise RuntimeError("round trip returned a different record")
        # Committing creates __consumer_offsets, so later consumer groups start at once.
        while True:
            try:
                await consumer.commit({partition: sent.offset + 1})
                break
            except KafkaError:
                await asyncio.sleep(0.2)
    finally:
        await consumer.stop()


async def describe(access: KafkaAccess) -> int:
    """Number of brokers the cluster reports (a cheap liveness probe)."""
    cluster = await admin_request(access, lambda admin: admin.describe_cluster())
    return len(cluster.get("brokers", []))


async def admin_request(access: KafkaAccess, request: Callable[[Any], Awaitable[Any]]) -> Any:
    """What ``request`` returns of a new admin client (5 s a request), closed after."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**access.client_kwargs(), request_timeout_ms=5000)
    await start_client(admin, access)
    try:
        return await request(admin)
    finally:
        await admin.close()
