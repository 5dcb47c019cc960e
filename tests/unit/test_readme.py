"""The README's first screen gives exactly two commands, and CI runs the test one verbatim."""

from __future__ import annotations

import re

from tests.conftest import ROOT


def _first_screen_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    first_screen = "\n".join(readme.splitlines()[:25])
    block = re.search(r"```bash\n(.*?)```", first_screen, re.S)
    assert block, "the README's first screen has no command block"
    return [line.split("#")[0].strip() for line in block.group(1).splitlines() if line.strip()]


def test_first_screen_has_exactly_a_demo_and_a_test_command() -> None:
    commands = _first_screen_commands()
    assert commands == ["bash scripts/demo.sh", "bash scripts/test.sh"]
    for command in commands:
        assert (ROOT / command.split()[1]).is_file()


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    test_command = _first_screen_commands()[1]
    assert test_command in [line.strip() for line in ci]


def test_the_test_command_runs_every_quality_gate() -> None:
    script = (ROOT / "scripts" / "test.sh").read_text()
    for gate in ("ruff format --check", "ruff check", "mypy", "lint-imports", "pytest"):
        assert gate in script
