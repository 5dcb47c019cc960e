"""The cluster side of the Kubernetes loop in tests: objects a KAI cluster would have, made by hand.

Only the API server runs (no kubelet, scheduler or controller-manager), so the test plays
their parts: it binds pods (binding subresource), sets them Running (status subresource), and
deletes evicted pods with grace 0 (no kubelet finishes an eviction). Plus the bridge and the
evictor as subprocesses on a Pipeline's database and topics.
"""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from minruntime.cluster.api import read_json
from minruntime.cluster.mapping import LAST_START_ANNOTATION
from tests.conftest import MINRUNTIME, ROOT
from tests.e2e.harness import Pipeline, Subprocess
from tests.e2e.kubeapi import ensure_namespace

GROUP = "scheduling.run.ai"


def rfc3339(moment: datetime) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster:
    """Admin calls on the real API server, named after what KAI and the kubelet would do."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.namespace = namespace
        ensure_namespace(api, namespace)

    # -- objects ----------------------------------------------------------------------------
    def apply_queues(self, text: str) -> None:
        """Create (or replace the spec of) each Queue of a YAML text."""
        for body in yaml.safe_load_all(text):
            try:
                self.custom.create_cluster_custom_object(GROUP, "v2", "queues", body)
            except ApiException as exc:
                if exc.status != 409:
                    raise
                self.patch_queue(body["metadata"]["name"], body["spec"])

    def patch_queue(self, name: str, spec: Mapping[str, Any]) -> None:
        """A merge patch of a Queue's spec (as `kubectl patch queue NAME --type merge`)."""
        self.custom.patch_cluster_custom_object(GROUP, "v2", "queues", name, {"spec": spec})

    def priority_class(self, name: str, value: int) -> None:
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}  # fmt: skip
        client.SchedulingV1Api(self.api).create_priority_class(body)

    def node(self, name: str, pool: str, gpus: int) -> None:
        """A Node with GPUs in a node pool, without the not-ready taint (no kubelet here)."""
        labels = {"kai.scheduler/node-pool": pool}
        self.core.create_node({"metadata": {"name": name, "labels": labels}})
        capacity = {"nvidia.com/gpu": str(gpus), "cpu": "64", "pods": "110"}
        self.core.patch_node_status(
            name, {"status": {"capacity": capacity, "allocatable": capacity}}
        )

    def podgroup(self, name: str, queue: str, priority_class: str, **extra: Any) -> str:
        """A PodGroup; returns its uid."""
        annotations = extra.pop("annotations", {})
        labels = {"kai.scheduler/node-pool": extra.pop("node_pool")} if "node_pool" in extra else {}
        body = {
            "apiVersion": f"{GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": self.namespace,
                "annotations": annotations,
                "labels": labels,
            },
            "spec": {"queue": queue, "minMember": 1, "priorityClassName": priority_class, **extra},
        }
        created = self.custom.create_namespaced_custom_object(
            GROUP, "v2alpha2", self.namespace, "podgroups", body
        )
        return str(created["metadata"]["uid"])

    def get_podgroup(self, name: str) -> dict[str, Any]:
        return dict(
            self.custom.get_namespaced_custom_object(
                GROUP, "v2alpha2", self.namespace, "podgroups", name
            )
        )

    def annotate_podgroup(self, name: str, annotations: Mapping[str, str | None]) -> None:
        self.custom.patch_namespaced_custom_object(
            GROUP, "v2alpha2", self.namespace, "podgroups", name,
            {"metadata": {"annotations": dict(annotations)}},
        )  # fmt: skip

    def pod(self, name: str, podgroup: str, gpus: int) -> None:
        """A pod of a podgroup (its `pod-group-name` annotation) asking for whole GPUs."""
        limits = {"nvidia.com/gpu": str(gpus)}
        self.core.create_namespaced_pod(
            self.namespace,
            {
                "metadata": {"name": name, "annotations": {"pod-group-name": podgroup}},
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
        except ApiException as exc:
            if exc.status == 404:
                return None
            raise

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

    def finish_eviction(self, pod: str) -> None:
        """What the kubelet would do after an eviction: the pod goes away (grace 0)."""
        self.core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)


class KubeProcess(Subprocess):
    """`minruntime kube bridge|evictor` on a Pipeline's database and topics."""

    def __init__(
        self, pipeline: Pipeline, command: str, kubeconfig: Path, env: Mapping[str, str]
    ) -> None:
        self.command = command
        self.env = {**pipeline.env, "KUBECONFIG": str(kubeconfig), **env}
        self.process: subprocess.Popen[bytes] | None = None
        self.log_path = pipeline.workdir / f"{command}-{uuid.uuid4().hex[:6]}.log"

    def start(self) -> KubeProcess:
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            [MINRUNTIME, "kube", self.command, "--loglevel", "info"],
            env={**os.environ, **self.env},
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
        return self
