"""A pod list page decoded to the kept fields only keeps what the whole page keeps."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.cluster import mapping
from minruntime.cluster.wire import decode_node_list, decode_pod_list, decode_podgroup_list


def full_pod(index: int = 0) -> dict[str, Any]:
    """A pod with every field a real one has (and those the mapping reads, all set)."""
    time = "2026-11-29T10:00:0{}Z"
    return {
        "kind": "Pod",
        "apiVersion": "v1",
        "metadata": {
            "name": f"train-{index}",
            "generateName": "train-",
            "namespace": "team-a",
            "uid": f"uid-{index}",
            "resourceVersion": str(100 + index),
            "generation": 2,
            "creationTimestamp": time.format(0),
            "deletionTimestamp": time.format(9),
            "deletionGracePeriodSeconds": 30,
            "labels": {
                "app": "train",
                "kai.scheduler/queue": "research",
                "kai.scheduler/subgroup-name": "workers",
                "kai.scheduler/node-pool": "pool-a",
            },
            "annotations": {
                "pod-group-name": "train",
                "gpu-fraction": "0.5",
                "kai.scheduler/preemption-delay": "5m",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
            },
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-1",
                 "controller": True, "blockOwnerDeletion": True}
            ],
            "finalizers": ["example.com/keep"],
            "managedFields": [
                {"manager": "kai-scheduler", "operation": "Update", "apiVersion": "v1",
                 "time": time.format(5), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:nodeName": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                 "time": time.format(7), "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:phase": {}}}},
            ],
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeName": "node-1",
            "restartPolicy": "Never",
            "containers": [
                {"name": "main", "image": "trainer:1", "command": ["python", "train.py"],
                 "env": [{"name": "RANK", "value": str(index)}],
                 "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "8"},
                               "requests": {"nvidia.com/gpu": "2", "memory": "64Gi"}},
                 "volumeMounts": [{"name": "data", "mountPath": "/data"}]},
                {"name": "sidecar", "image": "log:1", "resources": {"requests": {"cpu": "1"}}},
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {
            "phase": "Failed",
            "reason": "Evicted",
            "startTime": time.format(6),
            "hostIP": "10.0.0.1",
            "podIP": "10.1.0.1",
            "conditions": [
                {"type": "PodScheduled", "status": "True", "lastTransitionTime": time.format(5)},
                {"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                 "lastTransitionTime": time.format(8), "message": "evicted"},
                {"type": "Ready", "status": "False", "lastTransitionTime": time.format(8)},
            ],
            "containerStatuses": [
                {"name": "main", "ready": False, "restartCount": 0, "image": "trainer:1",
                 "state": {"terminated": {"exitCode": 1, "finishedAt": time.format(8)}}},
                {"name": "sidecar", "state": {"running": {"startedAt": time.format(6)}}},
            ],
        },
    }  # fmt: skip


def page(items: list[Any]) -> bytes:
    body = {"kind": "PodList", "apiVersion": "v1", "items": items}
    body["metadata"] = {"resourceVersion": "77", "continue": "token", "remainingItemCount": 3}
    return json.dumps(body).encode()


def kept_both_ways(body: bytes) -> tuple[list[Any], list[Any]]:
    """What the bridge keeps of each item: decoded to the kept fields, and decoded whole."""
    items = decode_pod_list(body)["items"] or []
    whole = json.loads(body)["items"] or []
    return (
        [mapping.kept_pod(item) for item in items if isinstance(item, dict)],
        [mapping.kept_pod(item) for item in whole if isinstance(item, dict)],
    )


def test_a_pod_with_every_field_is_kept_the_same_through_the_narrow_decoder() -> None:
    body = page([full_pod(0), full_pod(1)])
    narrow, whole = kept_both_ways(body)
    assert narrow == whole
    assert narrow[0]["metadata"]["annotations"]["kai.scheduler/preemption-delay"] == "5m"
    assert narrow[0]["status"]["containerStatuses"]  # the finish time is kept
    decoded = decode_pod_list(body)
    assert decoded["metadata"] == json.loads(body)["metadata"]  # the continue token, the version
    # What is not kept is never decoded: no env, no image, no managedFields' field sets.
    container = decoded["items"][0]["spec"]["containers"][0]
    assert set(container) == {"resources"}
    assert decoded["items"][0]["metadata"]["managedFields"][0] == {"time": "2026-11-29T10:00:05Z"}


_LEAF = st.one_of(
    st.none(), st.booleans(), st.integers(-5, 5), st.text(max_size=4),
    st.sampled_from(["2026-11-29T10:00:00Z", "Running", "Succeeded", "True", "PodScheduled"]),
)  # fmt: skip
_JSON = st.recursive(
    _LEAF,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(
            st.sampled_from(["time", "terminated", "finishedAt", "limits", "nvidia.com/gpu", "x"]),
            inner,
            max_size=3,
        ),
    ),
    max_leaves=8,
)


def _field(keys: list[str]) -> Any:
    return st.dictionaries(st.sampled_from(keys), _JSON, max_size=len(keys))


@settings(max_examples=300, deadline=None)
@given(
    metadata=_field(["uid", "name", "namespace", "labels", "annotations", "managedFields",
                     "creationTimestamp", "deletionTimestamp", "resourceVersion"]),
    spec=_field(["nodeName", "containers", "volumes"]),
    status=_field(["phase", "reason", "startTime", "conditions", "containerStatuses"]),
    drop=st.sets(st.sampled_from(["metadata", "spec", "status"])),
)  # fmt: skip
def test_any_item_is_kept_the_same_or_refused_the_same(
    metadata: dict[str, Any], spec: dict[str, Any], status: dict[str, Any], drop: set[str]
) -> None:
    pod = {"metadata": metadata, "spec": spec, "status": status}
    body = page([{key: value for key, value in pod.items() if key not in drop}, full_pod()])
    try:
        whole = [mapping.kept_pod(item) for item in json.loads(body)["items"]]
    except Exception as error:  # the mapping refuses the whole item: so it must here too
        with pytest.raises(type(error)):
            kept_both_ways(body)
        return
    assert kept_both_ways(body)[0] == whole


def test_a_page_that_is_not_json_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="not JSON"):
        decode_pod_list(b'{"items": [')


def full_podgroup(index: int = 0) -> dict[str, Any]:
    """A PodGroup as KAI writes it, every field set (status and field sets too)."""
    return {
        "apiVersion": "scheduling.run.ai/v2alpha2",
        "kind": "PodGroup",
        "metadata": {
            "name": f"pg-{index}",
            "namespace": "team-a",
            "uid": f"pg-uid-{index}",
            "resourceVersion": str(200 + index),
            "generation": 3,
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"kai.scheduler/queue": "research", "kai.scheduler/node-pool": "pool-a"},
            "annotations": {
                "kai.scheduler/last-start-timestamp": "2026-11-29T10:00:05Z",
                "kubectl.kubernetes.io/last-applied-configuration": "{}",
                "k" * 400: "over the key bound",
            },
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": "job-1",
                 "controller": True, "blockOwnerDeletion": True}
            ],
            "managedFields": [
                {"manager": "kai", "operation": "Update", "time": "2026-11-29T10:00:03Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:queue": {}}}},
            ],
        },
        "spec": {
            "queue": "research", "minMember": 4, "priorityClassName": "train",
            "subGroups": [{"name": "workers", "minMember": 4}], "preemptionDelay": "5m",
        },
        "status": {"phase": "Running", "running": 4, "conditions": [{"type": "Scheduled"}]},
    }  # fmt: skip


def full_node(index: int = 0) -> dict[str, Any]:
    """A Node with what a real one carries (images, addresses, conditions)."""
    return {
        "kind": "Node",
        "apiVersion": "v1",
        "metadata": {
            "name": f"node-{index}",
            "uid": f"node-uid-{index}",
            "resourceVersion": str(300 + index),
            "creationTimestamp": "2026-11-29T09:00:00Z",
            "labels": {"kai.scheduler/node-pool": "pool-a", "kubernetes.io/hostname": "n"},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [
                {"manager": "kubelet", "operation": "Update", "time": "2026-11-29T09:00:07Z",
                 "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:capacity": {}}}},
            ],
        },
        "spec": {"podCIDR": "10.1.0.0/24", "taints": [{"key": "gpu", "effect": "NoSchedule"}]},
        "status": {
            "capacity": {"nvidia.com/gpu": "8", "cpu": "96", "memory": "1Ti"},
            "allocatable": {"nvidia.com/gpu": "8", "cpu": "95"},
            "addresses": [{"type": "InternalIP", "address": "10.0.0.1"}],
            "conditions": [{"type": "Ready", "status": "True"}],
            "images": [{"names": ["trainer:1"], "sizeBytes": 10**9}],
        },
    }  # fmt: skip


def list_body(items: list[Any]) -> bytes:
    return json.dumps(
        {"metadata": {"resourceVersion": "9", "continue": "c"}, "items": items}
    ).encode()


def _kept_podgroup(item: Any) -> Any:
    return (mapping.kept_podgroup(item), mapping.dropped_annotations(item))


@pytest.mark.parametrize(
    ("decode", "keep", "full"),
    [
        (decode_podgroup_list, _kept_podgroup, full_podgroup),
        (decode_node_list, mapping.kept_node, full_node),
    ],
)
def test_a_podgroup_or_node_with_every_field_is_kept_the_same_narrowly(
    decode: Any, keep: Any, full: Any
) -> None:
    body = list_body([full(0), full(1)])
    decoded = decode(body)
    assert decoded["metadata"] == json.loads(body)["metadata"]
    assert [keep(item) for item in decoded["items"]] == [
        keep(item) for item in json.loads(body)["items"]
    ]
    assert "status" not in decoded["items"][0] or set(decoded["items"][0]["status"]) == {
        "capacity"
    }  # a PodGroup's status, a Node's images and conditions: never decoded


@settings(max_examples=300, deadline=None)
@given(
    metadata=_field(["uid", "name", "namespace", "labels", "annotations", "managedFields",
                     "creationTimestamp", "resourceVersion", "ownerReferences", "generation"]),
    spec=_JSON,
    status=_field(["capacity", "phase", "images"]),
    drop=st.sets(st.sampled_from(["metadata", "spec", "status"])),
    node=st.booleans(),
)  # fmt: skip
def test_any_podgroup_or_node_is_kept_the_same_or_refused_the_same(
    metadata: dict[str, Any], spec: Any, status: dict[str, Any], drop: set[str], node: bool
) -> None:
    decode: Any
    keep: Any
    full: Any
    decode, keep, full = (
        (decode_node_list, mapping.kept_node, full_node)
        if node
        else (decode_podgroup_list, _kept_podgroup, full_podgroup)
    )
    item = {"metadata": metadata, "spec": spec, "status": status}
    body = list_body([{key: value for key, value in item.items() if key not in drop}, full()])
    try:
        whole = [keep(one) for one in json.loads(body)["items"]]
    except Exception as error:  # the mapping refuses the whole item: so it must here too
        with pytest.raises(type(error)):
            [keep(one) for one in decode(body)["items"]]
        return
    assert [keep(one) for one in decode(body)["items"]] == whole
