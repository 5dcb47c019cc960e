"""`stack up --kube`: a real kube-apiserver (built once from the Go module proxy) with the
project's CRDs for KAI's Queue and PodGroup; `status` prints KUBECONFIG; `down` stops it."""

from __future__ import annotations

import shutil
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus, stack_down
from minruntime_dev.stack.postgres import PostgresNode
from tests.conftest import free_ports, run_cli
from tests.e2e.kubeapi import admin_client as api_client

pytestmark = pytest.mark.stack

GROUP = "scheduling.run.ai"


def queue(name: str, **spec: Any) -> dict[str, Any]:
    """A scheduling.run.ai/v2 Queue manifest."""
    return {
        "apiVersion": f"{GROUP}/v2",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def test_up_kube_again_and_status_print_kubeconfig(kube_stack: StackStatus) -> None:
    again = run_cli("stack", "up", "--kube")
    assert again.returncode == 0, again.stderr
    assert "Kubernetes API server already running" in again.stdout
    assert f"KUBECONFIG={kube_stack.kubeconfig}" in again.stdout.splitlines()

    status = run_cli("stack", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    assert "etcd" in status.stdout
    assert "kube-apiserver" in status.stdout
    assert "Kubernetes v1.33.13" in status.stdout
    assert status.stdout.count("healthy") == 4
    assert f"KUBECONFIG={kube_stack.kubeconfig}" in status.stdout.splitlines()


def test_crds_are_established_and_serve_kai_objects(kube_stack: StackStatus) -> None:
    assert kube_stack.kubeconfig is not None
    with api_client(kube_stack.kubeconfig) as api:
        extensions = client.ApiextensionsV1Api(api)
        for name, version in (
            ("queues.scheduling.run.ai", "v2"),
            ("podgroups.scheduling.run.ai", "v2alpha2"),
            ("bindrequests.scheduling.run.ai", "v1alpha2"),
            ("topologies.kai.scheduler", "v1alpha1"),
        ):
            crd = extensions.read_custom_resource_definition(name)
            conditions = {c.type: c.status for c in crd.status.conditions}
            assert conditions["Established"] == "True"
            assert [v.name for v in crd.spec.versions] == [version]

        objects = client.CustomObjectsApi(api)
        parent, child = f"dept-{uuid.uuid4().hex[:6]}", f"team-{uuid.uuid4().hex[:6]}"
        objects.create_cluster_custom_object(
            GROUP, "v2", "queues", queue(parent, preemptMinRuntime="10m", priority=100)
        )
        objects.create_cluster_custom_object(
            GROUP,
            "v2",
            "queues",
            queue(
                child,
                parentQueue=parent,
                reclaimMinRuntime="1h30m",
                resources={"gpu": {"quota": 4, "limit": 8, "overQuotaWeight": 1}},
            ),
        )
        stored = objects.get_cluster_custom_object(GROUP, "v2", "queues", child)
        assert stored["spec"]["parentQueue"] == parent
        assert stored["spec"]["reclaimMinRuntime"] == "1h30m"

        podgroup = {
            "apiVersion": f"{GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": f"pg-{uuid.uuid4().hex[:6]}",
                "annotations": {"kai.scheduler/expected-runtime": "2h"},
            },
            "spec": {
                "queue": child,
                "minMember": 3,
                "priorityClassName": "train",
                "preemptibility": "preemptible",
                "subGroups": [{"name": "workers", "minMember": 2}],
            },
        }
        created = objects.create_namespaced_custom_object(
            GROUP, "v2alpha2", "default", "podgroups", podgroup
        )
        assert created["spec"]["subGroups"] == [{"name": "workers", "minMember": 2}]
        # The status subresource exists: KAI writes its conditions there, not through the spec.
        condition = {"type": "Scheduled", "status": "True", "reason": "Allocated"}
        written = objects.patch_namespaced_custom_object_status(
            GROUP,
            "v2alpha2",
            "default",
            "podgroups",
            podgroup["metadata"]["name"],
            {"status": {"conditions": [condition]}},
        )
        assert written["status"]["conditions"] == [condition]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("preemptMinRuntime", 300, "spec.preemptMinRuntime"),
        ("reclaimMinRuntime", 60, "spec.reclaimMinRuntime"),
    ],
)
def test_integer_min_runtime_is_rejected_by_the_crd_schema(
    kube_stack: StackStatus, field: str, value: int, expected: str
) -> None:
    assert kube_stack.kubeconfig is not None
    with api_client(kube_stack.kubeconfig) as api:
        objects = client.CustomObjectsApi(api)
        name = f"bad-{uuid.uuid4().hex[:6]}"
        with pytest.raises(ApiException) as refused:
            objects.create_cluster_custom_object(
                GROUP, "v2", "queues", queue(name, **{field: value})
            )
        assert refused.value.status == 422
        assert expected in str(refused.value.body)
        assert "string" in str(refused.value.body)
        with pytest.raises(ApiException) as missing:
            objects.get_cluster_custom_object(GROUP, "v2", "queues", name)
        assert missing.value.status == 404


