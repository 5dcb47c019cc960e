"""Two processor instances on one partition: the zombie's batch is a no-op, nothing lost.

When a consumer-group rebalance moves a partition while its old owner still has a batch of it
in flight (a "zombie": stalled past its session, then resumed), the two instances apply
overlapping batches of one partition. ``apply_batch`` locks the partition's offset row in the
batch's transaction (``store.offsets.lock_offsets``), so the second transaction waits for the
first and then skips every record the first one stored. These tests run the two transactions
on two connections against the real database, in each order, and with the first one's
process frozen in the middle of its transaction (the processor's sink bounds how long a
transaction may sit idle, so a frozen instance cannot hold its partitions' rows for good).
The last one runs such a late batch through the topic guard, against a real Kafka topic: the
stale watermark the late instance's fetcher knew is not taken for a truncated log.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from minruntime.core.topic_life import StoredOffset, TopicLife
from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch, isolation
from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import Settings
from minruntime.store.engine import bounded_idle_transactions
from minruntime.store.offsets import stored_offsets
from minruntime.store.schema import LIVE
from minruntime.stream.sink import BatchSink
from minruntime.stream.topic_guard import TopicGuard
from minruntime.topic_admin import (
    TopicRole,
    describe_topics,
    input_topic_roles,
)
from tests.cloudevents import allocated, queue, submitted
from tests.cloudevents import message as as_message
from tests.e2e.harness import wait_for
from tests.integration.helpers import (
    GROUP,
    Feed,
    Other,
    idempotent_producer,
    kafka_admin,
    new_topic,
    rows,
    scalar,
    waiting_for_a_lock,
)

OFFSET = (
    "SELECT next_offset FROM minruntime_state.consumer_offsets"
    " WHERE consumer_group = :g AND topic = 'kai.podgroups' AND partition = 0"
)


def _overlapping(
    engine: sa.Engine, held: Sequence[InboundRecord], waiting: Sequence[InboundRecord]
) -> tuple[BatchOutcome, BatchOutcome]:
    """Apply ``held`` in an open transaction, start ``waiting`` on another connection, commit.

    Returns both outcomes; the second batch is seen waiting for the offsets row lock first.
    """
    with engine.connect() as conn, conn.begin() as transaction:
        first = apply_batch(conn, held, consumer_group=GROUP)
        other = Other(engine, waiting)
        wait_for(
            lambda: waiting_for_a_lock(engine),
            10,
            "the other instance's batch to wait for the offsets row lock",
        )
        transaction.commit()
    return first, other.result()


def _lifecycles(feed: Feed, count: int) -> list[InboundRecord]:
    messages = []
    for i in range(count):
        messages += [submitted(f"u{i}", "a", 2), allocated(f"u{i}", 2)]
    return feed.records(*messages)


def _logged(engine: sa.Engine) -> list[tuple[int, int]]:
    """(offset, how many times) for every offset in the event log."""
    logged = rows(
        engine, 'SELECT "offset", count(*) FROM minruntime.event_log GROUP BY 1 ORDER BY 1'
    )
    return [(row[0], row[1]) for row in logged]


def test_a_batch_in_flight_holds_the_new_owner_which_then_applies_only_what_follows(
    engine: sa.Engine,
) -> None:
    records = _lifecycles(Feed(engine), 10)  # offsets 0-19 of partition 0
    # The old owner's batch is in flight; the new owner read the partition from an older
    # Kafka commit, so its batch (5-19) overlaps.
    first, second = _overlapping(engine, records[:12], records[5:])
    assert (first.applied, first.skipped_offsets) == (12, 0)
    assert (second.applied, second.skipped_offsets, second.duplicate_ids) == (8, 7, 0)
    assert _logged(engine) == [(offset, 1) for offset in range(20)]
    assert scalar(engine, OFFSET, g=GROUP) == 20
    assert scalar(engine, "SELECT count(*) FROM minruntime.podgroups") == 10
    assert scalar(engine, "SELECT count(*) FROM minruntime.dead_letters") == 0


def test_a_zombie_batch_that_commits_last_applies_nothing_and_lowers_no_offset(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    records = _lifecycles(feed, 10)
    # The new owner applies the partition; the zombie resumes with the batch it fetched
    # before the rebalance and waits for the owner's transaction.
    applied, stale = _overlapping(engine, records, records[:6])
    assert applied.applied == 20
    assert (stale.applied, stale.skipped_offsets, stale.duplicate_ids) == (0, 6, 0)
    assert stale.next_offsets == {("kai.podgroups", 0): 20}
    assert _logged(engine) == [(offset, 1) for offset in range(20)]
    assert scalar(engine, OFFSET, g=GROUP) == 20
    # The partition goes on from where the owner stopped.
    more = feed.records(submitted("late", "a"))
    assert feed.apply(more).applied == 1
    assert scalar(engine, OFFSET, g=GROUP) == 21


def test_an_instance_frozen_inside_a_statement_holds_its_partitions_no_longer_either(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Frozen in the middle of a COPY (the store writes its rows with COPY): the backend waits
    for rows that never come, "active", not idle; the bound ends that statement too."""
    settings = Settings()
    records = _lifecycles(Feed(engine), 10)
    frozen, resume = threading.Event(), threading.Event()

    def freezing(conn: sa.Connection, part: Sequence[InboundRecord], **options: Any) -> Any:
        outcome = apply_batch(conn, part, **options)
        if not frozen.is_set():  # the first attempt: written, locked, inside a COPY
            driver = conn.connection.driver_connection
            assert driver is not None
            with (
                driver.cursor() as cursor,
                cursor.copy("COPY minruntime_state.dead_letter_log (topic) FROM STDIN"),
            ):
                frozen.set()
                resume.wait(60)
        return outcome

    monkeypatch.setattr(isolation, "apply_batch", freezing)

    def instance() -> BatchSink:
        return BatchSink(
            bounded_idle_transactions(engine, 1.0),
            consumer_group=GROUP,
            topic_roles=input_topic_roles(settings),
            dead_letter_topic=settings.topic_dead_letter,
            sleep=lambda _: None,
            frozen_after=1.0,
        )

    outcomes: list[BatchOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(instance()(records[:12])))
    thread.daemon = True
    thread.start()
    assert frozen.wait(30)
    # The new owner's batch waits 1 s for the offset rows, ends the frozen COPY's session and
    # applies everything on its retry.
    taken_over = instance()(records)
    assert (taken_over.applied, taken_over.skipped_offsets) == (20, 0)
    resume.set()
    thread.join(60)
    (late,) = outcomes  # its session was ended: a lost connection, retried, skipped everything
    assert (late.applied, late.skipped_offsets, late.duplicate_ids) == (0, 12, 0)
    assert _logged(engine) == [(offset, 1) for offset in range(20)]
    assert scalar(engine, OFFSET, g=GROUP) == 20


