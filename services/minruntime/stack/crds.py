"""The project's own CRDs for KAI's Queue and PodGroup, applied to the local API server.

They live in `deploy/kubernetes/crds/` (a cluster that runs KAI has KAI's own). `stack up
--kube` applies them with server-side apply, so an edited CRD replaces the old one, and
returns only once the API server reports each one Established: before that, creating a Queue
fails with 404.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from minruntime.errors import StackError
from minruntime.settings import project_root

FIELD_MANAGER = "minruntime-stack"


def crd_directory() -> Path:
    """`deploy/kubernetes/crds/` of this checkout."""
    return project_root() / "deploy" / "kubernetes" / "crds"


def read_crds(directory: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition document in the directory's YAML files."""
    crds = [
        document
        for path in sorted(directory.glob("*.yaml"))
        for document in yaml.safe_load_all(path.read_text())
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition"
    ]
    if not crds:
        raise StackError(f"no CustomResourceDefinition found in {directory}")
    return crds


def apply_crds(kubeconfig: Path, directory: Path, timeout: float) -> list[str]:
    """Server-side apply every CRD of `directory`, wait until all are Established."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    crds = read_crds(directory)
    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    api = client.ApiextensionsV1Api(api_client)
    names = [str(crd["metadata"]["name"]) for crd in crds]
    try:
        for name, crd in zip(names, crds, strict=True):
            api.patch_custom_resource_definition(
                name,
                crd,
                field_manager=FIELD_MANAGER,
                force=True,
                _content_type="application/apply-patch+yaml",
            )
        deadline = time.monotonic() + timeout
        pending = set(names)
        while pending:
            pending = {name for name in pending if not _established(api, name)}
            if pending and time.monotonic() > deadline:
                raise StackError(
                    f"CRDs not Established after {timeout:.0f}s: {', '.join(sorted(pending))}"
                )
            if pending:
                time.sleep(0.2)
    except ApiException as exc:
        raise StackError(
            f"applying the CRDs of {directory} failed: {exc.status} {exc.reason}"
        ) from exc
    return names


def _established(api: Any, name: str) -> bool:
    status = api.read_custom_resource_definition(name).status
    return any(c.type == "Established" and c.status == "True" for c in (status.conditions or []))
