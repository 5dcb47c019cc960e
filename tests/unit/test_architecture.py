"""The import-linter contracts cover every top-level module of the package, and
docs/architecture.md's layer table is the layers contract, row for row; SQL stays behind store/."""

from __future__ import annotations

import ast
import pkgutil
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

import minruntime
import minruntime_dev
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


def _layers() -> list[str]:
    (layers,) = [c for c in _contracts() if c["type"] == "layers"]
    names: list[str] = layers["layers"]
    return names


def contract_rows(layers: list[str]) -> list[set[str]]:
    """The modules of each layer of the contract, top to bottom."""
    return [set(re.split(r"\s*[|:]\s*", layer.strip())) for layer in layers]


# A module of the service named in the page: `services/minruntime/store/` or `.../cli.py`.
_PAGE_MODULE = re.compile(r"`services/minruntime/(\w+)(?:\.py|/)`")


def page_rows(page: str) -> list[set[str]]:
    """The modules each row of the page's layer table names (its second column), top to
    bottom: the table that follows the heading `## The layers`."""
    section = page.split("## The layers", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    cells = [row.strip("|").split("|") for row in rows[2:]]  # past the header and its rule
    return [
        {f"minruntime.{name}" for name in _PAGE_MODULE.findall(cell[1])}
        for cell in cells
        if len(cell) >= 2
    ]


def layer_table_disagreements(page: str, layers: list[str]) -> list[str]:
    """How the page's layer table differs from the contract's layers (nothing: they agree)."""
    found: list[str] = []
    table, contract = page_rows(page), contract_rows(layers)
    if len(table) != len(contract):
        found.append(f"the page has {len(table)} rows, the contract {len(contract)} layers")
    for number, (row, layer) in enumerate(zip(table, contract, strict=False), start=1):
        if row != layer:
            found.append(
                f"row {number}: the page names {sorted(row)}, the contract {sorted(layer)}"
            )
    return found


def test_the_architecture_pages_layer_table_is_the_layers_contract() -> None:
    page = (ROOT / "docs" / "architecture.md").read_text()
    assert layer_table_disagreements(page, _layers()) == []


_TABLE = """
## The layers

| layer | packages | what it is |
|---|---|---|
| top | `services/minruntime/cli.py` | x |
| middle | `services/minruntime/store/`, `services/minruntime/settings.py` | y |
| bottom | `services/minruntime/core/` | z |

## Next
"""


@pytest.mark.parametrize(
    ("layers", "wrong"),
    [
        (["minruntime.cli", "minruntime.store | minruntime.settings", "minruntime.core"], []),
        (["minruntime.cli", "minruntime.store : minruntime.settings", "minruntime.core"], []),
        # Two layers where the page has one row, an order the page does not follow, a module
        # the page leaves out.
        (["minruntime.cli", "minruntime.store", "minruntime.settings", "minruntime.core"], ["4"]),
        (["minruntime.cli", "minruntime.core", "minruntime.store | minruntime.settings"], ["2"]),
        (["minruntime.cli | minruntime.kube", "minruntime.store | minruntime.settings"], ["2"]),
    ],
)
def test_the_table_check_finds_each_disagreement(layers: list[str], wrong: list[str]) -> None:
    found = layer_table_disagreements(_TABLE, layers)
    assert bool(found) == bool(wrong), found
    assert all(any(w in line for line in found) for w in wrong), found


def test_the_service_package_is_the_service_alone() -> None:
    """The development tooling lives in minruntime_dev (never imported by the service: a
    contract); what the service package holds at its top is its own (issue 31: 18 modules
    before, about 11 after)."""
    modules = {info.name for info in pkgutil.iter_modules(minruntime.__path__)}
    assert not {m for m in modules if m.startswith(("demo", "stack", "topology"))}
    assert len([m for m in modules if (Path(minruntime.__path__[0]) / f"{m}.py").exists()]) <= 12
    (forbidden,) = [
        c
        for c in _contracts()
        if c["type"] == "forbidden" and c["source_modules"] == ["minruntime"]
    ]
    assert forbidden["forbidden_modules"] == ["minruntime_dev"]
    assert "ignore_imports" not in forbidden
    assert not any(
        "minruntime_dev" in line for c in _contracts() for line in c.get("ignore_imports", [])
    )


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

PACKAGE = Path(minruntime.__path__[0])
DEV_PACKAGE = Path(minruntime_dev.__path__[0])
# Where SQL may be written: in the service, the persistence boundary; in the development
# tooling, the local stack's setup, the scratch databases and the SQL the demos show.
SQL_HOMES = ("store/", "migrations/")
DEV_SQL_HOMES = ("stack/", "scratch.py", "demo_queries.py")
# A string that starts as a statement does (after whitespace, any case).
RAW_SQL = re.compile(
    r"\s*(SELECT\s+(\S+\s*$|\d|.*\(|.*\sFROM\s)"
    r"|INSERT\s+INTO\s|UPDATE\s+\S+\s+SET\s|DELETE\s+FROM\s|WITH\s+\w+\s+AS\s*\("
    r"|SET\s+(LOCAL\s+|SESSION\s+)?[\w.]+\s*(=|TO\s)|SET\s+TRANSACTION\s|SHOW\s+\w+$"
    r"|LISTEN\s|NOTIFY\s)",
    re.IGNORECASE,
)


def sql_outside_store(root: Path, homes: tuple[str, ...] = SQL_HOMES) -> list[str]:
    """``path:line: what`` of each SQL statement, or call that runs one, in the ``.py`` files
    under ``root`` outside ``homes``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        if relative.startswith(homes):
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
    found += [f"minruntime_dev/{line}" for line in sql_outside_store(DEV_PACKAGE, DEV_SQL_HOMES)]
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
    (tmp_path / "migrations").mkdir()
    (tmp_path / "migrations" / "allowed.py").write_text(source)
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
