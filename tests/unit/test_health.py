"""Health: readiness checks, conditions, liveness, the HTTP endpoints, waiting for a dependency.

The status line and the backoff themselves: tests/unit/test_retry.py.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, Counter

from minruntime.health import (
    Condition,
    HealthServer,
    Liveness,
    MetricsPortError,
    Readiness,
    ReadinessMetrics,
    serve_metrics,
)
from minruntime.health.outage import RepeatFilter, wait_until_available
from minruntime.retry import Backoff
from minruntime.settings import Settings
from tests.conftest import free_ports


def test_ready_only_when_every_check_passes() -> None:
    readiness = Readiness()
    assert readiness.failures() == {}
    readiness.add_check("offsets", lambda: None)
    assert readiness.failures() == {}
    readiness.add_check("topic", lambda: "topic kai.queues's identity changed\nre-baseline it")
    assert readiness.failures() == {"topic": "topic kai.queues's identity changed re-baseline it"}
    readiness.remove_check("topic")
    assert readiness.failures() == {}


def test_a_broken_check_fails_readiness_instead_of_the_endpoint() -> None:
    readiness = Readiness()
    readiness.add_check("broken", lambda: str(1 / 0))
    assert readiness.failures() == {
        "broken": "the check raised ZeroDivisionError: division by zero"
    }


def test_condition_reports_its_reason_and_how_long() -> None:
    condition = Condition()
    assert condition() is not None
    assert condition.failing
    condition.ok()
    assert condition() is None
    condition.fail("PostgreSQL unreachable:\n connection refused")
    reason = condition()
    assert reason is not None
    assert reason.startswith("PostgreSQL unreachable: connection refused (for ")


def test_liveness_asks_the_event_loop() -> None:
    liveness = Liveness(timeout=0.5)
    assert liveness() is None  # not watching a loop yet: starting counts as alive
    loop = asyncio.new_event_loop()
    liveness.watch(loop)
    assert liveness() == "the event loop did not answer within 0s"  # not running
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        assert liveness() is None
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(5)
        loop.close()
    assert liveness() == "the event loop is closed"


@pytest.fixture
def server() -> Iterator[tuple[HealthServer, Readiness]]:
    registry = CollectorRegistry()
    Counter("minruntime_test_things", "Things.", registry=registry).inc(3)
    readiness = Readiness()
    running = HealthServer(
        "127.0.0.1", 0, registry=registry, readiness=readiness, liveness=lambda: None
    ).start()
    try:
        yield running, readiness
    finally:
        running.close()


def _get(port: int, path: str, accept: str = "") -> tuple[int, str, str]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}")
    if accept:
        request.add_header("Accept", accept)
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status, answer.headers["Content-Type"], answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_one_port_serves_metrics_healthz_and_readyz(
    server: tuple[HealthServer, Readiness],
) -> None:
    running, readiness = server
    status, _, body = _get(running.port, "/metrics")
    assert status == 200
    assert "minruntime_test_things_total 3.0" in body
    assert _get(running.port, "/healthz") == (200, "text/plain; charset=utf-8", "alive\n")
    assert _get(running.port, "/readyz")[::2] == (200, "ready\n")
    assert _get(running.port, "/nothing")[0] == 404

    readiness.add_check("database", lambda: "PostgreSQL unreachable")
    readiness.add_check("kafka", lambda: None)
    assert _get(running.port, "/readyz")[::2] == (503, "database: PostgreSQL unreachable\n")
    for status, content_type, body in (
        _get(running.port, "/readyz?format=json"),
        _get(running.port, "/readyz", accept="application/json"),
    ):
        assert (status, content_type) == (503, "application/json")
        assert json.loads(body) == {
            "ready": False,
            "failing": {"database": "PostgreSQL unreachable"},
        }


def test_readiness_is_exported_as_metrics_read_at_each_scrape() -> None:
    registry = CollectorRegistry()
    readiness = Readiness()
    ReadinessMetrics(readiness, "processor").register(registry)
    ready = {"component": "processor"}
    assert registry.get_sample_value("minruntime_ready", ready) == 1.0

    database: list[str | None] = ["PostgreSQL unreachable"]
    readiness.add_check("database", lambda: database[0])
    readiness.add_check("kafka", lambda: None)
    assert registry.get_sample_value("minruntime_ready", ready) == 0.0
    checks = {
        sample.labels["check"]: sample.value
        for family in registry.collect()
        if family.name == "minruntime_readiness_check"
        for sample in family.samples
    }
    assert checks == {"database": 0.0, "kafka": 1.0}

    database[0] = None  # the outage ended: the next scrape says so
    assert registry.get_sample_value("minruntime_ready", ready) == 1.0
    assert (
        registry.get_sample_value("minruntime_readiness_check", {**ready, "check": "database"})
        == 1.0
    )


def test_serve_metrics_exports_the_process_readiness_and_names_a_taken_port(
    listening_socket: socket.socket,
) -> None:
    assert serve_metrics("127.0.0.1", 0, "WORKER_METRICS_PORT", "requeue-worker") is None
    taken = listening_socket.getsockname()[1]
    with pytest.raises(MetricsPortError, match="set MINRUNTIME_WORKER_METRICS_PORT to a free"):
        serve_metrics("127.0.0.1", taken, "WORKER_METRICS_PORT", "requeue-worker")

    registry = CollectorRegistry()
    running = serve_metrics(
        "127.0.0.1", free_ports(), "WORKER_METRICS_PORT", "requeue-worker", registry
    )
    assert running is not None
    try:
        status, _, body = _get(running.port, "/metrics")
    finally:
        running.close()
    assert status == 200
    assert "# TYPE minruntime_ready gauge" in body
    assert 'minruntime_ready{component="requeue-worker"}' in body


def test_repeat_filter_lets_each_kind_of_message_through_once_a_minute() -> None:
    now = [0.0]
    repeat = RepeatFilter(60.0, clock=lambda: now[0])

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("aiokafka.conn", logging.ERROR, "", 0, message, None, None)

    passed = []
    for second in range(0, 150, 1):
        now[0] = float(second)
        passed += [
            r.msg for r in (record("Unable connect"), record("No metadata")) if repeat.filter(r)
        ]
    assert passed.count("Unable connect") == 3
    assert passed.count("No metadata") == 3


def test_wait_until_available_retries_transient_errors_only() -> None:
    calls = []
    condition = Condition()

    def attempt() -> str:
        calls.append(1)
        if len(calls) < 4:
            raise ConnectionRefusedError("not yet")
        return "connected"

    result = wait_until_available(
        "a thing",
        attempt,
        transient=lambda error: isinstance(error, ConnectionError),
        condition=condition,
        backoff=Backoff(0.0, 0.0),
    )
    assert (result, len(calls), condition()) == ("connected", 4, None)

    def misconfigured() -> str:
        raise ValueError("the schema is not migrated")

    with pytest.raises(ValueError, match="not migrated"):
        wait_until_available("a thing", misconfigured, backoff=Backoff(0.0, 0.0))


def test_processor_instance_id_is_stable_and_distinct_per_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("socket.gethostname", lambda: "node-a")
    assert Settings(processor_metrics_port=9400).processor_group_instance_id == "node-a:9400"
    assert Settings(processor_metrics_port=9410).processor_group_instance_id == "node-a:9410"
    named = Settings(processor_instance_id="processor-0", processor_metrics_port=0)
    assert named.processor_group_instance_id == "processor-0"
    # Nothing identifies an instance without a port or a name: dynamic membership.
    assert Settings(processor_metrics_port=0).processor_group_instance_id is None
    off = Settings(processor_static_membership=False, processor_instance_id="processor-0")
    assert off.processor_group_instance_id is None
