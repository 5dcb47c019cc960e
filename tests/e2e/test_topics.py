"""Topics are created with their documented partitions and retention, once."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import Settings
from minruntime.topic_admin import TopicRole, ensure_topics, topic_specs
from minruntime_dev.stack import StackStatus
from tests.e2e.harness import Pipeline

pytestmark = pytest.mark.stack


async def _describe(
    access: KafkaAccess, names: list[str]
) -> tuple[dict[str, int], dict[str, dict]]:
    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await admin.start()
    try:
        topics = await admin.describe_topics(names)
        partitions = {t["topic"]: len(t["partitions"]) for t in topics}
        responses = await admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, name) for name in names]
        )
        configs: dict[str, dict] = {}
        for response in responses:
            for resource in response.resources:
                name, entries = resource[3], resource[4]
                configs[name] = {entry[0]: entry[1] for entry in entries}
    finally:
        await admin.close()
    return partitions, configs


def test_topics_have_documented_partitions_and_retention(
    stack: StackStatus, settings: Settings, tmp_path: Path
) -> None:
    pipeline = Pipeline(settings, tmp_path, "topics")
    try:
        specs = topic_specs(pipeline.settings())
        created = asyncio.run(ensure_topics(kafka_access(settings), specs))
        assert sorted(created) == sorted(s.name for s in specs)
        assert asyncio.run(ensure_topics(kafka_access(settings), specs)) == []  # idempotent

        partitions, configs = asyncio.run(
            _describe(kafka_access(settings), [s.name for s in specs])
        )
        by_role = {s.role: s.name for s in specs}
        # One partition for the queue tree: its changes apply in one total order.
        assert partitions[by_role[TopicRole.QUEUES]] == 1
        assert partitions[by_role[TopicRole.PODGROUPS]] == settings.podgroup_partitions
        for role in (TopicRole.QUEUES, TopicRole.PODGROUPS, TopicRole.NODES, TopicRole.DEAD_LETTER):
            assert configs[by_role[role]]["retention.ms"] == "-1", role  # audit: keep all
            assert configs[by_role[role]]["cleanup.policy"] == "delete", role
        decisions = configs[by_role[TopicRole.REQUEUE_DECISIONS]]
        assert decisions["retention.ms"] == str(30 * 24 * 3600 * 1000)
        # Wake-ups are worthless once old.
        assert configs[by_role[TopicRole.PROTECTION]]["retention.ms"] == str(7 * 24 * 3600 * 1000)
        assert partitions[by_role[TopicRole.PROTECTION]] == settings.protection_partitions
    finally:
        pipeline.drop()
