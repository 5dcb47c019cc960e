"""docs/architecture.md stays true: every path it names exists, every package is on the page."""

from __future__ import annotations

import pkgutil
import re
from pathlib import Path

import pytest

import minruntime
from tests.conftest import ROOT

PAGE = ROOT / "docs" / "architecture.md"

# `services/minruntime/...`, `tests/...`, `migrations/...`, `schemas/`, `benchmarks/`, `docs/...`
# in backticks: a path in the repository.
_PATH = re.compile(r"`((?:services|tests|migrations|schemas|benchmarks|docs)(?:/[\w.-]+)*/?)`")
# A module the page runs (`python -m minruntime.events.schemas`); `minruntime.x` alone is SQL.
_MODULE = re.compile(r"python -m (minruntime(?:\.\w+)+)")


def named_paths(text: str) -> list[str]:
    """The repository paths a page names."""
    return _PATH.findall(text)


def missing_paths(text: str, root: Path) -> list[str]:
    """The paths a page names that do not exist below `root`."""
    return [path for path in named_paths(text) if not (root / path).exists()]


def unnamed_packages(text: str, packages: set[str]) -> list[str]:
    """The service's packages the page does not name as `services/minruntime/<package>/`."""
    parts = [p.rstrip("/").split("/") for p in named_paths(text)]
    named = {p[2] for p in parts if p[:2] == ["services", "minruntime"] and len(p) > 2}
    return sorted(packages - named)


def _packages() -> set[str]:
    return {info.name for info in pkgutil.iter_modules(minruntime.__path__) if info.ispkg}


def test_every_path_the_page_names_exists() -> None:
    text = PAGE.read_text()
    assert len(named_paths(text)) > 30, "the page should walk through the files"
    assert missing_paths(text, ROOT) == []


def test_every_package_of_the_service_is_on_the_page() -> None:
    assert unnamed_packages(PAGE.read_text(), _packages()) == []


def test_every_dotted_module_the_page_names_imports() -> None:
    import importlib

    names = set(_MODULE.findall(PAGE.read_text()))
    assert names
    for name in names:
        importlib.import_module(name)


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("see `services/minruntime/store/` and `services/minruntime/nowhere.py`", ["nowhere"]),
        ("`tests/unit/no_such_test.py`", ["no_such_test"]),
        ("`docs/architecture.md`", []),
    ],
)
def test_the_check_finds_a_path_that_does_not_exist(text: str, missing: list[str]) -> None:
    found = missing_paths(text, ROOT)
    assert [Path(p).stem for p in found] == missing


def test_the_check_finds_a_package_the_page_leaves_out() -> None:
    text = "`services/minruntime/store/` and `services/minruntime/core/podgroup.py`"
    assert unnamed_packages(text, {"store", "core", "ingest"}) == ["ingest"]
