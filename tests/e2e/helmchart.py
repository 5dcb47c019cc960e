"""The Helm chart deploy/helm/minruntime/ rendered by the real helm (`minruntime stack tool helm`,
built once with Go), and the views of a list of manifests its tests compare with
deploy/kubernetes/: each container's effective environment, the RBAC rules as sets."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import TypeAdapter

from minruntime.settings import Settings
from minruntime_dev.stack.gotools import HELM, ensure_tool
from tests.conftest import ROOT

CHART = ROOT / "deploy" / "helm" / "minruntime"
RULES = ROOT / "deploy" / "monitoring" / "minruntime-rules.yaml"
EVERYTHING = Path(__file__).with_name("helm-values-everything.yaml")
OPERATOR = ("--api-versions", "monitoring.coreos.com/v1")
RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


@dataclass(frozen=True)
class Helm:
    """The helm program, with its own empty config, cache and data directories."""

    binary: Path
    home: Path

    @classmethod
    def build(cls, settings: Settings, home: Path) -> Helm:
        """Helm from the cache, built first when it is not there (minutes, once per machine)."""
        binary = ensure_tool(settings, HELM, say=lambda line: print(line, file=sys.stderr))
        return cls(binary, home)

    def run(self, *args: str | Path) -> subprocess.CompletedProcess[str]:
        """`helm ARGS`, whatever its exit status."""
        env = {
            **os.environ,
            **{f"HELM_{d}_HOME": str(self.home / d.lower()) for d in ("CACHE", "CONFIG", "DATA")},
        }
        return subprocess.run(
            [str(self.binary), *map(str, args)],
            capture_output=True,
            text=True,
            timeout=120,
            env=env,
            check=False,
        )

    def template(
        self,
        *args: str | Path,
        release: str = "minruntime",
        namespace: str = "minruntime",
        chart: Path = CHART,
    ) -> list[dict[str, Any]]:
        """The objects `helm template` renders (hooks included), in its order."""
        done = self.run("template", release, chart, "--namespace", namespace, *args)
        assert done.returncode == 0, done.stderr
        return [d for d in yaml.safe_load_all(done.stdout) if d]


def by_kind(objects: Iterable[Mapping[str, Any]], *kinds: str) -> dict[str, Mapping[str, Any]]:
    """The objects of these kinds, by name."""
    return {o["metadata"]["name"]: o for o in objects if o["kind"] in kinds}


def environment(objects: list[dict[str, Any]], container: Mapping[str, Any]) -> dict[str, str]:
    """Every variable the container gets and where from: a literal value, `secret NAME/KEY`
    (the whole Secret of an envFrom counts key by key) or `field PATH`."""
    sources = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(sources["ConfigMap", source["configMapRef"]["name"]]["data"])
        else:
            name = source["secretRef"]["name"]
            env.update(
                {key: f"secret {name}/{key}" for key in sources["Secret", name]["stringData"]}
            )
    for var in container.get("env", []):
        if "value" in var:
            env[var["name"]] = var["value"]
        elif "secretKeyRef" in var["valueFrom"]:
            ref = var["valueFrom"]["secretKeyRef"]
            env[var["name"]] = f"secret {ref['name']}/{ref['key']}"
        else:
            env[var["name"]] = f"field {var['valueFrom']['fieldRef']['fieldPath']}"
    return env


def is_the_default(variable: str, value: str) -> bool:
    """The setting's value parses to its default: giving it changes nothing."""
    field = Settings.model_fields[variable.removeprefix("MINRUNTIME_").lower()]
    default = field.get_default(call_default_factory=True)
    assert field.annotation is not None
    parsed = TypeAdapter[Any](field.annotation).validate_python(value)
    return bool(parsed == default)


def rbac(objects: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], Any]:
    """ServiceAccounts, roles and bindings by (kind, namespace, name): a role as the set of
    (apiGroup, resource, resourceName or *, verb) it grants, however its rules are split."""
    found: dict[tuple[str, str, str], Any] = {}
    for o in objects:
        if o["kind"] not in RBAC_KINDS:
            continue
        key = (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
        if o["kind"] in ("ClusterRole", "Role"):
            found[key] = {
                (group, resource, name, verb)
                for rule in o["rules"]
                for group in rule["apiGroups"]
                for resource in rule["resources"]
                for name in rule.get("resourceNames", ["*"])
                for verb in rule["verbs"]
            }
        elif o["kind"].endswith("Binding"):
            subjects = sorted(tuple(sorted(s.items())) for s in o["subjects"])
            found[key] = (tuple(sorted(o["roleRef"].items())), subjects)
        else:
            found[key] = o.get("automountServiceAccountToken")
    return found


def without_key(value: Any, key: str) -> Any:
    """A copy of nested dicts and lists with every `key` of every dict left out."""
    if isinstance(value, dict):
        return {k: without_key(v, key) for k, v in value.items() if k != key}
    if isinstance(value, list):
        return [without_key(v, key) for v in value]
    return value


def rule_groups(path: Path) -> list[Any]:
    """The `groups` of a Prometheus rule file."""
    groups: list[Any] = yaml.safe_load(path.read_text())["groups"]
    return groups
