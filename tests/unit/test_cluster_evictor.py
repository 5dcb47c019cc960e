"""The evictor's retries, without an API server: a disruption budget's 429, a stop mid-way."""

from __future__ import annotations

import asyncio
import logging
import threading
from datetime import UTC, datetime
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from minruntime.cluster import evictor as evictor_module
from minruntime.cluster.evictor import Evictor, Outcome, _handle
from minruntime.events import RequeueCommittedData, encode_event, new_event
from tests.unit.fake_stop import FakeStop

POD = {"metadata": {"name": "long-0", "namespace": "team"}}


class BudgetedCore:
    """CoreV1Api's eviction: `refusals` 429s from a disruption budget, then `final`."""

    def __init__(self, refusals: int, final: int | None = None) -> None:
        self.refusals, self.final, self.calls = refusals, final, 0

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> None:
        self.calls += 1
        if self.calls <= self.refusals:
            raise ApiException(status=429, reason="Too Many Requests")
        if self.final is not None:
            raise ApiException(status=self.final, reason="Not Found")


def evictor_with(core: BudgetedCore, stop: threading.Event) -> Evictor:
    evictor = Evictor.__new__(Evictor)  # no API client: only `_evict` is exercised
    evictor.core, evictor.backoff_max, evictor.stop = core, 2.0, stop
    return evictor


def test_a_disruption_budget_is_waited_for_with_one_line_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop, core = FakeStop(), BudgetedCore(refusals=5)
    with caplog.at_level(logging.INFO, evictor_module.log.name):
        assert evictor_with(core, stop)._evict(POD) is True
    assert (core.calls, stop.delays) == (6, [0.5, 1.0, 2.0, 2.0, 2.0])
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0] == (
        "eviction of pod team/long-0: EvictionRefusedError: refused by a disruption budget"
        " (429); retrying with backoff"
    )
    assert lines[1:] == [
        "evicted pod team/long-0",
        "eviction of pod team/long-0 is back after 0s (6 attempts)",
    ]


def test_a_pod_already_gone_is_not_evicted_and_other_errors_propagate() -> None:
    assert evictor_with(BudgetedCore(refusals=1, final=404), FakeStop())._evict(POD) is False
    with pytest.raises(ApiException):
        evictor_with(BudgetedCore(refusals=1, final=403), FakeStop())._evict(POD)


def test_a_stop_while_a_budget_refuses_interrupts_the_eviction() -> None:
    core = BudgetedCore(refusals=100)
    with pytest.raises(InterruptedError):
        evictor_with(core, FakeStop(set_after_waits=2))._evict(POD)
    assert core.calls == 2


class FlakyEvictor:
    """`carry_out` fails `failures` times, then succeeds (or stops the evictor, with `stop`)."""

    def __init__(self, failures: int, stop: threading.Event | None = None) -> None:
        self.failures, self.stop, self.calls = failures, stop, 0

    def carry_out(self, decision_id: str, decision: RequeueCommittedData) -> Outcome:
        self.calls += 1
        if self.calls <= self.failures:
            raise ConnectionError("API server away")
        if self.stop is not None:
            self.stop.set()
            raise InterruptedError("stopped while retrying a disruption budget")
        return Outcome(decision_id, ("long-0",))


def decision_record() -> bytes:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    data = {
        "uid": "pg-1",
        "nominatedBy": ["expectedruntime"],
        "beneficiaries": ["pg-2"],
        "requeueNotBefore": now,
        "decidedAt": now,
    }
    return encode_event(new_event("requeue.committed", data, time=now, id="d-7"))


def test_a_decision_is_retried_until_carried_out_with_one_line_per_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop, evictor = FakeStop(), FlakyEvictor(failures=4)
    with caplog.at_level(logging.WARNING, evictor_module.log.name):
        asyncio.run(_handle(evictor, decision_record(), stop, 2.0))  # type: ignore[arg-type]
    assert (evictor.calls, stop.delays) == (5, [0.5, 1.0, 2.0, 2.0])
    assert [r.getMessage() for r in caplog.records] == [
        "decision d-7: ConnectionError: API server away; retrying with backoff",
        "decision d-7 is back after 0s (5 attempts)",
        "decision d-7 for pg-1: evicted long-0",
    ]


def test_a_decision_stopped_before_it_is_done_is_cancelled(
    caplog: pytest.LogCaptureFixture,
) -> None:
    stop = FakeStop()
    evictor = FlakyEvictor(failures=1, stop=stop)  # then stopped in a disruption budget's wait
    with caplog.at_level(logging.WARNING, evictor_module.log.name):
        with pytest.raises(asyncio.CancelledError):
            asyncio.run(_handle(evictor, decision_record(), stop, 2.0))  # type: ignore[arg-type]
        assert evictor.calls == 2
        with pytest.raises(asyncio.CancelledError):  # already stopped: not even attempted
            asyncio.run(_handle(evictor, decision_record(), stop, 2.0))  # type: ignore[arg-type]
    assert evictor.calls == 2
    assert [r.getMessage() for r in caplog.records] == [
        "decision d-7: ConnectionError: API server away; retrying with backoff"
    ]
