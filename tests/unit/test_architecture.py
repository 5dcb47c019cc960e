"""The import-linter contracts must cover every top-level module of the package."""

from __future__ import annotations

import pkgutil
import re
import tomllib
from pathlib import Path
from typing import Any

import minruntime

ROOT = Path(__file__).resolve().parents[2]


def _contracts() -> list[dict[str, Any]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, Any]] = config["tool"]["importlinter"]["contracts"]
    return contracts


def _top_level_modules() -> set[str]:
    modules = {f"minruntime.{info.name}" for info in pkgutil.iter_modules(minruntime.__path__)}
    assert modules, "no modules found"
    return modules


def test_the_layers_contract_places_every_top_level_module_once() -> None:
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    placed = [name for layer in layers["layers"] for name in re.split(r"\s*[|:]\s*", layer)]
    assert len(placed) == len(set(placed)), "a module is in two layers"
    missing = _top_level_modules() - set(placed)
    assert not missing, f"add {sorted(missing)} to the layers contract in pyproject.toml"
    unknown = set(placed) - _top_level_modules()
    assert not unknown, f"the layers contract names modules that do not exist: {sorted(unknown)}"


def test_the_core_sits_alone_at_the_bottom_and_imports_no_third_party_package() -> None:
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    bottom = re.split(r"\s*([|:])\s*", layers["layers"][-1])
    assert "minruntime.core" in bottom
    # Independent of its siblings ("|"): the core imports nothing of the package.
    assert set(bottom[1::2]) <= {"|"}
    core = next(c for c in _contracts() if c.get("source_modules") == ["minruntime.core"])
    assert {"sqlalchemy", "pydantic", "psycopg", "faust", "aiokafka"} <= set(
        core["forbidden_modules"]
    )
