"""`minruntime kube bridge|evictor` without a usable API server: one line, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("command", ["bridge", "evictor", "diff"])
def test_an_unusable_kubeconfig_is_one_line(command: str, tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("not: a kubeconfig\n")
    result = run_cli("kube", command, env={"KUBECONFIG": str(broken)}, timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(f"minruntime: error: cannot use {broken}:")


def test_no_kubeconfig_at_all_names_the_three_ways(tmp_path: Path) -> None:
    result = run_cli(
        "kube",
        "bridge",
        env={
            "KUBECONFIG": "",
            "MINRUNTIME_STACK_DIR": str(tmp_path),
            "KUBERNETES_SERVICE_HOST": "",
        },
        timeout=60,
    )
    assert result.returncode == 2
    assert "stack up --kube" in result.stderr


def test_kube_diff_without_an_api_server_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    result = run_cli("kube", "diff", env={"KUBECONFIG": str(kubeconfig)}, timeout=60)
    assert result.returncode == 2
    [line] = result.stderr.strip().splitlines()
    assert line.startswith(
        "minruntime: error: cannot list PodGroup objects from the Kubernetes API server:"
    )
    assert "Connection refused" in line
