"""kube-apiserver and etcd, built once from the Go module proxy into the per-user cache.

No release tarballs and no Docker: a scratch Go module requires the pinned `k8s.io/kubernetes`
and `go.etcd.io/etcd/server/v3`, maps every Kubernetes staging module to its published
version (the upstream go.mod points them at `./staging/...`, which a module download does not
have) and builds both `main` packages. The binaries land in
`<cache_dir>/kube-<version>/` and are shared by every checkout; a file lock keeps two
concurrent `stack up --kube` from building twice.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from minruntime.errors import MissingToolError, StackError
from minruntime.settings import Settings
from minruntime_dev.stack.process import run

KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
APISERVER_PACKAGE = "k8s.io/kubernetes/cmd/kube-apiserver"
MIN_GO = (1, 24)
_STAGING = re.compile(r"^\s*(k8s\.io/[\w.-]+)\s*=>\s*\./staging/")
_GO_VERSION = re.compile(r"go(\d+)\.(\d+)")

_TOOLS_GO = """//go:build tools

// Package tools only names the two programs, so `go mod tidy` resolves their dependencies.
package tools

import (
\t_ "{etcd}"
\t_ "{apiserver}"
)
"""


class KubeBinaries:
    """Where the two binaries live, and how to build them when they are missing."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = (
            settings.cache_dir / f"kube-{settings.kube_version}-etcd-{settings.etcd_version}"
        )
        self.apiserver = self.home / "kube-apiserver"
        self.etcd = self.home / "etcd"
        self.marker = self.home / ".complete"

    @property
    def built(self) -> bool:
        return self.marker.is_file() and self.apiserver.is_file() and self.etcd.is_file()

    def go(self) -> str:
        """The `go` command, or one line saying it is missing or too old."""
        found = shutil.which("go")
        if found is None:
            raise MissingToolError(
                "Go is not installed; it is needed once to build kube-apiserver and etcd "
                f"for `stack up --kube` (install Go >= {MIN_GO[0]}.{MIN_GO[1]} from go.dev/dl)"
            )
        version = run([found, "env", "GOVERSION"], what="go env GOVERSION").strip()
        match = _GO_VERSION.match(version)
        if match and (int(match[1]), int(match[2])) < MIN_GO:
            raise MissingToolError(
                f"{version} is too old to build Kubernetes {self.settings.kube_version}; "
                f"install Go >= {MIN_GO[0]}.{MIN_GO[1]}"
            )
        return found

    def ensure(self, say: Callable[[str], None]) -> None:
        """Build both binaries unless the cache already holds them."""
        if self.built:
            return
        go = self.go()
        self.home.mkdir(parents=True, exist_ok=True)
        with exclusive(self.home / ".lock"):
            if self.built:  # another process built them while we waited for the lock
                return
            say(
                f"building kube-apiserver {self.settings.kube_version} and etcd "
                f"{self.settings.etcd_version} with Go (once, a few minutes) into {self.home}"
            )
            with tempfile.TemporaryDirectory(dir=self.home, prefix="build-") as work:
                self._build(go, Path(work))
            self.marker.write_text(f"{self.settings.kube_version} {self.settings.etcd_version}\n")

    def _build(self, go: str, work: Path) -> None:
        kube = self.settings.kube_version
        env = {
            **os.environ,
            "CGO_ENABLED": "0",
            "GOFLAGS": "-mod=mod",
            # A newer toolchain must not be fetched behind the user's back.
            "GOTOOLCHAIN": "local",
        }
        timeout = self.settings.kube_build_timeout_seconds
        upstream = self._upstream_go_mod(go, work, env)
        (work / "go.mod").write_text(scratch_go_mod(upstream, kube, self.settings.etcd_version))
        (work / "tools.go").write_text(
            _TOOLS_GO.format(etcd=ETCD_MODULE, apiserver=APISERVER_PACKAGE)
        )
        run(
            [go, "mod", "tidy"],
            what="go mod tidy (kube-apiserver, etcd)",
            timeout=timeout,
            cwd=work,
            env=env,
        )
        major, minor = kube.lstrip("v").split(".")[:2]
        versions = {
            "gitVersion": kube,
            "gitMajor": major,
            "gitMinor": minor,
            "gitTreeState": "clean",
        }
        version_flags = " ".join(
            f"-X k8s.io/component-base/version.{name}={value}" for name, value in versions.items()
        )
        for package, output in ((APISERVER_PACKAGE, "kube-apiserver"), (ETCD_MODULE, "etcd")):
            run(
                [go, "build", "-trimpath", "-ldflags", f"-s -w {version_flags}",
                 "-o", str(work / output), package],
                what=f"go build {output}",
                timeout=timeout,
                cwd=work,
                env=env,
            )  # fmt: skip
        for output in ("kube-apiserver", "etcd"):
            (work / output).replace(self.home / output)

    def _upstream_go_mod(self, go: str, work: Path, env: dict[str, str]) -> str:
        """Kubernetes' own go.mod, from the module proxy (the build needs the module anyway)."""
        done = subprocess.run(
            [go, "mod", "download", "-json", f"{KUBERNETES_MODULE}@{self.settings.kube_version}"],
            capture_output=True,
            text=True,
            cwd=work,
            env={**env, "GOFLAGS": ""},
            timeout=self.settings.kube_build_timeout_seconds,
        )
        try:
            info = json.loads(done.stdout)
        except json.JSONDecodeError:
            info = {}
        mod_file = info.get("GoMod")
        if done.returncode != 0 or not mod_file:
            reason = info.get("Error") or " | ".join(done.stderr.strip().splitlines()[-3:])
            raise StackError(
                f"fetching {KUBERNETES_MODULE}@{self.settings.kube_version} failed: {reason}"
            )
        return Path(mod_file).read_text()


def scratch_go_mod(upstream: str, kube: str, etcd: str) -> str:
    """The scratch module's go.mod: both programs required at their pins, and every staging
    module that Kubernetes' own go.mod (`upstream`) maps to `./staging/...` mapped to its
    published version instead (v1.33.13 -> v0.33.13)."""
    staging_version = "v0." + kube.lstrip("v").split(".", 1)[1]
    staging = sorted({m[1] for line in upstream.splitlines() if (m := _STAGING.match(line))})
    if not staging:
        raise StackError(f"{KUBERNETES_MODULE} {kube}: no staging modules in its go.mod")
    replaces = "\n".join(f"\t{name} => {name} {staging_version}" for name in staging)
    go_line = next((line for line in upstream.splitlines() if line.startswith("go ")), "go 1.24.0")
    return (
        "module local.minruntime/kubestack\n\n"
        f"{go_line}\n\n"
        f"require (\n\t{KUBERNETES_MODULE} {kube}\n\t{ETCD_MODULE} {etcd}\n)\n\n"
        f"replace (\n{replaces}\n)\n"
    )


@contextmanager
def exclusive(lock_file: Path) -> Iterator[None]:
    with lock_file.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
