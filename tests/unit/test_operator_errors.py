"""Every operator command answers an unreachable database with one line, never a traceback."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import run_cli


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.parametrize(
    "args",
    [
        ("replay", "--verify"),
        ("replay", "--until", "now-1h", "--into", "x"),
        ("protection",),
        ("protection", "--at", "now-5m"),
        ("explain", "pg-1"),
        ("audit", "pg-1"),
        ("whatif", "--queue", "q", "--preempt-min-runtime", "1h"),
        ("requeue", "plan"),
        ("requeue", "plan", "--at", "now-5m", "--node-pool", "default"),
        ("migrate",),
    ],
)
def test_an_unreachable_database_is_one_line(args: tuple[str, ...]) -> None:
    url = f"postgresql://minruntime:minruntime@127.0.0.1:{_closed_port()}/minruntime"
    result = run_cli(*args, env={"MINRUNTIME_DATABASE_URL": url}, timeout=60)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("minruntime: error: cannot read the database: connection failed")


def test_a_write_refused_by_a_standby_says_the_command_needs_the_primary() -> None:
    from sqlalchemy.exc import InternalError

    from minruntime.commands.common import database_error

    class ReadOnlyError(Exception):
        sqlstate = "25006"

    raw = ReadOnlyError("cannot execute SELECT FOR UPDATE")  # psycopg's own, on the driver cursor
    wrapped = InternalError("CREATE SCHEMA ...", {}, ReadOnlyError("cannot execute CREATE SCHEMA"))
    for error in (wrapped, raw):
        message = database_error(error)
        assert message is not None
        assert "needs the primary" in message
        assert "\n" not in message
