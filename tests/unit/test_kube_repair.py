"""`kube diff --repair`'s pure plan: the events that make the service agree with the cluster."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from minruntime.cluster.drift import ClusterPodGroup, ServicePodGroup, cluster_podgroups, compare
from minruntime.cluster.mirror import Kind, MirrorOptions
from minruntime.cluster.repair import SOURCE, Repair, mirrored, repair
from minruntime.events import decode_event, encode_event
from tests.unit.test_cluster_mirror import NOW, data
from tests.unit.test_kube_drift import (
    EXPECTED,
    LAST_START,
    START,
    pod,
    podgroup,
    running_row,
    stamp,
)


def plan(
    podgroups: list[dict[str, Any]],
    pods: list[dict[str, Any]],
    rows: list[ServicePodGroup],
    priority_classes: list[dict[str, Any]] | None = None,
) -> Repair:
    cluster = cluster_podgroups(podgroups, pods)
    listing = {
        Kind.PRIORITY_CLASS: priority_classes or [],
        Kind.POD_GROUP: podgroups,
        Kind.POD: pods,
    }
    events = mirrored(listing, MirrorOptions(), lambda: NOW)
    return repair(compare(cluster, rows), cluster, rows, events, NOW)


def started(**annotations: str) -> dict[str, Any]:
    return podgroup(annotations={LAST_START: stamp(START), **annotations})


def summary(done: Repair) -> list[tuple[str, dict[str, Any]]]:
    return [(emission.event.type, data(emission)) for emission in done.emissions]


def test_an_unknown_running_gang_is_submitted_and_allocated_as_the_bridge_would() -> None:
    priority = {"metadata": {"name": "train", "uid": "pc-1"}, "value": 120}
    group = started()
    group["spec"]["priorityClassName"] = "train"
    done = plan(
        [group], [pod("train-0"), pod("train-1", node=None, phase="Pending")], [], [priority]
    )
    [(submitted, submission), (allocated, allocation)] = summary(done)
    assert submitted == "podgroup.submitted"
    assert submission["priority"] == 120
    assert submission["preemptible"] is False  # KAI's rule at priority 120
    assert [p["name"] for p in submission["pods"]] == ["train-0", "train-1"]
    assert submission["annotations"] == {LAST_START: stamp(START)}
    assert allocated == "podgroup.allocated"
    assert allocation["pods"] == [{"name": "train-0", "node": "gpu-1"}]
    assert done.emissions[1].event.time == START  # KAI's start, as the bridge stamps it
    assert {e.event.source for e in done.emissions} == {SOURCE}
    assert {e.role for e in done.emissions} == {"podgroups"}
    assert done.notes == ()


def test_a_podgroup_gone_from_the_cluster_is_deleted_now() -> None:
    done = plan([], [], [running_row()])
    assert summary(done) == [("podgroup.deleted", {"uid": "pg-1"})]
    assert done.emissions[0].event.time == NOW


def test_a_pod_deleted_unseen_is_released_by_name() -> None:
    row = running_row(running_pods=2, running=("train-0", "train-1"))
    done = plan([started()], [pod("train-1")], [row])
    assert summary(done) == [
        ("podgroup.released", {"uid": "pg-1", "pods": ["train-0"], "reason": "deleted"})
    ]
    assert done.emissions[0].event.time == NOW


def test_a_pod_that_ended_is_released_with_its_reason_and_finish_time() -> None:
    finished = pod("train-0", phase="Succeeded")
    finished["status"]["containerStatuses"] = [
        {"state": {"terminated": {"finishedAt": "2026-11-24T11:00:00Z"}}}
    ]
    done = plan([started()], [finished], [running_row(running=("train-0",))])
    [(kind, data)] = summary(done)
    assert (kind, data["reason"]) == ("podgroup.released", "completed")
    assert done.emissions[0].event.time == datetime(2026, 11, 24, 11, tzinfo=UTC)


def test_a_pod_the_service_does_not_hold_is_allocated_and_held_ones_are_not_sent() -> None:
    row = running_row(running=("train-0",))
    done = plan([started()], [pod("train-0"), pod("train-1")], [row])
    assert summary(done) == [
        ("podgroup.allocated", {"uid": "pg-1", "pods": [{"name": "train-1", "node": "gpu-1"}]})
    ]


def test_changed_annotations_are_set_and_removed() -> None:
    row = running_row(
        running=("train-0",),
        annotations={LAST_START: stamp(START), "kai.scheduler/requeue-delay": "5m"},
    )
    done = plan([started(**{EXPECTED: "30m"})], [pod("train-0")], [row])
    assert summary(done) == [
        (
            "podgroup.annotated",
            {
                "uid": "pg-1",
                "annotations": {EXPECTED: "30m", "kai.scheduler/requeue-delay": None},
            },
        )
    ]


def test_another_queue_is_a_new_submission() -> None:
    done = plan([started()], [pod("train-0")], [running_row(queue="old", running=("train-0",))])
    [(kind, data)] = summary(done)
    assert (kind, data["queue"]) == ("podgroup.submitted", "research")


def test_without_pod_names_all_pods_are_released_only_when_the_cluster_runs_none() -> None:
    stopped = pod("train-0", phase="Failed")
    done = plan([started()], [stopped], [running_row(running=None)])
    assert summary(done) == [("podgroup.released", {"uid": "pg-1", "reason": "deleted"})]
    row = running_row(running_pods=3, running=None)
    unknown = plan([started()], [pod("train-0")], [row])
    # Allocations are still sent (a pod the service already holds: a no-op there).
    assert [kind for kind, _ in summary(unknown)] == ["podgroup.allocated"]
    [note] = unknown.notes
    assert "pod names" in note


def test_a_start_time_or_a_deletion_in_the_service_is_not_repaired_but_said() -> None:
    late = running_row(start_time=START + timedelta(seconds=7), running=("train-0",))
    done = plan([started()], [pod("train-0")], [late])
    assert done.emissions == ()
    assert "start_time not repaired" in done.notes[0]
    deleted = plan([started()], [pod("train-0")], [running_row(status="deleted")])
    assert deleted.emissions == ()
    assert "deletion is final" in deleted.notes[0]


def test_a_podgroup_the_bridge_cannot_map_is_said() -> None:
    done = plan([podgroup(queue="")], [pod("train-0")], [])
    assert done.emissions == ()
    assert "cannot map" in done.notes[0]


def test_ids_repeat_for_the_same_state_and_change_with_the_service_row() -> None:
    row = running_row(running_pods=2, running=("train-0", "train-1"))
    first = plan([started()], [pod("train-1")], [row])
    again = plan([started()], [pod("train-1")], [row])
    changed = plan([started()], [pod("train-1")], [dataclasses.replace(row, updated_at=NOW)])
    assert [e.event.id for e in first.emissions] == [e.event.id for e in again.emissions]
    assert first.emissions[0].event.id != changed.emissions[0].event.id


def test_every_event_follows_the_contract_on_the_wire() -> None:
    done = plan([started(**{EXPECTED: "1h"})], [pod("train-0")], [])
    for emission in done.emissions:
        decoded = decode_event(encode_event(emission.event), "kai.podgroups")
        assert decoded == emission.event


def test_only_differing_podgroups_are_repaired() -> None:
    same: ClusterPodGroup = cluster_podgroups([started()], [pod("train-0")])["pg-1"]
    assert same.status == "running"
    done = plan([started()], [pod("train-0")], [running_row(running=("train-0",))])
    assert done == Repair((), ())
