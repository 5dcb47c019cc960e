"""The event log as Kafka holds it: every input topic and the decisions topic, from the start.

For rebuilding when the database (and with it ``event_log``) is lost. Kafka keeps order only
within a partition, so the topics are merged by time: input records by their record
timestamp (when they were produced), decisions by their ``time`` (when the worker decided,
which is before the relay published them). The order of ``event_log`` is the authoritative
one; a Kafka replay can order two nearly simultaneous events of different topics otherwise.
Records that are not valid events are dead-lettered in the shadow, as the processor would.
It needs topics whose retention keeps everything (``retention.ms=-1``).

Both content modes are read: a record keeps its headers, so ``apply_batch`` decodes a
binary-mode record exactly as the processor did (and logs its structured event); its type,
subject and time, for the merge, come from the equivalent structured event.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping
from contextlib import suppress
from datetime import datetime
from typing import Any, Final

from minruntime.audit.replay import DECISION_TYPES, LogEntry
from minruntime.core import InvalidTimestampError, parse_rfc3339
from minruntime.errors import UserError
from minruntime.events import EventRejected, Header, structured_value
from minruntime.kafka_access import KafkaAccess, start_client

_FETCH_TIMEOUT_MS: Final = 1_000
_IDLE_ROUNDS: Final = 10


def read_kafka(
    access: KafkaAccess,
    topics: Mapping[str, str],
    until: datetime | None = None,
) -> list[LogEntry]:
    """Every record of ``topics`` (name -> role) up to today's end offsets, merged by time."""
    return asyncio.run(_read(access, topics, until))


async def _read(
    access: KafkaAccess, topics: Mapping[str, str], until: datetime | None
) -> list[LogEntry]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        **access.client_kwargs(),
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",  # what the processor applies (docs/audit.md)
    )
    await start_client(consumer, access)
    keyed: list[tuple[float, int, LogEntry]] = []
    try:
        partitions = await _partitions(access, list(topics))
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        remaining = {tp for tp, end in ends.items() if end > 0}
        idle = 0
        while remaining and idle < _IDLE_ROUNDS:
            batch = await consumer.getmany(*remaining, timeout_ms=_FETCH_TIMEOUT_MS)
            idle = 0 if batch else idle + 1
            for tp, records in batch.items():
                for record in records:
                    if record.offset >= ends[tp]:
                        continue
                    entry, at = _entry(record, len(keyed))
                    if until is None or at is None or at <= until.timestamp():
                        keyed.append((at if at is not None else 0.0, len(keyed), entry))
                if await consumer.position(tp) >= ends[tp]:
                    remaining.discard(tp)
    finally:
        await consumer.stop()
    keyed.sort(key=lambda item: (item[0], item[1]))
    # Numbered in the merged order: the replay reports positions in it.
    return [entry._replace(seq=index + 1) for index, (_, _, entry) in enumerate(keyed)]


class MissingTopicsError(UserError):
    """A topic to read does not exist on the cluster (one line: which ones, where)."""


async def _partitions(access: KafkaAccess, topics: list[str]) -> list[Any]:
    """Every partition of ``topics``; MissingTopicsError naming those that do not exist."""
    from aiokafka import TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        described = await admin.describe_topics(topics)
    finally:
        await admin.close()
    missing = sorted(str(t["topic"]) for t in described if t["error_code"] or not t["partitions"])
    if missing:
        raise MissingTopicsError(f"topic(s) not found on {access.bootstrap}: {', '.join(missing)}")
    return [
        TopicPartition(t["topic"], p["partition"])
        for t in described
        for p in sorted(t["partitions"], key=lambda p: int(p["partition"]))
    ]


def _entry(record: Any, index: int) -> tuple[LogEntry, float | None]:
    value: bytes = record.value or b""
    headers = tuple(record.headers or ())
    event_type, subject, decided = _peek(_structured(record.value, headers) or value)
    at = record.timestamp / 1000 if record.timestamp is not None else None
    if event_type in DECISION_TYPES and decided is not None:
        at = decided
    entry = LogEntry(
        seq=index,
        topic=record.topic,
        # Decisions have no input position: they are applied as decisions, like the log's.
        partition=None if event_type in DECISION_TYPES else record.partition,
        offset=None if event_type in DECISION_TYPES else record.offset,
        type=event_type or "",
        subject=subject,
        value=value,
        headers=headers,
    )
    return entry, at


def _structured(value: bytes | None, headers: tuple[Header, ...]) -> bytes | None:
    """The record's structured event (None when a binary record cannot make one: it is
    dead-lettered when applied, as the processor did)."""
    if not headers:
        return value
    try:
        return structured_value(value, headers)
    except EventRejected:
        return None


def _peek(value: bytes) -> tuple[str | None, str | None, float | None]:
    """(type, subject, time) of a record value, when it is a JSON object that has them."""
    try:
        document = json.loads(value)
    except ValueError:
        return None, None, None
    if not isinstance(document, dict):
        return None, None, None
    event_type, subject, moment = document.get("type"), document.get("subject"), None
    if isinstance(document.get("time"), str):
        with suppress(InvalidTimestampError):
            moment = parse_rfc3339(document["time"]).timestamp()
    return (
        event_type if isinstance(event_type, str) else None,
        subject if isinstance(subject, str) else None,
        moment,
    )
