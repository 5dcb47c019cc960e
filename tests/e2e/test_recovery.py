"""Faults with real processes: kill -9 loops, PostgreSQL stopped, the broker killed, cold starts.

Each test runs the real `minruntime processor` (and a requeue-worker replica) against the
stack's own PostgreSQL and Kafka, stops or kills one of those, and asserts the promises: the
service keeps running (no exit), says it is not ready while it cannot work (/readyz 503) and
ready afterwards (200), and in the end everything was applied exactly once (the harness's
`drop()` also runs `replay --verify`). No timed assertions: waits are generous, and the
measured recovery times are printed (`pytest -s`) for the record.

The stack is restored at the end of every test, whatever happened.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from minruntime_dev.stack.kafka import KafkaNode
from minruntime_dev.stack.postgres import PostgresNode
from minruntime_dev.stack.process import pid_alive, read_pid
from tests import cloudevents as ce
from tests.conftest import free_ports
from tests.e2e.harness import Pipeline, Subprocess, Worker, probe, wait_for

pytestmark = pytest.mark.stack

# Generous: a loaded 2-core machine, and a processor's own start takes a while.
PATIENCE = 240.0


# The processes a test runs: every wait fails at once, with the log, when one has exited.
_WATCHED: list[Subprocess] = []


def _running() -> None:
    for process in _WATCHED:
        if process.process is not None and process.process.poll() is not None:
            raise AssertionError(
                f"{process.log_path.name} exited with {process.process.returncode}:\n"
                f"{process.log_tail()}"
            )


def _wait(check: Any, what: str, timeout: float = PATIENCE) -> Any:
    def checked() -> Any:
        _running()
        return check()

    return wait_for(checked, timeout, what)


def _wait_status(port: int, path: str, status: int, what: str, timeout: float = PATIENCE) -> str:
    def answered() -> str | None:
        code, body = probe(port, path)
        return (body or "(empty)") if code == status else None

    return str(_wait(answered, f"{what}: {path} answering {status}", timeout))


class Fixture:
    """A pipeline with fixed metrics ports, a worker replica, and the stack's two nodes."""

    def __init__(self, settings: Settings, workdir: Path, name: str) -> None:
        self.processor_port, self.worker_port = free_ports(), free_ports()
        self.pipeline = Pipeline(
            settings,
            workdir,
            name,
            overrides={
                "processor_metrics_port": str(self.processor_port),
                "worker_metrics_port": str(self.worker_port),
            },
        )
        self.postgres = PostgresNode(settings)
        self.kafka = KafkaNode(settings)
        self.settings = settings

    def applied(self) -> int:
        return int(self.pipeline.scalar("SELECT count(*) FROM minruntime.event_log"))

    def wait_applied(self, count: int, timeout: float = PATIENCE) -> None:
        _wait(
            lambda: self.applied() >= count,
            f"{count} applied events\n{self.pipeline.log_tail()}",
            timeout,
        )

    def assert_running(self, *processes: Subprocess) -> None:
        for process in processes:
            assert process.process is not None, "not started"
            assert process.process.poll() is None, f"exited:\n{process.log_tail()}"

    def kill_kafka(self) -> None:
        pid = read_pid(self.kafka.pid_file)
        assert pid is not None
        assert pid_alive(pid)
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not pid_alive(pid), 60, "the broker to die")

    def start_with_worker(self) -> tuple[Pipeline, Worker]:
        """The processor and a worker replica running, 50 queues applied, both ready."""
        pipeline = self.pipeline.create()
        pipeline.start()
        worker = pipeline.start_worker()
        _WATCHED.append(worker)
        pipeline.produce_events("queues", _queues("before", 50))
        self.wait_applied(50)
        _wait_status(self.processor_port, "/readyz", 200, "the processor")
        _wait_status(self.worker_port, "/readyz", 200, "the worker")
        return pipeline, worker

    def restore(self) -> None:
        """Both nodes up and answering (idempotent)."""
        self.postgres.start(self.settings.stack_timeout_seconds)
        self.kafka.start()
        self.kafka.wait_ready(self.settings.stack_timeout_seconds)


@pytest.fixture
def fixture(
    stack: StackStatus, settings: Settings, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Fixture]:
    made = Fixture(settings, tmp_path, request.node.name[5:17].replace("_", ""))
    _WATCHED[:] = [made.pipeline]
    try:
        yield made
    finally:
        _WATCHED.clear()
        made.restore()
        made.pipeline.drop()


def _queues(prefix: str, count: int) -> list[dict[str, Any]]:
    return [ce.queue(f"{prefix}-{i:05d}") for i in range(count)]


def _no_traceback(process: Subprocess) -> None:
    log = process.log_path.read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]


