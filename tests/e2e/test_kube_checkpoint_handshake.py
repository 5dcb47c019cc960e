"""The checkpoint handshake on the real API server: the evictor asks a PodGroup that declares
`minruntime.kai.scheduler/checkpoint-grace` for a checkpoint before evicting it, and waits.

- acknowledged: the workload (`minruntime checkpoint ack`'s client, on a thread) writes
  `checkpointed-at`; the eviction follows it, long before the grace;
- timed out: nobody answers; the eviction happens at requested-at + the grace, not before and
  not much later;
- the PodGroup deleted mid-wait: the wait ends at once (`gone`), the decision is abandoned
  (`not_found`), nothing is evicted;
- the evictor restarted mid-wait: the second one resumes the first one's request (one
  request, one eviction, one `requeue.checkpoint`), timed out on the first request's clock.

Graces of a few seconds. The evictor runs in-process (as in test_kube_evictor_lanes.py).
"""

from __future__ import annotations

import asyncio
import subprocess
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from minruntime.cluster.checkpoint_ack import acknowledge
from minruntime.cluster.mapping import REQUEUE_DECISION_ANNOTATION
from minruntime.core import parse_rfc3339
from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    CHECKPOINTED_AT_ANNOTATION,
)
from minruntime.events import RequeueCheckpointData
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from minruntime_dev.standin import Cluster
from tests.conftest import run_cli
from tests.e2e.harness import wait_for
from tests.e2e.kubeapi import service_account_token, token_kubeconfig
from tests.e2e.test_kube_evictor_lanes import (
    RunningEvictor,
    abandoned_events,
    committed,
    evictor_scene,
    produce,
)

pytestmark = pytest.mark.stack


class EvictionWatch:
    """Polls a pod every 50 ms and notes when it first carries a deletionTimestamp."""

    def __init__(self, cluster: Cluster, pod: str) -> None:
        self.cluster, self.pod = cluster, pod
        self.at: datetime | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and self.at is None:
            found = self.cluster.get_pod(self.pod)
            if found is None or found["metadata"].get("deletionTimestamp"):
                self.at = datetime.now(UTC)
            self._stop.wait(0.05)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


@pytest.fixture
def scene(kube_stack: StackStatus, settings: Settings) -> Iterator[tuple[Settings, Cluster]]:
    with evictor_scene(
        kube_stack, settings, "ckpt", decision_partitions=1, evictor_checkpoint_poll_seconds=0.2
    ) as (scoped, cluster):
        cluster.priority_class(f"{cluster.namespace}-low", 10)
        yield scoped, cluster


def running_gang(cluster: Cluster, name: str, grace: str) -> str:
    """A running two-pod gang whose PodGroup declares `grace`; its uid."""
    uid = cluster.podgroup(
        name, "train", f"{cluster.namespace}-low", annotations={CHECKPOINT_GRACE_ANNOTATION: grace}
    )
    pods = [f"{name}-0", f"{name}-1"]
    for pod in pods:
        cluster.pod(pod, name, 1)
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=1)
    cluster.start(name, pods, f"{cluster.namespace}-gpu", start, start)
    return uid


def requeued_gang(settings: Settings, cluster: Cluster, name: str, grace: str) -> tuple[str, Any]:
    """A running gang declaring `grace` (its uid), and its committed requeue, produced (the
    decision event)."""
    uid = running_gang(cluster, name, grace)
    decision = committed(uid, 0, datetime.now(UTC))
    asyncio.run(produce(settings, [decision]))
    return uid, decision


def podgroup_annotations(cluster: Cluster, name: str) -> dict[str, str]:
    return dict(cluster.get_podgroup(name)["metadata"].get("annotations") or {})


def requested_at(cluster: Cluster, name: str) -> datetime | None:
    value = podgroup_annotations(cluster, name).get(CHECKPOINT_REQUESTED_AT_ANNOTATION)
    return None if value is None else parse_rfc3339(value)


def evicted(cluster: Cluster, pod: str) -> bool:
    found = cluster.get_pod(pod)
    return found is None or bool(found["metadata"].get("deletionTimestamp"))


def handshakes(settings: Settings) -> list[Any]:
    return [e for e in asyncio.run(abandoned_events(settings)) if e.type == "requeue.checkpoint"]


def the_handshake(settings: Settings) -> tuple[Any, RequeueCheckpointData]:
    """The one `requeue.checkpoint` sent, and its data."""
    [event] = handshakes(settings)
    assert isinstance(event.data, RequeueCheckpointData)
    return event, event.data


