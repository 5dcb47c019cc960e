"""deploy/kubernetes/ against the real API server: every manifest passes a server-side dry run,
and the ServiceAccount's own token (TokenRequest API) may make every call the bridge and the
evictor make — and nothing they do not need (403)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from minruntime.cluster.evictions import EVICT_EVENT_SELECTOR
from minruntime.cluster.mapping import REQUEUE_DECISION_ANNOTATION
from minruntime.events import encode_event, new_event
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.e2e.harness import Pipeline, wait_for
from tests.e2e.kubeapi import (
    admin_client,
    apply,
    deploy_manifests,
    ensure_namespace,
    service_account_token,
    token_kubeconfig,
)
from tests.e2e.kubeloop import UNLIMITED_RESOURCES, KubeProcess

pytestmark = pytest.mark.stack

GROUP = "scheduling.run.ai"
NAMESPACE = "minruntime"
SERVICE_ACCOUNT = "minruntime-cluster"
KAI_NAMESPACE = "kai-scheduler"
SCHEDULER_CONFIG = "kai-scheduler-config"
LEASE = "minruntime-kube-bridge"
WORKLOADS = "team-rbac"
SCHEDULER_CONFIG_YAML = """tiers:
- plugins:
  - name: minruntime
    arguments:
      defaultPreemptMinRuntime: 10m
"""
_RBAC_KINDS = {
    "Namespace",
    "ServiceAccount",
    "ClusterRole",
    "ClusterRoleBinding",
    "Role",
    "RoleBinding",
}


def test_every_manifest_passes_a_server_side_dry_run(kube_stack: StackStatus) -> None:
    assert kube_stack.kubeconfig is not None
    manifests = deploy_manifests()
    kinds = {(m["kind"], m["metadata"]["name"]) for m in manifests}
    assert {
        ("Deployment", "minruntime-processor"),
        ("Deployment", "minruntime-requeue-worker"),
        ("Deployment", "minruntime-kube-bridge"),
        ("Deployment", "minruntime-kube-evictor"),
        ("Job", "minruntime-migrate"),
        ("ServiceAccount", SERVICE_ACCOUNT),
        ("ClusterRole", "minruntime-bridge"),
        ("ClusterRole", "minruntime-evictor"),
    } <= kinds
    with admin_client(kube_stack.kubeconfig) as api:
        # A namespaced dry run needs its namespace to exist for real.
        for namespace in (NAMESPACE, KAI_NAMESPACE):
            ensure_namespace(api, namespace)
        applied = apply(api, manifests, dry_run=True)
        assert [(a.kind, a.metadata.name) for a in applied] == [
            (m["kind"], m["metadata"]["name"]) for m in manifests
        ]
        with pytest.raises(ApiException) as absent:
            client.AppsV1Api(api).read_namespaced_deployment("minruntime-processor", NAMESPACE)
        assert absent.value.status == 404, "a dry run must create nothing"
        replicas = {a.metadata.name: a.spec.replicas for a in applied if a.kind == "Deployment"}
        assert replicas["minruntime-requeue-worker"] == 2


@dataclass(frozen=True)
class Cluster:
    """Objects the bridge and the evictor work on, and a client holding only the SA's token."""

    admin: client.ApiClient
    service_account: client.ApiClient
    podgroup: str
    pod: str


def podgroup_with_a_bound_pod(admin: client.ApiClient, podgroup: str, pod: str, queue: str) -> str:
    """A PodGroup and one pod of it, created with its node already set: bound, so an eviction
    is accepted and leaves it terminating (no kubelet finishes it). Returns the PodGroup's uid."""
    created = client.CustomObjectsApi(admin).create_namespaced_custom_object(
        GROUP,
        "v2alpha2",
        WORKLOADS,
        "podgroups",
        {
            "apiVersion": f"{GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": podgroup},
            "spec": {"queue": queue, "minMember": 1},
        },
    )
    client.CoreV1Api(admin).create_namespaced_pod(
        WORKLOADS,
        {
            "metadata": {"name": pod, "annotations": {"pod-group-name": podgroup}},
            "spec": {
                "nodeName": f"node-{pod}",
                "containers": [{"name": "main", "image": "busybox"}],
            },
        },
    )
    return str(created["metadata"]["uid"])


