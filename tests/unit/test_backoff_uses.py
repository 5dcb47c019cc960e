"""Every loop that backs off is `retry.py`'s, or is named in its docstring with the reason.

An AST scan of services/: each `Backoff(...)` outside retry.py is found with the function it
is in, and the set must be exactly the allow-list of retry.py's docstring (a new hand-driven
loop fails here, and so does an entry left behind once its loop is gone).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import minruntime
from minruntime import retry

SERVICES = Path(minruntime.__file__).parents[1]
PACKAGE = Path(minruntime.__file__).parent
ENTRY = re.compile(r"^- `(?P<path>[\w/]+\.py)` `(?P<function>[\w.]+)`: \S", re.MULTILINE)


def allow_list() -> set[tuple[str, str]]:
    doc = retry.__doc__ or ""
    return {(found["path"], found["function"]) for found in ENTRY.finditer(doc)}


class _Uses(ast.NodeVisitor):
    def __init__(self) -> None:
        self.scope: list[str] = []
        self.found: list[str] = []

    def _enter(self, node: ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    visit_ClassDef = visit_FunctionDef = visit_AsyncFunctionDef = _enter  # noqa: N815

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if name == "Backoff":
            self.found.append(".".join(self.scope) or "<module>")
        self.generic_visit(node)


def backoff_uses(root: Path) -> set[tuple[str, str]]:
    """(path under the package, function) of every `Backoff(...)` outside retry.py."""
    uses: set[tuple[str, str]] = set()
    for module in sorted(root.rglob("*.py")):
        if module == PACKAGE / "retry.py":
            continue
        visitor = _Uses()
        visitor.visit(ast.parse(module.read_text(), str(module)))
        where = module.relative_to(PACKAGE if module.is_relative_to(PACKAGE) else root)
        uses.update((where.as_posix(), function) for function in visitor.found)
    return uses


def test_every_hand_driven_backoff_loop_is_named_in_retry_s_allow_list() -> None:
    uses = backoff_uses(SERVICES)
    allowed = allow_list()
    assert len(allowed) >= 1, "retry.py's docstring lost its allow-list"
    assert uses - allowed == set(), "use retry()/retry_async(), or name it in retry.py's list"
    assert allowed - uses == set(), "an allow-list entry whose loop is gone: remove it"


def test_the_scan_finds_a_new_loop(tmp_path: Path) -> None:
    module = tmp_path / "loop.py"
    module.write_text(
        "from minruntime.retry import Backoff\n"
        "class Poller:\n"
        "    def run(self):\n"
        "        delays = Backoff()\n"
        "        while True:\n"
        "            delays.next()\n"
    )
    assert backoff_uses(tmp_path) == {("loop.py", "Poller.run")}


_LOG_CALLS = {"debug", "info", "warning", "error", "exception", "critical", "log"}


def retrying_lines(root: Path) -> list[str]:
    """Log calls outside retry.py whose message says it retries (retry.py's wording only)."""
    found: list[str] = []
    for module in sorted(root.rglob("*.py")):
        if module == PACKAGE / "retry.py":
            continue
        for node in ast.walk(ast.parse(module.read_text(), str(module))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr not in _LOG_CALLS:
                continue
            said = " ".join(
                arg.value
                for arg in ast.walk(node)
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str)
            )
            if "retrying" in said.lower():
                found.append(f"{module.name}:{node.lineno}")
    return found


def test_no_log_line_says_retrying_but_retry_s_own() -> None:
    assert retrying_lines(SERVICES) == []


def test_the_scan_finds_a_retrying_line(tmp_path: Path) -> None:
    (tmp_path / "loop.py").write_text('log.warning("cannot reach %s; retrying", what)\n')
    assert retrying_lines(tmp_path) == ["loop.py:1"]
