"""The cluster bridge's pure mapping: Kubernetes objects -> contract events, ids, times."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest

from minruntime.cluster import mapping
from minruntime.cluster.context import Emission, MirrorOptions
from minruntime.cluster.mirror import ADDED, DELETED, MODIFIED, ClusterMirror
from minruntime.cluster.objects import Kind
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


# A Queue without spec.resources as KAI reads it (pkg/scheduler/api/queue_info/queue_info.go,
# getQueueQuota): quota, limit and weight 0 for every resource; KAI schedules nothing there.
KAI_ZERO = {
    name: {"quota": 0.0, "limit": 0.0, "overQuotaWeight": 0.0} for name in ("gpu", "cpu", "memory")
}


def test_a_queue_becomes_queue_upserted_through_the_queues_apply_parser() -> None:
    [emission] = mirror().observe(Kind.QUEUE, ADDED, queue("research", "q-1", parentQueue="ml"))
    assert emission.role == "queues"
    assert emission.event.type == "queue.upserted"
    # Unlabelled: the default shard's queue (KAI's shard rule, docs/kubernetes.md).
    assert data(emission) == {
        "name": "research",
        "parentQueue": "ml",
        "resources": KAI_ZERO,
        "nodePool": "default",
    }
    assert emission.event.source == mapping.SOURCE


def test_a_queue_without_resources_is_sent_with_kais_zero_quota_and_limit() -> None:
    # Absent or null spec.resources: never "unmanaged", which the planner reads as unlimited.
    view = mirror()
    [absent] = view.observe(Kind.QUEUE, ADDED, queue("plain", "q-1"))
    [null] = view.observe(Kind.QUEUE, ADDED, queue("nulled", "q-2", resources=None))
    assert data(absent)["resources"] == data(null)["resources"] == KAI_ZERO


def test_a_queues_priority_and_resources_are_carried_as_kai_reads_them() -> None:
    # KAI's own example shape: gpu fully set, cpu only a quota, memory left out.
    [emission] = mirror().observe(
        Kind.QUEUE,
        ADDED,
        queue(
            "burst",
            "q-2",
            priority=150,
            resources={
                "gpu": {"quota": 0, "limit": -1, "overQuotaWeight": 2},
                "cpu": {"quota": 500},
            },
        ),
    )
    zero = {"quota": 0.0, "limit": 0.0, "overQuotaWeight": 0.0}
    assert data(emission) == {
        "name": "burst",
        "priority": 150,
        "resources": {
            "gpu": {"quota": 0.0, "limit": -1.0, "overQuotaWeight": 2.0},
            "cpu": {"quota": 500.0, "limit": 0.0, "overQuotaWeight": 0.0},
            "memory": zero,
        },
        "nodePool": "default",
    }


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
    [released] = view.list_all({Kind.POD: []})
    assert data(released)["reason"] == "deleted"
    assert released.event.time == NOW
    [gone] = view.list_all({Kind.NODE: []})
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


def listing(view: ClusterMirror, objects: dict[Kind, list[dict[str, Any]]]) -> list[Emission]:
    """A term's first listing of every kind, as the bridge makes it."""
    return list(view.list_all(objects))


def test_without_a_ledger_podgroups_that_ran_and_hold_no_pod_release_all() -> None:
    # Pods deleted while no bridge watched are in no list: without a ledger their names are
    # unknown, and their podgroup's run is ended as a whole.
    view = mirror()
    ran = {mapping.LAST_START_ANNOTATION: "2026-11-24T10:00:00Z"}
    cluster = {
        Kind.POD_GROUP: [
            podgroup(annotations=ran),
            podgroup("busy", "pg-2", annotations=ran),
            podgroup("never-ran", "pg-3"),
        ],
        Kind.POD: [pod("busy-0", "p-9", group="busy", node="n1", phase="Running")],
    }
    emissions = listing(view, cluster)
    [released] = [e for e in emissions if e.event.type == "podgroup.released"]
    assert data(released) == {"uid": "pg-1", "reason": "deleted"}
    assert released.event.time == NOW
    assert types(emissions) == ["podgroup.released", "podgroup.submitted", "podgroup.allocated"]
    # The ledger keeps that it was sent: the next term does not end that run again.
    assert listing(ClusterMirror(MirrorOptions(), clock, view.memory()), cluster) == []


