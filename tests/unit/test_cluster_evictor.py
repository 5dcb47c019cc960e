"""The evictor without an API server: a refusal per pod, lanes that do not block each other,
abandonment at the deadline, offsets committed only up to the first open decision."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException
from prometheus_client import CollectorRegistry

from minruntime.cluster.evictor import (
    DeadlinePassedError,
    DecisionRunner,
    EvictionRefusedError,
    Evictor,
    Outcome,
    PodGroupGoneError,
    abandon_reason,
)
from minruntime.cluster.evictor_metrics import EvictorMetrics
from minruntime.cluster.lanes import Lanes, Offsets
from minruntime.events import Event, RequeueAbandonedData, RequeueCommittedData
from minruntime.settings import Settings

POD = {"metadata": {"name": "long-0", "namespace": "team"}}
T0 = datetime(2026, 1, 1, tzinfo=UTC)


class BudgetedCore:
    """CoreV1Api's eviction answering `status` (None: accepted)."""

    def __init__(self, status: int | None) -> None:
        self.status, self.calls = status, 0

    def create_namespaced_pod_eviction(self, name: str, namespace: str, body: Any) -> None:
        self.calls += 1
        if self.status is not None:
            raise ApiException(status=self.status, reason="refused")


def evictor_with(core: BudgetedCore) -> Evictor:
    evictor = Evictor.__new__(Evictor)  # no API client: only `_evict` is exercised
    evictor.core, evictor.backoff_max, evictor.stop = core, 2.0, threading.Event()
    return evictor


def test_one_eviction_attempt_per_call_a_budget_refusal_raises_for_the_lane_to_retry() -> None:
    assert evictor_with(BudgetedCore(None))._evict(POD) is True
    core = BudgetedCore(429)
    with pytest.raises(EvictionRefusedError) as refused:
        evictor_with(core)._evict(POD)
    assert core.calls == 1  # not retried in place: the lane waits, not the whole evictor
    assert abandon_reason(refused.value) == "pdb"
    assert evictor_with(BudgetedCore(404))._evict(POD) is False
    with pytest.raises(ApiException) as forbidden:
        evictor_with(BudgetedCore(403))._evict(POD)
    assert abandon_reason(forbidden.value) == "forbidden"
    assert abandon_reason(PodGroupGoneError("gone")) == "not_found"
    assert abandon_reason(DeadlinePassedError("late")) == "expired"
    assert abandon_reason(ConnectionError("away")) == "api_error"


def test_offsets_are_committed_only_up_to_the_first_open_record() -> None:
    offsets: Offsets[str] = Offsets()
    for offset in range(4):
        offsets.read("p0", offset)
    offsets.finish("p0", 1)
    offsets.finish("p0", 2)
    assert offsets.committable() == {}
    assert offsets.open_count == 2
    offsets.finish("p0", 0)
    assert offsets.committable() == {"p0": 3}
    assert offsets.committable() == {}  # unchanged: nothing to commit again
    offsets.finish("p0", 3)
    assert offsets.committable() == {"p0": 4}


class FakeEvictor:
    """`carry_out`: the uids in `refusing` are refused (429) every time; `gone` are gone."""

    def __init__(self, refusing: set[str], gone: frozenset[str] = frozenset()) -> None:
        self.refusing, self.gone = refusing, gone
        self.pools: dict[str, str] = {}
        self.done: list[str] = []
        self.calls: list[tuple[str, bool]] = []

    def carry_out(
        self, decision_id: str, decision: RequeueCommittedData, *, evict: bool = True
    ) -> Outcome:
        self.calls.append((decision_id, evict))
        if decision.uid in self.gone:
            raise PodGroupGoneError("gone")
        if decision_id in self.done:
            return Outcome(decision_id, skipped="already_done")
        if not evict:
            raise DeadlinePassedError("late")
        if decision.uid in self.refusing:
            raise EvictionRefusedError("refused by a disruption budget (429)")
        self.done.append(decision_id)
        return Outcome(decision_id, ("pod",))