def test_kill_9_in_a_loop_resumes_every_time_and_applies_everything_once(
    fixture: Fixture,
) -> None:
    pipeline = fixture.pipeline.create()
    pipeline.start()
    pipeline.stop()  # topics exist: produce first, so every kill lands mid-stream
    total = 6000
    pipeline.produce_events("queues", _queues("loop", total))
    pipeline.start()
    times = []
    for _ in range(5):
        before = fixture.applied()
        # On a fast machine the restarted processor may finish the stream before the next kill.
        fixture.wait_applied(min(before + 200, total))
        if fixture.applied() >= total:
            break
        assert pipeline.kill() == -signal.SIGKILL
        at_kill = fixture.applied()
        if at_kill >= total:
            break
        restarted = time.monotonic()
        pipeline.spawn()
        fixture.wait_applied(at_kill + 1)
        times.append(time.monotonic() - restarted)
        body = _wait_status(fixture.processor_port, "/readyz", 200, "the restarted processor")
        assert body == "ready\n"
    fixture.wait_applied(total)
    assert fixture.applied() == total
    assert pipeline.scalar("SELECT count(*) FROM minruntime.queues") == total
    assert pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters") == 0
    print(f"\nrecovery after kill -9 (restart -> first new event), s: {times}")


def test_postgres_stopped_for_two_minutes_while_events_flow(fixture: Fixture) -> None:
    pipeline, worker = fixture.start_with_worker()

    assert fixture.postgres.stop()
    stopped = time.monotonic()
    try:
        pipeline.produce_events("queues", _queues("during", 200))
        _wait_status(fixture.processor_port, "/readyz", 503, "the processor, PostgreSQL away")
        _wait_status(fixture.worker_port, "/readyz", 503, "the worker, PostgreSQL away")
        while time.monotonic() - stopped < 120:
            fixture.assert_running(pipeline, worker)
            _wait_status(fixture.processor_port, "/healthz", 200, "processor alive", 30)
            time.sleep(5)
        fixture.assert_running(pipeline, worker)
    finally:
        fixture.postgres.start(fixture.settings.stack_timeout_seconds)
    pipeline.produce_events("queues", _queues("after", 50))
    fixture.wait_applied(300)
    _wait_status(fixture.processor_port, "/readyz", 200, "the processor, PostgreSQL back")
    _wait_status(fixture.worker_port, "/readyz", 200, "the worker, PostgreSQL back")
    fixture.assert_running(pipeline, worker)
    assert fixture.applied() == 300
    assert pipeline.scalar("SELECT count(*) FROM minruntime.queues") == 300


def test_kafka_broker_killed_and_restarted(fixture: Fixture) -> None:
    pipeline, worker = fixture.start_with_worker()

    fixture.kill_kafka()
    try:
        reason = _wait_status(fixture.processor_port, "/readyz", 503, "processor, Kafka away")
        assert "kafka" in reason
        time.sleep(30)
        fixture.assert_running(pipeline, worker)
        _wait_status(fixture.worker_port, "/readyz", 200, "the worker (no Kafka needed)")
    finally:
        fixture.kafka.start()
        fixture.kafka.wait_ready(fixture.settings.stack_timeout_seconds)
    pipeline.produce_events("queues", _queues("after", 50))
    fixture.wait_applied(100)
    _wait_status(fixture.processor_port, "/readyz", 200, "the processor, Kafka back")
    fixture.assert_running(pipeline, worker)
    assert fixture.applied() == 100


@pytest.mark.parametrize("away", ["postgres", "kafka"])
def test_started_while_a_dependency_is_down_waits_quietly_then_works(
    fixture: Fixture, away: str
) -> None:
    pipeline = fixture.pipeline.create(with_topics=True)
    if away == "postgres":
        fixture.postgres.stop()
    else:
        fixture.kill_kafka()
    try:
        pipeline.spawn()
        worker = Worker(pipeline, "cold", pipeline.env).start()
        pipeline.workers.append(worker)
        _WATCHED.append(worker)
        for process in (pipeline, worker):
            _wait(
                lambda process=process: "waiting for" in process.log_tail(),
                f"a status line\n{process.log_tail()}",
            )
        _wait_status(fixture.processor_port, "/readyz", 503, "the waiting processor")
        _wait_status(fixture.worker_port, "/readyz", 503, "the waiting worker")
        _wait_status(fixture.processor_port, "/healthz", 200, "the waiting processor")
        time.sleep(15)  # several retries
        fixture.assert_running(pipeline, worker)
    finally:
        fixture.restore()
    pipeline.produce_events("queues", _queues("cold", 20))
    fixture.wait_applied(20)
    _wait_status(fixture.processor_port, "/readyz", 200, "the processor")
    _wait_status(fixture.worker_port, "/readyz", 200, "the worker")
    fixture.assert_running(pipeline, worker)
    for process in (pipeline, worker):
        _no_traceback(process)
        waits = [line for line in process.log_tail(200).splitlines() if "waiting for" in line]
        assert waits, process.log_tail()
        # One line per report, never more often than every few seconds.
        assert len(waits) < 40, waits