def test_a_pod_going_away_is_a_release_not_a_new_submission() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1", phase="Running"))
    view.observe(Kind.POD, ADDED, pod("train-1", "p-1", node="n1", phase="Running"))
    gone = pod("train-1", "p-1", node="n1", phase="Running")
    assert types(view.observe(Kind.POD, DELETED, gone)) == ["podgroup.released"]
    annotated = podgroup(rv="11", annotations={"kai.scheduler/expected-runtime": "1h"})
    assert types(view.observe(Kind.POD_GROUP, MODIFIED, annotated)) == ["podgroup.annotated"]


# -- a first listing, the ledger, restarts ------------------------------------------------------

CLASS = {"metadata": meta("train", "pc-1"), "value": 50}


def cluster(pods: int = 4, annotations: dict[str, str] | None = None) -> dict[Kind, list[Any]]:
    """Two gangs of ``pods`` pods each, bound and running, a queue, a node, a class."""
    return {
        Kind.PRIORITY_CLASS: [CLASS],
        Kind.QUEUE: [queue("research", "q-1")],
        Kind.NODE: [
            {"metadata": meta("n1", "node-1"), "status": {"capacity": {"nvidia.com/gpu": "8"}}}
        ],
        Kind.POD_GROUP: [
            podgroup("train", "pg-1", annotations=annotations),
            podgroup("eval", "pg-2", annotations=annotations),
        ],
        Kind.POD: [
            pod(f"{group}-{i}", f"p-{group}-{i}", group=group, node="n1", phase="Running")
            for group in ("train", "eval")
            for i in range(pods)
        ],
    }


def test_a_first_listing_submits_each_gang_once_with_all_its_pods() -> None:
    emissions = listing(mirror(), cluster())
    submitted = [e for e in emissions if e.event.type == "podgroup.submitted"]
    assert len(submitted) == 2
    assert sorted(len(data(e)["pods"]) for e in submitted) == [4, 4]
    assert types(emissions).count("podgroup.allocated") == 8
    assert types(emissions)[:2] == ["queue.upserted", "node.upserted"]


def test_a_term_that_starts_from_the_ledger_sends_nothing_for_an_unchanged_cluster() -> None:
    first = mirror()
    listing(first, cluster())
    ledger = first.memory()
    assert first.take_changes() == ledger  # every record changed once, none forgotten
    assert listing(ClusterMirror(MirrorOptions(), clock, ledger), cluster()) == []


def test_changes_made_while_no_bridge_watched_are_sent_once() -> None:
    first = mirror()
    listing(first, cluster())
    ledger = first.memory()
    later = cluster()
    # KAI wrote the run's start; a user set an expected runtime; a pod of `eval` went away;
    # a pod joined `train`; the node went away; the queue's spec changed; a new config.
    started = {
        mapping.LAST_START_ANNOTATION: "2026-11-24T10:00:00Z",
        "kai.scheduler/expected-runtime": "1h",
    }
    later[Kind.POD_GROUP][0] = podgroup("train", "pg-1", rv="11", annotations=started)
    later[Kind.POD] = [p for p in later[Kind.POD] if p["metadata"]["name"] != "eval-3"]
    later[Kind.POD].append(pod("train-4", "p-train-4", group="train"))
    later[Kind.NODE] = []
    later[Kind.QUEUE] = [queue("research", "q-1", generation=2, preemptMinRuntime="4h")]
    emissions = listing(ClusterMirror(MirrorOptions(), clock, ledger), later)
    by_type = {e.event.type: e for e in emissions}
    assert sorted(types(emissions)) == [
        "node.deleted",
        "podgroup.annotated",
        "podgroup.released",
        "podgroup.submitted",
        "queue.upserted",
    ]
    assert data(by_type["podgroup.annotated"])["annotations"] == started
    assert data(by_type["podgroup.released"]) == {
        "uid": "pg-2",
        "pods": ["eval-3"],
        "reason": "deleted",
    }
    resubmitted = data(by_type["podgroup.submitted"])
    assert len(resubmitted["pods"]) == 5
    assert not resubmitted.get("annotations")  # they travel as podgroup.annotated
    # the annotation goes before the new shape (the processor merges either way)
    assert types(emissions).index("podgroup.annotated") < types(emissions).index(
        "podgroup.submitted"
    )