def evicted_once(
    settings: Settings, cluster: Cluster, pod: str
) -> tuple[EvictionWatch, RunningEvictor]:
    """An evictor run until it has carried out one eviction, with a watch on ``pod``; both
    stopped."""
    watch = EvictionWatch(cluster, pod)
    evictor = RunningEvictor(settings)
    try:
        wait_for(lambda: evictor.count("carried_out") == 1, 90, "the eviction")
    finally:
        evictor.stop()
        watch.stop()
    return watch, evictor


def test_an_acknowledged_checkpoint_is_followed_by_the_eviction(
    scene: tuple[Settings, Cluster],
) -> None:
    settings, cluster = scene
    uid, decision = requeued_gang(settings, cluster, "saver", "30s")
    acked: list[str] = []

    def workload() -> None:  # the training script's sidecar, after its save
        asked = wait_for(lambda: requested_at(cluster, "saver"), 90, "the checkpoint request")
        time.sleep(1.0)
        assert not evicted(cluster, "saver-0")  # the evictor waits for the answer
        acked.append(acknowledge(cluster.api, cluster.namespace, "saver", datetime.now(UTC)))
        assert parse_rfc3339(acked[0]) >= asked

    sidecar = threading.Thread(target=workload, daemon=True)
    sidecar.start()
    try:
        watch, evictor = evicted_once(settings, cluster, "saver-0")
    finally:
        sidecar.join(10)
    event, data = the_handshake(settings)
    assert event.id == f"{decision.id}.checkpoint"
    assert event.source == "minruntime/kube-evictor"
    assert (data.uid, data.decision, data.outcome) == (uid, decision.id, "acknowledged")
    assert data.checkpointed_at == parse_rfc3339(acked[0])
    assert data.requested_at == requested_at(cluster, "saver")
    assert data.grace == timedelta(seconds=30)
    assert watch.at is not None
    assert data.checkpointed_at <= watch.at  # evicted after the acknowledgement
    assert watch.at - data.requested_at < timedelta(seconds=10)  # not the 30 s grace
    assert evicted(cluster, "saver-1")
    assert podgroup_annotations(cluster, "saver")[REQUEUE_DECISION_ANNOTATION] == decision.id
    assert evictor.metrics.ack_seconds._sum.get() > 0
    assert evictor.metrics.checkpoints.labels("acknowledged")._value.get() == 1


def test_a_workload_that_never_answers_is_evicted_when_its_grace_ends(
    scene: tuple[Settings, Cluster],
) -> None:
    settings, cluster = scene
    requeued_gang(settings, cluster, "silent", "3s")
    watch, evictor = evicted_once(settings, cluster, "silent-0")
    _, data = the_handshake(settings)
    assert (data.outcome, data.checkpointed_at) == ("timed_out", None)
    ends = data.requested_at + timedelta(seconds=3)
    assert ends <= data.ended_at < ends + timedelta(seconds=1.5)
    assert watch.at is not None
    assert ends <= watch.at < ends + timedelta(seconds=3)  # at its grace's end, not later
    assert evictor.metrics.checkpoints.labels("timed_out")._value.get() == 1


def test_a_podgroup_deleted_mid_wait_ends_it_at_once(
    scene: tuple[Settings, Cluster],
) -> None:
    settings, cluster = scene
    requeued_gang(settings, cluster, "leaving", "30s")
    evictor = RunningEvictor(settings)
    try:
        wait_for(lambda: requested_at(cluster, "leaving"), 90, "the checkpoint request")
        cluster.custom.delete_namespaced_custom_object(
            "scheduling.run.ai", "v2alpha2", cluster.namespace, "podgroups", "leaving"
        )
        deleted_at = datetime.now(UTC)
        events = wait_for(
            lambda: [
                e for e in asyncio.run(abandoned_events(settings)) if e.type == "requeue.abandoned"
            ],
            15,
            "the decision abandoned",
        )
    finally:
        evictor.stop()
    _, handshake = the_handshake(settings)
    assert handshake.outcome == "gone"
    assert handshake.ended_at - deleted_at < timedelta(seconds=2)  # at once, not 30 s
    assert [e.data.reason for e in events] == ["not_found"]
    assert not evicted(cluster, "leaving-0")
    assert evictor.count("carried_out") == 0


