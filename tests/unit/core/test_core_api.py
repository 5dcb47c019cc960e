"""The public surface of minruntime.core and its purity."""

from __future__ import annotations

import ast
import inspect
import sys
from pathlib import Path

import minruntime.core as core

CONTRACT_NAMES = {
    "parse_duration",
    "Queue",
    "QueueTree",
    "MinRuntimeConfig",
    "Resolver",
    "Resolution",
    "is_protected",
}


def test_contract_names_are_exported() -> None:
    assert set(core.__all__) >= CONTRACT_NAMES
    assert sorted(core.__all__) == sorted(set(core.__all__))
    for name in core.__all__:
        assert hasattr(core, name), name


def test_every_error_is_a_value_error_with_a_kind() -> None:
    errors = [
        obj
        for obj in vars(core).values()
        if inspect.isclass(obj) and issubclass(obj, core.MinRuntimeError)
    ]
    assert len(errors) >= 8
    kinds = [error.kind for error in errors]
    assert all(issubclass(error, ValueError) for error in errors)
    assert len(set(kinds)) == len(kinds)


def test_core_imports_only_the_standard_library() -> None:
    package = Path(core.__file__).parent
    for module in package.glob("*.py"):
        for node in ast.walk(ast.parse(module.read_text())):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            for name in names:
                top = name.split(".")[0]
                allowed = top in sys.stdlib_module_names or name.startswith("minruntime.core")
                assert allowed, f"{module.name} imports {name}"


def test_public_functions_have_docstrings() -> None:
    for name in core.__all__:
        obj = getattr(core, name)
        if inspect.isfunction(obj) or inspect.isclass(obj):
            assert obj.__doc__, name
        if inspect.isclass(obj):
            for attr, member in vars(obj).items():
                if not attr.startswith("_") and inspect.isfunction(member):
                    assert member.__doc__, f"{name}.{attr}"