def test_a_ledger_record_follows_each_object_and_is_a_tombstone_once_it_is_gone() -> None:
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup())
    view.observe(Kind.POD, ADDED, pod("train-0", "p-0", node="n1"))
    changes = view.take_changes()
    assert changes["pod/p-0"] == {
        "podgroup": "pg-1",
        "name": "train-0",
        "submitted": True,
        "allocated": True,
        "released": False,
        "created": "2026-11-24T10:00:00Z",  # to match eviction signals if it goes unseen
    }
    assert set(changes) == {"podgroup/pg-1", "pod/p-0"}
    assert view.take_changes() == {}
    view.observe(Kind.POD, DELETED, pod("train-0", "p-0", node="n1"))
    view.observe(Kind.POD_GROUP, DELETED, podgroup())
    assert view.take_changes() == {"pod/p-0": None, "podgroup/pg-1": None}


def test_without_a_ledger_a_restart_never_gives_one_id_two_payloads() -> None:
    # The ledger lost (or a first start after an upgrade): the whole state is sent again.
    # Unchanged objects repeat their ids with the same payload (true duplicates); KAI's
    # last-start-timestamp, written after the first submission, makes a new submission id
    # rather than a conflicting duplicate.
    before = listing(mirror(), cluster())
    after = listing(
        mirror(), cluster(annotations={mapping.LAST_START_ANNOTATION: "2026-11-24T11:00:00Z"})
    )
    payloads: dict[str, bytes] = {}
    for emission in before + after:
        value = encode_event(emission.event)
        assert payloads.setdefault(emission.event.id, value) == value
    repeated = {e.event.id for e in before} & {e.event.id for e in after}
    assert {e.event.type for e in before if e.event.id in repeated} == {
        "queue.upserted",
        "node.upserted",
    }


def test_a_change_costs_its_gang_not_the_cluster(monkeypatch: pytest.MonkeyPatch) -> None:
    # Linearity without a clock: count the pods the mapping reads for one pod's change, with
    # ten and with a thousand gangs in the cluster.
    def touched(gangs: int) -> int:
        view = mirror()
        listing(
            view,
            {
                Kind.POD_GROUP: [podgroup(f"g{i}", f"pg-{i}") for i in range(gangs)],
                Kind.POD: [
                    pod(f"g{i}-{j}", f"p-{i}-{j}", group=f"g{i}")
                    for i in range(gangs)
                    for j in range(4)
                ],
            },
        )
        reads = 0
        real = mapping.pod_node

        def counting(obj: Any) -> Any:
            nonlocal reads
            reads += 1
            return real(obj)

        monkeypatch.setattr(mapping, "pod_node", counting)
        view.observe(Kind.POD, MODIFIED, pod("g3-1", "p-3-1", group="g3", node="n1"))
        monkeypatch.setattr(mapping, "pod_node", real)
        return reads

    assert touched(10) == touched(1000) <= 4


