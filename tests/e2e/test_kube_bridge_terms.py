"""The bridge across terms, against the real API server: restarts that send only what changed
and write no dead letter, a takeover in the middle of a first listing where the two replicas
never produce at once, and objects at the API server's own bounds.

Real processes: the API server, Kafka, PostgreSQL, `minruntime processor` and
`minruntime kube bridge` replicas (no worker, no evictor: nothing here is requeued).
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from minruntime.cluster.bridge import PRODUCER_HEADER
from minruntime.cluster.mapping import LAST_START_ANNOTATION, POD_GROUP_ANNOTATION
from minruntime.kafka_access import start_client
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from minruntime_dev.standin import rfc3339
from tests.e2e.harness import wait_for
from tests.e2e.kubeloop import KubeProcess, KubeScene, kube_scene

pytestmark = pytest.mark.stack

LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"


@dataclass
class Terms(KubeScene):
    """A pipeline, a namespace of the real API server, and the bridge replicas' settings."""

    def bridge(self, identity: str, **env: str) -> KubeProcess:
        return self.kube("bridge", MINRUNTIME_KUBE_IDENTITY=identity, **env).start()

    def dead_letters(self) -> int:
        return int(self.pipeline.query("SELECT count(*) FROM minruntime.dead_letters")[0][0])

    def row(self, uid: str) -> tuple[Any, ...] | None:
        rows = self.pipeline.query(
            "SELECT status, running_pods, expected_runtime FROM minruntime.podgroups"
            " WHERE uid = %s",
            (uid,),
        )
        return tuple(rows[0]) if rows else None

    def records(self) -> list[tuple[str, str, int, str]]:
        """(topic, producer identity, timestamp ms, key) of every record the bridges wrote to
        the input topics, aborted transactions included (read uncommitted)."""
        return asyncio.run(self._records())

    def records_about(self, *subjects: str) -> int:
        """How many records name one of `subjects` (the bridge watches the whole cluster:
        other tests' objects may change meanwhile)."""
        return sum(1 for record in self.records() if record[3] in subjects)

    async def _records(self) -> list[tuple[str, str, int, str]]:
        from aiokafka import AIOKafkaConsumer, TopicPartition
        from aiokafka.admin import AIOKafkaAdminClient

        consumer = AIOKafkaConsumer(
            **self.pipeline.kafka.client_kwargs(), isolation_level="read_uncommitted"
        )
        await start_client(consumer, self.pipeline.kafka)
        found: list[tuple[str, str, int, str]] = []
        try:
            admin = AIOKafkaAdminClient(**self.pipeline.kafka.client_kwargs())
            await start_client(admin, self.pipeline.kafka)
            try:
                names = [self.pipeline.topics[role] for role in ("queues", "podgroups", "nodes")]
                described = await admin.describe_topics(names)
            finally:
                await admin.close()
            partitions = [
                TopicPartition(topic["topic"], partition["partition"])
                for topic in described
                for partition in topic["partitions"]
            ]
            consumer.assign(partitions)
            await consumer.seek_to_beginning(*partitions)
            ends = await consumer.end_offsets(partitions)
            while [tp for tp, end in ends.items() if await consumer.position(tp) < end]:
                for batch in (await consumer.getmany(timeout_ms=1000)).values():
                    for record in batch:
                        who = dict(record.headers).get(PRODUCER_HEADER, b"?").decode()
                        key = (record.key or b"").decode()
                        found.append((record.topic, who, record.timestamp, key))
        finally:
            await consumer.stop()
        return found


@pytest.fixture(scope="module")
def terms(
    kube_stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Terms]:
    with kube_scene(Terms, kube_stack, settings, tmp_path_factory, "terms", "terms") as terms:
        suffix, cluster = terms.suffix, terms.cluster
        terms.apply_queue(f"tq-{suffix}")
        cluster.priority_class(f"tp-{suffix}", 50)
        cluster.node(f"tn-{suffix}", f"pool-{suffix}", 64)
        yield terms


def gang(terms: Terms, name: str, pods: int, started: bool = True, **extra: Any) -> str:
    """A PodGroup of `pods` pods, bound and running when `started` (as KAI and the kubelet
    would make it)."""
    cluster = terms.cluster
    uid = cluster.podgroup(name, f"tq-{terms.suffix}", f"tp-{terms.suffix}", **extra)
    names = [f"{name}-{i}" for i in range(pods)]
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda pod: cluster.pod(pod, name, 1), names))
    if started:
        now = datetime.now(UTC).replace(microsecond=0)
        cluster.start(name, names, f"tn-{terms.suffix}", now, now)
    return uid


