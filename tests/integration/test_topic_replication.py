"""The topics the service creates take the replication the cluster or the settings ask for, and
a topic the broker refuses is a one-line error, never a topic silently missing.

Against the local stack's single broker (its `default.replication.factor` is 1); the
three-broker cluster's own test checks replication factor 3 and `min.insync.replicas` 2.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import Iterator

import pytest

from minruntime.errors import ConfigError
from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import Settings
from minruntime.topic_admin import (
    FOREVER,
    Replication,
    TopicRole,
    TopicSpec,
    ensure_topics,
    replication_for,
    topic_specs,
)
from minruntime_dev.stack import StackStatus
from tests.conftest import run_cli
from tests.integration.helpers import kafka_admin


async def _describe(access: KafkaAccess, name: str) -> tuple[int, dict[str, str]]:
    """(replication factor, topic configs) of one topic."""
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    async with kafka_admin(access) as admin:
        (topic,) = await admin.describe_topics([name])
        factor = len(topic["partitions"][0]["replicas"])
        (answer,) = await admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, name)])
        (resource,) = answer.to_object()["resources"]
        configs = {e["config_names"]: e["config_value"] for e in resource["config_entries"]}
        return factor, configs


async def _exists(access: KafkaAccess, name: str) -> bool:
    async with kafka_admin(access) as admin:
        return name in await admin.list_topics()


@pytest.fixture
def names(settings: Settings, stack: StackStatus) -> Iterator[list[str]]:
    """Topic names to create; every one that exists afterwards is deleted."""
    made: list[str] = []
    yield made
    access = kafka_access(settings)

    async def delete() -> None:
        async with kafka_admin(access) as admin:
            present = set(await admin.list_topics())
            doomed = [name for name in made if name in present]
            if doomed:
                await admin.delete_topics(doomed)

    asyncio.run(delete())


def _name(names: list[str]) -> str:
    name = f"test.replication.{uuid.uuid4().hex[:8]}"
    names.append(name)
    return name


def test_a_topic_takes_the_clusters_default_replication(
    settings: Settings, names: list[str]
) -> None:
    access = kafka_access(settings)
    name = _name(names)
    created = asyncio.run(ensure_topics(access, [TopicSpec(TopicRole.NODES, name, 2, FOREVER)]))
    assert created == [name]
    factor, configs = asyncio.run(_describe(access, name))
    assert factor == 1  # the stack broker's default.replication.factor
    assert configs["retention.ms"] == FOREVER


def test_min_insync_replicas_is_set_on_the_topic(settings: Settings, names: list[str]) -> None:
    access = kafka_access(settings)
    name = _name(names)
    spec = TopicSpec(TopicRole.NODES, name, 1, FOREVER, Replication(factor=1, min_insync=1))
    asyncio.run(ensure_topics(access, [spec]))
    _, configs = asyncio.run(_describe(access, name))
    assert configs["min.insync.replicas"] == "1"


def test_more_replicas_than_brokers_is_one_line_and_creates_nothing(
    settings: Settings, names: list[str]
) -> None:
    access = kafka_access(settings)
    name = _name(names)
    spec = TopicSpec(TopicRole.NODES, name, 1, FOREVER, Replication(factor=3))
    with pytest.raises(ConfigError, match=r"replication factor 3 but the cluster has 1 broker"):
        asyncio.run(ensure_topics(access, [spec]))
    assert not asyncio.run(_exists(access, name))


def test_a_topic_the_broker_refuses_is_an_error_not_a_silent_gap(
    settings: Settings, names: list[str]
) -> None:
    # Before: create_topics' per-topic errors were never read; the topic was simply missing.
    access = kafka_access(settings)
    name = _name(names)
    spec = TopicSpec(TopicRole.NODES, name, 1, "not-a-number")
    with pytest.raises(ConfigError, match=f"creating topic {name} was refused") as raised:
        asyncio.run(ensure_topics(access, [spec]))
    assert "\n" not in str(raised.value)
    assert not asyncio.run(_exists(access, name))


def test_settings_choose_replication_per_role(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MINRUNTIME_TOPIC_REPLICATION_FACTOR", "3")
    monkeypatch.setenv("MINRUNTIME_TOPIC_MIN_INSYNC_REPLICAS", "2")
    monkeypatch.setenv(
        "MINRUNTIME_TOPIC_REPLICATION",
        '{"dead_letter": {"replication_factor": 5, "min_insync_replicas": 3}, "ledger": {}}',
    )
    settings = Settings()
    specs = {spec.role: spec for spec in topic_specs(settings)}
    assert specs[TopicRole.PODGROUPS].replication == Replication(3, 2)
    assert specs[TopicRole.DEAD_LETTER].replication == Replication(5, 3)
    assert specs[TopicRole.DEAD_LETTER].configs["min.insync.replicas"] == "3"
    assert replication_for(settings, "ledger") == Replication(3, 2)


def test_an_unknown_role_in_the_settings_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from pydantic import ValidationError

    monkeypatch.setenv("MINRUNTIME_TOPIC_REPLICATION", '{"podgroup": {"replication_factor": 3}}')
    with pytest.raises(ValidationError, match="unknown topic roles"):
        Settings()


def test_the_bridge_ledger_is_compacted_and_replicated_like_the_rest(
    settings: Settings, names: list[str]
) -> None:
    from minruntime.cluster.ledger import ledger_spec

    access = kafka_access(settings)
    name = _name(names)
    spec = ledger_spec(settings.model_copy(update={"kube_ledger_topic": name}))
    asyncio.run(ensure_topics(access, [spec]))
    factor, configs = asyncio.run(_describe(access, name))
    assert (factor, configs["cleanup.policy"]) == (1, "compact")


def test_doctor_judges_the_local_stack_as_a_development_cluster(stack: StackStatus) -> None:
    done = run_cli("doctor")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("ok      kafka: 1 broker(s)")
    assert any(
        line.startswith("note    kai.podgroups: replication factor 1 on a single-broker")
        for line in lines
    )
    assert any("a primary" in line for line in lines if line.split()[1] == "postgresql:")


def test_doctor_fails_on_a_runtime_url_that_may_reach_a_standby(stack: StackStatus) -> None:
    from minruntime.pgurl import PgAddress

    address = PgAddress.parse(Settings().database_url)
    both = f"{address.host}:{address.port},{address.host}:{address.port}"
    url = address.uri().replace(f"{address.host}:{address.port}", both)
    done = run_cli("doctor", "--json", env={"MINRUNTIME_DATABASE_URL": url})
    assert done.returncode == 1, done.stderr
    unsafe = [f for f in json.loads(done.stdout) if f["severity"] == "unsafe"]
    assert [f["subject"] for f in unsafe] == ["postgresql"]
    assert "target_session_attrs=read-write" in unsafe[0]["message"]
