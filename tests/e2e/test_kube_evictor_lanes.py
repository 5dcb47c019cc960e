"""The evictor on the real API server: one PodDisruptionBudget that never allows an eviction
holds back only its own gang. Nine other committed requeues are carried out within seconds
behind it; the blocked one is abandoned at its (short, test-set) deadline as
`requeue.abandoned` (reason `pdb`); an evictor restarted mid-way resumes exactly once.

Run in-process (`consume` in a thread) against the stack's Kafka and API server, on topics
of its own (no processor or worker: the decisions are produced as the worker would send them).
"""

from __future__ import annotations

import asyncio
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from prometheus_client import CollectorRegistry

from minruntime.cluster.api import api_client
from minruntime.cluster.evictor import Evictor, consume
from minruntime.cluster.mapping import REQUEUE_DECISION_ANNOTATION
from minruntime.cluster.metrics import EvictorMetrics
from minruntime.events import RequeueAbandonedData, decode_event, encode_event, new_event
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.topic_admin import ensure_topics, topic_specs
from minruntime_dev.stack import StackStatus
from minruntime_dev.standin import Cluster
from tests.e2e.harness import wait_for
from tests.e2e.kubeapi import admin_client

GANGS = 10
DEADLINE_SECONDS = 12.0


class RunningEvictor:
    """`consume` in a thread of this process, until `stop()`."""

    def __init__(self, settings: Settings) -> None:
        self.stop_event = threading.Event()
        self.metrics = EvictorMetrics(CollectorRegistry())
        evictor = Evictor(api_client(settings))
        self.evictor = evictor
        self.thread = threading.Thread(
            target=lambda: asyncio.run(consume(settings, evictor, self.stop_event, self.metrics)),
            daemon=True,
        )
        self.thread.start()

    def count(self, outcome: str) -> float:
        return float(self.metrics.decisions.labels(outcome)._value.get())

    def stop(self) -> None:
        self.stop_event.set()
        self.thread.join(30)
        assert not self.thread.is_alive()


@contextmanager
def evictor_scene(
    kube_stack: StackStatus, settings: Settings, prefix: str, **updates: Any
) -> Iterator[tuple[Settings, Cluster]]:
    """Topics, a consumer group and a namespace of their own (`prefix`-<random>), with a
    GPU node; everything removed after."""
    assert kube_stack.kubeconfig is not None
    suffix = uuid.uuid4().hex[:6]
    scoped = settings.model_copy(
        update={
            "topic_requeue_decisions": f"{prefix}-{suffix}.decisions",
            "topic_podgroups": f"{prefix}-{suffix}.podgroups",
            "evictor_group": f"{prefix}-{suffix}",
            "kube_backoff_max_seconds": 1.0,
            **updates,
        }
    )
    specs = [
        spec
        for spec in topic_specs(scoped)
        if spec.name in (scoped.topic_requeue_decisions, scoped.topic_podgroups)
    ]
    asyncio.run(ensure_topics(kafka_access(scoped), specs))
    cluster = Cluster(admin_client(kube_stack.kubeconfig), f"{prefix}-{suffix}")
    cluster.node(f"{cluster.namespace}-gpu", "default", 2 * GANGS)
    try:
        yield scoped, cluster
    finally:
        cluster.remove_everything()
        cluster.core.delete_node(f"{cluster.namespace}-gpu")


@pytest.fixture
def scene(kube_stack: StackStatus, settings: Settings) -> Iterator[tuple[Settings, Cluster]]:
    with evictor_scene(
        kube_stack,
        settings,
        "lanes",
        # One partition: every decision behind the blocked one stays uncommitted, so a
        # restart reads all nine done ones again (the worst case for "exactly once").
        decision_partitions=1,
        evictor_deadline_seconds=DEADLINE_SECONDS,
    ) as made:
        yield made


def committed(uid: str, index: int, now: datetime) -> Any:
    data = {
        "uid": uid,
        "nominatedBy": ["expectedruntime"],
        "beneficiaries": ["pending-pg"],
        "requeueNotBefore": now + timedelta(minutes=5),
        "decidedAt": now,
    }
    return new_event("requeue.committed", data, time=now, id=f"d-{index}-{uid[:8]}")