def test_a_frozen_instance_holds_its_partitions_no_longer_than_the_idle_bound(
    engine: sa.Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings()
    records = _lifecycles(Feed(engine), 10)
    frozen, resume = threading.Event(), threading.Event()

    def freezing(conn: sa.Connection, part: Sequence[InboundRecord], **options: Any) -> Any:
        outcome = apply_batch(conn, part, **options)
        if not frozen.is_set():  # the first attempt: written, locked, not committed
            frozen.set()
            resume.wait(60)
        return outcome

    monkeypatch.setattr(isolation, "apply_batch", freezing)
    sink = BatchSink(
        bounded_idle_transactions(engine, 1.0),
        consumer_group=GROUP,
        topic_roles=input_topic_roles(settings),
        dead_letter_topic=settings.topic_dead_letter,
        sleep=lambda _: None,
    )
    outcomes: list[BatchOutcome] = []
    thread = threading.Thread(target=lambda: outcomes.append(sink(records[:12])), daemon=True)
    thread.start()
    assert frozen.wait(30)
    # The partition's new owner reads it from Kafka's committed offset (here: 0). It waits for
    # the frozen transaction's locks until PostgreSQL ends that transaction, then applies all.
    taken_over = Other(engine, records).result()
    assert (taken_over.applied, taken_over.skipped_offsets) == (20, 0)
    resume.set()
    thread.join(60)
    (late,) = outcomes  # its commit failed as a lost connection; the retry skipped everything
    assert (late.applied, late.skipped_offsets, late.duplicate_ids) == (0, 12, 0)
    assert _logged(engine) == [(offset, 1) for offset in range(20)]
    assert scalar(engine, OFFSET, g=GROUP) == 20


async def _send_queues(access: KafkaAccess, topic: str, prefix: str) -> None:
    """Five queue.upserted records (``prefix-0`` .. ``prefix-4``) at the end of ``topic``."""
    producer = await idempotent_producer(access)
    try:
        for i in range(5):
            message = as_message(queue(f"{prefix}-{i}"))
            await producer.send_and_wait(topic, message.value, key=message.key)
    finally:
        await producer.stop()


@pytest.fixture
def kafka_topic(settings: Settings) -> Iterator[str]:
    """A fresh one-partition topic holding five queue.upserted records (offsets 0-4)."""
    access = kafka_access(settings)

    async def create() -> str:
        name = await new_topic(access, TopicRole.QUEUES, "shared")
        await _send_queues(access, name, "late")
        return name

    async def delete() -> None:
        async with kafka_admin(access) as admin:
            await admin.delete_topics([name])

    name = asyncio.run(create())
    try:
        yield name
    finally:
        asyncio.run(delete())


def test_a_late_batch_with_a_stale_watermark_is_applied_as_a_no_op_not_refused(
    engine: sa.Engine, settings: Settings, kafka_topic: str
) -> None:
    access = kafka_access(settings)
    (described,) = asyncio.run(describe_topics(access, [kafka_topic])).values()
    assert described.log_ends == {0: 5}
    records = [
        InboundRecord(kafka_topic, 0, offset, message.key, message.value, None)
        for offset, message in enumerate(as_message(queue(f"late-{i}")) for i in range(5))
    ]
    sink = BatchSink(
        engine,
        consumer_group=GROUP,
        topic_roles={kafka_topic: "queues"},
        dead_letter_topic=settings.topic_dead_letter,
    )
    # The instance that took the partition over applied the whole log (offsets 0-4).
    sink(records, {kafka_topic: TopicLife(described.topic_id, {0: 5})})

    async def read_stored(topic: str) -> list[StoredOffset]:
        with engine.connect() as conn:
            return stored_offsets(conn, LIVE, GROUP).get(topic, [])

    async def late_batch() -> BatchOutcome:
        guard = TopicGuard(access, CollectorRegistry(), read_stored, recheck_seconds=0.5)
        try:
            # The late instance fetched offsets 0-2 when the log ended at 3, and its fetcher
            # has not fetched since: 3 is what it knows of the partition's end.
            return await asyncio.wait_for(
                guard.apply(
                    kafka_topic,
                    "queues",
                    {0: 0},
                    lambda: {0: 3},
                    functools.partial(asyncio.to_thread, sink, records[:3]),
                ),
                30,
            )
        finally:
            assert guard.readiness() is None  # never refused
            await guard.close()

    late = asyncio.run(late_batch())
    assert (late.applied, late.skipped_offsets) == (0, 3)
    assert scalar(engine, "SELECT count(*) FROM minruntime.event_log") == 5


def test_a_batch_written_against_a_stale_topic_id_is_rolled_back_and_refused(
    engine: sa.Engine, settings: Settings, kafka_topic: str
) -> None:
    """Once a batch of a topic has committed, the next one is written while Kafka is asked for
    the topic's ID, and commits only if the answer is the ID it was written against. Here the
    topic is deleted and re-created between two batches and its new life already holds more
    records than were applied (so the log ends alone cannot tell): the second batch, written
    against the first one's ID, is rolled back at its commit and the topic refused."""
    access = kafka_access(settings)
    sink = BatchSink(
        engine,
        consumer_group=GROUP,
        topic_roles={kafka_topic: "queues"},
        dead_letter_topic=settings.topic_dead_letter,
    )
    confirms: list[object] = []

    def batch(names: Sequence[str], first: int) -> Any:
        records = [
            InboundRecord(kafka_topic, 0, first + n, message.key, message.value, None)
            for n, message in enumerate(as_message(queue(name)) for name in names)
        ]

        async def run(lives: Any, confirm: Any) -> BatchOutcome:
            confirms.append(confirm)
            return await asyncio.to_thread(sink, records, lives, confirm=confirm)

        return run

    async def read_stored(topic: str) -> list[StoredOffset]:
        with engine.connect() as conn:
            return stored_offsets(conn, LIVE, GROUP).get(topic, [])

    async def recreate() -> None:
        from aiokafka.admin import NewTopic

        async with kafka_admin(access) as admin:
            await admin.delete_topics([kafka_topic])
        for _ in range(300):
            async with kafka_admin(access) as admin:
                if kafka_topic not in await admin.list_topics():
                    break
            await asyncio.sleep(0.2)
        async with kafka_admin(access) as admin:
            await admin.create_topics([NewTopic(kafka_topic, 1, 1)])
        await _send_queues(access, kafka_topic, "second")

    async def scenario() -> None:
        guard = TopicGuard(access, CollectorRegistry(), read_stored, recheck_seconds=0.5)
        try:
            first = batch(["first-0", "first-1"], 0)
            applied = await guard.apply(kafka_topic, "queues", {0: 0}, lambda: {0: 5}, first)
            assert applied.applied == 2
            await recreate()
            second = batch(["second-2", "second-3", "second-4"], 2)
            with pytest.raises(TimeoutError):  # held: refused until re-baselined
                await asyncio.wait_for(
                    guard.apply(kafka_topic, "queues", {0: 2}, lambda: {0: 5}, second), 10
                )
            assert guard.readiness() is not None
        finally:
            await guard.close()

    asyncio.run(scenario())
    assert confirms[0] is None  # the topic's first batch waited for Kafka's answer
    assert confirms[1] is not None  # the next one was written while Kafka was asked
    assert len(confirms) > 2  # checked again at once, against Kafka's answer, and refused
    assert all(confirm is None for confirm in confirms[2:])
    assert scalar(engine, "SELECT count(*) FROM minruntime.event_log") == 2
    stored = scalar(
        engine,
        "SELECT next_offset FROM minruntime_state.consumer_offsets"
        " WHERE consumer_group = :g AND topic = :t",
        g=GROUP,
        t=kafka_topic,
    )
    assert stored == 2
