"""Command-line tools the test suite checks the deployment files with (helm, promtool), built
once from the Go module proxy into the per-user cache, as kube-apiserver and etcd are.

`go install PACKAGE@VERSION` with `GOBIN` pointing into `<cache_dir>/tools/<name>-<version>/`:
no release tarballs (there is no network but the package proxies), one build per version shared
by every checkout, a file lock so that two concurrent callers do not build twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minruntime.settings import Settings
from minruntime_dev.stack.kube_build import KubeBinaries, exclusive
from minruntime_dev.stack.process import run


@dataclass(frozen=True, slots=True)
class GoTool:
    """One program: its name, the package holding its `main`, and the pinned module version."""

    name: str
    package: str
    version: str


HELM = GoTool("helm", "helm.sh/helm/v3/cmd/helm", "v3.22.0")
PROMTOOL = GoTool("promtool", "github.com/prometheus/prometheus/cmd/promtool", "v0.316.0")
TOOLS = {tool.name: tool for tool in (HELM, PROMTOOL)}


def tool_home(settings: Settings, tool: GoTool) -> Path:
    return settings.cache_dir / "tools" / f"{tool.name}-{tool.version}"


def cached_tool(settings: Settings, tool: GoTool) -> Path | None:
    """The built program, or None when it is not in the cache yet."""
    home = tool_home(settings, tool)
    binary = home / tool.name
    return binary if (home / ".complete").is_file() and binary.is_file() else None


def ensure_tool(settings: Settings, tool: GoTool, say: Callable[[str], None]) -> Path:
    """The program's path, building it first when the cache does not hold it."""
    found = cached_tool(settings, tool)
    if found is not None:
        return found
    go = KubeBinaries(settings).go()
    home = tool_home(settings, tool)
    home.mkdir(parents=True, exist_ok=True)
    with exclusive(home / ".lock"):
        found = cached_tool(settings, tool)
        if found is not None:  # built by another process while we waited for the lock
            return found
        say(f"building {tool.name} {tool.version} with Go (once) into {home}")
        env = {
            **os.environ,
            "CGO_ENABLED": "0",
            "GOBIN": str(home),
            "GOFLAGS": "",
            "GOTOOLCHAIN": "local",
        }
        run(
            [go, "install", "-trimpath", "-ldflags", "-s -w", f"{tool.package}@{tool.version}"],
            what=f"go install {tool.package}@{tool.version}",
            timeout=settings.kube_build_timeout_seconds,
            cwd=home,
            env=env,
        )
        (home / ".complete").write_text(f"{tool.package}@{tool.version}\n")
    return home / tool.name
