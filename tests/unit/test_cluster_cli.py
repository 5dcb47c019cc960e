"""`minruntime kube bridge|evictor` without a usable API server: one line, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("command", ["bridge", "evictor"])
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
