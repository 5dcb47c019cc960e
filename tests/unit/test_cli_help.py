"""`minruntime --help` and every group's and command's `--help`, as a snapshot.

The help texts are part of the interface (CONTRACT.md names, the README, the runbooks): any
change shows here as a diff against `tests/unit/cli_help.txt`. When a change is meant, write
the snapshot again with `python -m tests.unit.test_cli_help` and review the diff.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer import rich_utils

from minruntime.cli import COMMANDS, app, load, main

SNAPSHOT = Path(__file__).with_name("cli_help.txt")
WIDTH = "100"
HEADING = "==== minruntime"


def command_paths() -> Iterator[list[str]]:
    """Every group and command of the command line, depth first in `--help`'s order."""
    root: Any = typer.main.get_command(app)
    context = root.make_context("minruntime", [], resilient_parsing=True)

    def walk(group: Any, context: Any, path: list[str]) -> Iterator[list[str]]:
        yield path
        if not hasattr(group, "list_commands"):
            return
        for name in group.list_commands(context):
            sub = group.get_command(context, name)
            child = sub.make_context(name, [], resilient_parsing=True, parent=context)
            yield from walk(sub, child, [*path, name])

    yield from walk(root, context, [])


@contextlib.contextmanager
def plain_help() -> Iterator[None]:
    """Help as a pipe gets it, WIDTH columns wide, whatever the environment says."""
    saved = (rich_utils.FORCE_TERMINAL, rich_utils.MAX_WIDTH, os.environ.get("COLUMNS"))
    rich_utils.FORCE_TERMINAL, rich_utils.MAX_WIDTH = None, None
    os.environ["COLUMNS"] = WIDTH
    try:
        yield
    finally:
        rich_utils.FORCE_TERMINAL, rich_utils.MAX_WIDTH = saved[0], saved[1]
        if saved[2] is None:
            os.environ.pop("COLUMNS", None)
        else:
            os.environ["COLUMNS"] = saved[2]


def help_text(path: list[str]) -> str:
    """What `minruntime PATH --help` prints on stdout (it exits 0, nothing on stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with plain_help(), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([*path, "--help"])
    assert (code, err.getvalue()) == (0, ""), path
    return out.getvalue()


def snapshot() -> str:
    """Every help text, each under a heading line naming its command."""
    return "".join(
        f"{HEADING} {' '.join([*path, '--help'])}\n{help_text(path)}" for path in command_paths()
    )


def recorded() -> dict[str, str]:
    """The snapshot file's help texts, by heading."""
    texts: dict[str, str] = {}
    heading = ""
    for line in SNAPSHOT.read_text().splitlines(keepends=True):
        if line.startswith(HEADING):
            heading = line.strip()
            texts[heading] = ""
        else:
            texts[heading] += line
    return texts


def test_every_help_text_is_the_recorded_one() -> None:
    now = {}
    for path in command_paths():
        now[f"{HEADING} {' '.join([*path, '--help'])}"] = help_text(path)
    before = recorded()
    assert list(now) == list(before), "the commands or their order changed"
    for heading, text in now.items():
        assert text == before[heading], heading


def test_the_snapshot_holds_every_command() -> None:
    headings = recorded()
    assert len(headings) >= 40
    for words in ("", "kube diff", "replay", "outbox retry", "protection forecast"):
        assert f"{HEADING} {words} --help".replace("  ", " ") in headings


@pytest.mark.parametrize("row", COMMANDS, ids=lambda row: f"{row.group} {row.name}".strip())
def test_a_rows_summary_is_the_first_paragraph_of_its_commands_help(row: Any) -> None:
    # The summary is what `--help` lists without importing the command: it must say what the
    # command's own help says.
    command = load(row)
    assert row.summary == inspect.cleandoc(command.help).split("\n\n")[0]
    assert command.name == (row.name or row.group)


def test_help_imports_no_command_module_and_no_driver() -> None:
    listed = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from minruntime.cli import main; main(['--help']); main(['kube', "
            "'--help']); print(*sorted(m for m in sys.modules if m.startswith(("
            "'minruntime.commands.', 'sqlalchemy', 'psycopg', 'minruntime.store'))))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert listed.stdout.splitlines()[-1] == ""


def test_a_command_imports_its_module_only() -> None:
    loaded = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys; from minruntime.cli import main; main(['checkpoint', 'ack', "
            "'--help']); print(*sorted(m for m in sys.modules if m.startswith("
            "'minruntime.commands.')))",
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    modules = set(loaded.stdout.splitlines()[-1].split())
    assert modules == {
        "minruntime.commands.checkpoint",
        "minruntime.commands.common",
        "minruntime.commands.render",
    } - ({"minruntime.commands.render"} - modules)


@pytest.mark.parametrize("path", [["kube"], ["stack"], []])
def test_a_group_without_a_command_prints_its_help(
    path: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with plain_help():
        assert main(path) in (0, 2)
    captured = capsys.readouterr()
    assert "Usage: minruntime" in captured.out + captured.err


if __name__ == "__main__":
    SNAPSHOT.write_text(snapshot())
    sys.exit(0)
