"""The CRDs a real KAI needs, applied to the local API server by `stack up --kube`.

The project's own, in `deploy/kubernetes/crds/` (written from KAI's Go API types; a cluster that
runs KAI has KAI's own): Queue, PodGroup, BindRequest and Topology. `--kai-crds PATH` applies a
user's CRDs (a file or a directory of YAML files, e.g. KAI's `deployments/kai-scheduler/crds/`)
in place of the project's of the same name; `--semi-preemptible` patches the PodGroup CRD with
`deploy/kubernetes/crds/variants/semi-preemptible.yaml` (a JSON patch, also usable with
`kubectl patch`). Everything goes by server-side apply under one field manager, so the CRD
applied last replaces the one before it whole; `stack up --kube` returns only once the API
server reports each one Established: before that, creating a Queue fails with 404.
"""

from __future__ import annotations

import copy
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import yaml

from minruntime.errors import StackError
from minruntime.settings import project_root

FIELD_MANAGER: Final = "minruntime-stack"
PODGROUP_CRD: Final = "podgroups.scheduling.run.ai"
# A user's CRD folder is a few files of at most a few hundred KiB (KAI's largest is ~300 KiB).
_MAX_CRD_FILES: Final = 64
_MAX_CRD_BYTES: Final = 8 * 1024 * 1024


@dataclass(frozen=True)
class CrdChoice:
    """Which CRDs `stack up --kube` applies: the project's, a user's over them, a variant."""

    kai_crds: Path | None = None
    semi_preemptible: bool = False


def crd_directory() -> Path:
    return project_root() / "deploy" / "kubernetes" / "crds"


def read_crds(path: Path) -> list[dict[str, Any]]:
    """Every CustomResourceDefinition of a YAML file, or of a directory's `*.yaml`/`*.yml`
    files (not its subdirectories); one line naming the path when there is none to read."""
    if not path.exists():
        raise StackError(f"no such CRD file or directory: {path}")
    files = (
        sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml") and p.is_file())
        if path.is_dir()
        else [path]
    )
    if len(files) > _MAX_CRD_FILES:
        raise StackError(f"{path}: {len(files)} YAML files, more than {_MAX_CRD_FILES}")
    crds = [crd for file in files for crd in _crds_of(file)]
    if not crds:
        raise StackError(f"no CustomResourceDefinition found in {path}")
    return crds


def _crds_of(file: Path) -> list[dict[str, Any]]:
    try:
        if file.stat().st_size > _MAX_CRD_BYTES:
            raise StackError(f"{file}: over {_MAX_CRD_BYTES // (1024 * 1024)} MiB")
        documents = list(yaml.safe_load_all(file.read_text()))
    except OSError as error:
        raise StackError(f"cannot read {file}: {error.strerror or error}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as error:
        raise StackError(f"{file} is not YAML: {' '.join(str(error).split())}") from None
    crds = [
        document
        for document in documents
        if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition"
    ]
    for crd in crds:
        name = (crd.get("metadata") or {}).get("name") if isinstance(crd, dict) else None
        if not isinstance(name, str) or not name:
            raise StackError(f"{file}: a CustomResourceDefinition without metadata.name")
    return crds


def chosen_crds(choice: CrdChoice) -> list[dict[str, Any]]:
    """The project's CRDs, a user's in place of those of the same name, then the variant."""
    by_name = {crd["metadata"]["name"]: crd for crd in read_crds(crd_directory())}
    if choice.kai_crds is not None:
        by_name.update({crd["metadata"]["name"]: crd for crd in read_crds(choice.kai_crds)})
    if choice.semi_preemptible:
        if PODGROUP_CRD not in by_name:
            raise StackError(f"--semi-preemptible: no {PODGROUP_CRD} CRD to patch")
        by_name[PODGROUP_CRD] = with_semi_preemptible(by_name[PODGROUP_CRD])
    return list(by_name.values())


def with_semi_preemptible(crd: dict[str, Any]) -> dict[str, Any]:
    """The PodGroup CRD patched by `variants/semi-preemptible.yaml` (unchanged when its enum
    already has the value, as KAI's feature-branch CRD does)."""
    patch = crd_directory() / "variants" / "semi-preemptible.yaml"
    operations = yaml.safe_load(patch.read_text())
    return json_patched(crd, operations)


def json_patched(document: dict[str, Any], operations: list[dict[str, Any]]) -> dict[str, Any]:
    """RFC 6902's `test` and `add` (the two the variant uses) applied to a copy; an `add` to
    the end of a list that holds the value already changes nothing."""
    patched = copy.deepcopy(document)
    for operation in operations:
        *parents, last = [
            part.replace("~1", "/").replace("~0", "~") for part in operation["path"][1:].split("/")
        ]
        target: Any = patched
        try:
            for part in parents:
                target = target[int(part)] if isinstance(target, list) else target[part]
            if operation["op"] == "test":
                found = target[int(last)] if isinstance(target, list) else target[last]
                if found != operation["value"]:
                    raise StackError(
                        f"{operation['path']} is {found!r}, not {operation['value']!r}"
                    )
            elif operation["op"] == "add" and isinstance(target, list) and last == "-":
                if operation["value"] not in target:
                    target.append(operation["value"])
            elif operation["op"] == "add" and isinstance(target, dict):
                target[last] = operation["value"]
            else:
                raise StackError(f"unsupported JSON patch operation {operation}")
        except (KeyError, IndexError, ValueError, TypeError):
            raise StackError(f"the CRD has no {operation['path']}") from None
    return patched


def apply_crds(kubeconfig: Path, crds: list[dict[str, Any]], timeout: float) -> list[str]:
    """Server-side apply every CRD, wait until all are Established."""
    from kubernetes import client, config
    from kubernetes.client.exceptions import ApiException

    api_client = config.new_client_from_config(config_file=str(kubeconfig))
    api = client.ApiextensionsV1Api(api_client)
    names = [str(crd["metadata"]["name"]) for crd in crds]
    try:
        for name, crd in zip(names, crds, strict=True):
            try:
                api.patch_custom_resource_definition(
                    name,
                    crd,
                    field_manager=FIELD_MANAGER,
                    force=True,
                    _content_type="application/apply-patch+yaml",
                )
            except ApiException as exc:
                raise StackError(f"applying the CRD {name} failed: {_refusal(exc)}") from None
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
        raise StackError(f"reading the CRDs failed: {exc.status} {exc.reason}") from exc
    finally:
        api_client.close()
    return names


def _refusal(exc: Any) -> str:
    """The API server's message (what is wrong with the CRD), on one line."""
    import json

    try:
        message = json.loads(exc.body).get("message") or exc.reason
    except (TypeError, ValueError, AttributeError):
        message = exc.reason
    return f"{exc.status} {' '.join(str(message).split())}"


def _established(api: Any, name: str) -> bool:
    status = api.read_custom_resource_definition(name).status
    return any(c.type == "Established" and c.status == "True" for c in (status.conditions or []))
