"""KAI's objects on the real API server with the project's CRDs, and the project's objects with
KAI's: every field kept (nothing pruned, nothing refused with strict field validation).

The shared API server's `scheduling.run.ai` CRDs are re-applied by every checkout's test run,
so each CRD under test is installed under a scratch group of its own (the same schema, another
API group), used, and deleted. KAI's CRDs and example objects are read from a KAI source
checkout at test time only (``MINRUNTIME_KAI_SOURCE``, else /work/kai-src/kai); without one
those tests are skipped.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from minruntime.cluster import mapping
from minruntime.core import Preemptibility
from minruntime.events import PodGroupSubmittedData
from minruntime_dev.demo_kube import _QUEUES as DEMO_QUEUES
from minruntime_dev.stack import StackStatus
from minruntime_dev.stack.crds import apply_crds, crd_directory, read_crds, with_semi_preemptible
from minruntime_dev.standin import Cluster
from tests.conftest import ROOT, run_cli
from tests.e2e.kubeapi import admin_client
from tests.unit.test_kai_crds import KAI_CRDS, KAI_SOURCE, needs_kai

pytestmark = pytest.mark.stack

STRICT = {"field_validation": "Strict"}
KAI_EXAMPLES = (
    "examples/quickstart/default-queues.yaml",
    "examples/time-based-fairshare/two-queue-oscillation/queues.yaml",
    "examples/preemption-delay/00-queues.yaml",
    "examples/preemption-delay/01-victim.yaml",
    "examples/staleness-grace-period/00-with-spec.yaml",
    "examples/batch/external-podgroup-job.yaml",
    "examples/external-podgroup/multi-topology-jobs.yaml",
    "examples/topology-aliases/topology-aliases.yaml",
    "docs/priority/example/limited-queue.yaml",
)
TIME = "2026-11-29T05:00:00Z"
QUANTITIES = {"nvidia.com/gpu": "2", "cpu": "1500m", "memory": "4Gi"}


def every_queue_field(name: str) -> dict[str, Any]:
    """A Queue with every field of KAI's QueueSpec and QueueStatus."""
    resource = {"quota": 2.5, "limit": -1, "overQuotaWeight": 2}
    return {
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": {
            "displayName": "Team A",
            "parentQueue": "dept",
            "priority": 7,
            "preemptMinRuntime": "5m",
            "reclaimMinRuntime": "1h30m",
            "resources": {"gpu": resource, "cpu": resource, "memory": resource},
        },
        "status": {
            "conditions": [
                {
                    "type": "OverQuota",
                    "status": "True",
                    "lastProbeTime": TIME,
                    "lastTransitionTime": TIME,
                    "reason": "Allocated",
                    "message": "over its quota",
                }
            ],
            "childQueues": ["team-a-1"],
            "allocated": QUANTITIES,
            "allocatedNonPreemptible": QUANTITIES,
            "requested": QUANTITIES,
        },
    }


def every_podgroup_field(name: str) -> dict[str, Any]:
    """A PodGroup with every field of KAI's PodGroupSpec and PodGroupStatus (minMember 0)."""
    topology = {
        "topology": "racks",
        "requiredTopologyLevel": "zone",
        "preferredTopologyLevel": "rack",
    }
    condition = {
        "type": "Scheduled",
        "status": "True",
        "transitionID": "3",
        "lastTransitionTime": TIME,
        "reason": "Allocated",
        "message": "all pods bound",
    }
    details = {
        "name": "team-a",
        **dict.fromkeys(
            (
                "queueRequestedResources",
                "queueDeservedResources",
                "queueAllocatedResources",
                "queueAllocatedNonPreemptibleResources",
                "queueResourceLimits",
                "podGroupRequestedResources",
                "podGroupRequestedNonPreemptibleResources",
            ),
            QUANTITIES,
        ),
    }
    return {
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "minMember": 0,
            "minSubGroup": 1,
            "queue": "team-a",
            "priorityClassName": "train",
            "preemptibility": "non-preemptible",
            "preemptionDelay": "30s",
            "stalenessGracePeriod": "-1s",
            "topologyConstraint": topology,
            "subGroups": [
                {"name": "leader", "minMember": 0, "topologyConstraint": topology},
                {"name": "workers", "minSubGroup": 1},
                {"name": "workers-1", "parent": "workers", "minMember": 2},
            ],
            "markUnschedulable": True,
            "schedulingBackoff": -1,
        },
        "status": {
            "conditions": [condition],
            "schedulingConditions": [
                {
                    **condition,
                    "type": "UnschedulableOnNodePool",
                    "nodePool": "default",
                    "reasons": [
                        {
                            "reason": "OverLimit",
                            "message": "over",
                            "details": {"queueDetails": details},
                        }
                    ],
                }
            ],
            "resourcesStatus": {
                "allocated": QUANTITIES,
                "allocatedNonPreemptible": QUANTITIES,
                "requested": QUANTITIES,
            },
        },
    }


