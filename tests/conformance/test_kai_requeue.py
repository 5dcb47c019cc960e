"""The requeue loop against the real KAI: the worker commits only what KAI will not undo.

- **Committed:** an over-running gang (nominated by its expected runtime) fills the node; a
  higher-priority gang of another queue waits that fits only once it is gone. Neither queue
  has a quota, so KAI's fair share (half the node each) keeps KAI's own reclaim away from the
  victim (the waiting queue would be over its share: proportion's `CanReclaimResources`), and
  preemption never crosses queues. The worker commits, the evictor evicts, KAI binds the
  beneficiary on the node the decision promised, and the victim's recreated pod waits: it
  may not reclaim it back either.
- **Rolled back:** nothing of higher priority waits: KAI's placement is untouched.
- **Quota:** the victim's queue deserves the node (GPU quota 4), the beneficiary's none: KAI
  would reclaim the beneficiary back for the recreated victim (GuaranteeDeservedQuota), so
  the worker rolls back with `beneficiary_over_quota` (issue 27 part 5) instead.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

import minruntime
from tests.conformance.conftest import HIGH, LOW, Scene, module_scene
from tests.conformance.kai import gpu_resources, wait_until

EXPECTED_RUNTIME = "4s"


def _start_the_worker_and_the_evictor(scene: Scene) -> None:
    scene.start_service("requeue-worker", MINRUNTIME_REQUEUE_INTERVAL_SECONDS="1")
    scene.start_service("evictor")


scene = module_scene("requeue", start=_start_the_worker_and_the_evictor)


def decision(scene: Scene, uid: str, outcome: str = "%", timeout: float = 60) -> dict[str, Any]:
    """The worker's first decision about `uid` (minruntime.requeue_decisions) whose outcome
    is like `outcome`."""
    rows = wait_until(
        lambda: scene.pipeline.query(
            "SELECT outcome, reason, beneficiaries, placements FROM minruntime.requeue_decisions"
            " WHERE uid = %s AND outcome LIKE %s ORDER BY seq",
            (uid, outcome),
        ),
        timeout,
        f"the requeue worker to decide about {uid}",
    )
    outcome, reason, beneficiaries, placements = rows[0]
    return {"outcome": outcome, "reason": reason, "beneficiaries": beneficiaries,
            "placements": placements or []}  # fmt: skip


def over_runner(scene: Scene, queue: str) -> tuple[str, str, str, str]:
    """A node and a 4-GPU gang on it expected to run 4s (its pods recreated after an
    eviction, as a Job's would be): (node, name, uid, its pod's uid)."""
    node = scene.node(4)
    name, uid = scene.gang(
        "long", queue, LOW, keep=True,
        annotations={"kai.scheduler/expected-runtime": EXPECTED_RUNTIME},
    )  # fmt: skip
    scene.wait_bound(name, 1)
    scene.wait_service_running(uid, 1)
    pod = scene.kai.pod(scene.namespace, f"{name}-0")
    assert pod is not None
    return node, name, uid, pod["metadata"]["uid"]


def cleanup(scene: Scene, node: str, *gangs: str) -> None:
    for gang in gangs:
        scene.cluster.kubelet.forget(scene.namespace, f"{gang}-0")
        scene.kai.delete_gang(scene.namespace, gang)
    scene.kai.delete_node(node)


def test_a_committed_requeue_is_one_kai_keeps(scene: Scene) -> None:
    node, victim, uid, _ = over_runner(scene, scene.queue("batch"))
    beneficiary, beneficiary_uid = scene.gang("urgent", scene.queue("interactive"), HIGH)
    time.sleep(3)  # KAI's own preempt and reclaim leave the victim alone
    assert not scene.bound(beneficiary)
    assert not scene.removals(f"{victim}-0")

    # (A cycle before the service knew the beneficiary may have rolled back first.)
    made = decision(scene, uid, "committed")
    assert made["beneficiaries"] == [beneficiary_uid]
    promised = {p.get("node") for p in made["placements"]}
    placed = scene.wait_bound(beneficiary, 1, timeout=20)
    assert set(placed.values()) == promised == {node}
    removal = scene.removal(f"{victim}-0")
    assert removal.disruption_target  # the Eviction API, by the evictor

    # The victim's pod comes back and waits: KAI does not reclaim the beneficiary for it.
    wait_until(lambda: scene.kai.pod(scene.namespace, f"{victim}-0"), 20, "the pod recreated")
    time.sleep(5)
    assert scene.bound(beneficiary) == placed
    assert not scene.bound(victim)
    assert len(scene.removals(f"{beneficiary}-0")) == 0
    cleanup(scene, node, victim, beneficiary)


def test_a_rolled_back_requeue_leaves_kais_placement_alone(scene: Scene) -> None:
    node, victim, uid, pod_uid = over_runner(scene, scene.queue("alone"))
    made = decision(scene, uid)
    assert (made["outcome"], made["reason"]) == ("rolled_back", "no_higher_priority_pending")
    time.sleep(3)
    pod = scene.kai.pod(scene.namespace, f"{victim}-0")
    assert pod is not None
    assert pod["metadata"]["uid"] == pod_uid
    assert not pod["metadata"].get("deletionTimestamp")
    assert scene.bound(victim) == {f"{victim}-0": node}
    assert not scene.removals(f"{victim}-0")
    cleanup(scene, node, victim)


def quota_rule_present() -> bool:
    package = Path(minruntime.__file__).parent
    return any("beneficiary_over_quota" in p.read_text() for p in package.rglob("*.py"))


def test_a_requeue_kai_would_undo_rolls_back_for_quota(scene: Scene) -> None:
    if not quota_rule_present():
        pytest.skip(
            "the requeue planner does not apply KAI's queue quotas on this branch "
            "(issue 27 part 5: rollback reason beneficiary_over_quota)"
        )
    deserving = scene.queue("deserving", resources=gpu_resources(4))
    node, victim, uid, pod_uid = over_runner(scene, deserving)
    beneficiary, _ = scene.gang("unfunded", scene.queue("unfunded",
                                resources=gpu_resources(0)), HIGH)  # fmt: skip
    made = decision(scene, uid)
    assert (made["outcome"], made["reason"]) == ("rolled_back", "beneficiary_over_quota"), made
    time.sleep(3)
    pod = scene.kai.pod(scene.namespace, f"{victim}-0")
    assert pod is not None
    assert pod["metadata"]["uid"] == pod_uid
    assert not scene.bound(beneficiary)
    cleanup(scene, node, victim, beneficiary)


def test_a_beneficiary_in_a_queue_without_resources_rolls_back_for_quota(scene: Scene) -> None:
    """KAI gives a Queue without spec.resources limit 0 (getQueueQuota): it never places the
    beneficiary, so the service must not evict the victim for it."""
    node, victim, uid, pod_uid = over_runner(scene, scene.queue("funded"))
    beneficiary, _ = scene.gang("bare", scene.queue("bare", resources=None), HIGH)
    # (A cycle before the service knew the beneficiary may have rolled back otherwise first.)
    wait_until(
        lambda: scene.pipeline.query(
            "SELECT 1 FROM minruntime.requeue_decisions WHERE uid = %s AND outcome = %s"
            " AND reason = %s",
            (uid, "rolled_back", "beneficiary_over_quota"),
        ),
        60,
        "a beneficiary_over_quota rollback",
    )
    time.sleep(3)
    assert not scene.pipeline.query(
        "SELECT 1 FROM minruntime.requeue_decisions WHERE uid = %s AND outcome = 'committed'",
        (uid,),
    )
    pod = scene.kai.pod(scene.namespace, f"{victim}-0")
    assert pod is not None
    assert pod["metadata"]["uid"] == pod_uid
    assert not scene.removals(f"{victim}-0")
    assert not scene.bound(beneficiary)
    cleanup(scene, node, victim, beneficiary)
