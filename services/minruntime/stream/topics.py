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

import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from minruntime.events import topics as events_topics
from minruntime.kafka_access import KafkaAccess, start_client
from minruntime.settings import Settings

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


# The wire contract says which roles are inputs; this only gives them the enum's type.
INPUT_ROLES = tuple(TopicRole(role) for role in events_topics.INPUT_ROLES)


@dataclass(frozen=True)
class TopicSpec:
    """One topic as the service creates it."""

    role: TopicRole
    name: str
    partitions: int
    retention_ms: str

    @property
    def configs(self) -> dict[str, str]:
        """Topic-level configuration passed at creation."""
        return {"retention.ms": self.retention_ms, "cleanup.policy": "delete"}


def topic_specs(settings: Settings) -> tuple[TopicSpec, ...]:
    """Every topic the service reads or writes, with its documented shape."""
    return (
        TopicSpec(TopicRole.QUEUES, settings.topic_queues, 1, FOREVER),
        TopicSpec(
            TopicRole.PODGROUPS, settings.topic_podgroups, settings.podgroup_partitions, FOREVER
        ),
        TopicSpec(TopicRole.NODES, settings.topic_nodes, settings.node_partitions, FOREVER),
        TopicSpec(
            TopicRole.NOMINATIONS,
            settings.topic_nominations,
            settings.nomination_partitions,
            FOREVER,
        ),
        TopicSpec(
            TopicRole.REQUEUE_DECISIONS,
            settings.topic_requeue_decisions,
            settings.decision_partitions,
            THIRTY_DAYS_MS,
        ),
        TopicSpec(TopicRole.DEAD_LETTER, settings.topic_dead_letter, 1, FOREVER),
        TopicSpec(
            TopicRole.PROTECTION,
            settings.topic_protection,
            settings.protection_partitions,
            SEVEN_DAYS_MS,
        ),
    )


def topic_names(settings: Settings) -> dict[TopicRole, str]:
    """Role → configured topic name."""
    return {spec.role: spec.name for spec in topic_specs(settings)}


async def ensure_topics(access: KafkaAccess, specs: Sequence[TopicSpec]) -> list[str]:
    """Create the topics that are missing; return the names created.

    An existing topic is left as it is (a warning is logged when it has fewer partitions
    than documented): partitions can only grow, and growing them reshuffles keys.
    """
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        existing = set(await admin.list_topics())
        missing = [spec for spec in specs if spec.name not in existing]
        if missing:
            # Another process may create them at the same moment.
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [
                        NewTopic(spec.name, spec.partitions, 1, topic_configs=spec.configs)
                        for spec in missing
                    ]
                )
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
