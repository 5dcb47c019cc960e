"""The cluster bridge's pure mapping: Kubernetes objects -> contract events, ids, times."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from minruntime.cluster import mapping
from minruntime.cluster.mirror import (
    ADDED,
    DELETED,
    MODIFIED,
    ClusterMirror,
    Emission,
    Kind,
    MirrorOptions,
)
from minruntime.events import decode_event, encode_event

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def clock() -> datetime:
    return NOW


def mirror() -> ClusterMirror:
    return ClusterMirror(MirrorOptions(), clock)


def meta(name: str, uid: str, rv: str = "1", namespace: str | None = None, **extra: Any) -> Any:
    found: dict[str, Any] = {
        "name": name,
        "uid": uid,
        "resourceVersion": rv,
        "creationTimestamp": "2026-11-24T10:00:00Z",
        **extra,
    }
    if namespace is not None:
        found["namespace"] = namespace
    return found


def queue(name: str, uid: str, generation: int = 1, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2",
        "kind": "Queue",
        "metadata": meta(name, uid, generation=generation),
        "spec": spec,
        "status": {"allocated": {"gpu": 3}},
    }


def podgroup(
    name: str = "train",
    uid: str = "pg-1",
    rv: str = "10",
    annotations: dict[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": meta(
            name,
            uid,
            rv,
            namespace="team-a",
            annotations=annotations or {},
            labels={"kai.scheduler/node-pool": "a100"},
        ),
        "spec": {"queue": "research", "minMember": 2, "priorityClassName": "train", **spec},
    }


def pod(
    name: str,
    uid: str,
    group: str = "train",
    node: str | None = None,
    gpu: str | None = "2",
    phase: str = "Pending",
    annotations: dict[str, str] | None = None,
    conditions: list[dict[str, Any]] | None = None,
    **extra_meta: Any,
) -> dict[str, Any]:
    resources = {"limits": {"nvidia.com/gpu": gpu}} if gpu is not None else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta(
            name,
            uid,
            namespace="team-a",
            annotations={"pod-group-name": group, **(annotations or {})},
            **extra_meta,
        ),
        "spec": {
            "containers": [{"name": "main", "resources": resources}],
            **({"nodeName": node} if node else {}),
        },
        "status": {"phase": phase, "conditions": conditions or []},
    }


def types(emissions: list[Emission]) -> list[str]:
    return [emission.event.type for emission in emissions]


def data(emission: Emission) -> dict[str, Any]:
    return emission.event.data.model_dump(mode="json", by_alias=True, exclude_none=True)


def test_a_queue_becomes_queue_upserted_through_the_queues_apply_parser() -> None:
    [emission] = mirror().observe(Kind.QUEUE, ADDED, queue("research", "q-1", parentQueue="ml"))
    assert emission.role == "queues"
    assert emission.event.type == "queue.upserted"
    assert data(emission) == {"name": "research", "parentQueue": "ml"}
    assert emission.event.source == mapping.SOURCE


def test_a_queue_status_change_sends_nothing_and_a_spec_change_sends_a_new_id() -> None:
    view = mirror()
    [first] = view.observe(Kind.QUEUE, ADDED, queue("research", "q-1"))
    status_only = queue("research", "q-1")
    status_only["status"] = {"allocated": {"gpu": 7}}
    assert view.observe(Kind.QUEUE, MODIFIED, status_only) == []
    [second] = view.observe(
        Kind.QUEUE, MODIFIED, queue("research", "q-1", generation=2, preemptMinRuntime="4h")
    )
    assert data(second)["preemptMinRuntime"] == "4h"
    assert second.event.id != first.event.id


def test_a_restarted_bridge_sends_the_same_ids_for_the_same_state() -> None:
    objects = [
        (Kind.PRIORITY_CLASS, {"metadata": meta("train", "pc-1"), "value": 50}),
        (Kind.QUEUE, queue("research", "q-1")),
        (Kind.POD_GROUP, podgroup()),
        (Kind.POD, pod("train-0", "p-0", node="n1")),
        (Kind.POD, pod("train-1", "p-1", node="n1")),
    ]

    def ids() -> list[str]:
        view = mirror()
        return [
            emission.event.id
            for kind, obj in objects
            for emission in view.observe(kind, ADDED, obj)
        ]

    first, second = ids(), ids()
    assert first == second
    assert len(first) == len(set(first)) == 5  # queue, submitted, submitted again, 2 allocated


def test_a_podgroup_is_submitted_with_its_pods_priority_pool_and_subgroups() -> None:
    view = mirror()
    view.observe(Kind.PRIORITY_CLASS, ADDED, {"metadata": meta("train", "pc-1"), "value": 50})
    assert view.observe(Kind.POD_GROUP, ADDED, podgroup()) == []  # no pods yet
    [submitted] = view.observe(
        Kind.POD, ADDED, pod("train-0", "p-0", annotations={"gpu-fraction": "0.5"}, gpu=None)
    )
    assert submitted.event.type == "podgroup.submitted"
    assert submitted.event.subject == "pg-1"
    assert data(submitted) == {
        "uid": "pg-1",
        "name": "train",
        "namespace": "team-a",
        "queue": "research",
        "nodePool": "a100",
        "priority": 50,
        "preemptible": True,
        "subGroups": [{"name": "default", "minAvailable": 2}],
        "pods": [{"name": "train-0", "subGroup": "default", "gpu": 0.5}],
        "annotations": {},
    }
    [again] = view.observe(Kind.POD, ADDED, pod("train-1", "p-1"))
    assert [p["name"] for p in data(again)["pods"]] == ["train-0", "train-1"]


def test_subgroups_preemptibility_and_an_unknown_priority_class() -> None:
    view = mirror()
    group = podgroup(
        priorityClassName="nowhere",
        preemptibility="non-preemptible",
        subGroups=[{"name": "leader", "minMember": 1}, {"name": "workers", "minMember": 3}],
    )
    view.observe(Kind.POD_GROUP, ADDED, group)
    leader = pod("l", "p-l")
    leader["metadata"]["labels"] = {"kai.scheduler/subgroup-name": "leader"}
    worker = pod("w", "p-w")
    worker["metadata"]["labels"] = {"kai.scheduler/subgroup-name": "workers"}
    view.observe(Kind.POD, ADDED, leader)
    [submitted] = view.observe(Kind.POD, ADDED, worker)
    payload = data(submitted)
    assert payload["priority"] == mapping.DEFAULT_PRIORITY
    assert payload["preemptible"] is False
    assert payload["subGroups"] == [
        {"name": "leader", "minAvailable": 1},
        {"name": "workers", "minAvailable": 3},
    ]
    assert {p["name"]: p["subGroup"] for p in payload["pods"]} == {"l": "leader", "w": "workers"}


def test_binding_allocates_at_kais_last_start_timestamp() -> None:
    view = mirror()
    start = "2026-11-24T10:05:00Z"
    view.observe(
        Kind.POD_GROUP, ADDED, podgroup(annotations={mapping.LAST_START_ANNOTATION: start})
    )
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0"))
    scheduled = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-24T10:04:00Z"}
    ]
    [allocated] = view.observe(
        Kind.POD, MODIFIED, pod("train-0", "p-0", node="n1", conditions=scheduled)
    )
    assert allocated.event.type == "podgroup.allocated"
    assert data(allocated) == {"uid": "pg-1", "pods": [{"name": "train-0", "node": "n1"}]}
    assert allocated.event.time == datetime(2026, 11, 24, 10, 5, tzinfo=UTC)
    running = pod("train-0", "p-0", node="n1", phase="Running", conditions=scheduled)
    assert view.observe(Kind.POD, MODIFIED, running) == []  # allocated once


def test_without_kais_annotation_the_pod_scheduled_condition_is_the_start() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    scheduled = [
        {"type": "PodScheduled", "status": "True", "lastTransitionTime": "2026-11-24T10:04:00Z"}
    ]
    emissions = view.observe(
        Kind.POD, ADDED, pod("train-0", "p-0", node="n1", conditions=scheduled)
    )
    assert types(emissions) == ["podgroup.submitted", "podgroup.allocated"]
    assert emissions[1].event.time == datetime(2026, 11, 24, 10, 4, tzinfo=UTC)


def test_a_last_start_older_than_the_pod_is_a_previous_runs() -> None:
    view = mirror()
    old = {mapping.LAST_START_ANNOTATION: "2026-11-24T09:00:00Z"}
    view.observe(Kind.POD_GROUP, ADDED, podgroup(annotations=old))
    [_, allocated] = view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1"))
    assert allocated.event.time == datetime(2026, 11, 24, 10, 0, tzinfo=UTC)  # creation


@pytest.mark.parametrize(
    ("phase", "status", "reason"),
    [
        ("Succeeded", {}, "completed"),
        ("Failed", {}, "failed"),
        ("Failed", {"reason": "Evicted"}, "evicted"),
    ],
)
def test_a_pod_that_ends_is_released_with_its_reason_and_finish_time(
    phase: str, status: dict[str, Any], reason: str
) -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1", phase="Running"))
    done = pod("train-0", "p-0", node="n1", phase=phase)
    finished = {"state": {"terminated": {"finishedAt": "2026-11-24T11:00:00Z"}}}
    done["status"].update(status, containerStatuses=[finished])
    [released] = view.observe(Kind.POD, MODIFIED, done)
    assert data(released) == {"uid": "pg-1", "pods": ["train-0"], "reason": reason}
    assert released.event.time == datetime(2026, 11, 24, 11, 0, tzinfo=UTC)
    assert view.observe(Kind.POD, DELETED, done) == []  # released once


def test_an_evicted_pod_is_released_as_evicted_when_it_is_deleted() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1", phase="Running"))
    target = [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]
    evicted = pod(
        "train-0",
        "p-0",
        node="n1",
        phase="Running",
        conditions=target,
        deletionTimestamp="2026-11-24T11:30:00Z",
    )
    assert view.observe(Kind.POD, MODIFIED, evicted) == []  # still holds its GPUs
    [released] = view.observe(Kind.POD, DELETED, evicted)
    assert data(released)["reason"] == "evicted"
    assert released.event.time == datetime(2026, 11, 24, 11, 30, tzinfo=UTC)
    plain = pod("train-1", "p-1", node="n1", phase="Running")
    view.observe(Kind.POD, ADDED, plain)
    [deleted] = view.observe(Kind.POD, DELETED, plain)
    assert data(deleted)["reason"] == "deleted"


def test_annotation_changes_are_podgroup_annotated_with_removals_as_null() -> None:
    view = mirror()
    first = {
        "kai.scheduler/expected-runtime": "1h",
        "kubectl.kubernetes.io/last-applied-configuration": "{}",
    }
    view.observe(Kind.POD_GROUP, ADDED, podgroup(annotations=first))
    [submitted] = view.observe(Kind.POD, ADDED, pod("train-0", "p-0"))
    assert data(submitted)["annotations"] == {"kai.scheduler/expected-runtime": "1h"}
    changed = podgroup(rv="11", annotations={"kai.scheduler/requeue-delay": "10m"})
    [annotated] = view.observe(Kind.POD_GROUP, MODIFIED, changed)
    assert annotated.event.type == "podgroup.annotated"
    assert data(annotated)["annotations"] == {
        "kai.scheduler/requeue-delay": "10m",
        "kai.scheduler/expected-runtime": None,
    }
    assert (
        view.observe(
            Kind.POD_GROUP,
            MODIFIED,
            podgroup(rv="12", annotations=changed["metadata"]["annotations"]),
        )
        == []
    )


def test_a_deleted_podgroup_and_a_relist_that_misses_objects() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1"))
    view.observe(
        Kind.NODE,
        ADDED,
        {"metadata": meta("n1", "node-1"), "status": {"capacity": {"nvidia.com/gpu": "8"}}},
    )
    # The pod and the node went away while the watch was down (410 Gone): a relist finds out.
    [released] = view.relisted(Kind.POD, [])
    assert data(released)["reason"] == "deleted"
    assert released.event.time == NOW
    [gone] = view.relisted(Kind.NODE, [])
    assert (gone.event.type, gone.role) == ("node.deleted", "nodes")
    [deleted] = view.observe(Kind.POD_GROUP, DELETED, podgroup())
    assert deleted.event.type == "podgroup.deleted"


def test_nodes_carry_their_gpu_capacity_and_node_pool() -> None:
    view = mirror()
    node = {
        "metadata": meta("n1", "node-1", labels={"kai.scheduler/node-pool": "a100"}),
        "status": {"capacity": {"nvidia.com/gpu": "8", "cpu": "64"}},
    }
    [upserted] = view.observe(Kind.NODE, ADDED, node)
    assert data(upserted) == {"name": "n1", "nodePool": "a100", "gpu": 8}
    heartbeat = {**node, "metadata": {**node["metadata"], "resourceVersion": "2"}}
    assert view.observe(Kind.NODE, MODIFIED, heartbeat) == []


def test_the_scheduler_config_map_becomes_config_updated() -> None:
    config = (
        "tiers:\n- plugins:\n  - name: minruntime\n"
        "    arguments:\n      defaultPreemptMinRuntime: 10m\n"
    )
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta("kai", "cm-1"),
        "data": {"config.yaml": config},
    }
    [updated] = mirror().observe(Kind.CONFIG_MAP, ADDED, config_map)
    assert updated.event.type == "config.updated"
    assert updated.event.subject == "config/default"
    assert data(updated)["defaultPreemptMinRuntime"] == "10m"


def test_objects_that_cannot_be_mapped_send_nothing() -> None:
    view = mirror()
    assert view.observe(Kind.QUEUE, ADDED, queue("bad", "q-9", preemptMinRuntime="soon")) == []
    no_queue = podgroup()
    del no_queue["spec"]["queue"]
    view.observe(Kind.POD_GROUP, ADDED, no_queue)
    assert view.observe(Kind.POD, ADDED, pod("train-0", "p-0")) == []


def test_every_event_round_trips_through_the_contract_decoder() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    for emission in view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1")):
        assert decode_event(encode_event(emission.event)).id == emission.event.id


def test_quantities() -> None:
    assert mapping.quantity("500m") == 0.5
    assert mapping.quantity(4) == 4
    with pytest.raises(mapping.ObjectError):
        mapping.quantity("-1")


def test_after_the_first_listing_podgroups_holding_no_pod_release_all() -> None:
    # Pods deleted while no bridge watched are in no list: their podgroup's run is ended.
    view = mirror()
    ran = {mapping.LAST_START_ANNOTATION: "2026-11-24T10:00:00Z"}
    view.relisted(
        Kind.POD_GROUP,
        [
            podgroup(annotations=ran),
            podgroup("busy", "pg-2", annotations=ran),
            podgroup("never-ran", "pg-3"),
        ],
    )
    view.relisted(Kind.POD, [pod("busy-0", "p-9", group="busy", node="n1", phase="Running")])
    [released] = view.listed_everything()
    assert data(released) == {"uid": "pg-1", "reason": "deleted"}
    assert released.event.time == NOW
    assert mirror().listed_everything() == []


def test_a_pod_going_away_is_a_release_not_a_new_submission() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1", phase="Running"))
    view.observe(Kind.POD, ADDED, pod("train-1", "p-1", node="n1", phase="Running"))
    gone = pod("train-1", "p-1", node="n1", phase="Running")
    assert types(view.observe(Kind.POD, DELETED, gone)) == ["podgroup.released"]
    annotated = podgroup(rv="11", annotations={"kai.scheduler/expected-runtime": "1h"})
    assert types(view.observe(Kind.POD_GROUP, MODIFIED, annotated)) == ["podgroup.annotated"]
