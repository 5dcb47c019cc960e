"""The service's Kafka topics and their administration: names, partitions, retention, their
creation, and which life of each topic Kafka holds (its topic ID). One module for every
component that makes or describes topics: the stream processor (``minruntime.stream``) and the
cluster bridge (``minruntime.cluster``: its ledger) use it alike.

- Per-uid input topics (`kai.podgroups`, `kai.nodes`, `kai.nominations`) are keyed by uid or
  name, so every event of one podgroup lands in one partition and keeps its order.
- `kai.queues` has exactly ONE partition: queue-tree and configuration changes must apply in
  one total order (a cycle check depends on every earlier change).
- Input topics keep everything (`retention.ms=-1`, `cleanup.policy=delete`): they are the
  audit log that `replay` reads. Compaction would keep only the last value per key.
- `kai.dead-letter` keeps everything too; `kai.requeue-decisions` keeps 30 days;
  `kai.protection` (wake-ups, worthless once old) keeps 7 days.

Topic IDs: a topic deleted and created again, or the same name on a new cluster, starts its
offsets at 0 again; only its topic ID (a random UUID Kafka gives each topic at creation,
KIP-516) tells the two apart. aiokafka 0.14 speaks Metadata only up to v5, which has no topic
IDs, so this module sends Metadata v10 itself through aiokafka's client, which negotiates the
version against the broker's ApiVersions.
"""

from __future__ import annotations

import functools
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from io import BytesIO
from typing import TYPE_CHECKING, Any, ClassVar, Final

from minruntime.errors import ConfigError, UserError
from minruntime.events import topics as events_topics
from minruntime.kafka_access import KafkaAccess, start_client
from minruntime.settings import Settings

if TYPE_CHECKING:
    from aiokafka.admin import AIOKafkaAdminClient

log = logging.getLogger(__name__)

FOREVER = "-1"
THIRTY_DAYS_MS = str(30 * 24 * 3600 * 1000)
SEVEN_DAYS_MS = str(7 * 24 * 3600 * 1000)


class TopicRole(StrEnum):
    """What a topic carries; roles are fixed, names are configurable."""

    QUEUES = "queues"
    PODGROUPS = "podgroups"
    NODES = "nodes"
    NOMINATIONS = "nominations"
    REQUEUE_DECISIONS = "requeue_decisions"
    DEAD_LETTER = "dead_letter"
    PROTECTION = "protection"
    LEDGER = "ledger"
    """The cluster bridge's own compacted record of what it sent (minruntime.cluster.ledger)."""


# The wire contract says which roles are inputs; this only gives them the enum's type.
INPUT_ROLES = tuple(TopicRole(role) for role in events_topics.INPUT_ROLES)


@dataclass(frozen=True)
class Replication:
    """How many copies of a topic the cluster keeps, and how many must have a write before it
    is acknowledged (None: the cluster's `default.replication.factor` / `min.insync.replicas`)."""

    factor: int | None = None
    min_insync: int | None = None


@dataclass(frozen=True)
class TopicSpec:
    """One topic as the service creates it."""

    role: TopicRole
    name: str
    partitions: int
    retention_ms: str
    replication: Replication = Replication()
    extra_configs: tuple[tuple[str, str], ...] = ()
    """Configs beyond retention (a compacted topic's cleanup policy)."""

    @property
    def configs(self) -> dict[str, str]:
        """Topic-level configuration passed at creation."""
        configs = {"retention.ms": self.retention_ms, "cleanup.policy": "delete"}
        configs.update(self.extra_configs)
        if self.replication.min_insync is not None:
            configs["min.insync.replicas"] = str(self.replication.min_insync)
        return configs


def replication_for(settings: Settings, role: str) -> Replication:
    """The replication a topic of ``role`` is created with: its own setting, else the
    service-wide one, else the cluster's defaults (docs/deployment.md, "Kafka with several
    brokers")."""
    own = settings.topic_replication.get(role)
    return Replication(
        factor=(own.replication_factor if own else None) or settings.topic_replication_factor,
        min_insync=(own.min_insync_replicas if own else None) or settings.topic_min_insync_replicas,
    )


def topic_specs(settings: Settings) -> tuple[TopicSpec, ...]:
    """Every topic the service reads or writes, with its documented shape."""
    shapes = (
        (TopicRole.QUEUES, settings.topic_queues, 1, FOREVER),
        (TopicRole.PODGROUPS, settings.topic_podgroups, settings.podgroup_partitions, FOREVER),
        (TopicRole.NODES, settings.topic_nodes, settings.node_partitions, FOREVER),
        (
            TopicRole.NOMINATIONS,
            settings.topic_nominations,
            settings.nomination_partitions,
            FOREVER,
        ),
        (
            TopicRole.REQUEUE_DECISIONS,
            settings.topic_requeue_decisions,
            settings.decision_partitions,
            THIRTY_DAYS_MS,
        ),
        (TopicRole.DEAD_LETTER, settings.topic_dead_letter, 1, FOREVER),
        (
            TopicRole.PROTECTION,
            settings.topic_protection,
            settings.protection_partitions,
            SEVEN_DAYS_MS,
        ),
    )
    return tuple(
        TopicSpec(role, name, partitions, retention, replication_for(settings, role.value))
        for role, name, partitions, retention in shapes
    )


