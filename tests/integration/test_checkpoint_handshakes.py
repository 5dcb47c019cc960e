"""``requeue.checkpoint`` through Kafka into PostgreSQL: the evictor's record, as the evictor
encodes it, read back from a real topic and applied by the processor's batch code, twice (an
evictor restarted after sending it): one row in ``minruntime.checkpoint_handshakes`` (the
reader role may read it), ``explain`` shows the wait and its end, ``audit`` the event."""

from __future__ import annotations

import asyncio
import uuid
from datetime import timedelta

import pytest
import sqlalchemy as sa
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from minruntime.audit.explain import explain
from minruntime.audit.explain_model import CheckpointHandshake, handshake_text
from minruntime.audit.timeline import podgroup_story
from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
)
from minruntime.core.timestamps import format_rfc3339
from minruntime.events import EventType, RequeueCheckpointData, encode_event, new_event
from minruntime.ingest import InboundRecord
from minruntime.kafka_access import kafka_access, start_client
from minruntime.settings import Settings
from minruntime.store.shadows import LIVE as LIVE_SHADOW
from minruntime.store.unit import ReadUnit, Units
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, ensure_topics
from minruntime_dev.stack import StackStatus
from tests.cloudevents import T0, allocated, annotated, submitted
from tests.integration.helpers import Feed, kafka_admin, rows

pytestmark = pytest.mark.stack

REQUESTED = T0 + timedelta(minutes=10)
SAVED = REQUESTED + timedelta(seconds=40)
ENDED = SAVED + timedelta(seconds=1)


def through_kafka(settings: Settings, values: list[bytes]) -> list[InboundRecord]:
    """Produce ``values`` to a fresh podgroups-role topic and read them back (as the
    processor reads kai.podgroups: the records keep the podgroups topic's name)."""
    access = kafka_access(settings)
    topic = f"test.checkpoint.{uuid.uuid4().hex[:8]}"

    async def roundtrip() -> list[InboundRecord]:
        await ensure_topics(access, [TopicSpec(TopicRole.PODGROUPS, topic, 1, FOREVER)])
        producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
        await start_client(producer, access)
        try:
            for value in values:
                await producer.send_and_wait(topic, value, key=b"x")
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(
            topic, **access.client_kwargs(), auto_offset_reset="earliest", group_id=None
        )
        await start_client(consumer, access)
        read: list[InboundRecord] = []
        try:
            while len(read) < len(values):
                batches = await asyncio.wait_for(consumer.getmany(timeout_ms=500), 30)
                for records in batches.values():
                    read.extend(
                        InboundRecord(
                            settings.topic_podgroups,
                            0,
                            r.offset,
                            r.key,
                            r.value,
                            headers=tuple(r.headers),
                        )
                        for r in records
                    )
        finally:
            await consumer.stop()
            async with kafka_admin(access) as admin:
                await admin.delete_topics([topic])
        return read

    return asyncio.run(roundtrip())


def checkpoint_value() -> bytes:
    """The evictor's event, encoded as the evictor encodes it."""
    return encode_event(
        new_event(
            str(EventType.REQUEUE_CHECKPOINT),
            RequeueCheckpointData(
                uid="x",
                decision="d-1",
                outcome="acknowledged",
                requested_at=REQUESTED,
                grace=timedelta(minutes=5),
                ended_at=ENDED,
                checkpointed_at=SAVED,
            ),
            time=ENDED,
            source="minruntime/kube-evictor",
            id="d-1.checkpoint",
        )
    )


def test_a_handshake_through_kafka_is_stored_once_and_explained(
    engine: sa.Engine,
    reader: sa.Engine,
    feed: Feed,
    settings: Settings,
    stack: StackStatus,
) -> None:
    feed.send(
        submitted("x", "q", pods=2, annotations={CHECKPOINT_GRACE_ANNOTATION: "5m"}),
        allocated("x", 2, time=T0),
        annotated(
            "x",
            {CHECKPOINT_REQUESTED_AT_ANNOTATION: format_rfc3339(REQUESTED)},
            time=REQUESTED,
        ),
    )
    with engine.connect() as conn:
        waiting = explain(ReadUnit(conn, LIVE_SHADOW), "x", REQUESTED + timedelta(seconds=5), None)
    assert waiting.checkpoint == CheckpointHandshake(REQUESTED, timedelta(minutes=5))
    assert handshake_text(waiting.checkpoint).startswith(
        f"waiting since {format_rfc3339(REQUESTED)}"
    )

    value = checkpoint_value()
    records = through_kafka(settings, [value, value])  # sent again by a restarted evictor
    next_offset = feed.offsets[settings.topic_podgroups]  # after the records fed above
    first, again = (record._replace(offset=next_offset + i) for i, record in enumerate(records))
    assert feed.apply([first]).applied == 1
    assert feed.apply([again]).duplicate_ids == 1  # the same (source, id): applied once
    expected = [("x", "d-1", "acknowledged", REQUESTED, timedelta(minutes=5), ENDED, SAVED)]
    query = (
        "SELECT uid, decision_id, outcome, requested_at, grace, ended_at, checkpointed_at"
        " FROM minruntime.checkpoint_handshakes"
    )
    assert rows(engine, query) == expected
    assert rows(reader, query) == expected  # the read role's view
    assert rows(reader, "SELECT waited FROM minruntime.checkpoint_handshakes") == [
        (ENDED - REQUESTED,)
    ]

    with engine.connect() as conn:
        ended = explain(ReadUnit(conn, LIVE_SHADOW), "x", ENDED + timedelta(seconds=5), None)
        during = explain(ReadUnit(conn, LIVE_SHADOW), "x", REQUESTED + timedelta(seconds=5), None)
    assert ended.checkpoint == CheckpointHandshake(
        REQUESTED, timedelta(minutes=5), "acknowledged", ENDED, SAVED
    )
    assert handshake_text(ended.checkpoint).startswith("acknowledged after 41.0 s")
    assert during.checkpoint is not None
    assert during.checkpoint.outcome is None  # as of an instant inside the wait

    [row] = [
        row for row in podgroup_story(Units(engine), "x").rows if row.type == "requeue.checkpoint"
    ]
    assert row.kind == "checkpoint"
    assert row.summary.startswith("checkpoint acknowledged after 41.0 s (checkpointed at")
