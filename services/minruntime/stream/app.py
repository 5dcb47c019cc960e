"""The faust application: one thin agent per input topic, plus the outbox relay task.

Each agent takes a batch of records (`take_events`), applies it in ONE database transaction
through the `BatchSink` (projections + event log + consumed offsets), and only then lets
faust acknowledge it. Agent concurrency stays 1 (faust #606: with concurrency > 1 an offset
can be committed past a record still in flight). Records are read as raw bytes: decoding is
ours, so a record that is not JSON becomes a dead letter instead of a deserializer crash.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Callable, Mapping
from typing import Any

import faust
from faust.sensors.monitor import Monitor
from faust.types import TP, EventT, Message, StreamT

from minruntime.ingest import BatchOutcome, InboundRecord
from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import Settings
from minruntime.stream.sink import BatchSink, stop_loudly
from minruntime.stream.topic_guard import TopicGuard
from minruntime.stream.topics import INPUT_ROLES, TopicRole, topic_names

log = logging.getLogger(__name__)

# (role, what the batch did, seconds it took, partition -> records still behind it)
OutcomeListener = Callable[[TopicRole, BatchOutcome, float, Mapping[int, int]], None]
# (role, partition) of every input partition this process owns after a rebalance
AssignmentListener = Callable[[set[tuple[TopicRole, int]]], None]


def record_of(event: Any) -> InboundRecord:
    """The Kafka coordinates and raw bytes of one faust event."""
    message = event.message
    timestamp = getattr(message, "timestamp", None)
    return InboundRecord(
        topic=message.topic,
        partition=message.partition,
        offset=message.offset,
        key=message.key,
        value=message.value,
        timestamp_ms=int(timestamp * 1000) if timestamp is not None else None,
    )


class _WithoutRecordStatistics(Monitor):
    """faust's monitor sensor without its per-record statistics.

    The monitor counts and times every record for faust's web views, which the processor does
    not serve (``web_enabled=False``; its metrics are its own, ``stream.metrics``): ~10 µs of
    CPU per record on the ingest benchmark (docs/benchmarks.md). Kept: when a stream last took
    a record (faust's slow-processing check reads it) and the other hooks (commits, rebalances,
    sends).
    """

    def on_message_in(self, tp: TP, offset: int, message: Message) -> None:
        return None

    def on_stream_event_in(
        self, tp: TP, offset: int, stream: StreamT[Any], event: EventT[Any]
    ) -> dict[str, Any] | None:
        self.stream_inbound_time[tp] = time.monotonic()
        return None

    def on_stream_event_out(
        self,
        tp: TP,
        offset: int,
        stream: StreamT[Any],
        event: EventT[Any],
        state: dict[str, Any] | None = None,
    ) -> None:
        return None

    def on_message_out(self, tp: TP, offset: int, message: Message) -> None:
        return None


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


def build_app(
    settings: Settings,
    sink: BatchSink,
    *,
    on_outcome: OutcomeListener | None = None,
    relay: Callable[[], Any] | None = None,
    guard: TopicGuard | None = None,
    on_assigned: AssignmentListener | None = None,
) -> faust.App:
    """A faust app with an agent for each input topic (and the relay as a background task)."""
    access = kafka_access(settings)
    app = faust.App(
        settings.processor_group,
        broker=f"kafka://{access.bootstrap}",
        broker_credentials=broker_credentials(access),
        value_serializer="raw",
        key_serializer="raw",
        web_enabled=False,
        topic_allow_declare=False,
        topic_disable_leader=True,
        consumer_auto_offset_reset="earliest",
        stream_buffer_maxsize=max(settings.batch_max_events * 4, 16384),
        broker_commit_every=settings.batch_max_events,
        broker_commit_interval=1.0,
        producer_acks=-1,
        datadir=str(settings.state_dir),
        # Recovery (docs/pipeline.md): a restarted instance rejoins as the same static member
        # and gets its partitions back at once; a dead one's partitions idle one session.
        consumer_group_instance_id=settings.processor_group_instance_id,
        broker_session_timeout=settings.processor_session_timeout_seconds,
        broker_heartbeat_interval=settings.processor_heartbeat_interval_seconds,
        monitor=_WithoutRecordStatistics(),
    )
    names = topic_names(settings)
    for role in INPUT_ROLES:
        _add_agent(app, role, names[role], settings, sink, on_outcome, guard)
    if relay is not None:
        app.task(relay)
    if on_assigned is not None:
        roles = {names[role]: role for role in INPUT_ROLES}

        @app.on_partitions_assigned.connect
        async def _assigned(_app: Any, /, *args: Any, signal: Any, **_: Any) -> None:
            (assigned,) = args  # the new assignment: every partition this process owns now
            on_assigned({(roles[tp.topic], tp.partition) for tp in assigned if tp.topic in roles})

    if guard is not None:

        @app.on_before_shutdown.connect
        async def _close_guard(_app: Any, /, *_: Any, signal: Any, **__: Any) -> None:
            await guard.close()

    return app


def _add_agent(
    app: faust.App,
    role: TopicRole,
    topic_name: str,
    settings: Settings,
    sink: BatchSink,
    on_outcome: OutcomeListener | None,
    guard: TopicGuard | None = None,
) -> None:
    topic = app.topic(topic_name, value_serializer="raw", key_serializer="raw")
    max_events, within = settings.batch_max_events, settings.batch_within_seconds

    async def process(stream: Any) -> None:
        async for events in stream.take_events(max_events, within=within):
            records = [record_of(event) for event in events]
            started = time.perf_counter()
            try:
                if guard is None:
                    outcome = await asyncio.to_thread(sink, records)
                else:
                    # Stored offsets must belong to the topic's current life (topic_guard).
                    outcome = await guard.apply(
                        topic_name,
                        role.value,
                        _firsts(records),
                        functools.partial(_log_ends, app, events),
                        functools.partial(asyncio.to_thread, sink, records),
                        lambda: bool(app.should_stop),
                    )
            except BaseException as exc:
                stop_loudly(exc)
                raise
            if on_outcome is not None:
                seconds = time.perf_counter() - started
                on_outcome(role, outcome, seconds, _lags(app, events))

    process.__name__ = f"apply_{role.value.replace('-', '_')}"
    app.agent(topic, name=f"minruntime.{role.value}", concurrency=1, sink=None)(process)


def _firsts(records: list[InboundRecord]) -> dict[int, int]:
    """Partition -> the first offset of the batch there."""
    firsts: dict[int, int] = {}
    for record in records:
        firsts[record.partition] = min(record.offset, firsts.get(record.partition, record.offset))
    return firsts


def _log_ends(app: faust.App, events: list[Any]) -> dict[int, int]:
    """Partition -> high watermark the fetcher last saw, for the partitions of ``events``."""
    return {tp.partition: end for tp, end in _highwaters(app, events).items()}


def _lags(app: faust.App, events: list[Any]) -> dict[int, int]:
    """Partition -> records after the last one of this batch (from the fetcher's watermark)."""
    last: dict[Any, int] = {}
    for event in events:
        last[event.message.tp] = event.message.offset
    return {
        tp.partition: max(highwater - last[tp] - 1, 0)
        for tp, highwater in _highwaters(app, events).items()
    }


def _highwaters(app: faust.App, events: list[Any]) -> dict[Any, int]:
    highwaters: dict[Any, int] = {}
    for tp in {event.message.tp for event in events}:
        try:
            highwater = app.consumer.highwater(tp)
        except Exception:  # the consumer is being rebalanced or stopped: no figure now
            continue
        if highwater is not None:
            highwaters[tp] = int(highwater)
    return highwaters


def consumer_problem(app: faust.App) -> str | None:
    """Why the app's Kafka consumer is not consuming now (None: it is in its group, connected).

    Reads the state of faust's aiokafka consumer (its coordinator and connections); that is
    private API, so anything unexpected counts as "cannot tell", not as a failure.
    """
    if app.rebalancing:
        return "the consumer group is rebalancing"
    try:
        consumer = app.consumer._thread._consumer  # type: ignore[attr-defined]
        if consumer is None:
            return "the Kafka consumer has not started"
        coordinator = consumer._coordinator
        connected = any(conn.connected() for conn in consumer._client._conns.values())
        generation, coordinator_id = coordinator.generation, coordinator.coordinator_id
    except AttributeError:
        return None
    if not connected:
        return "no connection to any Kafka broker"
    if coordinator_id is None:
        return "no group coordinator (Kafka unreachable or electing one)"
    if generation is None or generation < 0:
        return "not a member of the consumer group yet"
    return None
