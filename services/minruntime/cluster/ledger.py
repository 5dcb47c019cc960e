"""The bridge's ledger: what it has sent, per object, in a compacted Kafka topic.

One record per object the bridge has sent an event for, keyed ``<kind>/<uid>`` (the mirror's
memory: ``cluster.memory``), the value a small versioned JSON object (``cluster.records``:
digests, which pods were submitted, allocated, released), a tombstone once the object is
gone. The bridge writes the records an event batch changed in the same Kafka transaction as
the events: the ledger says exactly what the input topics received, never more, never less.
A new term (a restart, a takeover) reads the ledger to its end before it lists the cluster,
so it sends only what changed while no bridge watched.

The ``meta`` record holds the topic IDs of the input topics the ledger's events went to. A
ledger whose input topics were deleted and made again (another life, another cluster) is not
evidence of what those topics hold: it is ignored, and the term sends the whole state (every
id names its content, so what the topics do hold is sent again as true duplicates).

The topic is made by the bridge if missing: one partition, ``cleanup.policy=compact``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from typing import Final

from minruntime.cluster.packed import Packed
from minruntime.cluster.records import Record, from_json, split_key
from minruntime.kafka_access import KafkaAccess, start_client
from minruntime.settings import Settings
from minruntime.topic_admin import FOREVER, TopicRole, TopicSpec, describe_topics, replication_for

log = logging.getLogger(__name__)

META_KEY: Final = "meta"
# How many records one read asks for; the ledger holds one per pod, PodGroup, Queue, Node.
_READ_BATCH: Final = 10_000
_TOPIC_CONFIGS: Final = (
    ("cleanup.policy", "compact"),
    # Compact a segment once it is an hour old: a restart reads little more than the live set.
    ("segment.ms", str(3600 * 1000)),
    ("min.cleanable.dirty.ratio", "0.2"),
)


def meta_record(topic_ids: Mapping[str, str]) -> bytes:
    return json.dumps({"topics": dict(sorted(topic_ids.items()))}).encode()


def ledger_spec(settings: Settings) -> TopicSpec:
    """The ledger topic as the bridge creates it: compacted, one partition, kept forever, its
    replication as for the service's other topics."""
    return TopicSpec(
        TopicRole.LEDGER,
        settings.kube_ledger_topic_resolved,
        1,
        FOREVER,
        replication_for(settings, TopicRole.LEDGER.value),
        extra_configs=_TOPIC_CONFIGS,
    )


async def topic_ids(access: KafkaAccess, topics: Sequence[str]) -> dict[str, str]:
    """Topic name -> topic ID of the input topics the bridge writes."""
    described = await describe_topics(access, topics)
    return {name: topic.topic_id for name, topic in described.items()}


async def read_ledger(
    access: KafkaAccess, topic: str, current_ids: Mapping[str, str]
) -> Mapping[str, Record]:
    """The ledger's records (committed ones only), read to the end; {} when it belongs to
    other input topics than ``current_ids`` (see the module docstring). Held packed as they
    are read (``cluster.packed``): the mirror takes them over as they are."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        **access.client_kwargs(),
        enable_auto_commit=False,
        isolation_level="read_committed",
        max_partition_fetch_bytes=8 * 1024 * 1024,
    )
    await start_client(consumer, access)
    records: Packed[Record] = Packed()
    meta: object = None
    skipped = 0
    try:
        partitions = [
            TopicPartition(topic, number)
            for number in sorted(consumer.partitions_for_topic(topic) or {0})
        ]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        ends = await consumer.end_offsets(partitions)
        while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
            batches = await consumer.getmany(*partitions, timeout_ms=1000, max_records=_READ_BATCH)
            for batch in batches.values():
                for message in batch:
                    key = (message.key or b"").decode("utf-8", "replace")
                    if key == META_KEY:
                        meta = _json(message.value)
                        continue
                    if split_key(key) is None:
                        skipped += 1
                        continue
                    record = from_json(message.value)
                    if record is not None:
                        records[key] = record
                    else:
                        records.pop(key, None)
    finally:
        await consumer.stop()
    if skipped:
        log.warning("ledger %s: %d record(s) with an unknown key ignored", topic, skipped)
    if not records:
        return {}
    said = meta.get("topics") if isinstance(meta, dict) else None
    if said != dict(current_ids):
        log.warning(
            "ledger %s belongs to other input topics (%s, now %s): sending the whole state",
            topic,
            said,
            dict(current_ids),
        )
        return {}
    return records


def _json(value: bytes | None) -> object:
    if value is None:
        return None
    try:
        return json.loads(value)
    except ValueError:
        return None