def input_topic_roles(settings: Settings) -> dict[str, str]:
    """Configured input topic name → role name (what `apply_batch` checks types against)."""
    return {
        spec.name: spec.role.value for spec in topic_specs(settings) if spec.role in INPUT_ROLES
    }


def topic_names(settings: Settings) -> dict[TopicRole, str]:
    """Role → configured topic name."""
    return {spec.role: spec.name for spec in topic_specs(settings)}


async def ensure_topics(access: KafkaAccess, specs: Sequence[TopicSpec]) -> list[str]:
    """Create the topics that are missing; return the names created.

    A missing topic gets the replication its spec asks for, the cluster's default where it asks
    for none (aiokafka's CreateTopics predates "-1 = the broker's default", so the default is
    read from a broker). A replication factor above the number of brokers, or a refusal of the
    broker, is a one-line `ConfigError`, never a silently missing topic.

    An existing topic is left as it is (a warning is logged when it has fewer partitions
    than documented): partitions can only grow, and growing them reshuffles keys.
    """
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            await _create(admin, missing)
        present = [spec for spec in specs if spec.name in existing]
        if present:
            described = await admin.describe_topics([spec.name for spec in present])
            partitions = {t["topic"]: len(t.get("partitions", [])) for t in described}
            for spec in present:
                if partitions.get(spec.name, spec.partitions) < spec.partitions:
                    log.warning(
                        "topic %s has %d partitions, fewer than the documented %d",
                        spec.name,
                        partitions[spec.name],
                        spec.partitions,
                    )
    finally:
        await admin.close()
    return [spec.name for spec in missing]


async def _create(admin: AIOKafkaAdminClient, specs: Sequence[TopicSpec]) -> None:
    from aiokafka.admin import NewTopic
    from aiokafka.errors import for_code

    cluster = await ClusterFacts.read(
        admin, need_default=any(s.replication.factor is None for s in specs)
    )
    topics = []
    for spec in specs:
        factor = spec.replication.factor or cluster.default_replication_factor
        if factor > cluster.brokers:
            raise ConfigError(
                f"topic {spec.name}: replication factor {factor} but the cluster has "
                f"{cluster.brokers} broker(s) (MINRUNTIME_TOPIC_REPLICATION_FACTOR)"
            )
        min_insync = spec.replication.min_insync
        if min_insync is not None and min_insync > factor:
            raise ConfigError(
                f"topic {spec.name}: min.insync.replicas {min_insync} above its replication "
                f"factor {factor}: no write could ever be acknowledged"
            )
        topics.append(NewTopic(spec.name, spec.partitions, factor, topic_configs=spec.configs))
    response = await admin.create_topics(topics)
    for topic, code, *message in response.topic_errors:
        # 36 TOPIC_ALREADY_EXISTS: another process created it at the same moment.
        if code not in (0, 36):
            reason = message[0] if message and message[0] else for_code(code).__name__
            raise ConfigError(f"creating topic {topic} was refused: {reason}")
    log.info(
        "created topics %s (replication factor %s)",
        ", ".join(spec.name for spec in specs),
        ", ".join(sorted({str(t.replication_factor) for t in topics})),
    )


@dataclass(frozen=True)
class ClusterFacts:
    """What the service needs to know about a Kafka cluster before creating topics."""

    brokers: int
    default_replication_factor: int

    @classmethod
    async def read(cls, admin: AIOKafkaAdminClient, *, need_default: bool) -> ClusterFacts:
        """Count the brokers; with ``need_default``, read `default.replication.factor` from
        one of them (an ACL that refuses DescribeConfigs is a one-line `ConfigError`)."""
        from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType
        from aiokafka.errors import for_code

        described = await admin.describe_cluster()
        brokers = described["brokers"]
        if not need_default:
            return cls(len(brokers), 1)
        name = "default.replication.factor"
        resource = ConfigResource(
            ConfigResourceType.BROKER, str(brokers[0]["node_id"]), {name: None}
        )
        (answer,) = await admin.describe_configs([resource])
        for entry in answer.to_object()["resources"]:
            if entry["error_code"] != 0:
                reason = entry["error_message"] or for_code(entry["error_code"]).__name__
                raise ConfigError(
                    f"cannot read the cluster's {name} ({reason}); "
                    "set MINRUNTIME_TOPIC_REPLICATION_FACTOR"
                )
            for config in entry["config_entries"]:
                if config["config_names"] == name:
                    return cls(len(brokers), int(config["config_value"]))
        return cls(len(brokers), 1)


# -- topic IDs ----------------------------------------------------------------------------------

_ZERO_ID: Final = uuid.UUID(int=0)


class TopicIdUnavailableError(UserError):
    """Kafka did not say which topic ID a topic has."""


@functools.cache
def _topic_id_request() -> Any:
    """Kafka's Metadata v10 request (the first with topic IDs; flexible encoding, KIP-482),
    built on aiokafka's protocol classes at its first use: importing this module does not
    import aiokafka."""
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

    return _TopicIdRequest


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
    response = await client.send(node, _topic_id_request()(topics))
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