def test_podgroup_preemptibility_outside_the_enum_is_rejected(kube_stack: StackStatus) -> None:
    assert kube_stack.kubeconfig is not None
    with api_client(kube_stack.kubeconfig) as api:
        bad = {
            "apiVersion": f"{GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {"name": f"pg-{uuid.uuid4().hex[:6]}"},
            "spec": {"queue": "q", "minMember": 1, "preemptibility": "sometimes"},
        }
        with pytest.raises(ApiException) as refused:
            client.CustomObjectsApi(api).create_namespaced_custom_object(
                GROUP, "v2alpha2", "default", "podgroups", bad
            )
        assert refused.value.status == 422
        assert "spec.preemptibility" in str(refused.value.body)


# semi-preemptible (refused as by KAI main, kept by the variant): tests/e2e/test_kai_objects.py


@pytest.fixture
def private_kube_stack(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for a second stack (own directory and ports, shared binary cache)."""
    # One block of eight free ports, a pair each: pairs chosen one by one could overlap (etcd's
    # peer port, its port + 1, was once PostgreSQL's).
    kafka, postgres, apiserver, etcd = range(free_ports(8), 1 << 16, 2)[:4]
    env = {
        "MINRUNTIME_STACK_DIR": str(tmp_path / "stack"),
        "MINRUNTIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka}",
        "MINRUNTIME_DATABASE_URL": (
            f"postgresql://minruntime:minruntime@127.0.0.1:{postgres}/minruntime"
        ),
        "MINRUNTIME_KUBE_APISERVER_PORT": str(apiserver),
        "MINRUNTIME_KUBE_ETCD_PORT": str(etcd),
        "MINRUNTIME_KAFKA_HEAP": "384m",
    }
    yield env
    settings = Settings(
        stack_dir=Path(env["MINRUNTIME_STACK_DIR"]),
        kafka_bootstrap=env["MINRUNTIME_KAFKA_BOOTSTRAP"],
        database_url=env["MINRUNTIME_DATABASE_URL"],
        kube_apiserver_port=int(env["MINRUNTIME_KUBE_APISERVER_PORT"]),
        kube_etcd_port=int(env["MINRUNTIME_KUBE_ETCD_PORT"]),
    )
    stack_down(settings)
    node = PostgresNode(settings)
    if node.as_root:
        shutil.rmtree(node.home.parent, ignore_errors=True)


def _listening(port: str | int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", int(port))) == 0


def test_kube_lifecycle_down_kube_then_down(
    kube_stack: StackStatus, private_kube_stack: dict[str, str]
) -> None:
    # kube_stack first: on a fresh machine it builds the binaries this stack reuses.
    env = private_kube_stack
    kubeconfig = Path(env["MINRUNTIME_STACK_DIR"]) / "kube" / "kubeconfig"
    up = run_cli("stack", "up", "--kube", env=env)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "Kubernetes API server v1.33.13 ready at https://127.0.0.1:" in up.stdout
    # The four CRDs a real KAI needs: ours of Queue and PodGroup, BindRequest and Topology.
    assert (
        "CRDs established: bindrequests.scheduling.run.ai, podgroups.scheduling.run.ai, "
        "queues.scheduling.run.ai, topologies.kai.scheduler"
    ) in up.stdout
    assert f"KUBECONFIG={kubeconfig}" in up.stdout.splitlines()
    with api_client(kubeconfig) as api:
        client.CustomObjectsApi(api).create_cluster_custom_object(
            GROUP, "v2", "queues", queue("kept", preemptMinRuntime="5m")
        )

    only_kube = run_cli("stack", "down", "--kube", env=env)
    assert only_kube.returncode == 0, only_kube.stderr
    assert only_kube.stdout.splitlines() == ["Kubernetes API server stopped"]
    assert not _listening(env["MINRUNTIME_KUBE_APISERVER_PORT"])
    assert not _listening(env["MINRUNTIME_KUBE_ETCD_PORT"])
    status = run_cli("stack", "status", env=env)
    assert status.returncode == 0, "Kafka and PostgreSQL must still run"
    assert "kube-apiserver" not in status.stdout
    assert not any(line.startswith("KUBECONFIG=") for line in status.stdout.splitlines())

    again = run_cli("stack", "up", "--kube", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    assert "Kafka already running" in again.stdout
    with api_client(kubeconfig) as api:
        kept = client.CustomObjectsApi(api).get_cluster_custom_object(GROUP, "v2", "queues", "kept")
    assert kept["spec"]["preemptMinRuntime"] == "5m", "etcd's data survives a restart"

    down = run_cli("stack", "down", env=env)
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == [
        "Kubernetes API server stopped",
        "Kafka stopped",
        "PostgreSQL stopped",
    ]
    assert not _listening(env["MINRUNTIME_KUBE_APISERVER_PORT"])
    stopped = run_cli("stack", "status", env=env)
    assert stopped.returncode == 3
    assert "kube-apiserver" not in stopped.stdout


def test_missing_go_is_one_line_and_starts_nothing(
    private_kube_stack: dict[str, str], tmp_path: Path
) -> None:
    no_go = tmp_path / "bin"
    no_go.mkdir()
    env = {
        **private_kube_stack,
        "PATH": str(no_go),
        "MINRUNTIME_CACHE_DIR": str(tmp_path / "empty-cache"),
    }
    result = run_cli("stack", "up", "--kube", env=env)
    assert result.returncode == 3, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("minruntime: error: Go is not installed")
    assert not _listening(private_kube_stack["MINRUNTIME_KAFKA_BOOTSTRAP"].rsplit(":", 1)[1])
