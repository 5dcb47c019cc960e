"""Kafka's topic IDs: which life of a topic the processor is reading.

A topic deleted and created again, or the same name on a new cluster, starts its offsets at 0
again; only its topic ID (a random UUID Kafka gives each topic at creation, KIP-516) tells the
two apart. aiokafka 0.14 speaks Metadata only up to v5, which has no topic IDs, so this module
sends Metadata v10 itself (the first version with topic IDs; flexible encoding, KIP-482)
through aiokafka's client, which negotiates the version against the broker's ApiVersions.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO
from typing import Any, ClassVar, Final

from aiokafka.protocol.api import Request, RequestStruct, Response
from aiokafka.protocol.types import (
    AbstractType,
    Boolean,
    CompactArray,
    CompactString,
    Int16,
    Int32,
    Schema,
    TaggedFields,
)

from minruntime.errors import UserError
from minruntime.kafka_access import KafkaAccess

_ZERO_ID: Final = uuid.UUID(int=0)


class TopicIdUnavailableError(UserError):
    """Kafka did not say which topic ID a topic has."""


class _Uuid(AbstractType[bytes]):  # type: ignore[misc]  # aiokafka is untyped
    """Kafka's ``uuid`` wire type: 16 raw bytes."""

    @classmethod
    def encode(cls, value: bytes) -> bytes:
        return value

    @classmethod
    def decode(cls, data: BytesIO) -> bytes:
        raw = data.read(16)
        if len(raw) != 16:
            raise ValueError("buffer underrun decoding a uuid")
        return raw


class _MetadataResponseV10(Response):  # type: ignore[misc]  # aiokafka is untyped
    API_KEY = 3
    API_VERSION = 10
    SCHEMA = Schema(
        ("throttle_time_ms", Int32),
        (
            "brokers",
            CompactArray(
                ("node_id", Int32),
                ("host", CompactString("utf-8")),
                ("port", Int32),
                ("rack", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_id", CompactString("utf-8")),
        ("controller_id", Int32),
        (
            "topics",
            CompactArray(
                ("error_code", Int16),
                ("name", CompactString("utf-8")),
                ("topic_id", _Uuid),
                ("is_internal", Boolean),
                (
                    "partitions",
                    CompactArray(
                        ("error_code", Int16),
                        ("partition_index", Int32),
                        ("leader_id", Int32),
                        ("leader_epoch", Int32),
                        ("replica_nodes", CompactArray(Int32)),
                        ("isr_nodes", CompactArray(Int32)),
                        ("offline_replicas", CompactArray(Int32)),
                        ("tags", TaggedFields),
                    ),
                ),
                ("topic_authorized_operations", Int32),
                ("tags", TaggedFields),
            ),
        ),
        ("cluster_authorized_operations", Int32),
        ("tags", TaggedFields),
    )


class _MetadataRequestV10(RequestStruct):  # type: ignore[misc]  # aiokafka is untyped
    FLEXIBLE_VERSION = True
    API_KEY = 3
    API_VERSION = 10
    RESPONSE_TYPE = _MetadataResponseV10
    SCHEMA = Schema(
        (
            "topics",
            CompactArray(
                ("topic_id", _Uuid),
                ("name", CompactString("utf-8")),
                ("tags", TaggedFields),
            ),
        ),
        ("allow_auto_topic_creation", Boolean),
        ("include_cluster_authorized_operations", Boolean),
        ("include_topic_authorized_operations", Boolean),
        ("tags", TaggedFields),
    )


class _TopicIdRequest(Request[_MetadataRequestV10]):  # type: ignore[misc]  # aiokafka is untyped
    """Metadata of named topics, never creating one."""

    API_KEY: ClassVar[int] = 3

    def __init__(self, topics: Sequence[str]) -> None:
        self._topics = list(topics)

    def build(self, request_struct_class: type[_MetadataRequestV10]) -> _MetadataRequestV10:
        return request_struct_class(
            [(_ZERO_ID.bytes, name, {}) for name in self._topics], False, False, False, {}
        )


async def fetch_topic_ids(client: Any, topics: Sequence[str]) -> dict[str, str]:
    """Topic name -> topic ID (UUID text) of each existing topic, asked of one broker.

    ``client`` is a started ``aiokafka.AIOKafkaClient``. A topic that does not exist (or that
    the broker does not describe) is absent from the answer.
    """
    return {name: topic_id for name, (topic_id, _) in (await _metadata(client, topics)).items()}


async def _metadata(client: Any, topics: Sequence[str]) -> dict[str, tuple[str, list[int]]]:
    """Topic name -> (topic ID, partition numbers) of each existing topic."""
    node = client.get_random_node()
    if node is None:
        raise TopicIdUnavailableError("no Kafka broker is known to ask for topic IDs")
    response = await client.send(node, _TopicIdRequest(topics))
    described: dict[str, tuple[str, list[int]]] = {}
    for error_code, name, topic_id, _internal, partitions, *_ in response.topics:
        if error_code == 0 and topic_id != _ZERO_ID.bytes:
            numbers = sorted(partition[1] for partition in partitions)
            described[name] = (str(uuid.UUID(bytes=topic_id)), numbers)
    return described


@dataclass(frozen=True)
class KafkaTopic:
    """What Kafka holds of one topic now: its ID and each partition's log start and end."""

    topic_id: str
    log_starts: dict[int, int]
    log_ends: dict[int, int]


async def describe_topics(access: KafkaAccess, topics: Sequence[str]) -> dict[str, KafkaTopic]:
    """Topic name -> what Kafka holds of it; topics that do not exist are absent.

    Raises TopicIdUnavailableError (one line) when Kafka cannot be reached.
    """
    from aiokafka import AIOKafkaClient, AIOKafkaConsumer, TopicPartition
    from aiokafka.errors import KafkaError

    client = AIOKafkaClient(**access.client_kwargs())
    consumer = AIOKafkaConsumer(**access.client_kwargs(), enable_auto_commit=False)
    try:
        await client.bootstrap()
        await consumer.start()
        described = {}
        for name, (topic_id, numbers) in (await _metadata(client, topics)).items():
            partitions = [TopicPartition(name, p) for p in numbers]
            starts = await consumer.beginning_offsets(partitions)
            ends = await consumer.end_offsets(partitions)
            described[name] = KafkaTopic(
                topic_id,
                {tp.partition: offset for tp, offset in starts.items()},
                {tp.partition: offset for tp, offset in ends.items()},
            )
        return described
    except (KafkaError, OSError) as error:
        raise TopicIdUnavailableError(
            f"cannot reach Kafka at {access.bootstrap}: {error}"
        ) from None
    finally:
        await consumer.stop()
        await client.close()
