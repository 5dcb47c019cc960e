"""The import-linter contract must cover every top-level module of the package."""

from __future__ import annotations

import pkgutil
import tomllib
from pathlib import Path

import minruntime

ROOT = Path(__file__).resolve().parents[2]


def test_core_contract_forbids_every_other_top_level_module() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    core = next(c for c in contracts if c["source_modules"] == ["minruntime.core"])
    forbidden = set(core["forbidden_modules"])
    modules = {
        f"minruntime.{info.name}"
        for info in pkgutil.iter_modules(minruntime.__path__)
        if info.name != "core"
    }
    assert modules, "no modules found"
    missing = modules - forbidden
    assert not missing, f"add {sorted(missing)} to the core contract in pyproject.toml"
