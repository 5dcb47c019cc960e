"""The Kubernetes loop end to end, against the real API server that `stack up --kube` starts.

Real processes throughout: the API server and etcd, Kafka, PostgreSQL, `minruntime processor`,
`minruntime requeue-worker`, `minruntime kube bridge` and `minruntime kube evictor`. The test
plays only the parts of the cluster that are not running here (KAI binds pods and writes the
run's start; the kubelet sets them Running and, after an eviction, deletes them: there is no
kubelet, so the test deletes an evicted pod with grace 0).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from minruntime.cluster.mapping import REQUEUE_DECISION_ANNOTATION, REQUEUE_NOT_BEFORE_ANNOTATION
from minruntime.core import parse_rfc3339
from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    CHECKPOINTED_AT_ANNOTATION,
)
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conftest import run_cli
from tests.e2e.harness import wait_for
from tests.e2e.kubeloop import UNLIMITED_RESOURCES, KubeProcess, KubeScene, kube_scene

pytestmark = pytest.mark.stack


@dataclass
class Loop(KubeScene):
    """One pipeline + worker + bridge + evictor, and the cluster they watch."""

    bridge: KubeProcess = field(init=False)
    evictor: KubeProcess = field(init=False)

    @property
    def kube_env(self) -> dict[str, str]:
        return {**super().kube_env, "MINRUNTIME_EVICTOR_GROUP": f"evictor-{self.suffix}"}


@pytest.fixture(scope="module")
def loop(
    kube_stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Loop]:
    with kube_scene(Loop, kube_stack, settings, tmp_path_factory, "kube", "team") as loop:
        loop.pipeline.start_worker(env={"MINRUNTIME_REQUEUE_INTERVAL_SECONDS": "1"})
        loop.bridge = loop.kube("bridge").start()
        loop.evictor = loop.kube("evictor").start()
        try:
            yield loop
        finally:
            for process in (loop.bridge, loop.evictor):
                process.stop()


def podgroup_row(loop: Loop, uid: str) -> tuple[object, ...] | None:
    rows = loop.pipeline.query(
        "SELECT status, start_time, running_pods, awaiting_release, requeue_not_before"
        " FROM minruntime.podgroups WHERE uid = %s",
        (uid,),
    )
    return tuple(rows[0]) if rows else None


def whole_seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def test_a_bound_running_podgroup_is_protected_and_a_patched_queue_changes_the_answer(
    loop: Loop,
) -> None:
    cluster, root, team = loop.cluster, loop.name("kroot"), loop.name("kteam")
    other = loop.name("kother")  # a reclaimer's queue in another tree: the victim's top decides
    node, pool = loop.name("gpu-a"), loop.name("pool-a")
    # The queues of the pool's KAI shard carry its label (KAI's shard rule).
    labels = f"labels: {{kai.scheduler/node-pool: {pool}}}"
    resources = json.dumps(UNLIMITED_RESOURCES)  # without them KAI schedules nothing there
    cluster.apply_queues(
        f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {root}, {labels}}}
spec: {{preemptMinRuntime: "1h", reclaimMinRuntime: "30m", resources: {resources}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {team}, {labels}}}
spec: {{parentQueue: {root}, resources: {resources}}}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {other}, {labels}}}
spec: {{resources: {resources}}}
"""
    )
    cluster.priority_class(loop.name("train"), 50)
    cluster.node(node, pool, 8)
    uid = cluster.podgroup("steady", team, loop.name("train"), node_pool=pool)
    cluster.pod("steady-0", "steady", 2)
    cluster.pod("steady-1", "steady", 2)
    start = whole_seconds(datetime.now(UTC))
    cluster.start("steady", ["steady-0", "steady-1"], node, start, start + timedelta(seconds=7))

    row = wait_for(
        lambda: (r := podgroup_row(loop, uid)) and r[0] == "running" and r[2] == 2 and r,
        60,
        "the bridge to report the podgroup running",
    )
    assert row[1] == start  # KAI's last-start-timestamp, not the kubelet's startTime
    # The queues and the podgroup reach the service on two topics, applied independently:
    # the podgroup may be running before its queues are in the tree (no window resolved yet).
    wait_for(
        lambda: (
            {root, team}
            <= {
                name
                for (name,) in loop.pipeline.query(
                    "SELECT name FROM minruntime.queues WHERE name = ANY(%s)", ([root, team],)
                )
            }
        ),
        60,
        "the bridge's queues in the service's tree",
    )
    [protection] = loop.pipeline.query(
        "SELECT min_runtime, resolved_from, is_protected, start_time"
        " FROM minruntime.preempt_protection WHERE uid = %s",
        (uid,),
    )
    assert protection == (timedelta(hours=1), root, True, start)
    [reclaim] = loop.pipeline.query(
        "SELECT min_runtime, is_protected FROM minruntime.reclaim_protection(%s) WHERE uid = %s",
        (other, uid),
    )
    assert reclaim == (timedelta(minutes=30), True)
    [submitted] = loop.logged("podgroup.submitted", uid)[-1:]
    assert submitted["data"]["nodePool"] == pool
    assert [e["data"]["nodePool"] for e in loop.logged("queue.upserted", root)] == [pool]

    cluster.patch_queue(root, {"preemptMinRuntime": "0s"})
    wait_for(
        lambda: len(loop.logged("queue.upserted", root)) == 2,
        60,
        "a second queue.upserted for the patched queue",
    )
    assert loop.pipeline.query(
        "SELECT min_runtime, is_protected FROM minruntime.preempt_protection WHERE uid = %s",
        (uid,),
    ) == [(timedelta(0), False)]


