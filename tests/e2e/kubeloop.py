"""The bridge and the evictor as subprocesses of a test Pipeline (the cluster side is
`minruntime_dev.standin`), and the scene the kube e2e tests share: a pipeline and a
namespace of its own on the stack's API server."""

from __future__ import annotations

import json
import subprocess
import uuid
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from minruntime_dev.standin import Cluster
from tests.e2e.harness import Pipeline, Subprocess
from tests.e2e.kubeapi import admin_client

# A Queue's spec.resources as KAI's quick-start Queues have them: -1 (unlimited) everywhere.
UNLIMITED_RESOURCES: dict[str, dict[str, float]] = {
    resource: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
    for resource in ("gpu", "cpu", "memory")
}


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
        self._spawn("kube", self.command, "--loglevel", "info")
        return self


@dataclass
class KubeScene:
    """A started pipeline with its topics, and a namespace of the real API server to watch."""

    suffix: str
    pipeline: Pipeline
    cluster: Cluster
    kubeconfig: Path

    def name(self, base: str) -> str:
        """`base` made the scene's own (as its namespace and lease are)."""
        return f"{base}-{self.suffix}"

    @property
    def kube_env(self) -> dict[str, str]:
        """The settings of the scene's bridge and evictor: its namespace, one lease."""
        return {
            "MINRUNTIME_KUBE_NAMESPACE": self.cluster.namespace,
            "MINRUNTIME_KUBE_LEASE_NAME": f"bridge-{self.suffix}",
            "MINRUNTIME_KUBE_LEASE_SECONDS": "3",
            "MINRUNTIME_KUBE_SCHEDULER_CONFIG": f"{self.cluster.namespace}/scheduler-config",
        }

    def apply_queue(self, name: str, spec: str = "{}") -> None:
        """Create (or patch) the KAI Queue `name` with `spec` (a YAML flow mapping). A spec
        without `resources` gets unlimited ones: a Queue without them has quota 0 and limit 0
        in KAI (which schedules nothing in it) and in the service's planner."""
        body = yaml.safe_load(spec) or {}
        body.setdefault("resources", UNLIMITED_RESOURCES)
        self.cluster.apply_queues(
            "apiVersion: scheduling.run.ai/v2\nkind: Queue\n"
            f"metadata: {{name: {name}}}\nspec: {json.dumps(body)}\n"
        )

    def logged(self, event_type: str, subject: str) -> list[dict[str, Any]]:
        """The payloads of the event log's `event_type` events about `subject`, in order."""
        rows = self.pipeline.query(
            "SELECT payload FROM minruntime.event_log WHERE type = %s AND subject = %s"
            " ORDER BY seq",
            (event_type, subject),
        )
        return [row[0] for row in rows]

    def kube(self, command: str, **env: str) -> KubeProcess:
        """`minruntime kube <command>` on the scene (not started)."""
        return KubeProcess(self.pipeline, command, self.kubeconfig, {**self.kube_env, **env})


Scene = TypeVar("Scene", bound=KubeScene)


@contextmanager
def kube_scene(
    kind: type[Scene],
    kube_stack: StackStatus,
    settings: Settings,
    tmp: pytest.TempPathFactory,
    name: str,
    namespace: str,
    **overrides: str,
) -> Iterator[Scene]:
    """A `kind` on a started pipeline `name` (its files in a new temporary folder; ``overrides``
    as Pipeline's) and a namespace `<namespace>-<suffix>`; the pipeline is dropped afterwards,
    which proves `replay --verify` equal first."""
    assert kube_stack.kubeconfig is not None
    suffix = uuid.uuid4().hex[:6]
    workdir = tmp.mktemp(name)
    pipeline = Pipeline(settings, workdir, name, overrides=overrides).create(with_topics=True)
    cluster = Cluster(admin_client(kube_stack.kubeconfig), f"{namespace}-{suffix}")
    pipeline.start()
    try:
        yield kind(suffix, pipeline, cluster, kube_stack.kubeconfig)
    finally:
        pipeline.drop()