class Scratch:
    """CRDs installed under a scratch API group, and objects created through them."""

    def __init__(self, api: client.ApiClient, crds: list[dict[str, Any]], namespace: str) -> None:
        self.group = f"kai{uuid.uuid4().hex[:8]}.minruntime.test"
        self.objects = client.CustomObjectsApi(api)
        self.namespace = namespace
        self.crds: dict[str, dict[str, Any]] = {}
        for crd in crds:
            moved = copy.deepcopy(crd)
            names = moved["spec"]["names"]
            moved["spec"]["group"] = self.group
            moved["metadata"] = {"name": f"{names['plural']}.{self.group}"}
            self.crds[names["kind"]] = moved

    def create(self, body: Mapping[str, Any], *, dry_run: bool = False) -> dict[str, Any]:
        """Create `body` (its kind's CRD decides the version and scope), strictly validated:
        an unknown field is an error, never silently pruned."""
        crd = self.crds[body["kind"]]
        (version,) = crd["spec"]["versions"]
        plural = crd["spec"]["names"]["plural"]
        sent = {**body, "apiVersion": f"{self.group}/{version['name']}"}
        options = {**STRICT, **({"dry_run": "All"} if dry_run else {})}
        if crd["spec"]["scope"] == "Cluster":
            return dict(
                self.objects.create_cluster_custom_object(
                    self.group, version["name"], plural, sent, **options
                )
            )
        return dict(
            self.objects.create_namespaced_custom_object(
                self.group, version["name"], self.namespace, plural, sent, **options
            )
        )

    def write_status(self, body: Mapping[str, Any]) -> dict[str, Any]:
        """The status subresource, as KAI's controllers write it."""
        crd = self.crds[body["kind"]]
        (version,) = crd["spec"]["versions"]
        plural = crd["spec"]["names"]["plural"]
        name = body["metadata"]["name"]
        patch = {"status": body["status"]}
        if crd["spec"]["scope"] == "Cluster":
            return dict(
                self.objects.patch_cluster_custom_object_status(
                    self.group, version["name"], plural, name, patch, **STRICT
                )
            )
        return dict(
            self.objects.patch_namespaced_custom_object_status(
                self.group, version["name"], self.namespace, plural, name, patch, **STRICT
            )
        )


@contextmanager
def scratch(kube_stack: StackStatus, crds: list[dict[str, Any]]) -> Iterator[Scratch]:
    assert kube_stack.kubeconfig is not None
    with admin_client(kube_stack.kubeconfig) as api:
        namespace = f"kaiobj-{uuid.uuid4().hex[:6]}"
        Cluster(api, namespace)
        found = Scratch(api, crds, namespace)
        apply_crds(kube_stack.kubeconfig, list(found.crds.values()), 60)
        extensions = client.ApiextensionsV1Api(api)
        try:
            yield found
        finally:
            for crd in found.crds.values():
                extensions.delete_custom_resource_definition(crd["metadata"]["name"])


