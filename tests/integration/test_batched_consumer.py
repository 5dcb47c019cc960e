"""The processor's batched consumer against the real broker: lanes, backpressure, rebalances.

``BatchedConsumer`` hands each batch to an ``apply`` callable; here that callable records
what it was given (and can be held), so the tests see exactly which records the consumer
hands on, in which order, and what it commits to Kafka. The sink behind it in the processor
is covered by the e2e tests.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from aiokafka import AIOKafkaProducer

from minruntime.ingest import InboundRecord
from minruntime.kafka_access import KafkaAccess, kafka_access, start_client
from minruntime.settings import Settings
from minruntime.stream.consumer import BatchedConsumer, ConsumerOptions
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, ensure_topics
from minruntime_dev.stack import StackStatus
from tests.integration.helpers import kafka_admin, until

pytestmark = pytest.mark.stack

PER_PARTITION = 40


@asynccontextmanager
async def _topics(
    access: KafkaAccess, partitions: int, *roles: TopicRole
) -> AsyncIterator[list[str]]:
    """Fresh topics (one per role) with PER_PARTITION records in each partition; deleted after."""
    names = [f"test.lanes.{role.value}.{uuid.uuid4().hex[:8]}" for role in roles]
    await ensure_topics(
        access,
        [
            TopicSpec(role, name, partitions, FOREVER)
            for role, name in zip(roles, names, strict=True)
        ],
    )
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    await start_client(producer, access)
    try:
        for name in names:
            for partition in range(partitions):
                for i in range(PER_PARTITION):
                    await producer.send(name, b"{}", key=f"k{i}".encode(), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()
    try:
        yield names
    finally:
        async with kafka_admin(access) as admin:
            await admin.delete_topics(names)


async def _committed(access: KafkaAccess, group: str) -> dict[tuple[str, int], int]:
    async with kafka_admin(access) as admin:
        offsets: dict[Any, Any] = await admin.list_consumer_group_offsets(group)
    return {(tp.topic, tp.partition): meta.offset for tp, meta in offsets.items()}


def _coordinates(records: list[InboundRecord]) -> list[tuple[str, int, int]]:
    return [(record.topic, record.partition, record.offset) for record in records]


def _complete(applied: list[tuple[str, int, int]], topic: str, partitions: int) -> bool:
    return {c for c in applied if c[0] == topic} == {
        (topic, p, o) for p in range(partitions) for o in range(PER_PARTITION)
    }


def _options(group: str) -> ConsumerOptions:
    return ConsumerOptions(group, batch_max_events=5, batch_within_seconds=0.05, lane_records=20)


@pytest.fixture
def access(settings: Settings, stack: StackStatus) -> KafkaAccess:
    return kafka_access(settings)


@pytest.fixture
def group() -> str:
    """A fresh consumer group's name."""
    return f"test-lanes-{uuid.uuid4().hex[:8]}"


def test_a_held_topic_holds_only_its_own_lane_and_commits_nothing_past_it(
    access: KafkaAccess, group: str
) -> None:

    async def scenario() -> None:
        async with _topics(access, 2, TopicRole.QUEUES, TopicRole.NODES) as (held, flowing):
            release = asyncio.Event()
            applied: list[tuple[str, int, int]] = []
            in_order: list[bool] = []

            async def apply(role: TopicRole, records: list[InboundRecord]) -> None:
                if records[0].topic == held:
                    await release.wait()  # as the topic guard holds a refused topic's batch
                in_order.append(all(r.topic == records[0].topic for r in records))
                applied.extend(_coordinates(records))

            consumer = BatchedConsumer(
                access,
                {held: TopicRole.QUEUES, flowing: TopicRole.NODES},
                apply,
                _options(group),
            )
            run = asyncio.create_task(consumer.run())
            try:
                await until(lambda: _complete(applied, flowing, 2), "the other topic")
                assert [c for c in applied if c[0] == held] == []
                # The held lane stops fetching once full: a bounded buffer, not the topic.
                await until(lambda: consumer.buffered(held) >= 20, "the held lane to fill")
                await asyncio.sleep(0.5)
                assert consumer.buffered(held) < 20 + 5
                committed = await _committed(access, group)
                assert committed[(flowing, 0)] == committed[(flowing, 1)] == PER_PARTITION
                # Nothing of the held topic is committed to Kafka before it is applied.
                assert all(committed.get((held, p), -1) <= 0 for p in range(2))
                release.set()
                await until(lambda: _complete(applied, held, 2), "the held topic")
            finally:
                await consumer.stop()
                await run
            assert all(in_order)
            for partition in range(2):  # each partition's records in order, once
                offsets = [o for t, p, o in applied if (t, p) == (held, partition)]
                assert offsets == list(range(PER_PARTITION))
            committed = await _committed(access, group)
            assert committed[(held, 0)] == committed[(held, 1)] == PER_PARTITION

    asyncio.run(scenario())


