"""Every operator command answers an unreachable database with one line, never a traceback; so do
`minruntime offsets`'s user mistakes and an unreachable Kafka, and `minruntime kube` without a
usable API server."""

from __future__ import annotations

import socket
from pathlib import Path

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
        ("offsets", "show"),
    ],
)
def test_an_unreachable_database_is_one_line(args: tuple[str, ...]) -> None:
    url = f"postgresql://minruntime:minruntime@127.0.0.1:{_closed_port()}/minruntime"
    line = _one_line(args, {"MINRUNTIME_DATABASE_URL": url})
    assert line.startswith("minruntime: error: cannot read the database: connection failed")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("offsets", "rebaseline", "kai.queues"), "--from-start or --from-end"),
        (("offsets", "rebaseline", "kai.queues", "--from-start", "--from-end"), "exactly one"),
        (("offsets", "rebaseline", "kai.nope", "--from-start"), "not an input topic"),
        (("offsets", "rebaseline"), "Missing argument"),
    ],
)
def test_an_offsets_mistake_is_one_line(args: tuple[str, ...], says: str) -> None:
    assert says in _one_line(args)


def test_unreachable_kafka_is_one_line() -> None:
    env = {"MINRUNTIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{_closed_port()}"}
    line = _one_line(("offsets", "rebaseline", "kai.queues", "--from-start"), env)
    assert line.startswith("minruntime: error: cannot reach Kafka at 127.0.0.1:")


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


def test_a_connection_lost_under_a_driver_cursor_is_one_line() -> None:
    """The bulk writes and the podgroups' loads and pipelined writes run on the driver's
    cursor: its OperationalError (a subclass here, as psycopg raises) is one line too, as
    SQLAlchemy's is."""
    import psycopg
    from sqlalchemy.exc import OperationalError

    from minruntime.commands.common import database_error

    raw = psycopg.errors.AdminShutdown("terminating connection due to administrator command")
    wrapped = OperationalError("SELECT 1", {}, psycopg.OperationalError("server closed"))
    assert database_error(raw) == (
        "cannot read the database: terminating connection due to administrator command"
    )
    assert database_error(wrapped) == "cannot read the database: server closed"
    assert database_error(psycopg.errors.UniqueViolation("duplicate key")) is None
    assert database_error(ValueError("OperationalError")) is None


@pytest.mark.parametrize("command", ["bridge", "evictor", "diff"])
def test_an_unusable_kubeconfig_is_one_line(command: str, tmp_path: Path) -> None:
    broken = tmp_path / "kubeconfig"
    broken.write_text("not: a kubeconfig\n")
    line = _one_line(("kube", command), {"KUBECONFIG": str(broken)})
    assert "Traceback" not in line
    assert line.startswith(f"minruntime: error: cannot use {broken}:")


def test_no_kubeconfig_at_all_names_the_three_ways(tmp_path: Path) -> None:
    result = run_cli(
        "kube",
        "bridge",
        env={
            "KUBECONFIG": "",
            "MINRUNTIME_STACK_DIR": str(tmp_path),
            "KUBERNETES_SERVICE_HOST": "",
        },
        timeout=60,
    )
    assert result.returncode == 2
    assert "stack up --kube" in result.stderr


def test_kube_diff_without_an_api_server_is_one_line(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: x\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: t}}]\n"
        "contexts: [{name: x, context: {cluster: c, user: u}}]\n"
    )
    line = _one_line(("kube", "diff"), {"KUBECONFIG": str(kubeconfig)})
    assert line.startswith(
        "minruntime: error: cannot list PodGroup objects from the Kubernetes API server:"
    )
    assert "Connection refused" in line
