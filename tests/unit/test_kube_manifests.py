"""deploy/kubernetes/ kept in step with the code: each container runs a real `minruntime`
command from the project image, every `MINRUNTIME_*` key it sets is a real setting, only the
bridge and the evictor hold an API token, and the CRDs type every field the service reads.
(tests/e2e/test_kube_deploy.py checks the same files against the real API server.)"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from minruntime.kube import QUEUE_DURATION_FIELDS, QUEUE_SPEC_FIELDS
from tests.conftest import ROOT
from tests.manifests import SETTINGS, assert_a_real_minruntime_command, setting_names, workloads

DEPLOY = ROOT / "deploy" / "kubernetes"
CRDS = DEPLOY / "crds"
IMAGE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["x-minruntime"]["image"]
API_CLIENTS = {"minruntime-kube-bridge", "minruntime-kube-evictor"}


def _objects(directory: Path, names: list[str] | None = None) -> list[dict[str, Any]]:
    files = [directory / n for n in names] if names else sorted(directory.glob("*.yaml"))
    return [d for f in files for d in yaml.safe_load_all(f.read_text()) if d]


def _deployed() -> list[dict[str, Any]]:
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return _objects(DEPLOY, kustomization["resources"])


def _crd_spec(name: str) -> dict[str, Any]:
    (crd,) = [c for c in _objects(CRDS) if c["metadata"]["name"] == name]
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def test_every_yaml_file_of_the_folder_is_deployed() -> None:
    listed = set(yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())["resources"])
    on_disk = {p.name for p in DEPLOY.glob("*.yaml")} - {"kustomization.yaml"}
    assert listed == on_disk
    assert not any(o["kind"] == "CustomResourceDefinition" for o in _deployed()), (
        "KAI installs its own CRDs; the deployment must not replace them"
    )


@pytest.mark.parametrize("workload", sorted(workloads(_deployed())))
def test_every_container_runs_a_real_minruntime_command(workload: str) -> None:
    (container,) = workloads(_deployed())[workload]["containers"]
    assert container["image"] == IMAGE
    assert "command" not in container, "the image's entrypoint is `minruntime`"
    assert_a_real_minruntime_command(container["args"], workload)


def test_every_setting_the_manifests_give_is_a_real_setting() -> None:
    names = setting_names(_deployed())
    assert names
    assert names <= SETTINGS, names - SETTINGS


def test_each_declared_metrics_port_is_the_port_its_setting_gives() -> None:
    """A container that declares a metrics port serves /metrics there: the ConfigMap's
    MINRUNTIME_*_METRICS_PORT (the evictor's too, for its lanes and abandoned requeues)."""
    (config,) = [o for o in _deployed() if o["kind"] == "ConfigMap"]
    settings = {
        "minruntime-processor": "MINRUNTIME_PROCESSOR_METRICS_PORT",
        "minruntime-requeue-worker": "MINRUNTIME_WORKER_METRICS_PORT",
        "minruntime-kube-evictor": "MINRUNTIME_KUBE_EVICTOR_METRICS_PORT",
    }
    for name, setting in settings.items():
        (container,) = workloads(_deployed())[name]["containers"]
        declared = [
            p["containerPort"] for p in container.get("ports", []) if p["name"] == "metrics"
        ]
        assert declared == [int(config["data"][setting])], name


def test_only_the_bridge_and_the_evictor_hold_an_api_token() -> None:
    (account,) = [o for o in _deployed() if o["kind"] == "ServiceAccount"]
    bound = {
        s["name"]
        for o in _deployed()
        if o["kind"] in ("ClusterRoleBinding", "RoleBinding")
        for s in o["subjects"]
    }
    assert bound == {account["metadata"]["name"]}
    for name, spec in workloads(_deployed()).items():
        if name in API_CLIENTS:
            assert spec["serviceAccountName"] == account["metadata"]["name"]
        else:
            assert spec["automountServiceAccountToken"] is False, name
            assert "serviceAccountName" not in spec, name


def test_the_queue_crd_types_every_queue_spec_field_the_service_reads() -> None:
    spec = _crd_spec("queues.scheduling.run.ai")
    assert set(spec["properties"]) == set(QUEUE_SPEC_FIELDS)
    for field in QUEUE_DURATION_FIELDS:
        # An integer number of seconds is refused by the API server, as by KAI's own CRD.
        assert spec["properties"][field]["type"] == "string"
    assert spec["properties"]["parentQueue"]["type"] == "string"


def test_the_podgroup_crd_types_the_fields_the_bridge_reads() -> None:
    properties = _crd_spec("podgroups.scheduling.run.ai")["properties"]
    assert properties["queue"]["type"] == "string"
    assert properties["minMember"]["type"] == "integer"
    assert properties["priorityClassName"]["type"] == "string"
    # KAI main's two values; semi-preemptible only through crds/variants/ (test_kai_crds.py).
    assert properties["preemptibility"]["enum"] == ["preemptible", "non-preemptible"]
    subgroup = properties["subGroups"]["items"]
    assert subgroup["required"] == ["name"]
    assert subgroup["properties"]["minMember"]["type"] == "integer"
