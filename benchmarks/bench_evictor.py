"""The evictor against the local API server: N committed requeues (one running pod each), the
time until every PodGroup carries its decision's mark; with --blocked, one more gang behind
a PodDisruptionBudget that never allows an eviction, read first.

Needs the stack with the API server (`minruntime stack up --kube`). Run in-process
(`cluster.evictor.consume` in a thread) on topics of its own; cleans up its namespace.

    python benchmarks/bench_evictor.py --requeues 100 [--blocked] [--concurrency 16]
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from aiokafka import AIOKafkaProducer
from kubernetes import client
from prometheus_client import CollectorRegistry

from minruntime.cluster.api import KAI_GROUP, api_client
from minruntime.cluster.evictor import Evictor, consume
from minruntime.cluster.mapping import REQUEUE_DECISION_ANNOTATION
from minruntime.cluster.metrics import EvictorMetrics
from minruntime.events import encode_event, new_event
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.topic_admin import ensure_topics, topic_specs
from minruntime_dev.standin import Cluster


def marked(cluster: Cluster) -> int:
    """How many PodGroups of the namespace carry a decision mark."""
    listed = cluster.custom.list_namespaced_custom_object(
        KAI_GROUP, "v2alpha2", cluster.namespace, "podgroups"
    )
    return sum(
        1
        for item in listed.get("items", [])
        if (item["metadata"].get("annotations") or {}).get(REQUEUE_DECISION_ANNOTATION)
    )


async def produce(settings: Settings, events: list[Any]) -> None:
    producer = AIOKafkaProducer(**kafka_access(settings).client_kwargs(), linger_ms=5)
    await producer.start()
    try:
        for event in events:
            await producer.send(
                settings.topic_requeue_decisions, encode_event(event), key=event.subject.encode()
            )
        await producer.flush()
    finally:
        await producer.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requeues", type=int, default=100)
    parser.add_argument("--blocked", action="store_true")
    parser.add_argument("--concurrency", type=int, default=16)
    args = parser.parse_args()

    suffix = uuid.uuid4().hex[:6]
    settings = Settings().model_copy(
        update={
            "topic_requeue_decisions": f"bench-evict-{suffix}.decisions",
            "topic_podgroups": f"bench-evict-{suffix}.podgroups",
            "evictor_group": f"bench-evict-{suffix}",
            "evictor_concurrency": args.concurrency,
            "kube_backoff_max_seconds": 2.0,
        }
    )
    wanted = {settings.topic_requeue_decisions, settings.topic_podgroups}
    specs = [spec for spec in topic_specs(settings) if spec.name in wanted]
    asyncio.run(ensure_topics(kafka_access(settings), specs))
    api = api_client(settings)
    cluster = Cluster(api, f"bench-evict-{suffix}")
    node = f"bench-evict-{suffix}"
    cluster.node(node, "default", 8 * (args.requeues + 1))
    cluster.priority_class(f"{node}-low", 10)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    names = ["blocked"] if args.blocked else []
    names += [f"gang-{i}" for i in range(args.requeues)]
    setup = time.perf_counter()
    uids = []
    for name in names:
        uids.append(cluster.podgroup(name, "train", f"{node}-low"))
        cluster.pod(f"{name}-0", name, 1)
        cluster.start(name, [f"{name}-0"], node, start, start)
    if args.blocked:
        client.PolicyV1Api(api).create_namespaced_pod_disruption_budget(
            cluster.namespace,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": "never"},
                "spec": {"maxUnavailable": 0, "selector": {"matchLabels": {"app": "blocked"}}},
            },
        )
    setup_seconds = time.perf_counter() - setup
    now = datetime.now(UTC)
    events = [
        new_event(
            "requeue.committed",
            {
                "uid": uid,
                "nominatedBy": ["expectedruntime"],
                "beneficiaries": ["pending"],
                "requeueNotBefore": now + timedelta(minutes=5),
                "decidedAt": now,
            },
            time=now,
        )
        for uid in uids
    ]
    asyncio.run(produce(settings, events))

    stop = threading.Event()
    evictor = Evictor(api)
    metrics = EvictorMetrics(CollectorRegistry())
    thread = threading.Thread(
        target=lambda: asyncio.run(consume(settings, evictor, stop, metrics)), daemon=True
    )
    started = time.perf_counter()
    thread.start()
    try:
        while marked(cluster) < args.requeues:
            if time.perf_counter() - started > 600:
                raise SystemExit("not done within 600 s")
            time.sleep(0.2)
        elapsed = time.perf_counter() - started
    finally:
        stop.set()
        thread.join(30)
        cluster.remove_everything()
        cluster.core.delete_node(node)
    print(
        f"evictor: {args.requeues} committed requeues carried out in {elapsed:.1f} s "
        f"({args.requeues / elapsed:.1f}/s), concurrency {args.concurrency}, "
        f"blocked PDB in front: {'yes' if args.blocked else 'no'} (setup {setup_seconds:.1f} s)"
    )


if __name__ == "__main__":
    main()
