"""Checks shared by the tests of the cluster manifests: deploy/kubernetes/ (kustomize) and the
Helm chart deploy/helm/minruntime/ as rendered."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import typer

from minruntime.cli import app
from minruntime.settings import Settings

Manifest = Mapping[str, Any]
SETTINGS = frozenset(f"MINRUNTIME_{name.upper()}" for name in Settings.model_fields)


def workloads(objects: Iterable[Manifest]) -> dict[str, dict[str, Any]]:
    """The pod spec of every Deployment and Job, by the object's name."""
    return {
        o["metadata"]["name"]: o["spec"]["template"]["spec"]
        for o in objects
        if o["kind"] in ("Deployment", "Job")
    }


def assert_a_real_minruntime_command(args: list[str], where: str) -> None:
    """`minruntime ARGS` names a command (not a group) and its options parse."""
    command: Any = typer.main.get_command(app)
    context = command.make_context("minruntime", [], resilient_parsing=True)
    words = list(args)
    # Walk the command groups (`kube` -> `bridge`), then parse the leaf's own options for real.
    while hasattr(command, "get_command") and words:
        name = words.pop(0)
        sub = command.get_command(context, name)
        assert sub is not None, f"{where}: `minruntime {' '.join(args)}`"
        context = sub.make_context(name, [], resilient_parsing=True, parent=context)
        command = sub
    assert not hasattr(command, "get_command"), f"{where}: names a group, not a command"
    command.make_context(context.info_name, words, parent=context.parent)


def setting_names(objects: Iterable[Manifest]) -> set[str]:
    """Every variable a ConfigMap, a Secret or a container's env gives."""
    objects = list(objects)
    names = {
        key
        for o in objects
        if o["kind"] in ("ConfigMap", "Secret")
        for key in {**o.get("data", {}), **o.get("stringData", {})}
    }
    return names | {
        env["name"]
        for spec in workloads(objects).values()
        for container in spec["containers"]
        for env in container.get("env", [])
    }
