"""KAI's shard rule in the bridge: the node pool of a Node, a PodGroup and a Queue.

A KAI scheduler started with `--partition-label-value V` lists the Nodes, PodGroups and Queues
whose `--nodepool-label-key` label equals V; the default one (V empty) those without the label
(docs/kubernetes.md, "Node pools are KAI's shards"). A `queues apply` file keeps its unlabelled
queues in every pool's tree.
"""

from __future__ import annotations

from typing import Any

import pytest

from minruntime.cluster import mapping
from minruntime.cluster.mirror import ADDED, MODIFIED, ClusterMirror, Kind, MirrorOptions
from minruntime.kube import ManifestError, change_events, parse_manifests, queue_upserts
from tests.unit.test_cluster_mirror import KAI_ZERO, clock, data, meta, pod, podgroup, queue

CUSTOM = "example.com/pool"


def labelled(obj: dict[str, Any], **labels: str) -> dict[str, Any]:
    obj["metadata"]["labels"] = dict(labels)
    return obj


def node(**labels: str) -> dict[str, Any]:
    return {
        "metadata": meta("n1", "node-1", labels=dict(labels)),
        "status": {"capacity": {"nvidia.com/gpu": "8"}},
    }


def mirror(label: str = mapping.NODE_POOL_LABEL) -> ClusterMirror:
    return ClusterMirror(MirrorOptions(node_pool_label=label), clock)


@pytest.mark.parametrize(
    ("labels", "key", "pool"),
    [
        ({"kai.scheduler/node-pool": "a100"}, mapping.NODE_POOL_LABEL, "a100"),
        ({}, mapping.NODE_POOL_LABEL, "default"),  # the default shard: no label
        ({"kai.scheduler/node-pool": "a100"}, CUSTOM, "default"),  # another key: not the pool
        ({CUSTOM: "h100"}, CUSTOM, "h100"),
        ({"kai.scheduler/node-pool": ""}, mapping.NODE_POOL_LABEL, "default"),
        ({"kai.scheduler/node-pool": "a100"}, "", None),  # no key: KAI's every shard sees it
    ],
)
def test_the_node_pool_of_an_object_is_its_label_else_the_default_shard(
    labels: dict[str, str], key: str, pool: str | None
) -> None:
    assert mapping.node_pool_of({"metadata": {"labels": labels}}, key) == pool


def test_a_queue_is_in_the_pool_its_label_names_else_the_default_shard_s() -> None:
    view = mirror()
    [labelled_queue] = view.observe(
        Kind.QUEUE, ADDED, labelled(queue("vision", "q-1"), **{mapping.NODE_POOL_LABEL: "a100"})
    )
    # (Without spec.resources: KAI's zero quota and limit, as KAI reads such a queue.)
    assert data(labelled_queue) == {"name": "vision", "resources": KAI_ZERO, "nodePool": "a100"}
    [plain] = view.observe(Kind.QUEUE, ADDED, queue("org", "q-2"))
    assert data(plain) == {"name": "org", "resources": KAI_ZERO, "nodePool": "default"}


def test_a_queue_moved_to_another_pool_is_sent_again() -> None:
    view = mirror()
    view.observe(Kind.QUEUE, ADDED, queue("vision", "q-1"))
    moved = labelled(queue("vision", "q-1"), **{mapping.NODE_POOL_LABEL: "h100"})
    moved["metadata"]["resourceVersion"] = "2"  # a label change leaves the generation alone
    [again] = view.observe(Kind.QUEUE, MODIFIED, moved)
    assert data(again)["nodePool"] == "h100"


def test_the_label_key_is_the_bridge_s_setting_for_queues_too() -> None:
    obj = labelled(queue("vision", "q-1"), **{CUSTOM: "h100", mapping.NODE_POOL_LABEL: "a100"})
    [emission] = mirror(CUSTOM).observe(Kind.QUEUE, ADDED, obj)
    assert data(emission)["nodePool"] == "h100"
    # No key: KAI's schedulers all see every queue; so does every pool here.
    [everywhere] = mirror("").observe(Kind.QUEUE, ADDED, queue("org", "q-2"))
    assert data(everywhere) == {"name": "org", "resources": KAI_ZERO}
    assert "nodePool" not in everywhere.event.data.model_dump(by_alias=True, mode="json")


def test_a_node_s_pool_follows_the_same_rule() -> None:
    assert mapping.node_data(node(), CUSTOM)["nodePool"] == "default"
    assert mapping.node_data(node(**{CUSTOM: "h100"}), CUSTOM)["nodePool"] == "h100"


def test_a_podgroup_s_pool_is_its_own_label_not_its_pods() -> None:
    # KAI lists PodGroups by the label; pods are not listed by pool.
    group = podgroup()
    group["metadata"]["labels"] = {}
    member = pod("train-0", "p-0", labels={mapping.NODE_POOL_LABEL: "a100"})
    assert mapping.submission_data(group, [member], 50)["nodePool"] == "default"
    assert mapping.submission_data(podgroup(), [member], 50)["nodePool"] == "a100"
    custom = podgroup()
    custom["metadata"]["labels"] = {CUSTOM: "h100"}
    assert mapping.submission_data(custom, [member], 50, CUSTOM)["nodePool"] == "h100"


QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: org}
spec: {reclaimMinRuntime: 2h}
---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {name: vision, labels: {kai.scheduler/node-pool: a100}}
spec: {parentQueue: org}
"""


def test_queues_apply_keeps_an_unlabelled_queue_in_every_pool_s_tree() -> None:
    events = change_events(parse_manifests("queues.yaml", QUEUES), only="Queue")
    upserts = [data for _, _, data in events]
    assert [(u.name, u.node_pool) for u in upserts] == [("org", None), ("vision", "a100")]
    dumped = upserts[0].model_dump(mode="json", by_alias=True)
    assert "nodePool" not in dumped  # as before node pools on queues existed
    assert dumped["resources"] == KAI_ZERO  # no spec.resources: KAI's zero quota and limit
    # The key is MINRUNTIME_KUBE_NODE_POOL_LABEL's; another key leaves both in every pool.
    other = change_events(parse_manifests("q.yaml", QUEUES), only="Queue", node_pool_label=CUSTOM)
    assert [data.node_pool for _, _, data in other] == [None, None]


def test_a_queue_s_node_pool_label_must_be_a_pool_name() -> None:
    text = QUEUES.replace("a100", "a" * 64)
    with pytest.raises(ManifestError, match="node pool name of at most 63"):
        queue_upserts(parse_manifests("queues.yaml", text), mapping.NODE_POOL_LABEL)
