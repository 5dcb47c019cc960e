"""The conformance suite runs only where KAI's build is in the cache, and says why it does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance import kai


def fake_build(cache: Path, *, binder: bool = True) -> Path:
    root = cache / "abc123"
    (root / "bin").mkdir(parents=True)
    (root / "crds").mkdir()
    names = ["kai-scheduler", "kai-binder"] if binder else ["kai-scheduler"]
    for name in names:
        (root / "bin" / name).write_text("#!/bin/sh\n")
        (root / "bin" / name).chmod(0o755)
    (root / "crds" / "queues.yaml").write_text("kind: CustomResourceDefinition\n")
    (root / "COMMIT").write_text("abc123\n")
    (cache / "current").symlink_to(root)
    return root


def test_without_a_build_the_reason_names_the_cache_and_the_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kai, "KAI_CACHE", tmp_path)
    assert kai.kai_build() is None
    reason = kai.missing_reason()
    assert reason is not None
    assert str(tmp_path / "current") in reason
    assert "git clone https://github.com/kai-scheduler/KAI-Scheduler" in reason
    assert "bash scripts/kai-build.sh" in reason


def test_an_incomplete_build_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kai, "KAI_CACHE", tmp_path)
    fake_build(tmp_path, binder=False)
    assert kai.kai_build() is None


def test_a_complete_build_runs_the_suite(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kai, "KAI_CACHE", tmp_path)
    root = fake_build(tmp_path)
    build = kai.kai_build()
    assert build is not None
    assert build.root == root.resolve()
    assert build.commit == "abc123"
    assert kai.missing_reason() is None


def test_the_scheduler_config_carries_the_plugin_arguments() -> None:
    import yaml

    config = yaml.safe_load(kai.scheduler_config(preempt="2s", reclaim="3s", method="queue"))
    [plugin] = [p for p in config["tiers"][0]["plugins"] if p["name"] == "minruntime"]
    assert plugin["arguments"] == {
        "defaultPreemptMinRuntime": "2s",
        "defaultReclaimMinRuntime": "3s",
        "reclaimResolveMethod": "queue",
    }
    assert config["actions"] == kai.DEFAULT_ACTIONS
