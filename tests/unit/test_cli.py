"""The command line: usage errors and user errors are one line and a non-zero exit."""

from __future__ import annotations

import pytest

from minruntime.cli import main
from minruntime.errors import StackError, UserError


def one_error_line(argv: list[str], capsys: pytest.CaptureFixture[str], code: int = 2) -> str:
    """The one line `minruntime argv` writes when it exits `code`: on stderr, nothing on stdout."""
    assert main(argv) == code
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert captured.out == ""
    return lines[0]


def test_help_lists_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("stack", "demo"):
        assert command in out


@pytest.mark.parametrize(
    ("argv", "fragment"),
    [
        (["no-such-command"], "No such command 'no-such-command'"),
        (["stack", "up", "--bogus"], "No such option: --bogus"),
        (["demo", "--width", "wide"], "Invalid value for '--width'"),
    ],
)
def test_usage_errors_are_one_line(
    argv: list[str], fragment: str, capsys: pytest.CaptureFixture[str]
) -> None:
    line = one_error_line(argv, capsys)
    assert line.startswith("minruntime: ")
    assert fragment in line
    assert "Traceback" not in line


@pytest.mark.parametrize(
    ("target", "argv", "error", "code", "line"),
    [
        (
            "minruntime_dev.stack.stack_up",
            ["stack", "up"],
            StackError("port 9092 on 127.0.0.1 is already in use by another process"),
            3,
            "minruntime: error: port 9092 on 127.0.0.1 is already in use by another process",
        ),
        (
            "minruntime_dev.demo.run_demo",
            ["demo", "--rules-only"],
            UserError("the user's mistake, said in one line"),
            2,
            "minruntime: error: the user's mistake, said in one line",
        ),
    ],
)
def test_user_errors_map_to_their_exit_code(
    target: str,
    argv: list[str],
    error: UserError,
    code: int,
    line: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    def broken(*_: object, **__: object) -> None:
        raise error

    monkeypatch.setattr(target, broken)
    assert main(argv) == code
    captured = capsys.readouterr()
    assert captured.err.strip().splitlines() == [line]
    assert "Traceback" not in captured.err + captured.out


def test_core_value_errors_are_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from minruntime.core import parse_duration

    def broken(*_: object, **__: object) -> None:
        parse_duration("1h-30m")

    monkeypatch.setattr("minruntime_dev.demo.run_demo", broken)
    assert "1h-30m" in one_error_line(["demo", "--rules-only"], capsys)


def test_outbox_retry_needs_ids_or_all(capsys: pytest.CaptureFixture[str]) -> None:
    assert one_error_line(["outbox", "retry"], capsys) == (
        "minruntime: error: name the row ids to retry, or pass --all (not both)"
    )
    assert "is not an outbox row id" in one_error_line(["outbox", "retry", "not-a-uuid"], capsys)


def test_a_bug_shows_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    # A plain ValueError is a programming error, not a user's: cli.main does not catch it.
    def buggy(*_: object, **__: object) -> None:
        raise ValueError("a bug: not the user's to fix")

    monkeypatch.setattr("minruntime_dev.demo.run_demo", buggy)
    with pytest.raises(ValueError, match="a bug") as raised:
        main(["demo", "--rules-only"])
    assert not isinstance(raised.value, UserError)
    assert raised.traceback[-1].name == "buggy"


def test_one_error_tree() -> None:
    # The core's errors, rejected events and untranslatable cluster objects are user errors;
    # the core's and rejected events are ValueErrors too (CONTRACT.md §4, docs/events.md), the
    # service's own are not: an `except ValueError` catches only what it names.
    from minruntime.cluster.mapping import ObjectError
    from minruntime.core.errors import MinRuntimeError
    from minruntime.errors import SchemaNameError, SnapshotError
    from minruntime.events import EventRejected

    for error in (MinRuntimeError, EventRejected, ObjectError, SchemaNameError, SnapshotError):
        assert issubclass(error, UserError)
    for error in (MinRuntimeError, EventRejected):
        assert issubclass(error, ValueError)
    for error in (ObjectError, SchemaNameError, SnapshotError):
        assert not issubclass(error, ValueError)
