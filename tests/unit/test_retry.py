"""The one retry primitive: capped backoff, one status line per outage (both wordings, grace),
stop, async."""

from __future__ import annotations

import asyncio
import logging

import pytest

from minruntime.health import one_line as health_one_line
from minruntime.retry import WAITING, Backoff, Outage, one_line, retry, retry_async
from tests.unit.fake_stop import FakeStop

log = logging.getLogger("tests.retry")


def messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [record.getMessage() for record in caplog.records if record.name == log.name]


def test_backoff_doubles_up_to_its_cap_and_resets() -> None:
    backoff = Backoff(0.5, 10.0)
    assert [backoff.next() for _ in range(7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0, 10.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_retry_waits_doubling_capped_delays_and_returns_the_result(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = FakeStop()
    calls: list[int] = []

    def attempt() -> str:
        calls.append(1)
        if len(calls) <= 6:
            raise ConnectionRefusedError("connection refused\n  at line 2")
        return "connected"

    with caplog.at_level(logging.WARNING, log.name):
        result = retry(attempt, what="the API server", stop=stop, logger=log, cap=4.0)
    assert (result, len(calls)) == ("connected", 7)
    assert stop.delays == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    # One line for the whole outage (15.5 s, under a reminder's interval), one when it ends.
    assert messages(caplog) == [
        "the API server: ConnectionRefusedError: connection refused at line 2;"
        " retrying with backoff",
        "the API server is back after 0s (7 attempts)",
    ]


def test_a_long_outage_is_one_line_then_a_reminder_per_interval_not_per_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    outage = Outage("Kafka at k:9092", log, every=60.0, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, log.name):
        for _ in range(30):  # 300 s of attempts every 10 s
            outage.failed("broker not available")
            now[0] += 10.0
        outage.back()
    assert messages(caplog) == [
        "Kafka at k:9092: broker not available; retrying with backoff",
        "Kafka at k:9092: broker not available; still retrying after 60s (7 attempts)",
        "Kafka at k:9092: broker not available; still retrying after 120s (13 attempts)",
        "Kafka at k:9092: broker not available; still retrying after 180s (19 attempts)",
        "Kafka at k:9092: broker not available; still retrying after 240s (25 attempts)",
        "Kafka at k:9092 is back after 300s (31 attempts)",
    ]


def test_back_says_nothing_without_a_reported_failure_and_a_new_outage_starts_afresh(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    outage = Outage("PostgreSQL", log, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, log.name):
        outage.back()
        assert messages(caplog) == []
        outage.failed(OSError("refused"))
        now[0] = 3.0
        outage.back()
        outage.back()  # already said
        now[0] = 100.0
        outage.failed(OSError("refused again"))
        now[0] = 101.0
        outage.back()
    assert messages(caplog) == [
        "PostgreSQL: OSError: refused; retrying with backoff",
        "PostgreSQL is back after 3s (2 attempts)",
        "PostgreSQL: OSError: refused again; retrying with backoff",
        "PostgreSQL is back after 1s (2 attempts)",
    ]


def test_the_waiting_wording_says_every_few_seconds_and_once_when_back(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    status = Outage("PostgreSQL", log, 5.0, lambda: now[0], wording=WAITING)
    with caplog.at_level(logging.WARNING, log.name):
        for _ in range(30):  # 15 s of retries every half second
            status.failed("connection refused")
            now[0] += 0.5
        status.back()
    assert [record.getMessage() for record in caplog.records] == [
        "waiting for PostgreSQL (0s so far, retrying): connection refused",
        "waiting for PostgreSQL (5s so far, retrying): connection refused",
        "waiting for PostgreSQL (10s so far, retrying): connection refused",
        "PostgreSQL is back after 15s",
    ]


def test_grace_hides_short_moments(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    status = Outage("Kafka", log, clock=lambda: now[0], grace=10.0, wording=WAITING)
    with caplog.at_level(logging.WARNING, log.name):
        status.failed("rebalancing")
        now[0] = 9.0
        status.failed("rebalancing")
        status.back()
    assert caplog.records == []


def test_a_success_at_once_logs_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, log.name):
        assert retry(lambda: 7, what="a thing", stop=FakeStop(), logger=log) == 7
    assert messages(caplog) == []


def test_an_error_that_is_not_transient_propagates_at_once() -> None:
    stop = FakeStop()
    calls: list[Exception] = []
    errors: list[Exception] = [ConnectionError("away"), ValueError("schema not migrated")]

    def attempt() -> None:
        calls.append(errors[len(calls)])
        raise calls[-1]

    with pytest.raises(ValueError, match="not migrated"):
        retry(
            attempt,
            what="a thing",
            stop=stop,
            transient=lambda error: isinstance(error, ConnectionError),
        )
    assert (len(calls), stop.delays) == (2, [0.5])


def test_stop_interrupts_the_waiting_and_a_stopped_retry_does_not_start() -> None:
    stop = FakeStop(set_after_waits=3)
    calls: list[int] = []

    def attempt() -> None:
        calls.append(1)
        raise TimeoutError("no answer")

    with pytest.raises(InterruptedError, match="a thing"):
        retry(attempt, what="a thing", stop=stop)
    assert len(calls) == 3
    with pytest.raises(InterruptedError):
        retry(attempt, what="a thing", stop=stop)
    assert len(calls) == 3


def test_one_line_joins_lines_bounds_the_length_and_prefers_the_driver_error() -> None:
    class WrappedError(Exception):
        orig = ValueError("bad\nvalue")

    assert health_one_line is one_line  # health re-exports the one definition
    assert one_line(RuntimeError("(429)\nReason: Too Many Requests\n")) == (
        "RuntimeError: (429) Reason: Too Many Requests"
    )
    assert one_line(WrappedError("wrapper text")) == "ValueError: bad value"
    assert one_line(RuntimeError("RuntimeError: said twice")) == "RuntimeError: said twice"
    assert len(one_line("x" * 1000)) == 300


def test_retry_async_with_a_threading_event(caplog: pytest.LogCaptureFixture) -> None:
    stop = FakeStop()
    calls: list[int] = []

    async def attempt() -> str:
        calls.append(1)
        if len(calls) <= 3:
            raise ConnectionError("away")
        return "started"

    with caplog.at_level(logging.WARNING, log.name):
        result = asyncio.run(retry_async(attempt, what="Kafka", stop=stop, logger=log))
    assert (result, stop.delays) == ("started", [0.5, 1.0, 2.0])
    assert messages(caplog) == [
        "Kafka: ConnectionError: away; retrying with backoff",
        "Kafka is back after 0s (4 attempts)",
    ]


def test_retry_async_with_an_asyncio_event_waits_and_is_interrupted() -> None:
    async def scenario() -> tuple[str, int]:
        stop = asyncio.Event()
        calls: list[int] = []

        async def flaky() -> str:
            calls.append(1)
            if len(calls) == 1:
                raise ConnectionError("away")
            return "ok"

        result = await retry_async(flaky, what="x", stop=stop, backoff=Backoff(0.01, 0.01))

        async def never() -> str:
            asyncio.get_running_loop().call_later(0.05, stop.set)
            raise ConnectionError("away")

        with pytest.raises(InterruptedError):
            await retry_async(never, what="x", stop=stop, backoff=Backoff(30.0, 30.0))
        return result, len(calls)

    assert asyncio.run(asyncio.wait_for(scenario(), 5.0)) == ("ok", 2)


def test_retry_async_lets_a_non_transient_error_and_cancellation_through() -> None:
    async def refused() -> None:
        raise PermissionError("forbidden")

    async def cancelled() -> None:
        raise asyncio.CancelledError

    with pytest.raises(PermissionError):
        asyncio.run(
            retry_async(
                refused,
                what="x",
                stop=FakeStop(),
                transient=lambda error: not isinstance(error, PermissionError),
            )
        )
    with pytest.raises(asyncio.CancelledError):
        asyncio.run(retry_async(cancelled, what="x", stop=FakeStop()))