def test_an_evictor_restarted_mid_wait_resumes_it_exactly_once(
    scene: tuple[Settings, Cluster],
) -> None:
    settings, cluster = scene
    # Long enough that the second evictor (its consumer group's rebalance: seconds) resumes
    # the wait before the grace ends.
    uid, decision = requeued_gang(settings, cluster, "patient", "15s")
    first = RunningEvictor(settings)
    try:
        asked = wait_for(lambda: requested_at(cluster, "patient"), 90, "the checkpoint request")
        time.sleep(1.0)
    finally:
        first.stop()  # mid-wait: nothing sent, nothing evicted, the decision stays open
    assert handshakes(settings) == []
    assert not evicted(cluster, "patient-0")
    watch = EvictionWatch(cluster, "patient-0")
    second = RunningEvictor(settings)
    resumed: list[datetime] = []
    try:
        # Read again and its PodGroup looked up (a cluster-wide listing: seconds on a
        # crowded API server), the wait resumes.
        wait_for(lambda: uid in second.evictor.graces, 90, "the decision read again")
        resumed.append(datetime.now(UTC))
        wait_for(lambda: second.count("carried_out") == 1, 90, "the eviction")
    finally:
        second.stop()
        watch.stop()
    assert requested_at(cluster, "patient") == asked  # asked once
    _, data = the_handshake(settings)
    assert (data.requested_at, data.outcome) == (asked, "timed_out")
    ends = asked + timedelta(seconds=15)
    assert watch.at is not None
    assert ends <= data.ended_at <= watch.at  # not before the first request's grace ended
    assert watch.at - data.ended_at < timedelta(seconds=4)  # evicted right after the wait
    # On the first request's clock: resumed mid-wait, it ends at that grace's end (resumed
    # after it, a loaded machine, at once); a new wait would end 15 s after the resumption.
    assert data.ended_at < max(ends, resumed[0]) + timedelta(seconds=4)
    assert first.count("carried_out") + second.count("carried_out") == 1
    assert podgroup_annotations(cluster, "patient")[REQUEUE_DECISION_ANNOTATION] == decision.id


def test_checkpoint_ack_needs_only_patch_on_its_podgroup_and_fails_in_one_line(
    scene: tuple[Settings, Cluster], kube_stack: StackStatus, tmp_path: Path
) -> None:
    """`minruntime checkpoint ack` as a workload runs it: with a ServiceAccount token whose
    Role is the one docs/kubernetes.md gives (patch on its own PodGroup), and one without."""
    from kubernetes import client

    _, cluster = scene
    assert kube_stack.kubeconfig is not None
    running_gang(cluster, "trainer", "5m")
    core, rbac = client.CoreV1Api(cluster.api), client.RbacAuthorizationV1Api(cluster.api)
    for account in ("trainer", "stranger"):
        core.create_namespaced_service_account(cluster.namespace, {"metadata": {"name": account}})
    rbac.create_namespaced_role(
        cluster.namespace,
        {
            "metadata": {"name": "checkpoint-ack"},
            "rules": [
                {
                    "apiGroups": ["scheduling.run.ai"],
                    "resources": ["podgroups"],
                    "resourceNames": ["trainer"],
                    "verbs": ["patch"],
                }
            ],
        },
    )
    rbac.create_namespaced_role_binding(
        cluster.namespace,
        {
            "metadata": {"name": "checkpoint-ack"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "checkpoint-ack",
            },
            "subjects": [
                {"kind": "ServiceAccount", "name": "trainer", "namespace": cluster.namespace}
            ],
        },
    )

    def as_account(account: str, *args: str) -> subprocess.CompletedProcess[str]:
        token = service_account_token(cluster.api, cluster.namespace, account)
        config = token_kubeconfig(kube_stack.kubeconfig, token, tmp_path / f"{account}.json")  # type: ignore[arg-type]
        return run_cli("checkpoint", "ack", *args, env={"KUBECONFIG": str(config)})

    target = f"{cluster.namespace}/trainer"
    saved = "2026-01-01T00:00:00Z"
    done = wait_for(  # the RoleBinding takes effect within a moment
        lambda: (
            (r := as_account("trainer", "--podgroup", target, "--at", saved)).returncode == 0 and r
        ),
        15,
        "the trainer's acknowledgement",
    )
    assert done.stdout.strip() == f"PodGroup {target}: checkpointed-at {saved}"
    assert podgroup_annotations(cluster, "trainer")[CHECKPOINTED_AT_ANNOTATION] == saved

    def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
        assert result.returncode != 0
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
        return result.stderr.strip()

    refused = one_line_error(as_account("stranger", "--podgroup", target))
    assert "forbidden to patch PodGroup" in refused
    admin = {"KUBECONFIG": str(kube_stack.kubeconfig)}
    missing = run_cli("checkpoint", "ack", "--podgroup", f"{cluster.namespace}/nope", env=admin)
    assert f"PodGroup {cluster.namespace}/nope not found" in one_line_error(missing)
    future = run_cli("checkpoint", "ack", "--podgroup", target, "--at", "2999-01-01T00:00:00Z")
    assert "is in the future" in one_line_error(future)
    bad = run_cli("checkpoint", "ack", "--podgroup", "Not/A Name", env=admin)
    assert "use NAMESPACE/NAME" in one_line_error(bad)