def test_a_queues_overrides_and_a_podgroups_owner_reference_reach_the_service(
    loop: Loop,
) -> None:
    """Issue 28: a Queue's disruption annotations travel on queue.upserted (a bad one left
    out, the Queue still sent); a PodGroup without KAI's top-owner annotation gets its
    ownerReference as topOwner, stored and read by the runs."""
    cluster, queue = loop.cluster, loop.name("kbudget")
    resources = json.dumps(UNLIMITED_RESOURCES)
    annotations = (
        '{minruntime.kai.scheduler/max-evictions-per-window: "0",'
        ' minruntime.kai.scheduler/eviction-window: "1h",'
        ' minruntime.kai.scheduler/min-eviction-gap: "10m"}'
    )
    cluster.apply_queues(
        f"""
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: {queue}, annotations: {annotations}}}
spec: {{resources: {resources}}}
"""
    )
    (upserted,) = wait_for(
        lambda: loop.logged("queue.upserted", queue),
        60,
        "the bridge to send the Queue without its bad annotation",
    )
    assert upserted["data"]["annotations"] == {
        "minruntime.kai.scheduler/eviction-window": "1h",
        "minruntime.kai.scheduler/min-eviction-gap": "10m",
    }
    # A real object as the owner (no garbage collector runs here, but keep it honest).
    owner = cluster.core.create_namespaced_config_map(
        cluster.namespace, {"metadata": {"name": loop.name("owner")}}
    )
    reference = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
    }
    cluster.priority_class(loop.name("owned"), 50)
    name = loop.name("owned")
    # Created with it, as KAI's podgrouper does (a reference added later, after the pods were
    # submitted, is not sent again: the owner is not part of a submission's shape).
    uid = cluster.podgroup(name, queue, loop.name("owned"), owner_references=[reference])
    cluster.pod(f"{name}-0", name, 1)
    submitted = wait_for(
        lambda: [e for e in loop.logged("podgroup.submitted", uid) if "topOwner" in e["data"]],
        60,
        "a podgroup.submitted with the PodGroup's ownerReference as topOwner",
    )
    assert submitted[-1]["data"]["topOwner"] == {
        "kind": "ConfigMap",
        "name": owner.metadata.name,
        "uid": owner.metadata.uid,
    }