def test_a_restart_sends_only_what_changed_while_no_bridge_watched(terms: Terms) -> None:
    steady = gang(terms, "steady", 2)
    changing = gang(terms, "changing", 3)
    shrinking = gang(terms, "shrinking", 3)
    bridge = terms.bridge("first")
    try:
        wait_for(
            lambda: all(
                (r := terms.row(uid)) and r[0] == "running" for uid in (steady, changing, shrinking)
            ),
            90,
            "the three gangs running",
        )
    finally:
        bridge.kill()
    ours = (steady, changing, shrinking)
    records_before = terms.records_about(*ours)
    dead_before = terms.dead_letters()

    # While no bridge watches: KAI restarts `changing` (a new last-start-timestamp), a user
    # gives it an expected runtime; one pod of `shrinking` goes away (the gang keeps two).
    later = datetime.now(UTC).replace(microsecond=0)
    terms.cluster.annotate_podgroup(
        "changing",
        {LAST_START_ANNOTATION: rfc3339(later), "kai.scheduler/expected-runtime": "2h"},
    )
    terms.cluster.finish_eviction("shrinking-2")

    bridge = terms.bridge("second")
    try:
        wait_for(lambda: "watching" in bridge.log_tail(), 60, "the second bridge watching")
        wait_for(
            lambda: (r := terms.row(changing)) and r[2] is not None and r,
            60,
            "the expected runtime to reach the service",
        )
        wait_for(
            lambda: (r := terms.row(shrinking)) and r[1] == 2, 60, "shrinking to hold two pods"
        )
    finally:
        bridge.stop()
    [annotated] = terms.logged("podgroup.annotated", changing)
    assert annotated["data"]["annotations"] == {
        LAST_START_ANNOTATION: rfc3339(later),
        "kai.scheduler/expected-runtime": "2h",
    }
    [released] = terms.logged("podgroup.released", shrinking)
    assert released["data"] == {"uid": shrinking, "pods": ["shrinking-2"], "reason": "deleted"}
    assert terms.dead_letters() == dead_before == 0
    # What the restart sent: the annotation and the release, nothing of the steady gang.
    assert terms.records_about(*ours) - records_before == 2
    assert len(terms.logged("podgroup.submitted", steady)) == 1

    # A third start on the unchanged cluster sends nothing at all.
    bridge = terms.bridge("third")
    try:
        wait_for(lambda: "watching" in bridge.log_tail(), 60, "an idle restart")
    finally:
        bridge.stop()
    assert terms.records_about(*ours) - records_before == 2


def test_two_replicas_never_produce_at_once_through_a_takeover_mid_listing(
    terms: Terms,
) -> None:
    # A first listing slowed down to many pages (one pod each) so that the active replica is
    # frozen (SIGSTOP: it cannot renew, cannot send) in the middle of it.
    for index in range(6):
        gang(terms, f"many{index}", 20, started=index % 2 == 0)
    slow = {"MINRUNTIME_KUBE_LIST_PAGE_SIZE": "1"}
    replicas = {name: terms.bridge(name, **slow) for name in ("a", "b")}
    active = wait_for(
        lambda: next(
            (name for name, p in replicas.items() if "listing the cluster" in p.log_tail()), None
        ),
        60,
        "one replica listing",
    )
    standby = "b" if active == "a" else "a"
    try:
        process = replicas[active].process
        assert process is not None
        process.send_signal(signal.SIGSTOP)
        frozen_at = datetime.now(UTC).timestamp() * 1000
        wait_for(lambda: "watching" in replicas[standby].log_tail(), 90, "the standby taking over")
        process.send_signal(signal.SIGCONT)  # it wakes up past its lease
        wait_for(
            lambda: "term ended" in replicas[active].log_tail(), 30, "the old replica standing down"
        )
        running = [f"many{index}" for index in range(0, 6, 2)]
        uids = {name: terms.cluster.get_podgroup(name)["metadata"]["uid"] for name in running}
        wait_for(
            lambda: all((r := terms.row(uid)) and r[1] == 20 for uid in uids.values()),
            60,
            "every running gang in SQL",
        )
    finally:
        for replica in replicas.values():
            replica.stop()
    spans: dict[str, tuple[int, int]] = {}
    for _, who, stamp, _ in terms.records():
        low, high = spans.get(who, (stamp, stamp))
        spans[who] = (min(low, stamp), max(high, stamp))
    assert standby in spans
    if active in spans:  # it may have been frozen before it sent anything
        assert spans[active][1] <= frozen_at < spans[standby][0]
    assert terms.dead_letters() == 0


def test_objects_at_the_api_servers_bounds_neither_crash_nor_stop_the_bridge(
    terms: Terms,
) -> None:
    bridge = terms.bridge("bounds")
    try:
        wait_for(lambda: "watching" in bridge.log_tail(), 60, "the bridge watching")
        # A name at the API server's 253-character bound (a PodGroup's and its pod's), and
        # an annotation over the contract's 64 KiB value bound (the API server allows 256 KiB
        # for all of an object's annotations).
        long_name = ("x" * 61 + ".") * 4 + "y"
        assert len(long_name) == 249
        long_uid = terms.cluster.podgroup(long_name, f"tq-{terms.suffix}", f"tp-{terms.suffix}")
        pod_name = long_name + "-0"
        terms.cluster.core.create_namespaced_pod(
            terms.cluster.namespace,
            {
                "metadata": {"name": pod_name, "annotations": {POD_GROUP_ANNOTATION: long_name}},
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [{"name": "main", "image": "busybox"}],
                },
            },
        )
        now = datetime.now(UTC).replace(microsecond=0)
        terms.cluster.start(long_name, [pod_name], f"tn-{terms.suffix}", now, now)
        huge = {"example.com/blob": "b" * 200_000, "kai.scheduler/expected-runtime": "3h"}
        huge_uid = gang(terms, "huge", 1, annotations=huge)
        wait_for(
            lambda: (r := terms.row(long_uid)) and r[0] == "running", 60, "the long name applied"
        )
        row = wait_for(
            lambda: (r := terms.row(huge_uid)) and r[0] == "running" and r, 60, "huge applied"
        )
        assert row[2] is not None  # its expected runtime was sent, the blob was not
        assert "annotation(s) over the contract's bounds not sent" in bridge.log_tail(200)
        [submitted] = terms.logged("podgroup.submitted", huge_uid)
        assert "example.com/blob" not in submitted["data"]["annotations"]
        assert terms.dead_letters() == 0
        assert bridge.process is not None
        assert bridge.process.poll() is None
    finally:
        bridge.stop()