def test_kept_objects_hold_only_what_the_mapping_reads() -> None:
    big = pod("train-0", "p-0", node="n1", phase="Running")
    big["metadata"]["annotations"]["noise"] = "x" * 10_000
    big["metadata"]["managedFields"] = [{"time": "2026-11-24T10:00:05Z", "fieldsV1": {"f": 1}}]
    big["spec"]["containers"][0]["env"] = [{"name": f"E{i}", "value": "v" * 50} for i in range(40)]
    kept = mapping.kept_pod(big)
    assert len(json.dumps(kept)) < 700
    assert kept["metadata"]["annotations"] == {"pod-group-name": "train"}
    assert mapping.changed_at(kept) == mapping.changed_at(big)
    assert mapping.pod_gpu(kept) == mapping.pod_gpu(big)
    assert mapping.pod_node(kept) == "n1"


def test_annotations_over_the_contracts_bounds_are_not_sent_and_the_rest_is() -> None:
    huge = {"kai.scheduler/expected-runtime": "1h", "example.com/blob": "x" * 70_000}
    view = mirror()
    view.observe(Kind.POD_GROUP, ADDED, podgroup(annotations=huge))
    [submitted, *_] = view.observe(Kind.POD, ADDED, pod("train-0", "p-0"))
    assert data(submitted)["annotations"] == {"kai.scheduler/expected-runtime": "1h"}
    assert mapping.dropped_annotations(podgroup(annotations=huge)) == ["example.com/blob"]


def test_over_256_annotations_kais_and_the_checkpoints_are_kept_first() -> None:
    many = {f"example.com/a{i:03d}": "x" for i in range(300)}
    many["minruntime.kai.scheduler/checkpointed-at"] = "2026-11-29T10:00:00Z"
    many["kai.scheduler/expected-runtime"] = "1h"
    sent = mapping.annotations_of(podgroup(annotations=many))
    assert len(sent) == 256
    assert sent["minruntime.kai.scheduler/checkpointed-at"] == "2026-11-29T10:00:00Z"
    assert sent["kai.scheduler/expected-runtime"] == "1h"


def test_a_gang_of_ten_thousand_pods_with_long_names_is_mapped_and_not_sent_whole() -> None:
    from minruntime.cluster.bridge import MAX_RECORD_BYTES, sendable

    view = mirror()
    stem = "w" * 240
    pods = [pod(f"{stem}-{i:05d}", f"p-{i}", node="n1", phase="Running") for i in range(10_000)]
    emissions = listing(view, {Kind.POD_GROUP: [podgroup()], Kind.POD: pods})
    assert types(emissions).count("podgroup.allocated") == 10_000
    [submitted] = [e for e in emissions if e.event.type == "podgroup.submitted"]
    assert len(data(submitted)["pods"]) == 10_000
    sent = sendable(emissions)
    assert len(sent) == 10_000  # the allocations; the 2.6 MB submission is logged, not sent
    assert all(len(value) <= MAX_RECORD_BYTES for _, value in sent)


def config_map(minimum: str) -> dict[str, Any]:
    text = (
        "tiers:\n- plugins:\n  - name: minruntime\n    arguments:\n"
        f"      defaultPreemptMinRuntime: {minimum}\n"
    )
    return {"metadata": meta("kai", "cm-1"), "data": {"config.yaml": text}}


def test_labels_priority_values_and_the_config_changed_unseen_are_sent_once() -> None:
    first = mirror()
    listing(first, {**cluster(), Kind.CONFIG_MAP: [config_map("10m")]})
    ledger = first.memory()
    later = {**cluster(), Kind.CONFIG_MAP: [config_map("20m")]}
    # The class's value rose (the gangs' priority), `eval` moved to another node pool (label).
    later[Kind.PRIORITY_CLASS] = [{"metadata": meta("train", "pc-1", rv="2"), "value": 80}]
    moved = podgroup("eval", "pg-2", rv="12")
    moved["metadata"]["labels"] = {"kai.scheduler/node-pool": "h100"}
    later[Kind.POD_GROUP] = [later[Kind.POD_GROUP][0], moved]
    second = ClusterMirror(MirrorOptions(), clock, ledger)
    emissions = listing(second, later)
    assert sorted(types(emissions)) == [
        "config.updated",
        "podgroup.submitted",
        "podgroup.submitted",
    ]
    submitted = {e.event.subject: data(e) for e in emissions if e.event.type != "config.updated"}
    assert {uid: d["priority"] for uid, d in submitted.items()} == {"pg-1": 80, "pg-2": 80}
    assert submitted["pg-2"]["nodePool"] == "h100"
    assert submitted["pg-1"]["nodePool"] == "a100"
    # Sent once: a third term, from the second one's ledger, sends nothing.
    assert listing(ClusterMirror(MirrorOptions(), clock, second.memory()), later) == []


