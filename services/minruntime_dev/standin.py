"""Stand-ins for the parts of a cluster that the local API server does not run.

`minruntime stack up --kube` starts only the API server and etcd: no KAI scheduler, no
kubelet, no controller-manager. The demo and the end-to-end tests play their parts with these
admin calls, named after who would make them: KAI binds pods (binding subresource) and writes
the run's start; the kubelet sets pods Running (status subresource) and, after an eviction,
makes the pod go away (here: a delete with grace 0).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import yaml

from minruntime.cluster.api import KAI_GROUP, read_json
from minruntime.cluster.mapping import LAST_START_ANNOTATION, NODE_POOL_LABEL, POD_GROUP_ANNOTATION
from minruntime.core import DEFAULT_NODE_POOL

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


def pool_labels(pool: str) -> dict[str, str]:
    """The node-pool label of an object of `pool`: none for the default pool.

    KAI's default scheduler (an empty `--partition-label-value`) sees only the Nodes, PodGroups
    and Queues that carry no `kai.scheduler/node-pool` label: an object of the default pool
    that carried `kai.scheduler/node-pool: default` would never be scheduled by it.
    """
    return {} if pool == DEFAULT_NODE_POOL else {NODE_POOL_LABEL: pool}


def rfc3339(moment: datetime) -> str:
    """Whole-second RFC3339 in UTC, as the API server writes timestamps."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster:
    """Admin calls on the real API server, named after what KAI and the kubelet would do."""

    def __init__(self, api: Any, namespace: str) -> None:
        from kubernetes import client

        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        # Group, version, namespace and plural of the namespace's PodGroups.
        self._podgroups = (KAI_GROUP, "v2alpha2", namespace, "podgroups")
        try:
            self.core.create_namespace({"metadata": {"name": namespace}})
        except client.exceptions.ApiException as exc:
            if exc.status != HTTP_CONFLICT:
                raise

    # -- objects ----------------------------------------------------------------------------
    def apply_queues(self, text: str) -> None:
        """Create (or replace the spec of) each Queue of a YAML text."""
        for body in yaml.safe_load_all(text):
            try:
                self.custom.create_cluster_custom_object(KAI_GROUP, "v2", "queues", body)
            except Exception as exc:
                if getattr(exc, "status", None) != HTTP_CONFLICT:
                    raise
                self.patch_queue(body["metadata"]["name"], body["spec"])

    def patch_queue(self, name: str, spec: Mapping[str, Any]) -> None:
        """A merge patch of a Queue's spec (as `kubectl patch queue NAME --type merge`)."""
        self.custom.patch_cluster_custom_object(KAI_GROUP, "v2", "queues", name, {"spec": spec})

    def priority_class(self, name: str, value: int) -> None:
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}  # fmt: skip
        from kubernetes import client

        client.SchedulingV1Api(self.api).create_priority_class(body)

    def node(self, name: str, pool: str, gpus: int) -> None:
        """A Node with GPUs in a node pool, without the not-ready taint (no kubelet here)."""
        self.core.create_node({"metadata": {"name": name, "labels": pool_labels(pool)}})
        capacity = {"nvidia.com/gpu": str(gpus), "cpu": "64", "pods": "110"}
        self.core.patch_node_status(
            name, {"status": {"capacity": capacity, "allocatable": capacity}}
        )

    def podgroup(self, name: str, queue: str, priority_class: str, **extra: Any) -> str:
        """A PodGroup; returns its uid."""
        annotations = extra.pop("annotations", {})
        labels = pool_labels(extra.pop("node_pool", DEFAULT_NODE_POOL))
        # KAI's podgrouper creates a PodGroup with its top owner as its one ownerReference.
        owners = extra.pop("owner_references", None)
        body = {
            "apiVersion": f"{KAI_GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": annotations,
                "labels": labels,
                **({"ownerReferences": owners} if owners else {}),
            },
            "spec": {"queue": queue, "minMember": 1, "priorityClassName": priority_class, **extra},
        }
        created = self.custom.create_namespaced_custom_object(*self._podgroups, body)
        return str(created["metadata"]["uid"])

    def get_podgroup(self, name: str) -> dict[str, Any]:
        return dict(self.custom.get_namespaced_custom_object(*self._podgroups, name))

    def podgroup_annotations(self, name: str) -> dict[str, str]:
        return dict(self.get_podgroup(name)["metadata"].get("annotations") or {})

    def annotate_podgroup(self, name: str, annotations: Mapping[str, str | None]) -> None:
        patch = {"metadata": {"annotations": dict(annotations)}}
        self.custom.patch_namespaced_custom_object(*self._podgroups, name, patch)

    def pod(self, name: str, podgroup: str, gpus: int) -> None:
        """A pod of a podgroup (its `pod-group-name` annotation) asking for whole GPUs."""
        limits = {"nvidia.com/gpu": str(gpus)}
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {
                    "name": name,
                    "annotations": {POD_GROUP_ANNOTATION: podgroup},
                    "labels": {"app": podgroup},  # what a workload's selector would match
                },
                "spec": {
                    "schedulerName": "kai-scheduler",
                    "containers": [
                        {"name": "main", "image": "busybox", "resources": {"limits": limits}}
                    ],
                },
            },
        )

    def get_pod(self, name: str) -> dict[str, Any] | None:
        try:
            return dict(
                read_json(
                    self.core.read_namespaced_pod(name, self.namespace, _preload_content=False)
                )
            )
        except Exception as exc:
            if getattr(exc, "status", None) == HTTP_NOT_FOUND:
                return None
            raise

    def evicting_pod(self, name: str) -> dict[str, Any] | None:
        """The pod once it is being deleted (an eviction's deletionTimestamp), else None."""
        pod = self.get_pod(name)
        return pod if pod and pod["metadata"].get("deletionTimestamp") else None

    def disruption_budget(self, name: str, app: str) -> None:
        """A PodDisruptionBudget keeping every pod of `app` (the Eviction API answers 429)."""
        from kubernetes import client

        client.PolicyV1Api(self.api).create_namespaced_pod_disruption_budget(
            self.namespace,
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": {"name": name},
                "spec": {"minAvailable": 0, "selector": {"matchLabels": {"app": app}}},
            },
        )

    def allow_disruption(self, name: str) -> None:
        """What the disruption controller would write: one disruption allowed now."""
        from kubernetes import client

        status = {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 1,
                  "desiredHealthy": 0, "expectedPods": 1}  # fmt: skip
        policy = client.PolicyV1Api(self.api)
        policy.patch_namespaced_pod_disruption_budget_status(
            name, self.namespace, {"status": status}
        )

    # -- what the scheduler and the kubelet would do -----------------------------------------
    def start(
        self, podgroup: str, pods: list[str], node: str, at: datetime, running_at: datetime
    ) -> None:
        """KAI binds the pods and writes the run's start; the kubelet sets them Running."""
        self.annotate_podgroup(podgroup, {LAST_START_ANNOTATION: rfc3339(at)})
        for pod in pods:
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
            # The client cannot read the binding's reply (a known issue): take it raw.
            self.core.create_namespaced_pod_binding(
                pod, self.namespace, binding, _preload_content=False
            )
            self.core.patch_namespaced_pod_status(
                pod,
                self.namespace,
                {"status": {"phase": "Running", "startTime": rfc3339(running_at)}},
            )

    def remove_everything(self) -> None:
        """Delete the namespace's disruption budgets, pods (grace 0) and PodGroups (the
        namespace itself would stay Terminating: no controller finishes it here)."""
        from kubernetes import client

        policy = client.PolicyV1Api(self.api)
        for budget in policy.list_namespaced_pod_disruption_budget(self.namespace).items:
            policy.delete_namespaced_pod_disruption_budget(budget.metadata.name, self.namespace)
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            self.core.delete_namespaced_pod(
                pod.metadata.name, self.namespace, grace_period_seconds=0
            )
        podgroups = self.custom.list_namespaced_custom_object(*self._podgroups)
        for podgroup in podgroups.get("items", []):
            name = podgroup["metadata"]["name"]
            self.custom.delete_namespaced_custom_object(*self._podgroups, name)

    def finish_eviction(self, pod: str) -> None:
        """What the kubelet would do after an eviction: the pod goes away (grace 0)."""
        self.core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
