"""KAI's evictions, seen by the real bridge on the real API server (`stack up --kube`).

The test plays KAI exactly as it evicts by default (pkg/scheduler/cache/cache.go evict(),
status_updater/default_status_updater.go Evicted(), evictor/default_evictor.go): a core/v1
Event with reason ``Evict`` on the PodGroup, reported by ``kai-scheduler``, with the
``evictor-*`` annotations; a plain DELETE of the pod (its grace period: it lingers, as no
kubelet runs here, until the test deletes it with grace 0 as the kubelet would); the
PodGroup's ``kai.scheduler/last-eviction-timestamp`` in UTC whole seconds. Then it reads what
the bridge produced, and the run the processor ended.
"""

from __future__ import annotations

import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from minruntime.cluster.evictions import LAST_EVICTION_ANNOTATION
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from minruntime_dev.standin import rfc3339
from tests.conftest import free_ports
from tests.e2e.harness import wait_for
from tests.e2e.kubeloop import KubeProcess, KubeScene, kube_scene

pytestmark = pytest.mark.stack

WINDOW_SECONDS = 3


@dataclass
class Evictions(KubeScene):
    """A pipeline and a bridge (window 3 s, metrics on a port of its own)."""

    bridge: KubeProcess = field(init=False)
    metrics_port: int = field(init=False)

    def start_bridge(self) -> None:
        self.bridge = self.kube(
            "bridge",
            MINRUNTIME_KUBE_EVICTION_WINDOW_SECONDS=str(WINDOW_SECONDS),
            MINRUNTIME_KUBE_BRIDGE_METRICS_PORT=str(self.metrics_port),
        ).start()
        wait_for(lambda: "watching" in self.bridge.log_tail(), 60, "the bridge to watch")

    def running_gang(self, name: str, queue: str, pods: int, node: str) -> str:
        """A PodGroup whose pods KAI bound and the kubelet runs; its uid."""
        cluster = self.cluster
        uid = cluster.podgroup(name, queue, self.name("train"))
        names = [f"{name}-{index}" for index in range(pods)]
        for pod in names:
            cluster.pod(pod, name, 1)
        start = datetime.now(UTC).replace(microsecond=0) - timedelta(seconds=5)
        cluster.start(name, names, node, start, start)
        wait_for(lambda: len(self.logged("podgroup.allocated", uid)) == pods, 60, f"{name} running")
        return uid

    def evict_event(
        self, victim: str, pod: str, evictor: str, action: str, component: str = "kai-scheduler"
    ) -> None:
        """The Event KAI's recorder writes for one evicted pod (client-go's record package)."""
        podgroup = self.cluster.get_podgroup(victim)["metadata"]
        now = rfc3339(datetime.now(UTC))
        namespace = self.cluster.namespace
        body: dict[str, Any] = {
            "metadata": {
                "name": f"{victim}.{uuid.uuid4().hex[:16]}",
                "namespace": namespace,
                "annotations": {
                    "evictor-action-type": action,
                    "evictor-pod-group-name": evictor,
                    "evictor-pod-group-namespace": namespace,
                    "num-evicted-pods": "1",
                },
            },
            "involvedObject": {
                "apiVersion": "scheduling.run.ai/v2alpha2",
                "kind": "PodGroup",
                "name": victim,
                "namespace": namespace,
                "uid": podgroup["uid"],
                "resourceVersion": podgroup["resourceVersion"],
            },
            "reason": "Evict",
            "message": f"Pod {namespace}/{pod} was preempted by workload {namespace}/{evictor}.",
            "source": {"component": component},
            "reportingComponent": component,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": "Normal",
        }
        self.cluster.core.create_namespaced_event(namespace, body)

    def kai_deletes(self, pod: str, grace: int | None = None) -> None:
        """KAI's plain DELETE (DeleteOptions{}: the pod's own grace period)."""
        self.cluster.core.delete_namespaced_pod(
            pod, self.cluster.namespace, grace_period_seconds=grace
        )

    def stamp_eviction(self, podgroup: str) -> None:
        """KAI's status updater: last-eviction-timestamp, UTC, whole seconds."""
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.cluster.annotate_podgroup(podgroup, {LAST_EVICTION_ANNOTATION: now})

    def releases(self, uid: str, count: int) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = wait_for(
            lambda: (found := self.logged("podgroup.released", uid)) and len(found) >= count
            and [event["data"] for event in found],
            60,
            f"{count} release(s) of {uid}",
        )  # fmt: skip
        return found

    def metric(self, name: str, labels: str) -> float:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=10) as reply:
            text = reply.read().decode()
        line = next(row for row in text.splitlines() if row.startswith(f"{name}{{{labels}}}"))
        return float(line.rsplit(" ", 1)[1])


