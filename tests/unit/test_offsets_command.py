"""`minruntime offsets`: every user mistake and unreachable dependency is one line."""

from __future__ import annotations

import socket

import pytest

from tests.conftest import run_cli


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _one_line(args: tuple[str, ...], env: dict[str, str] | None = None) -> str:
    result = run_cli(*args, env=env, timeout=60)
    assert result.returncode == 2, result
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("offsets", "rebaseline", "kai.queues"), "--from-start or --from-end"),
        (("offsets", "rebaseline", "kai.queues", "--from-start", "--from-end"), "exactly one"),
        (("offsets", "rebaseline", "kai.nope", "--from-start"), "not an input topic"),
        (("offsets", "rebaseline"), "Missing argument"),
    ],
)
def test_a_mistake_is_one_line(args: tuple[str, ...], says: str) -> None:
    assert says in _one_line(args)


def test_unreachable_kafka_is_one_line() -> None:
    env = {"MINRUNTIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{_closed_port()}"}
    line = _one_line(("offsets", "rebaseline", "kai.queues", "--from-start"), env)
    assert line.startswith("minruntime: error: cannot reach Kafka at 127.0.0.1:")


def test_an_unreachable_database_is_one_line() -> None:
    url = f"postgresql://minruntime:minruntime@127.0.0.1:{_closed_port()}/minruntime"
    line = _one_line(("offsets", "show"), {"MINRUNTIME_DATABASE_URL": url})
    assert line.startswith("minruntime: error: cannot read the database: connection failed")