@pytest.fixture(scope="module")
def cluster(kube_stack: StackStatus) -> Iterator[Cluster]:
    assert kube_stack.kubeconfig is not None
    admin = admin_client(kube_stack.kubeconfig)
    for namespace in (NAMESPACE, KAI_NAMESPACE, WORKLOADS):
        ensure_namespace(admin, namespace)
    rbac = [m for m in deploy_manifests() if m["kind"] in _RBAC_KINDS]
    apply(admin, rbac)
    core = client.CoreV1Api(admin)
    suffix = uuid.uuid4().hex[:6]
    apply(
        admin,
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": SCHEDULER_CONFIG, "namespace": KAI_NAMESPACE},
                "data": {"config.yaml": SCHEDULER_CONFIG_YAML},
            }
        ],
    )
    podgroup, pod = f"pg-{suffix}", f"pod-{suffix}"
    podgroup_with_a_bound_pod(admin, podgroup, pod, "default")
    token = service_account_token(admin, NAMESPACE, SERVICE_ACCOUNT)
    configuration = client.Configuration()
    configuration.host = admin.configuration.host
    configuration.ssl_ca_cert = admin.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    service_account = client.ApiClient(configuration)
    try:
        yield Cluster(admin, service_account, podgroup, pod)
    finally:
        core.delete_namespaced_pod(pod, WORKLOADS, grace_period_seconds=0)
        service_account.close()
        admin.close()


