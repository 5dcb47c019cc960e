"""The import-linter contracts must cover every top-level module of the package."""

from __future__ import annotations

import ast
import pkgutil
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import minruntime
from tests.conftest import ROOT


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


# -- SQL lives behind store/ ----------------------------------------------------------------

PACKAGE = ROOT / "services" / "minruntime"
# Where SQL may be written: the persistence boundary, the local stack's setup, and the one
# module of the SQL the demos show to the reader.
SQL_HOMES = ("store/", "stack/", "migrations/", "demo_queries.py")
# A string that starts as a statement does (after whitespace, any case).
RAW_SQL = re.compile(
    r"\s*(SELECT\s+(\S+\s*$|\d|.*\(|.*\sFROM\s)"
    r"|INSERT\s+INTO\s|UPDATE\s+\S+\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s*\("
    r"|SET\s+(LOCAL\s+|SESSION\s+)?[\w.]+\s*(=|TO\s)|SET\s+TRANSACTION\s|SHOW\s+\w+$"
    r"|LISTEN\s|NOTIFY\s)",
    re.IGNORECASE,
)


def sql_outside_store(root: Path) -> list[str]:
    """``path:line: what`` of each SQL statement, or call that runs one, in the ``.py`` files
    under ``root`` outside ``SQL_HOMES``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(SQL_HOMES):
            continue
        tree = ast.parse(path.read_text(), filename=relative)
        found += [f"{relative}:{line}: {what}" for line, what in _sql_in(tree)]
    return found


def _sql_in(tree: ast.AST) -> list[tuple[int, str]]:
    text_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("sqlalchemy")
        for alias in node.names
        if alias.name == "text"
    }
    docstrings = {
        id(body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and (body := node.body)
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    }
    # An f-string's pieces are walked as the f-string: only its start is a statement's start.
    pieces = {
        id(piece)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for piece in node.values
    }
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute) and func.attr == "exec_driver_sql":
                found.append((node.lineno, "exec_driver_sql("))
            elif (
                isinstance(func, ast.Attribute)
                and func.attr == "text"
                and isinstance(func.value, ast.Name)
                and func.value.id in {"sa", "sqlalchemy"}
            ):
                found.append((node.lineno, f"{func.value.id}.text("))
            elif isinstance(func, ast.Name) and func.id in text_names:
                found.append((node.lineno, "text( from sqlalchemy"))
        first = _leading_text(node)
        skipped = id(node) in docstrings or id(node) in pieces
        if first is not None and not skipped and RAW_SQL.match(first):
            found.append((node.lineno, f"SQL string {first.strip()[:40]!r}"))
    return found


def _leading_text(node: ast.AST) -> str | None:
    """The text a string literal starts with (an f-string's: up to its first field)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr) and node.values:
        head = node.values[0]
        if isinstance(head, ast.Constant) and isinstance(head.value, str):
            return head.value
    return None


def test_no_sql_outside_the_store_the_stack_and_the_demo_queries() -> None:
    found = sql_outside_store(PACKAGE)
    assert not found, "move this SQL behind store/ (a function that names what it answers):\n" + (
        "\n".join(found)
    )


@pytest.mark.parametrize(
    ("source", "what"),
    [
        ('import sqlalchemy as sa\nq = sa.text("x")\n', "sa.text("),
        ('from sqlalchemy import text\nq = text("x")\n', "text( from sqlalchemy"),
        ('conn.exec_driver_sql("x")\n', "exec_driver_sql("),
        ('q = "  select uid FROM minruntime.podgroups"\n', "SQL string"),
        ('q = f"INSERT INTO {schema}.t VALUES (1)"\n', "SQL string"),
        ('q = "update t set a = 1"\n', "SQL string"),
        ('q = "DELETE FROM t"\n', "SQL string"),
        ('q = "WITH x AS (SELECT 1) SELECT * FROM x"\n', "SQL string"),
        ('q = "SET TRANSACTION READ ONLY"\n', "SQL string"),
        ('q = "set local lock_timeout = 5"\n', "SQL string"),
    ],
)
def test_the_sql_check_finds_each_spelling(tmp_path: Path, source: str, what: str) -> None:
    (tmp_path / "audit").mkdir()
    (tmp_path / "audit" / "reader.py").write_text(source)
    (tmp_path / "store").mkdir()
    (tmp_path / "store" / "allowed.py").write_text(source)
    (tmp_path / "demo_queries.py").write_text(source)
    (found,) = sql_outside_store(tmp_path)
    assert found.startswith("audit/reader.py:")
    assert what in found


def test_the_sql_check_leaves_prose_and_docstrings_alone(tmp_path: Path) -> None:
    (tmp_path / "words.py").write_text(
        '"""Select the victims: SELECT uid FROM nowhere."""\n'
        'a = "select a queue with --queue"\n'
        'b = f"kept as {name}: SELECT * FROM {name}.runs"\n'
        'c = "update the tree, then set the config"\n'
        'd = axes.text(1, 2, "label")\n'
    )
    assert sql_outside_store(tmp_path) == []
