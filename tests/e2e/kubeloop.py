"""The bridge and the evictor as subprocesses of a test Pipeline (the cluster side is
`minruntime.cluster.standin`)."""

from __future__ import annotations

import os
import subprocess
import uuid
from collections.abc import Mapping
from pathlib import Path

from tests.conftest import MINRUNTIME, ROOT
from tests.e2e.harness import Pipeline, Subprocess


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