def _list_and_watch(call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
    """The two calls an informer makes: a list, then a watch from its resourceVersion."""
    listed = call(*args, **kwargs)
    version = (
        listed["metadata"]["resourceVersion"]
        if isinstance(listed, dict)
        else (listed.metadata.resource_version)
    )
    stream = call(
        *args,
        **kwargs,
        watch=True,
        resource_version=version,
        timeout_seconds=1,
        _preload_content=False,
    )
    try:
        assert stream.status == 200
        stream.read()  # the watch ends after timeout_seconds; unread, it would poison the pool
    finally:
        stream.release_conn()


def test_the_service_account_may_do_what_the_bridge_does(cluster: Cluster) -> None:
    api = cluster.service_account
    objects, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    _list_and_watch(objects.list_cluster_custom_object, GROUP, "v2", "queues")
    _list_and_watch(objects.list_cluster_custom_object, GROUP, "v2alpha2", "podgroups")
    _list_and_watch(core.list_pod_for_all_namespaces)
    _list_and_watch(core.list_node)
    _list_and_watch(core.list_event_for_all_namespaces, field_selector=EVICT_EVENT_SELECTOR)
    _list_and_watch(client.SchedulingV1Api(api).list_priority_class)
    _list_and_watch(
        core.list_namespaced_config_map,
        KAI_NAMESPACE,
        field_selector=f"metadata.name={SCHEDULER_CONFIG}",
    )

    # A Lease an earlier run (or a bridge) left: the SA must be able to create it from nothing.
    with contextlib.suppress(ApiException):
        client.CoordinationV1Api(cluster.admin).delete_namespaced_lease(LEASE, NAMESPACE)
    leases = client.CoordinationV1Api(api)
    leases.create_namespaced_lease(
        NAMESPACE,
        client.V1Lease(
            metadata=client.V1ObjectMeta(name=LEASE),
            spec=client.V1LeaseSpec(holder_identity="bridge-0", lease_duration_seconds=15),
        ),
    )
    lease = leases.read_namespaced_lease(LEASE, NAMESPACE)
    lease.spec.holder_identity = "bridge-1"
    renewed = leases.replace_namespaced_lease(LEASE, NAMESPACE, lease)
    assert renewed.spec.holder_identity == "bridge-1"


def test_the_service_account_may_do_what_the_evictor_does(cluster: Cluster) -> None:
    api = cluster.service_account
    objects, core = client.CustomObjectsApi(api), client.CoreV1Api(api)
    listed = objects.list_cluster_custom_object(GROUP, "v2alpha2", "podgroups")
    assert cluster.podgroup in {item["metadata"]["name"] for item in listed["items"]}
    # Reads one PodGroup before acting on its decision (its mark, its pool's deadline).
    one = objects.get_namespaced_custom_object(
        GROUP, "v2alpha2", WORKLOADS, "podgroups", cluster.podgroup
    )
    assert one["metadata"]["name"] == cluster.podgroup
    pods = core.list_namespaced_pod(WORKLOADS)
    assert cluster.pod in {p.metadata.name for p in pods.items}

    core.create_namespaced_pod_eviction(
        cluster.pod,
        WORKLOADS,
        client.V1Eviction(metadata=client.V1ObjectMeta(name=cluster.pod, namespace=WORKLOADS)),
    )
    evicted = client.CoreV1Api(cluster.admin).read_namespaced_pod(cluster.pod, WORKLOADS)
    assert evicted.metadata.deletion_timestamp is not None

    patched = objects.patch_namespaced_custom_object(
        GROUP,
        "v2alpha2",
        WORKLOADS,
        "podgroups",
        cluster.podgroup,
        {"metadata": {"annotations": {"kai.scheduler/requeue-not-before": "2026-01-01T00:00:00Z"}}},
    )
    assert patched["metadata"]["annotations"]["kai.scheduler/requeue-not-before"]


def _refused(cluster: Cluster) -> dict[str, Callable[[], Any]]:
    api = cluster.service_account
    core, objects = client.CoreV1Api(api), client.CustomObjectsApi(api)
    leases = client.CoordinationV1Api(api)
    return {
        "delete a pod (evict, never delete)": lambda: core.delete_namespaced_pod(
            cluster.pod, WORKLOADS
        ),
        "create a pod": lambda: core.create_namespaced_pod(
            WORKLOADS,
            {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "x", "image": "x"}]}},
        ),
        "patch a pod": lambda: core.patch_namespaced_pod(
            cluster.pod, WORKLOADS, {"metadata": {"labels": {"x": "y"}}}
        ),
        "create a queue": lambda: objects.create_cluster_custom_object(
            GROUP,
            "v2",
            "queues",
            {"apiVersion": f"{GROUP}/v2", "kind": "Queue", "metadata": {"name": "x"}},
        ),
        "patch a queue": lambda: objects.patch_cluster_custom_object(
            GROUP, "v2", "queues", "default", {"spec": {"preemptMinRuntime": "1s"}}
        ),
        "delete a podgroup": lambda: objects.delete_namespaced_custom_object(
            GROUP, "v2alpha2", WORKLOADS, "podgroups", cluster.podgroup
        ),
        "patch a podgroup's status": lambda: objects.patch_namespaced_custom_object_status(
            GROUP, "v2alpha2", WORKLOADS, "podgroups", cluster.podgroup, {"status": {"phase": "x"}}
        ),
        "patch a node": lambda: core.patch_node("any", {"spec": {"unschedulable": True}}),
        "list secrets": lambda: core.list_secret_for_all_namespaces(),
        "list every ConfigMap of KAI's namespace": lambda: core.list_namespaced_config_map(
            KAI_NAMESPACE
        ),
        "list ConfigMaps elsewhere": lambda: core.list_namespaced_config_map(NAMESPACE),
        "read another Lease": lambda: leases.read_namespaced_lease("other", NAMESPACE),
        "create a Lease in another namespace": lambda: leases.create_namespaced_lease(
            WORKLOADS, client.V1Lease(metadata=client.V1ObjectMeta(name=LEASE))
        ),
    }


REFUSED = [
    "delete a pod (evict, never delete)",
    "create a pod",
    "patch a pod",
    "create a queue",
    "patch a queue",
    "delete a podgroup",
    "patch a podgroup's status",
    "patch a node",
    "list secrets",
    "list every ConfigMap of KAI's namespace",
    "list ConfigMaps elsewhere",
    "read another Lease",
    "create a Lease in another namespace",
]


@pytest.mark.parametrize("what", REFUSED)
def test_the_service_account_is_refused_what_it_does_not_need(cluster: Cluster, what: str) -> None:
    call = _refused(cluster)[what]
    with pytest.raises(ApiException) as refused:
        call()
    assert refused.value.status == 403, refused.value.body
    assert f"system:serviceaccount:{NAMESPACE}:{SERVICE_ACCOUNT}" in str(refused.value.body)


