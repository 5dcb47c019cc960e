"""The processor's process: a faust app hosting the batched consumer and the outbox relay.

The input topics are read by ``stream.consumer.BatchedConsumer`` (aiokafka ``getmany``, one
lane per topic); each batch goes through the topic guard to the ``BatchSink``, which applies it
in ONE database transaction (projections + event log + consumed offsets), and only then are
Kafka's offsets committed. Records are read as raw bytes: decoding is ours, so a record that
is not JSON becomes a dead letter instead of a deserializer crash.

faust stays the process host (worker, signals, logging, the relay and health tasks), with
its own Kafka clients switched off: it never joins the processor's consumer group (two
members under one static instance id would fence each other) and has no agents, so no
record goes through its per-record stream path (docs/pipeline.md, "Why not faust's agents").
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import faust
from faust.app.base import BootStrategy

from minruntime.ingest import BatchOutcome, InboundRecord
from minruntime.ingest.batch import DecodedAhead
from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import Settings
from minruntime.stream.consumer import (
    ApplyBatch,
    AssignmentListener,
    BatchedConsumer,
    ConsumerOptions,
)
from minruntime.stream.sink import BatchSink
from minruntime.stream.topic_guard import TopicGuard
from minruntime.topic_admin import INPUT_ROLES, TopicRole, topic_names

# (role, what the batch did, seconds it took, partition -> records it can still apply)
OutcomeListener = Callable[[TopicRole, BatchOutcome, float, Mapping[int, int]], None]


def broker_credentials(access: KafkaAccess) -> faust.types.auth.CredentialsT | None:
    """The same connection settings as every aiokafka client's, as faust's credentials."""
    # Here, not in minruntime.kafka_access: the audit tools use that module and must not
    # import faust.
    context = access.ssl_context()
    if access.uses_sasl:
        return faust.SASLCredentials(
            username=access.username,
            password=access.password,
            ssl_context=context,  # faust picks SASL_SSL when a context is given
            mechanism=access.mechanism,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class _HostOnly(BootStrategy):
    """faust starts its sensors and the app's tasks; none of its Kafka clients, no web."""

    enable_kafka = False
    enable_web = False


class ProcessorApp(NamedTuple):
    """The faust host and the batched consumer it runs."""

    app: faust.App
    consumer: BatchedConsumer


def build_app(
    settings: Settings,
    sink: BatchSink,
    *,
    on_outcome: OutcomeListener | None = None,
    relay: Callable[[], Any] | None = None,
    guard: TopicGuard | None = None,
    on_assigned: AssignmentListener | None = None,
) -> ProcessorApp:
    """A faust app running the batched consumer (and the relay) as tasks."""
    access = kafka_access(settings)
    app = faust.App(
        # The host's own id: faust's consumer is off, and even if it were on it would not be
        # a member of the processor's group.
        f"{settings.processor_group}-host",
        broker=f"kafka://{access.bootstrap}",
        broker_credentials=broker_credentials(access),
        web_enabled=False,
        topic_allow_declare=False,
        datadir=str(settings.state_dir),
    )
    app.boot_strategy = _HostOnly(app)
    names = topic_names(settings)
    roles = {names[role]: role for role in INPUT_ROLES}
    consumer: BatchedConsumer | None = None

    async def apply(
        role: TopicRole, records: list[InboundRecord], ahead: DecodedAhead | None = None
    ) -> None:
        reader = consumer
        assert reader is not None  # set below, before anything runs
        topic = names[role]
        started = time.perf_counter()
        if guard is None:
            outcome = await asyncio.to_thread(sink, records, ahead=ahead)
        else:
            firsts = _firsts(records)
            # Stored offsets must belong to the topic's current life (topic_guard).
            outcome = await guard.apply(
                topic,
                role.value,
                firsts,
                functools.partial(reader.highwaters, topic, firsts),
                lambda lives, confirm: asyncio.to_thread(sink, records, lives, ahead, confirm),
                lambda: reader.stopping or bool(app.should_stop),
            )
        if on_outcome is not None:
            seconds = time.perf_counter() - started
            on_outcome(role, outcome, seconds, reader.behind(topic, {r.partition for r in records}))

    async def prepare(role: TopicRole, records: list[InboundRecord]) -> ApplyBatch:
        # The next batch of a lane, decoded while the lane's current batch is written.
        ahead = await asyncio.to_thread(sink.decode, records)
        return functools.partial(apply, ahead=ahead)

    consumer = BatchedConsumer(
        access,
        roles,
        apply,
        ConsumerOptions(
            settings.processor_group,
            batch_max_events=settings.batch_max_events,
            batch_within_seconds=settings.batch_within_seconds,
            group_instance_id=settings.processor_group_instance_id,
            session_timeout_seconds=settings.processor_session_timeout_seconds,
            heartbeat_interval_seconds=settings.processor_heartbeat_interval_seconds,
            lanes_per_topic=settings.processor_lanes_per_topic,
            fetch_linger_ms=settings.processor_fetch_linger_ms,
        ),
        on_assigned=on_assigned,
        prepare=prepare if settings.decode_ahead else None,
    )

    async def consume() -> None:  # faust names its tasks after the function
        await consumer.run()

    app.task(consume)
    if relay is not None:
        app.task(relay)

    @app.on_before_shutdown.connect
    async def _stop(_app: Any, /, *_: Any, signal: Any, **__: Any) -> None:
        await consumer.stop()  # the batches in flight end, then the consumer leaves Kafka
        if guard is not None:
            await guard.close()

    return ProcessorApp(app, consumer)


def _firsts(records: list[InboundRecord]) -> dict[int, int]:
    """Partition -> the first offset of the batch there."""
    firsts: dict[int, int] = {}
    for record in records:
        firsts[record.partition] = min(record.offset, firsts.get(record.partition, record.offset))
    return firsts