def decision(uid: str, decided_at: datetime) -> RequeueCommittedData:
    return RequeueCommittedData(
        uid=uid,
        nominated_by=("expectedruntime",),
        beneficiaries=("pg-b",),
        requeue_not_before=decided_at + timedelta(minutes=5),
        decided_at=decided_at,
    )


def run_lanes(
    evictor: FakeEvictor, decisions: list[tuple[str, RequeueCommittedData]], deadline: float
) -> tuple[list[Event], list[tuple[str, float]], EvictorMetrics]:
    """Carry the decisions out in lanes (deadline seconds after each decision, real clock)."""
    settings = Settings(
        evictor_deadline_seconds=deadline, kube_backoff_max_seconds=0.05, evictor_concurrency=4
    )
    published: list[Event] = []
    ended: list[tuple[str, float]] = []
    metrics = EvictorMetrics(CollectorRegistry())

    async def main() -> None:
        async def publish(event: Event) -> None:
            published.append(event)

        runner = DecisionRunner(settings, evictor, publish, asyncio.Event(), metrics)  # type: ignore[arg-type]
        lanes = Lanes()
        start = time.monotonic()
        for event_id, data in decisions:

            async def job(event_id: str = event_id, data: RequeueCommittedData = data) -> None:
                await runner.run(event_id, data)
                ended.append((event_id, time.monotonic() - start))

            lanes.add(data.uid, job)
        while lanes.busy:
            await asyncio.sleep(0.01)

    asyncio.run(main())
    return published, ended, metrics


def test_a_refused_podgroup_holds_back_only_its_own_lane_and_is_abandoned_at_its_deadline() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing={"blocked"})
    decisions = [("d-0", decision("blocked", now))]
    decisions += [(f"d-{i}", decision(f"pg-{i}", now)) for i in range(1, 10)]
    decisions.append(("d-10", decision("blocked", now)))  # the same podgroup: behind d-0
    published, ended, metrics = run_lanes(evictor, decisions, deadline=1.0)

    order = [event_id for event_id, _ in ended]
    assert set(order[:9]) == {f"d-{i}" for i in range(1, 10)}  # not behind the blocked one
    assert all(seconds < 0.5 for event_id, seconds in ended if event_id not in {"d-0", "d-10"})
    assert order[9:] == ["d-0", "d-10"]  # in decision order within the podgroup's lane
    assert dict(ended)["d-0"] >= 0.9  # held until its deadline, not longer than a backoff step
    assert dict(ended)["d-0"] < 1.5
    assert [event.id for event in published] == ["d-0.abandoned", "d-10.abandoned"]
    data = published[0].data
    assert isinstance(data, RequeueAbandonedData)
    assert (data.uid, data.decision, data.reason) == ("blocked", "d-0", "pdb")
    assert data.deadline == now + timedelta(seconds=1)
    assert data.requeue_not_before == now + timedelta(minutes=5)
    # d-10's deadline passed while it waited in its lane: given up without an attempt.
    assert published[1].data.reason == "expired"  # type: ignore[attr-defined]
    assert ("d-10", True) not in evictor.calls
    assert metrics.abandons.labels("pdb")._value.get() == 1
    assert metrics.abandons.labels("expired")._value.get() == 1
    assert metrics.decisions.labels("carried_out")._value.get() == 9


def test_a_gone_podgroup_is_abandoned_at_once_and_a_late_reread_is_not_evicted() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set(), gone=frozenset({"gone"}))
    evictor.done.append("d-done")
    late = now - timedelta(hours=1)  # its deadline passed while no evictor ran
    published, ended, _ = run_lanes(
        evictor,
        [
            ("d-gone", decision("gone", now)),
            ("d-late", decision("late", late)),
            ("d-done", decision("done", late)),
        ],
        deadline=60.0,
    )
    reasons = {event.id: event.data.reason for event in published}  # type: ignore[attr-defined]
    assert reasons == {"d-gone.abandoned": "not_found", "d-late.abandoned": "expired"}
    assert ("d-late", False) in evictor.calls
    assert ("d-late", True) not in evictor.calls
    assert ("d-done", False) in evictor.calls  # done before the restart: ends as done
    assert len(ended) == 3