def test_lanes_of_one_topic_apply_at_once_each_partition_in_order_once(
    access: KafkaAccess, group: str
) -> None:
    """Two lanes per topic: the even partitions' lane is held until the odd partitions' lane
    has applied everything of its own (one lane would wait for ever), then both finish."""

    async def scenario() -> None:
        async with _topics(access, 4, TopicRole.PODGROUPS) as (topic,):
            applied: list[tuple[str, int, int]] = []
            odd_done = asyncio.Event()
            batches: list[set[int]] = []
            waited_in_vain: list[bool] = []

            async def apply(role: TopicRole, records: list[InboundRecord]) -> None:
                partitions = {record.partition % 2 for record in records}
                batches.append(partitions)
                if partitions == {0}:
                    try:
                        await asyncio.wait_for(odd_done.wait(), 10)
                    except TimeoutError:
                        waited_in_vain.append(True)
                applied.extend(_coordinates(records))
                odd = [(t, p, o) for t, p, o in applied if p % 2]
                if len(odd) == 2 * PER_PARTITION:
                    odd_done.set()

            options = ConsumerOptions(
                group, batch_max_events=5, batch_within_seconds=0.05, lanes_per_topic=2
            )
            consumer = BatchedConsumer(access, {topic: TopicRole.PODGROUPS}, apply, options)
            run = asyncio.create_task(consumer.run())
            try:
                await until(lambda: _complete(applied, topic, 4), "every record to be applied")
            finally:
                await consumer.stop()
                await run
            assert not waited_in_vain  # the odd lane went on while the even one was held
            # A batch holds the partitions of one lane only.
            assert batches
            assert all(len(partitions) == 1 for partitions in batches)
            for partition in range(4):  # each partition's records in order, once
                offsets = [o for t, p, o in applied if p == partition]
                assert offsets == list(range(PER_PARTITION))
            committed = await _committed(access, group)
            assert all(committed[(topic, p)] == PER_PARTITION for p in range(4))

    asyncio.run(scenario())


def test_records_buffered_for_revoked_partitions_are_not_applied_after_the_rebalance(
    access: KafkaAccess, group: str
) -> None:

    async def scenario() -> None:
        async with _topics(access, 4, TopicRole.PODGROUPS) as (topic,):
            release = asyncio.Event()
            first: list[tuple[str, int, int]] = []
            later: list[tuple[str, int, int]] = []  # what the first instance applies after it
            other: list[tuple[str, int, int]] = []

            async def apply_first(role: TopicRole, records: list[InboundRecord]) -> None:
                if not first:
                    first.extend(_coordinates(records))
                    await release.wait()  # in flight while the group rebalances
                    return
                later.extend(_coordinates(records))

            async def apply_other(role: TopicRole, records: list[InboundRecord]) -> None:
                other.extend(_coordinates(records))

            one = BatchedConsumer(
                access, {topic: TopicRole.PODGROUPS}, apply_first, _options(group)
            )
            two = BatchedConsumer(
                access, {topic: TopicRole.PODGROUPS}, apply_other, _options(group)
            )
            runs = [asyncio.create_task(one.run())]
            try:
                await until(lambda: one.buffered(topic) >= 20, "the first instance's lane to fill")
                runs.append(asyncio.create_task(two.run()))
                await until(lambda: one.problem() is not None, "the rebalance to begin")
                release.set()  # the batch in flight ends; the revocation waited for it
                await until(
                    lambda: (
                        _complete(first + later + other, topic, 4)
                        and one.problem() is None
                        and two.problem() is None
                    ),
                    "every record to be applied",
                )
                owned = {p for t, p in one.owned()}
                assert 0 < len(owned) < 4
                # What was buffered for the partitions that moved is never applied by the
                # instance that lost them: everything it applied after the batch in flight
                # comes from partitions it owns now.
                assert {p for _, p, _ in later} <= owned
                # And the other instance applied the rest, nothing of the first instance's
                # except (at most, if the revoking commit failed) the batch that was in flight.
                assert (set(first) | set(later)) & set(other) <= set(first)
            finally:
                for consumer in (one, two):
                    await consumer.stop()
                await asyncio.gather(*runs)

    asyncio.run(scenario())


def test_the_consumer_joins_with_its_static_instance_id(access: KafkaAccess, group: str) -> None:

    async def scenario() -> None:
        async with _topics(access, 1, TopicRole.NODES) as (topic,):
            applied: list[tuple[str, int, int]] = []

            async def apply(role: TopicRole, records: list[InboundRecord]) -> None:
                applied.extend(_coordinates(records))

            options = ConsumerOptions(
                group, batch_max_events=50, batch_within_seconds=0.05, group_instance_id="lane-1"
            )
            consumer = BatchedConsumer(access, {topic: TopicRole.NODES}, apply, options)
            run = asyncio.create_task(consumer.run())
            try:
                await until(lambda: _complete(applied, topic, 1), "the topic")
                async with kafka_admin(access) as admin:
                    (described,) = await admin.describe_consumer_groups([group])
                members = described.to_object()["groups"][0]["members"]
                # One member, the static one: its member id is the instance id's (KIP-345).
                assert len(members) == 1
                assert members[0]["member_id"].startswith("lane-1-")
                assert consumer.owned() == {(TopicRole.NODES, 0)}
            finally:
                await consumer.stop()
                await run

    asyncio.run(scenario())


def test_assigned_partitions_are_reported_by_role(access: KafkaAccess, group: str) -> None:
    # The processor's metrics drop the lag of partitions it no longer owns (on_assigned).
    reported: list[set[tuple[TopicRole, int]]] = []

    async def scenario() -> None:
        async with _topics(access, 3, TopicRole.NOMINATIONS) as (topic,):

            async def apply(role: TopicRole, records: list[InboundRecord]) -> None:
                return None

            consumer = BatchedConsumer(
                access,
                {topic: TopicRole.NOMINATIONS},
                apply,
                _options(group),
                on_assigned=reported.append,
            )
            run = asyncio.create_task(consumer.run())
            try:
                await until(lambda: bool(reported), "the assignment")
            finally:
                await consumer.stop()
                await run

    asyncio.run(scenario())
    assert reported[-1] == {(TopicRole.NOMINATIONS, p) for p in range(3)}
