"""The service's Kafka topics: names, partitions, retention, and their creation.

- Per-uid input topics (`kai.podgroups`, `kai.nodes`, `kai.nominations`) are keyed by uid or
  name, so every event of one podgroup lands in one partition and keeps its order.
- `kai.queues` has exactly ONE partition: queue-tree and configuration changes must apply in
  one total order (a cycle check depends on every earlier change).
- Input topics keep everything (`retention.ms=-1`, `cleanup.policy=delete`): they are the
  audit log that `replay` reads. Compaction would keep only the last value per key.
- `kai.dead-letter` keeps everything too; `kai.requeue-decisions` keeps 30 days;
  `kai.protection` (wake-ups, worthless once old) keeps 7 days.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

from minruntime.errors import ConfigError
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