def ours() -> list[dict[str, Any]]:
    return read_crds(crd_directory())


def kais() -> list[dict[str, Any]]:
    return [crd for crd in read_crds(KAI_CRDS) if crd["spec"]["names"]["kind"] in KINDS]


KINDS = ("Queue", "PodGroup", "BindRequest", "Topology")


@pytest.mark.parametrize("body", [every_queue_field("team-a"), every_podgroup_field("gang")])
def test_every_kai_field_is_kept_by_our_crds(kube_stack: StackStatus, body: dict[str, Any]) -> None:
    with scratch(kube_stack, ours()) as cluster:
        created = cluster.create({key: value for key, value in body.items() if key != "status"})
        assert created["spec"] == body["spec"]
        written = cluster.write_status(body)
        assert written["spec"] == body["spec"]
        assert written["status"] == body["status"]


@needs_kai
@pytest.mark.parametrize("body", [every_queue_field("team-a"), every_podgroup_field("gang")])
def test_the_every_field_objects_are_kai_objects(
    kube_stack: StackStatus, body: dict[str, Any]
) -> None:
    """The same objects are accepted unchanged by KAI's own CRDs: the test's "every field" is
    KAI's, not ours."""
    with scratch(kube_stack, kais()) as cluster:
        created = cluster.create({key: value for key, value in body.items() if key != "status"})
        assert created["spec"] == body["spec"]
        assert cluster.write_status(body)["status"] == body["status"]


def kai_examples() -> list[dict[str, Any]]:
    return [
        document
        for name in KAI_EXAMPLES
        if (KAI_SOURCE / name).is_file()
        for document in yaml.safe_load_all((KAI_SOURCE / name).read_text())
        if isinstance(document, dict) and document.get("kind") in KINDS
    ]


@needs_kai
def test_our_crds_accept_kais_example_objects(kube_stack: StackStatus) -> None:
    examples = kai_examples()
    assert {example["kind"] for example in examples} == {"Queue", "PodGroup", "Topology"}
    with scratch(kube_stack, ours()) as cluster:
        for example in examples:
            body = {key: value for key, value in example.items() if key != "apiVersion"}
            body["metadata"] = {k: v for k, v in example["metadata"].items() if k != "namespace"}
            kept = cluster.create(body, dry_run=True)
            assert kept["spec"] == example["spec"], example["metadata"]["name"]


def project_objects() -> list[dict[str, Any]]:
    """The KAI objects the project writes: the stand-in's PodGroup, the kube demo's Queue, the
    Queue examples of schemas/examples (what `queues apply` and the README show)."""
    stand_in = {
        "kind": "PodGroup",
        "metadata": {"name": "steady", "annotations": {"kai.scheduler/expected-runtime": "2h"}},
        "spec": {"queue": "team-a", "minMember": 1, "priorityClassName": "train"},
    }
    demo = yaml.safe_load(DEMO_QUEUES.format(run="abcd"))
    examples = [
        document
        for name in ("queue.production.yaml", "queues.tree.yaml")
        for document in yaml.safe_load_all((ROOT / "schemas" / "examples" / name).read_text())
        if isinstance(document, dict) and document.get("kind") == "Queue"
    ]
    return [stand_in, demo, *examples]


@needs_kai
def test_kais_crds_accept_every_object_the_project_writes(kube_stack: StackStatus) -> None:
    objects = project_objects()
    assert len(objects) >= 4
    with scratch(kube_stack, kais()) as cluster:
        for body in objects:
            kept = cluster.create(
                {k: v for k, v in body.items() if k != "apiVersion"}, dry_run=True
            )
            assert kept["spec"] == body["spec"], body["metadata"]["name"]
            labels = kept["metadata"].get("labels") or {}
            assert mapping.NODE_POOL_LABEL not in labels  # a default KAI sees it


def semi_preemptible(name: str) -> dict[str, Any]:
    return {
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {
            "queue": "q",
            "minMember": 2,
            "preemptibility": "semi-preemptible",
            "subGroups": [{"name": "workers", "minMember": 2}],
        },
    }