def _lease_holder(admin: client.ApiClient) -> str | None:
    try:
        lease = client.CoordinationV1Api(admin).read_namespaced_lease(LEASE, NAMESPACE)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    return str(lease.spec.holder_identity)


def _events(pipeline: Pipeline, role: str, event_type: str) -> list[dict[str, Any]]:
    records = pipeline.consume(role, 1_000_000, timeout=2)
    events = [json.loads(r.value) for r in records]
    return [e for e in events if e["type"] == event_type]


def test_the_bridge_and_the_evictor_run_on_the_service_accounts_own_token(
    cluster: Cluster, kube_stack: StackStatus, settings: Settings, tmp_path: Path
) -> None:
    """The real programs, with the deployment's defaults (Lease minruntime/minruntime-kube-bridge,
    ConfigMap kai-scheduler/kai-scheduler-config) and nothing but the ServiceAccount's token."""
    assert kube_stack.kubeconfig is not None
    admin, suffix = cluster.admin, uuid.uuid4().hex[:6]
    token = service_account_token(admin, NAMESPACE, SERVICE_ACCOUNT)
    kubeconfig = token_kubeconfig(kube_stack.kubeconfig, token, tmp_path / "kubeconfig")
    with contextlib.suppress(ApiException):
        client.CoordinationV1Api(admin).delete_namespaced_lease(LEASE, NAMESPACE)
    queue = f"rbac-{suffix}"
    client.CustomObjectsApi(admin).create_cluster_custom_object(
        GROUP,
        "v2",
        "queues",
        {
            "apiVersion": f"{GROUP}/v2",
            "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"resources": UNLIMITED_RESOURCES},
        },
    )
    podgroup, pod = f"pg-run-{suffix}", f"pod-run-{suffix}"
    uid = podgroup_with_a_bound_pod(admin, podgroup, pod, queue)
    core = client.CoreV1Api(admin)

    pipeline = Pipeline(settings, tmp_path, "rbac").create(with_topics=True)
    env = {
        "MINRUNTIME_KUBE_IDENTITY": f"bridge-{suffix}",
        "MINRUNTIME_KUBE_LEASE_SECONDS": "3",
        "MINRUNTIME_EVICTOR_GROUP": f"evictor-{suffix}",
    }
    bridge = KubeProcess(pipeline, "bridge", kubeconfig, env).start()
    evictor = KubeProcess(pipeline, "evictor", kubeconfig, env).start()
    try:
        wait_for(
            lambda: _lease_holder(admin) == f"bridge-{suffix}", 60, "the bridge to hold the Lease"
        )
        wait_for(
            lambda: any(
                e["subject"] == queue for e in _events(pipeline, "queues", "queue.upserted")
            ),
            60,
            "queue.upserted from the bridge",
        )
        assert _events(pipeline, "queues", "config.updated"), "the scheduler ConfigMap was read"

        now = datetime.now(UTC)
        decision = new_event(
            "requeue.committed",
            {
                "uid": uid,
                "nominatedBy": ["expectedruntime"],
                "beneficiaries": [f"pending-{suffix}"],
                "requeueNotBefore": now + timedelta(minutes=5),
                "decidedAt": now,
            },
            time=now,
        )
        pipeline.produce("requeue_decisions", [(uid.encode(), encode_event(decision))])
        marked = wait_for(
            lambda: (
                client.CustomObjectsApi(admin)
                .get_namespaced_custom_object(GROUP, "v2alpha2", WORKLOADS, "podgroups", podgroup)[
                    "metadata"
                ]
                .get("annotations", {})
                .get(REQUEUE_DECISION_ANNOTATION)
            ),
            60,
            "the evictor to mark the PodGroup",
        )
        assert marked == decision.id
        evicted = core.read_namespaced_pod(pod, WORKLOADS)
        assert evicted.metadata.deletion_timestamp is not None, "evicted, not left running"
    finally:
        bridge.stop()
        evictor.stop()
        pipeline.drop(verify=False)
        with contextlib.suppress(ApiException):
            core.delete_namespaced_pod(pod, WORKLOADS, grace_period_seconds=0)
    for process in (bridge, evictor):
        log = process.log_path.read_text()
        # The client's ApiException text says "Reason: Forbidden" for a 403.
        assert "Forbidden" not in log, log[-2000:]