@pytest.fixture(scope="module")
def scene(
    kube_stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Evictions]:
    with kube_scene(Evictions, kube_stack, settings, tmp_path_factory, "kevict", "evict") as scene:
        scene.metrics_port = free_ports()
        queue, hogs = scene.name("kvictims"), scene.name("khogs")
        scene.apply_queue(queue)
        scene.apply_queue(hogs)
        scene.cluster.priority_class(scene.name("train"), 50)
        scene.cluster.node(scene.name("gpu"), scene.name("pool"), 64)
        scene.cluster.podgroup("hog", hogs, scene.name("train"))
        scene.start_bridge()
        try:
            yield scene
        finally:
            scene.bridge.stop()


def test_kai_evictions_are_evicted_runs_naming_the_action_and_the_evictor(
    scene: Evictions,
) -> None:
    uid = scene.running_gang("gang", scene.name("kvictims"), 2, scene.name("gpu"))
    for pod in ("gang-0", "gang-1"):
        scene.evict_event("gang", pod, "hog", "reclaim")
        scene.kai_deletes(pod)  # terminating: no kubelet here
    scene.stamp_eviction("gang")
    for pod in ("gang-0", "gang-1"):
        scene.cluster.finish_eviction(pod)  # the kubelet, once the containers exited

    releases = scene.releases(uid, 2)
    assert sorted(pod for data in releases for pod in data["pods"]) == ["gang-0", "gang-1"]
    for data in releases:
        assert data["reason"] == "evicted"
        eviction = data["eviction"]
        assert eviction["source"] == "event"
        assert eviction["action"] == "reclaim"
        assert eviction["evictor"] == f"{scene.cluster.namespace}/hog"
        assert eviction["evictorQueue"] == scene.name("khogs")
    [(ended_by,)] = wait_for(
        lambda: scene.pipeline.query("SELECT ended_by FROM minruntime.runs WHERE uid = %s", (uid,)),
        60,
        "the run to end",
    )
    assert ended_by == "evicted"


def test_a_deletion_before_its_event_waits_and_a_plain_deletion_stays_deleted(
    scene: Evictions,
) -> None:
    queue, node = scene.name("kvictims"), scene.name("gpu")
    first = scene.running_gang("first", queue, 1, node)
    plain = scene.running_gang("plain", queue, 1, node)
    foreign = scene.running_gang("foreign", queue, 1, node)
    stamped = scene.running_gang("stamped", queue, 1, node)

    scene.kai_deletes("first-0", grace=0)  # gone at once: the release waits for the Event
    scene.kai_deletes("plain-0", grace=0)  # a user's deletion: nothing follows
    scene.evict_event("foreign", "foreign-0", "hog", "preempt", component="default-scheduler")
    scene.kai_deletes("foreign-0", grace=0)
    scene.kai_deletes("stamped-0", grace=0)
    scene.stamp_eviction("stamped")  # the annotation alone
    scene.evict_event("first", "first-0", "hog", "preempt")

    [attributed] = scene.releases(first, 1)
    assert attributed["reason"] == "evicted"
    assert attributed["eviction"]["action"] == "preempt"
    for uid in (plain, foreign):
        [unattributed] = scene.releases(uid, 1)
        assert unattributed == {"uid": uid, "pods": [unattributed["pods"][0]], "reason": "deleted"}
    [by_annotation] = scene.releases(stamped, 1)
    assert by_annotation["reason"] == "evicted"
    assert by_annotation["eviction"]["source"] == "annotation"
    assert set(by_annotation["eviction"]) == {"source", "at"}

    signals = "minruntime_kube_bridge_eviction_signals_total"
    assert scene.metric(signals, 'outcome="other_source",signal="event"') >= 1
    releases = "minruntime_kube_bridge_deletion_releases_total"
    assert scene.metric(releases, 'attribution="none"') >= 2


def test_a_pod_evicted_while_no_bridge_watched_is_attributed_from_the_listed_event(
    scene: Evictions,
) -> None:
    uid = scene.running_gang("unseen", scene.name("kvictims"), 1, scene.name("gpu"))
    scene.bridge.kill()
    scene.evict_event("unseen", "unseen-0", "hog", "consolidation")
    scene.kai_deletes("unseen-0", grace=0)
    scene.start_bridge()  # reads its ledger, lists the Events, finds the pod gone
    [release] = scene.releases(uid, 1)
    assert release["reason"] == "evicted"
    assert release["eviction"]["action"] == "consolidation"
    assert release["eviction"]["evictor"] == f"{scene.cluster.namespace}/hog"