def test_the_preemption_delay_of_the_spec_and_the_pods_is_mapped_bad_values_as_empty() -> None:
    from minruntime.cluster.mapping import kept_pod, submission_data

    delay = "kai.scheduler/preemption-delay"
    members = [
        pod("train-0", "p-0", annotations={delay: "5m", "unrelated": "x"}),
        pod("train-1", "p-1"),
        kept_pod(pod("train-2", "p-2", annotations={delay: "x" * 70_000})),
    ]
    data = submission_data(podgroup(preemptionDelay="10m"), members, 50)
    assert data["preemptionDelay"] == "10m"
    assert [entry.get("annotations") for entry in data["pods"]] == [
        {delay: "5m"},  # only what the service reads, and a kept pod keeps it
        None,
        {delay: ""},  # over the contract's bound: sent as an invalid value, never a dead letter
    ]
    assert "preemptionDelay" not in submission_data(podgroup(), members[1:2], 50)
    assert submission_data(podgroup(preemptionDelay=600), members, 50)["preemptionDelay"] == ""
    # The podgroup's own annotations (the delay, KAI's last eviction) travel as they are.
    annotated = podgroup(
        annotations={"kai.scheduler/last-eviction-timestamp": "2026-01-01T00:00:00Z"}
    )
    assert submission_data(annotated, members, 50)["annotations"] == {
        "kai.scheduler/last-eviction-timestamp": "2026-01-01T00:00:00Z"
    }


@pytest.mark.parametrize(
    ("said", "priority", "expected"),
    [
        ("semi-preemptible", 50, {"preemptibility": "semi-preemptible"}),
        ("semi-preemptible", 150, {"preemptibility": "semi-preemptible"}),
        ("preemptible", 150, {"preemptible": True}),
        ("non-preemptible", 50, {"preemptible": False}),
        # A value KAI does not know is ignored, as KAI ignores it: the priority decides.
        ("sometimes", 50, {"preemptible": True}),
        ("sometimes", 150, {"preemptible": False}),
        (7, 50, {"preemptible": True}),
    ],
)
def test_preemptibility_is_mapped_to_the_wire(
    said: object, priority: int, expected: dict[str, object]
) -> None:
    group = podgroup(preemptibility=said)
    data = mapping.submission_data(group, [pod("w", "p-w")], priority)
    assert {k: v for k, v in data.items() if k.startswith("preempt")} == expected


def test_the_first_submission_is_the_podgroups_creation_even_when_its_pods_come_later() -> None:
    # KAI anchors spec.preemptionDelay at the PodGroup's creationTimestamp (PreemptionDelayEnd,
    # pkg/scheduler/api/podgroup_info/job_info.go), not at its pods'; a later submission (the
    # gang changed shape) is its newest pod's.
    view = mirror()
    view.observe(Kind.PRIORITY_CLASS, ADDED, {"metadata": meta("train", "pc-1"), "value": 50})
    view.observe(Kind.POD_GROUP, ADDED, podgroup())  # created 10:00:00
    [submitted] = view.observe(
        Kind.POD, ADDED, pod("train-0", "p-0", creationTimestamp="2026-11-24T10:00:01Z")
    )
    assert submitted.event.time == datetime(2026, 11, 24, 10, 0, tzinfo=UTC)
    [again] = view.observe(
        Kind.POD, ADDED, pod("train-1", "p-1", creationTimestamp="2026-11-24T10:00:05Z")
    )
    assert again.event.time == datetime(2026, 11, 24, 10, 0, 5, tzinfo=UTC)
