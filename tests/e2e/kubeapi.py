"""Clients for the real API server of `stack up --kube`: as its admin, or as a ServiceAccount
with a token from the TokenRequest API (what a pod of that ServiceAccount would hold)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic import DynamicClient

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy" / "kubernetes"
FIELD_MANAGER = "minruntime-tests"


def admin_client(kubeconfig: Path) -> client.ApiClient:
    """A client authenticated as the stack's admin, trusting the server's own certificate."""
    return config.new_client_from_config(config_file=str(kubeconfig))


def deploy_manifests() -> list[dict[str, Any]]:
    """Every object of deploy/kubernetes/, in the kustomization's order."""
    kustomization = yaml.safe_load((DEPLOY / "kustomization.yaml").read_text())
    return [
        document
        for name in kustomization["resources"]
        for document in yaml.safe_load_all((DEPLOY / name).read_text())
        if document
    ]


def apply(
    api: client.ApiClient, objects: Iterable[Mapping[str, Any]], *, dry_run: bool = False
) -> list[Any]:
    """Server-side apply each object (as `kubectl apply --server-side [--dry-run=server]`)."""
    dynamic = DynamicClient(api)
    applied = []
    for body in objects:
        resource = dynamic.resources.get(api_version=body["apiVersion"], kind=body["kind"])
        applied.append(
            resource.server_side_apply(
                body=dict(body),
                field_manager=FIELD_MANAGER,
                force_conflicts=True,
                **({"dry_run": "All"} if dry_run else {}),
            )
        )
    return applied


def ensure_namespace(api: client.ApiClient, name: str) -> None:
    """Create a namespace unless it exists."""
    try:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    except ApiException as exc:
        if exc.status != 409:
            raise


def service_account_token(
    api: client.ApiClient, namespace: str, name: str, seconds: int = 3600
) -> str:
    """A token for the ServiceAccount from the TokenRequest API."""
    request = client.AuthenticationV1TokenRequest(
        spec=client.V1TokenRequestSpec(audiences=[], expiration_seconds=seconds)
    )
    reply = client.CoreV1Api(api).create_namespaced_service_account_token(name, namespace, request)
    return str(reply.status.token)


def token_kubeconfig(admin_kubeconfig: Path, token: str, path: Path) -> Path:
    """A kubeconfig for the same server and CA as the admin's, authenticated by `token`."""
    admin = json.loads(admin_kubeconfig.read_text())
    admin["users"] = [{"name": "token", "user": {"token": token}}]
    admin["contexts"] = [
        {"name": "token", "context": {"cluster": admin["clusters"][0]["name"], "user": "token"}}
    ]
    admin["current-context"] = "token"
    path.write_text(json.dumps(admin))
    return path