def test_an_over_running_podgroup_is_requeued_evicted_and_released(loop: Loop) -> None:
    cluster, queue = loop.cluster, loop.name("kfast")
    loop.apply_queue(queue, '{preemptMinRuntime: "0s", reclaimMinRuntime: "0s"}')
    low, high = loop.name("low"), loop.name("high")
    cluster.priority_class(low, 40)
    cluster.priority_class(high, 90)
    node, pool = loop.name("gpu-b"), loop.name("pool-b")
    cluster.node(node, pool, 4)
    # The contender waits first; the victim then takes the whole node, expected to run 3s.
    contender = cluster.podgroup("urgent", queue, high, node_pool=pool)
    cluster.pod("urgent-0", "urgent", 4)
    victim = cluster.podgroup(
        "long", queue, low, node_pool=pool, annotations={"kai.scheduler/expected-runtime": "3s"}
    )
    cluster.pod("long-0", "long", 4)
    cluster.disruption_budget("long-budget", "long")  # 429 until the "controller" allows one
    start = whole_seconds(datetime.now(UTC))
    cluster.start("long", ["long-0"], node, start, start)
    wait_for(
        lambda: (r := podgroup_row(loop, victim)) and r[0] == "running", 60, "the victim running"
    )

    [(decision_id, not_before, beneficiaries)] = wait_for(
        lambda: loop.pipeline.query(
            "SELECT decision_id, requeue_not_before, beneficiaries"
            " FROM minruntime.requeue_decisions WHERE uid = %s AND outcome = 'committed'",
            (victim,),
        ),
        90,
        "the worker to commit the requeue",
    )
    assert beneficiaries == [contender]
    wait_for(
        lambda: "disruption budget" in loop.evictor.log_tail(),
        60,
        "the evictor to meet the PodDisruptionBudget's 429",
    )
    assert not (cluster.get_pod("long-0") or {}).get("metadata", {}).get("deletionTimestamp")
    cluster.allow_disruption("long-budget")  # the evictor retries with backoff, then evicts
    evicted = wait_for(
        lambda: (
            (pod := cluster.get_pod("long-0")) and pod["metadata"].get("deletionTimestamp") and pod
        ),
        60,
        "the evictor to evict the victim's pod",
    )
    assert any(c["type"] == "DisruptionTarget" for c in evicted["status"]["conditions"])
    annotations = wait_for(  # written once every pod is evicted
        lambda: (
            (found := cluster.get_podgroup("long")["metadata"]["annotations"])
            and REQUEUE_DECISION_ANNOTATION in found
            and found
        ),
        60,
        "the evictor to mark the PodGroup",
    )
    assert parse_rfc3339(annotations[REQUEUE_NOT_BEFORE_ANNOTATION]) == not_before
    assert annotations[REQUEUE_DECISION_ANNOTATION] == str(decision_id)
    assert podgroup_row(loop, victim)[3] is True  # type: ignore[index]  # awaiting release

    # The bridge crashes mid-way; a new one relists everything and sends the state again.
    loop.bridge.kill()
    loop.bridge = loop.kube("bridge").start()
    wait_for(lambda: "watching" in loop.bridge.log_tail(), 60, "the new bridge to take over")
    cluster.finish_eviction("long-0")  # no kubelet: the pod goes away only when deleted

    row = wait_for(
        # Evicted: pending again, waiting to be scheduled (as KAI requeues it).
        lambda: (r := podgroup_row(loop, victim)) and r[0] == "pending" and r,
        60,
        "the bridge to report the release",
    )
    assert row[3] is False  # no longer awaiting release
    assert row[4] == not_before  # the cooldown
    [released] = loop.logged("podgroup.released", victim)
    assert released["data"]["reason"] == "evicted"
    # Sent again by the restarted bridge, applied once: one allocation, one submission shape.
    assert len(loop.logged("podgroup.allocated", victim)) == 1
    assert len(loop.logged("podgroup.submitted", victim)) == 1

    # A second evictor reading the decision again (a redelivery) evicts nothing.
    again = loop.kube("evictor", MINRUNTIME_EVICTOR_GROUP=f"again-{loop.suffix}").start()
    try:
        wait_for(lambda: "already_done" in again.log_tail(50), 60, "the repeated decision skipped")
    finally:
        again.stop()


def test_every_change_of_checkpointed_at_reaches_the_service(loop: Loop) -> None:
    """The workload's checkpointed-at (and the evictor's checkpoint-requested-at) reach the
    service's podgroup annotations on every change: the run's last checkpoint is known."""
    cluster, queue = loop.cluster, loop.name("kckpt")
    loop.apply_queue(queue, '{preemptMinRuntime: "1h"}')
    cluster.priority_class(loop.name("ckpt"), 30)
    uid = cluster.podgroup(
        "saving", queue, loop.name("ckpt"), annotations={CHECKPOINT_GRACE_ANNOTATION: "2m"}
    )
    cluster.pod("saving-0", "saving", 1)  # a PodGroup is submitted with its pods

    def stored(key: str) -> object:
        return loop.pipeline.scalar(
            "SELECT annotations ->> %s FROM minruntime.podgroups WHERE uid = %s", (key, uid)
        )

    def reaches(key: str, value: str) -> bool:
        return stored(key) == value

    # The first test of the module when run alone: the bridge may still be starting.
    wait_for(lambda: stored(CHECKPOINT_GRACE_ANNOTATION) == "2m", 180, "the podgroup submitted")
    for saved in ("2026-11-29T10:00:00Z", "2026-11-29T10:05:00Z"):
        cluster.annotate_podgroup("saving", {CHECKPOINTED_AT_ANNOTATION: saved})
        wait_for(lambda: reaches(CHECKPOINTED_AT_ANNOTATION, saved), 60, f"checkpoint {saved}")  # noqa: B023
    cluster.annotate_podgroup(
        "saving", {CHECKPOINT_REQUESTED_AT_ANNOTATION: "2026-11-29T10:06:00Z"}
    )
    wait_for(
        lambda: stored(CHECKPOINT_REQUESTED_AT_ANNOTATION) == "2026-11-29T10:06:00Z",
        60,
        "the request",
    )


