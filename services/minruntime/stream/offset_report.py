"""What `minruntime offsets show` and `offsets rebaseline` know of a topic: its stored offsets
against the life Kafka holds now (``core.topic_life``), per partition with the records still to
apply (a transaction's commit marker takes an offset but is no record)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Final

from minruntime.core.topic_life import StoredOffset, TopicLife, life_changed, untied
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.stream.backlog import records_behind
from minruntime.topic_admin import KafkaTopic, describe_topics

# Statuses whose stored offsets belong to the topic Kafka holds now (a backlog means something).
_READABLE: Final = frozenset({"ok", "untied (tied at the next batch)"})


def describe_kafka(settings: Settings, topics: list[str]) -> dict[str, KafkaTopic]:
    """Each topic's identity and log bounds in Kafka now (absent: no such topic)."""
    return asyncio.run(describe_topics(kafka_access(settings), topics))


def status_of(topic: str, stored: list[StoredOffset], kafka: KafkaTopic | None) -> str:
    """One word or line for a topic: ok, untied, not in Kafka, or why it is refused."""
    if kafka is None:
        return "not in Kafka"
    if not stored:
        return "not consumed yet"
    reason = life_changed(topic, stored, TopicLife(kafka.topic_id, kafka.log_ends))
    if reason is not None:
        return f"REFUSED: {reason}"
    return "untied (tied at the next batch)" if untied(stored) else "ok"


def partition_rows(
    settings: Settings, stored: Mapping[str, list[StoredOffset]], topics: Sequence[str]
) -> list[dict[str, Any]]:
    """One row per partition of ``topics``: the stored next offset and topic ID, the topic's
    ID and log bounds in Kafka, the records still to apply, and the topic's status."""
    kafka = describe_kafka(settings, list(topics))
    nexts = {
        (topic, row.partition): row.next_offset
        for topic in topics
        if status_of(topic, stored.get(topic, []), kafka.get(topic)) in _READABLE
        for row in stored.get(topic, [])
        if row.partition in kafka[topic].log_ends
    }
    behind = asyncio.run(records_behind(kafka_access(settings), nexts))
    rows: list[dict[str, Any]] = []
    for topic in topics:
        status = status_of(topic, stored.get(topic, []), kafka.get(topic))
        described = kafka.get(topic)
        partitions = sorted(
            {row.partition for row in stored.get(topic, [])}
            | set(described.log_ends if described else {})
        )
        by_partition = {row.partition: row for row in stored.get(topic, [])}
        for partition in partitions:
            row = by_partition.get(partition)
            counted = behind.get((topic, partition))
            rows.append(
                {
                    "topic": topic,
                    "partition": partition,
                    "next_offset": row.next_offset if row else None,
                    "stored_topic_id": row.topic_id if row else None,
                    "kafka_topic_id": described.topic_id if described else None,
                    "log_start": described.log_starts.get(partition) if described else None,
                    "log_end": described.log_ends.get(partition) if described else None,
                    "behind": counted.records if counted else None,
                    "behind_exact": counted.exact if counted else None,
                    "status": status,
                }
            )
    return rows