async def produce(settings: Settings, events: list[Any]) -> None:
    producer = AIOKafkaProducer(**kafka_access(settings).client_kwargs())
    await producer.start()
    try:
        for event in events:
            await producer.send_and_wait(
                settings.topic_requeue_decisions, encode_event(event), key=event.subject.encode()
            )
    finally:
        await producer.stop()


async def abandoned_events(settings: Settings) -> list[Any]:
    consumer = AIOKafkaConsumer(
        settings.topic_podgroups,
        **kafka_access(settings).client_kwargs(),
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    try:
        batches = await consumer.getmany(timeout_ms=2000)
        return [decode_event(r.value) for records in batches.values() for r in records]
    finally:
        await consumer.stop()


async def committed_offset(settings: Settings) -> int | None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**kafka_access(settings).client_kwargs())
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(settings.evictor_group)
    finally:
        await admin.close()
    return sum(meta.offset for meta in offsets.values()) if offsets else None


def test_a_blocked_gang_holds_back_nothing_and_is_abandoned_at_its_deadline(
    scene: tuple[Settings, Cluster],
) -> None:
    settings, cluster = scene
    cluster.priority_class(f"{cluster.namespace}-low", 10)
    node = f"{cluster.namespace}-gpu"
    uids, names = [], [f"gang-{i}" for i in range(GANGS)]
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    for name in names:
        uids.append(cluster.podgroup(name, "train", f"{cluster.namespace}-low"))
        cluster.pod(f"{name}-0", name, 1)
        cluster.pod(f"{name}-1", name, 1)
        # Running (a Pending pod is evicted whatever its budget says).
        cluster.start(name, [f"{name}-0", f"{name}-1"], node, start, start)
    from kubernetes import client

    client.PolicyV1Api(cluster.api).create_namespaced_pod_disruption_budget(
        cluster.namespace,
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "never"},
            "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "gang-0"}}},
        },
    )
    now = datetime.now(UTC)
    decisions = [committed(uid, i, now) for i, uid in enumerate(uids)]  # gang-0's first
    asyncio.run(produce(settings, decisions))

    def marked() -> list[str]:
        return [
            name
            for name in names
            if (cluster.get_podgroup(name)["metadata"].get("annotations") or {}).get(
                REQUEUE_DECISION_ANNOTATION
            )
        ]

    started = time.monotonic()
    first = RunningEvictor(settings)
    try:
        wait_for(lambda: len(marked()) == GANGS - 1, 30, "the nine other requeues carried out")
        behind = time.monotonic() - started
        assert "gang-0" not in marked()
        assert all(cluster.get_pod(f"gang-0-{i}") is not None for i in range(2))  # kept
        assert first.count("carried_out") == GANGS - 1
        # Nothing committed: the first decision of the partition is still open.
    finally:
        first.stop()
    assert behind < DEADLINE_SECONDS, behind  # not held back by the blocked gang
    assert asyncio.run(committed_offset(settings)) in (None, 0)

    # Restarted mid-way: every decision is read again; the nine done ones are found done
    # (nothing evicted twice), the blocked one waits until its deadline, then is abandoned.
    second = RunningEvictor(settings)
    try:
        wait_for(lambda: second.count("already_done") == GANGS - 1, 30, "the nine found done")
        events = wait_for(
            lambda: [
                e for e in asyncio.run(abandoned_events(settings)) if e.type == "requeue.abandoned"
            ],
            DEADLINE_SECONDS + 30,
            "gang-0's requeue abandoned",
        )
        abandoned_at = datetime.now(UTC)
        wait_for(lambda: asyncio.run(committed_offset(settings)) == GANGS, 30, "all committed")
    finally:
        second.stop()
    assert second.count("carried_out") == 0
    assert [e.id for e in events] == [f"{decisions[0].id}.abandoned"]
    data = events[0].data
    assert isinstance(data, RequeueAbandonedData)
    assert (data.uid, data.reason, data.decision) == (uids[0], "pdb", decisions[0].id)
    assert data.deadline == decisions[0].data.decided_at + timedelta(seconds=DEADLINE_SECONDS)
    assert abandoned_at >= data.deadline
    assert abandoned_at - data.deadline < timedelta(seconds=10)  # at its deadline, not later
    assert all(cluster.get_pod(f"gang-0-{i}") is not None for i in range(2))
