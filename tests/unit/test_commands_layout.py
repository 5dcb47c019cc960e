"""The shape of `minruntime.commands`: a command module imports no other command module (only
`common` for the options and settings, `render` for the output), so each can be loaded alone
by `cli` and its work lives in the service packages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import minruntime.commands

COMMANDS = Path(minruntime.commands.__file__).parent
PACKAGE = "minruntime.commands"
SHARED = frozenset({"common", "render"})
# Imports between two command modules of i31-unit's part (explain, forecast, audit, audit_plot),
# to go when that part lands: (importer, imported).
MODULES = sorted(path.stem for path in COMMANDS.glob("*.py") if path.stem != "__init__")


def imported_command_modules(source: str) -> set[str]:
    """The modules of ``minruntime.commands`` that ``source`` imports, anywhere in it (at the
    top, in a function, under TYPE_CHECKING)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module is not None and not node.level:
            names = [node.module]
            if node.module == PACKAGE:
                names = [f"{PACKAGE}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            if name.startswith(f"{PACKAGE}."):
                found.add(name.split(".")[2])
    return found & set(MODULES)


@pytest.mark.parametrize("module", MODULES)
def test_a_command_module_imports_only_common_and_render(module: str) -> None:
    imported = imported_command_modules((COMMANDS / f"{module}.py").read_text())
    others = imported - SHARED - {module}
    assert not others, f"commands/{module}.py imports the command modules {sorted(others)}"


def test_the_shared_modules_import_no_command_module() -> None:
    for module in SHARED:
        imported = imported_command_modules((COMMANDS / f"{module}.py").read_text())
        assert imported <= SHARED - {module}, module


def test_the_scan_sees_every_form_of_import() -> None:
    source = """
import minruntime.commands.whatif
from minruntime.commands.explain import describe_row
from minruntime.commands import kube_diff, common, INVOCATION
def late():
    from minruntime.commands.replay import replay_command
"""
    assert imported_command_modules(source) == {
        "whatif",
        "explain",
        "kube_diff",
        "common",
        "replay",
    }
