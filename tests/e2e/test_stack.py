"""The real stack: a round trip through the real broker and the real database, and the
`stack up | status | down` lifecycle from nothing on ports of its own."""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from minruntime.kafka_access import KafkaAccess, kafka_access
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus, stack_status
from tests.conftest import (
    environ,
    free_port_pair,
    free_ports,
    private_stack_env,
    remove_stack,
    run_cli,
)
from tests.e2e.harness import create_topic

pytestmark = pytest.mark.stack


async def _produce_and_consume(access: KafkaAccess, records: list[tuple[bytes, bytes]]) -> list:
    topic = f"test.stack-{uuid.uuid4().hex[:8]}"
    await create_topic(access, topic)
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    await producer.start()
    try:
        for key, value in records:
            await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(
        topic,
        **access.client_kwargs(),
        group_id=f"test-{topic}",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    await consumer.start()
    got = []
    try:
        while len(got) < len(records):
            batch = await consumer.getmany(timeout_ms=5000)
            assert batch, "no records came back from the broker"
            for messages in batch.values():
                got.extend((m.key, m.value, m.offset) for m in messages)
    finally:
        await consumer.stop()
    return got


def test_kafka_round_trip(stack: StackStatus, settings: Settings) -> None:
    records = [(f"pg-{i}".encode(), f'{{"n": {i}}}'.encode()) for i in range(5)]
    got = asyncio.run(_produce_and_consume(kafka_access(settings), records))
    assert [(k, v) for k, v, _ in got] == records
    assert [offset for _, _, offset in got] == list(range(5))


def test_database_round_trip(stack: StackStatus) -> None:
    # The owner: only it may create temporary tables in the service's database.
    with psycopg.connect(stack.owner_database_url) as conn:
        version = conn.execute("SHOW server_version_num").fetchone()
        assert version is not None
        assert int(version[0]) >= 150000
        conn.execute("CREATE TEMP TABLE probe (id int PRIMARY KEY, note text)")
        conn.execute("INSERT INTO probe VALUES (1, 'a'), (2, 'b')")
        rows = conn.execute("SELECT id, note FROM probe ORDER BY id").fetchall()
    assert rows == [(1, "a"), (2, "b")]


def test_stack_up_again_is_idempotent(stack: StackStatus, settings: Settings) -> None:
    # Read now, not from the session's start: the fault tests restart PostgreSQL and Kafka.
    pids = {c.name: c.pid for c in stack_status(settings).components}
    result = run_cli("stack", "up")
    assert result.returncode == 0, result.stderr
    assert "PostgreSQL already running" in result.stdout
    assert "Kafka already running" in result.stdout
    assert f"KAFKA_BOOTSTRAP={stack.kafka_bootstrap}" in result.stdout.splitlines()
    status = run_cli("stack", "status")
    assert status.returncode == 0, status.stdout + status.stderr
    for name, pid in pids.items():
        assert name in status.stdout
        assert str(pid) in status.stdout
    assert f"DATABASE_URL={stack.database_url}" in status.stdout.splitlines()


@pytest.fixture
def private_stack(tmp_path: Path) -> Iterator[dict[str, str]]:
    """Environment for a second stack with its own directory and ports; torn down after."""
    # One block of four free ports: two pairs chosen one by one could overlap.
    kafka = free_ports(4)
    env = private_stack_env(tmp_path / "stack", kafka, kafka + 2)
    yield env
    with environ(env):
        remove_stack(Settings())


def test_lifecycle_from_nothing(private_stack: dict[str, str]) -> None:
    bootstrap = private_stack["MINRUNTIME_KAFKA_BOOTSTRAP"]
    database_url = private_stack["MINRUNTIME_DATABASE_URL"]

    first = run_cli("stack", "up", env=private_stack)
    assert first.returncode == 0, first.stderr
    assert "PostgreSQL started" in first.stdout
    assert "Kafka answered a produce/consume round trip" in first.stdout

    again = run_cli("stack", "up", env=private_stack)
    assert again.returncode == 0, again.stderr
    assert "already running" in again.stdout

    status = run_cli("stack", "status", env=private_stack)
    assert status.returncode == 0
    assert status.stdout.count("healthy") == 2
    assert f"KAFKA_BOOTSTRAP={bootstrap}" in status.stdout.splitlines()
    assert f"DATABASE_URL={database_url}" in status.stdout.splitlines()
    with psycopg.connect(database_url) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("minruntime",)

    down = run_cli("stack", "down", env=private_stack)
    assert down.returncode == 0, down.stderr
    assert down.stdout.splitlines() == ["Kafka stopped", "PostgreSQL stopped"]

    stopped = run_cli("stack", "status", env=private_stack)
    assert stopped.returncode == 3
    assert stopped.stdout.count("stopped") == 2
    host, port = bootstrap.rsplit(":", 1)
    with socket.socket() as probe:
        assert probe.connect_ex((host, int(port))) != 0, "Kafka still listening after down"

    twice = run_cli("stack", "down", env=private_stack)
    assert twice.returncode == 0
    assert "was not running" in twice.stdout


def test_a_new_stack_directory_is_a_new_stack(private_stack: dict[str, str]) -> None:
    """A stack directory deleted and made anew (a fresh clone at the same path) starts empty.

    Run as root, PostgreSQL's data lives outside the stack directory at a path derived from
    its path; kept there, the database would outlive Kafka's data (which lives inside) and
    hold offsets of topics that no longer exist."""
    database_url = private_stack["MINRUNTIME_DATABASE_URL"]

    def cluster_identity() -> int:
        with psycopg.connect(database_url) as conn:
            row = conn.execute("SELECT system_identifier FROM pg_control_system()").fetchone()
        assert row is not None
        return int(row[0])

    assert run_cli("stack", "up", env=private_stack).returncode == 0
    first = cluster_identity()
    assert run_cli("stack", "down", env=private_stack).returncode == 0
    assert run_cli("stack", "up", env=private_stack).returncode == 0
    assert cluster_identity() == first, "a stack directory kept is the same stack"
    assert run_cli("stack", "down", env=private_stack).returncode == 0

    shutil.rmtree(private_stack["MINRUNTIME_STACK_DIR"])
    again = run_cli("stack", "up", env=private_stack)
    assert again.returncode == 0, again.stderr
    assert cluster_identity() != first
    assert run_cli("stack", "down", env=private_stack).returncode == 0


def test_existing_stack_restarts_on_new_ports(private_stack: dict[str, str]) -> None:
    assert run_cli("stack", "up", env=private_stack).returncode == 0
    assert run_cli("stack", "down", env=private_stack).returncode == 0
    pg_port = kafka_port = free_port_pair()
    # The pairs are not held between the calls: never let Kafka's broker or controller port
    # fall on PostgreSQL's (a flake seen under load).
    while {kafka_port, kafka_port + 1} & {pg_port, pg_port + 1}:
        kafka_port = free_port_pair()
    # An explicit password in the URL (an override) is the one the runtime role gets.
    moved = {
        **private_stack,
        "MINRUNTIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{kafka_port}",
        "MINRUNTIME_DATABASE_URL": (
            f"postgresql://minruntime:chosen@127.0.0.1:{pg_port}/minruntime"
        ),
    }
    again = run_cli("stack", "up", env=moved)
    assert again.returncode == 0, again.stderr
    assert "PostgreSQL started" in again.stdout
    assert ":chosen@" not in again.stdout
    with psycopg.connect(moved["MINRUNTIME_DATABASE_URL"]) as conn:
        assert conn.execute("SHOW port").fetchone() == (str(pg_port),)
    assert run_cli("stack", "status", env=moved).returncode == 0
    assert run_cli("stack", "down", env=moved).returncode == 0


def assert_one_line_stack_error(result: subprocess.CompletedProcess[str], fragment: str) -> None:
    """A stack error: exit 3, exactly one line on stderr, naming the problem."""
    assert result.returncode == 3, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("minruntime: error: ")
    assert fragment in lines[0]


def test_port_taken_is_one_line_and_starts_nothing(
    private_stack: dict[str, str], listening_socket: socket.socket
) -> None:
    taken = listening_socket.getsockname()[1]
    env = {**private_stack, "MINRUNTIME_KAFKA_BOOTSTRAP": f"127.0.0.1:{taken}"}
    result = run_cli("stack", "up", env=env)
    assert_one_line_stack_error(result, f"port {taken} on 127.0.0.1 is already in use")
    assert "MINRUNTIME_KAFKA_BOOTSTRAP" in result.stderr
    status = run_cli("stack", "status", env=env)
    assert status.stdout.count("stopped") == 2, "a failed `up` left something running"


def test_missing_java_is_one_line(private_stack: dict[str, str], tmp_path: Path) -> None:
    empty_bin = tmp_path / "bin"
    empty_bin.mkdir()
    result = run_cli("stack", "up", env={**private_stack, "PATH": str(empty_bin)})
    assert_one_line_stack_error(result, "Java is not installed")


def test_missing_maven_is_one_line_when_jars_are_not_cached(
    private_stack: dict[str, str], tmp_path: Path
) -> None:
    java = shutil.which("java")
    assert java is not None
    only_java = tmp_path / "bin"
    only_java.mkdir()
    (only_java / "java").symlink_to(Path(java).resolve())
    env = {
        **private_stack,
        "PATH": str(only_java),
        "MINRUNTIME_CACHE_DIR": str(tmp_path / "empty-cache"),
    }
    result = run_cli("stack", "up", env=env)
    assert_one_line_stack_error(result, "Maven (mvn) is not installed")


def test_missing_postgres_binaries_is_one_line(
    private_stack: dict[str, str], tmp_path: Path
) -> None:
    env = {**private_stack, "MINRUNTIME_POSTGRES_BINDIR": str(tmp_path / "no-postgres")}
    result = run_cli("stack", "up", env=env)
    assert_one_line_stack_error(result, "no PostgreSQL binaries")