def test_a_pod_deleted_while_no_bridge_watches_still_ends_the_run(loop: Loop) -> None:
    cluster, queue = loop.cluster, loop.name("kquiet")
    loop.apply_queue(queue)
    node, pool = loop.name("gpu-c"), loop.name("pool-c")
    cluster.node(node, pool, 2)
    uid = cluster.podgroup("quiet", queue, loop.name("train"), node_pool=pool)
    cluster.pod("quiet-0", "quiet", 1)
    start = whole_seconds(datetime.now(UTC))
    cluster.start("quiet", ["quiet-0"], node, start, start)
    wait_for(lambda: (r := podgroup_row(loop, uid)) and r[0] == "running", 60, "quiet running")

    loop.bridge.kill()
    cluster.finish_eviction("quiet-0")  # gone while nobody watches: no list will show it
    loop.bridge = loop.kube("bridge").start()
    wait_for(
        lambda: (r := podgroup_row(loop, uid)) and r[0] == "finished", 60, "the run to be ended"
    )
    [released] = loop.logged("podgroup.released", uid)
    # The ledger knew the pod: it is released by name, at the new bridge's clock.
    assert released["data"] == {"uid": uid, "pods": ["quiet-0"], "reason": "deleted"}


def test_one_bridge_replica_is_active_and_a_standby_takes_over(loop: Loop) -> None:
    from kubernetes import client

    leases = client.CoordinationV1Api(loop.cluster.api)
    lease_name = loop.kube_env["MINRUNTIME_KUBE_LEASE_NAME"]

    def holder() -> str:
        lease = leases.read_namespaced_lease(lease_name, loop.cluster.namespace)
        return str(lease.spec.holder_identity)

    active = holder()
    standby = loop.kube("bridge", MINRUNTIME_KUBE_IDENTITY=f"standby-{loop.suffix}").start()
    try:
        wait_for(lambda: "standing by" in standby.log_tail(), 60, "the second replica to wait")
        assert holder() == active
        loop.bridge.kill()  # the active replica dies; its lease lapses (3 s here)
        wait_for(lambda: "watching" in standby.log_tail(), 60, "the standby to take over")
        assert holder() == f"standby-{loop.suffix}"
    finally:
        loop.bridge = standby
    queue = loop.name("ktakeover")
    loop.apply_queue(queue)
    wait_for(lambda: loop.logged("queue.upserted", queue), 60, "the new active replica's event")


def test_the_kube_demo_runs_the_loop(loop: Loop) -> None:
    # The bridge watches the whole cluster: this module's worker would decide about the demo's
    # podgroups too (one service per cluster), so only the demo's own processes run.
    for process in (loop.bridge, loop.evictor, *loop.pipeline.workers):
        process.stop()
    # On the scene's own database and topics: the stack's default database may be another
    # branch's (a migration numbered differently there makes `upgrade` fail).
    env = {**loop.pipeline.env, "KUBECONFIG": str(loop.kubeconfig)}
    result = run_cli("demo", "--kube", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "The bridge's events, applied" in result.stdout
    assert "kai.scheduler/requeue-not-before=" in result.stdout
    # Issue 28's part: the blocked gang abandoned while the others were carried out, the
    # checkpoint answered before the eviction, the budget's skip with when it frees up.
    assert "blocked was abandoned at its deadline" in result.stdout
    assert "checkpointed-at" in result.stdout
    assert "was skipped (disruption_budget)" in result.stdout
    assert "The four processes are stopped." in result.stdout