def test_a_pod_without_kais_scheduler_is_not_watched(terms: Terms) -> None:
    from kubernetes import client

    uid = terms.cluster.podgroup("other", f"tq-{terms.suffix}", f"tp-{terms.suffix}")
    client.CoreV1Api(terms.cluster.api).create_namespaced_pod(
        terms.cluster.namespace,
        {
            "metadata": {"name": "other-0", "annotations": {POD_GROUP_ANNOTATION: "other"}},
            "spec": {"containers": [{"name": "main", "image": "busybox"}]},
        },
    )
    bridge = terms.bridge("selector")
    try:
        wait_for(lambda: "watching" in bridge.log_tail(), 60, "the bridge watching")
        gang(terms, "kai", 1)
        kai_uid = terms.cluster.get_podgroup("kai")["metadata"]["uid"]
        wait_for(lambda: terms.row(kai_uid), 60, "the KAI gang applied")
        assert terms.row(uid) is None  # the default scheduler's pod is not KAI's to protect
    finally:
        bridge.stop()


def test_the_preemption_delay_and_last_eviction_are_mapped_from_the_api_server(
    terms: Terms,
) -> None:
    """spec.preemptionDelay, a pod's kai.scheduler/preemption-delay annotation and KAI's
    kai.scheduler/last-eviction-timestamp reach the projection as SEMANTICS.md §10 says."""
    cluster = terms.cluster
    bridge = terms.bridge("delay")
    try:
        wait_for(lambda: "watching" in bridge.log_tail(), 60, "the bridge watching")
        spec_uid = gang(terms, "delayed-spec", 2, started=False, preemptionDelay="10m")
        pod_uid = cluster.podgroup("delayed-pod", f"tq-{terms.suffix}", f"tp-{terms.suffix}")
        for i, delay in enumerate(("nonsense", "7m")):
            cluster.core.create_namespaced_pod(
                cluster.namespace,
                {
                    "metadata": {
                        "name": f"delayed-pod-{i}",
                        "annotations": {
                            POD_GROUP_ANNOTATION: "delayed-pod",
                            "kai.scheduler/preemption-delay": delay,
                        },
                    },
                    "spec": {
                        "schedulerName": "kai-scheduler",
                        "containers": [{"name": "main", "image": "busybox"}],
                    },
                },
            )

        def window(uid: str) -> tuple[Any, ...] | None:
            rows = terms.pipeline.query(
                "SELECT submitted_preemption_delay, submitted_preemption_delay_pod,"
                " eviction_annotated_at, preemption_delay_ends_at, submitted_at"
                " FROM minruntime_state.podgroup_state WHERE uid = %s AND submitted",
                (uid,),
            )
            return tuple(rows[0]) if rows else None

        spec_row = wait_for(lambda: window(spec_uid), 60, "the spec's delay applied")
        assert spec_row[:3] == (timedelta(minutes=10), None, None)
        assert spec_row[3] == spec_row[4] + timedelta(minutes=10)
        pod_row = wait_for(
            lambda: (r := window(pod_uid)) and r[1] == "delayed-pod-1" and r, 60, "pod delay"
        )
        assert pod_row[0] == timedelta(minutes=7)
        assert pod_row[3] == pod_row[4] + timedelta(minutes=7)
        # Submitted again as each pod appeared: the last submission lists both.
        submitted = terms.logged("podgroup.submitted", pod_uid)[-1]
        assert [pod.get("annotations") for pod in submitted["data"]["pods"]] == [
            {"kai.scheduler/preemption-delay": "nonsense"},
            {"kai.scheduler/preemption-delay": "7m"},
        ]

        # KAI evicted it and wrote when: the window starts again there.
        evicted = datetime.now(UTC).replace(microsecond=0)
        cluster.annotate_podgroup("delayed-spec", {LAST_EVICTION: rfc3339(evicted)})
        spec_row = wait_for(
            lambda: (r := window(spec_uid)) and r[2] is not None and r, 60, "the eviction"
        )
        assert spec_row[2] == evicted
        assert spec_row[3] == evicted + timedelta(minutes=10)
        assert terms.dead_letters() == 0
    finally:
        bridge.stop()