def test_semi_preemptible_is_refused_as_by_kai_main_and_kept_by_the_variant(
    kube_stack: StackStatus,
) -> None:
    with scratch(kube_stack, ours()) as main_branch:
        with pytest.raises(ApiException) as refused:
            main_branch.create(semi_preemptible("semi"))
        assert refused.value.status == 422
        assert "spec.preemptibility" in str(refused.value.body)
        assert main_branch.create({**semi_preemptible("two"), "spec": {"queue": "q"}})
    variant = [
        with_semi_preemptible(crd) if crd["spec"]["names"]["kind"] == "PodGroup" else crd
        for crd in ours()
    ]
    with scratch(kube_stack, variant) as feature_branch:
        stored = feature_branch.create(semi_preemptible("semi"))
    # The bridge maps what either CRD stores: the third value when the CRD lets it through.
    pods = [
        {
            "metadata": {
                "name": f"semi-{i}",
                "namespace": "default",
                "uid": f"semi-pod-{i}",
                "annotations": {mapping.POD_GROUP_ANNOTATION: "semi"},
                "labels": {"kai.scheduler/subgroup-name": "workers"},
            },
            "spec": {"containers": [{"resources": {"limits": {mapping.GPU_RESOURCE: "1"}}}]},
        }
        for i in range(3)
    ]
    data = mapping.submission_data(stored, pods, priority=50)
    submitted = PodGroupSubmittedData.model_validate(data)
    assert submitted.resolved_preemptibility() is Preemptibility.SEMI_PREEMPTIBLE
    assert [sub.min_available for sub in submitted.sub_groups] == [2]


def test_the_stand_in_writes_no_node_pool_label_in_the_default_pool(
    kube_stack: StackStatus,
) -> None:
    assert kube_stack.kubeconfig is not None
    suffix = uuid.uuid4().hex[:6]
    with admin_client(kube_stack.kubeconfig) as api:
        cluster = Cluster(api, f"standin-{suffix}")
        node = f"standin-{suffix}"
        cluster.node(node, "default", 0)
        try:
            cluster.podgroup("plain", "q", "train")
            cluster.podgroup("pooled", "q", "train", node_pool="a100")
            labels = client.CoreV1Api(api).read_node(node).metadata.labels or {}
            assert mapping.NODE_POOL_LABEL not in labels
            plain = cluster.get_podgroup("plain")["metadata"].get("labels") or {}
            assert mapping.NODE_POOL_LABEL not in plain
            pooled = cluster.get_podgroup("pooled")["metadata"]["labels"]
            assert pooled[mapping.NODE_POOL_LABEL] == "a100"
        finally:
            cluster.remove_everything()
            client.CoreV1Api(api).delete_node(node)


def test_stack_up_kai_crds_applies_a_users_crds_over_ours(
    kube_stack: StackStatus, tmp_path: Path
) -> None:
    """`stack up --kube --kai-crds PATH` applies the user's CRD in place of the one of the same
    name, whole (one field manager): a field only ours has is gone."""
    with scratch(kube_stack, ours()) as cluster:
        theirs = copy.deepcopy(cluster.crds["PodGroup"])
        (version,) = theirs["spec"]["versions"]
        del version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["minSubGroup"]
        (tmp_path / "podgroups.yaml").write_text(yaml.safe_dump(theirs))
        done = run_cli("stack", "up", "--kube", "--kai-crds", str(tmp_path))
        assert done.returncode == 0, done.stderr
        assert theirs["metadata"]["name"] in done.stdout
        with pytest.raises(ApiException) as refused:
            cluster.create(
                {"kind": "PodGroup", "metadata": {"name": "x"}, "spec": {"minSubGroup": 1}}
            )
        # Strict field validation: an unknown field is a 400, not silently pruned.
        assert refused.value.status == 400
        assert 'unknown field \\"spec.minSubGroup\\"' in str(refused.value.body)
