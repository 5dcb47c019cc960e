"""The evictor without an API server: a refusal per pod, lanes that do not block each other,
abandonment at the deadline, offsets committed only up to the first open decision."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Awaitable, Callable
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
    Look,
    Outcome,
    PodGroupGoneError,
    abandon_reason,
)
from minruntime.cluster.lanes import Lanes, Offsets
from minruntime.cluster.metrics import EvictorMetrics
from minruntime.core import format_rfc3339
from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINTED_AT_ANNOTATION,
    read_checkpoint_grace,
)
from minruntime.core.checkpoint import (
    CHECKPOINT_REQUESTED_AT_ANNOTATION as REQUESTED,
)
from minruntime.core.checkpoint_wait import pending_request
from minruntime.events import (
    Event,
    RequeueAbandonedData,
    RequeueCheckpointData,
    RequeueCommittedData,
)
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
    """`carry_out`: the uids in `refusing` are refused (429) every time; `gone` are gone.
    `notes`: each PodGroup's annotations (the checkpoint handshake reads and writes them)."""

    def __init__(self, refusing: set[str], gone: frozenset[str] = frozenset()) -> None:
        self.refusing, self.gone = refusing, set(gone)
        self.pools: dict[str, str] = {}
        self.graces: dict[str, timedelta] = {}
        self.notes: dict[str, dict[str, str]] = {}
        self.requests: list[tuple[str, datetime]] = []
        self.done: list[str] = []
        self.calls: list[tuple[str, bool]] = []
        self.evicted_at: dict[str, float] = {}
        self.published_at: dict[str, float] = {}
        self.refuse_once: set[str] = set()  # refused (429) at their first attempt only
        self.slow_reads = 0.0  # seconds a read of the annotations takes (an API server slow)

    def look(self, decision_id: str, decision: RequeueCommittedData) -> Look:
        if decision.uid in self.gone:
            raise PodGroupGoneError("gone")
        notes = self.notes.get(decision.uid, {})
        reading = read_checkpoint_grace(notes)
        if reading.grace is not None:
            self.graces[decision.uid] = reading.grace
        return Look(
            {"metadata": {"annotations": notes}},
            "team",
            decision.uid,
            decision_id in self.done,
            reading,
            pending_request(notes, decision.decided_at),
        )

    def request_checkpoint(self, namespace: str, name: str, requested_at: datetime) -> datetime:
        self.requests.append((name, requested_at))
        self.notes.setdefault(name, {})[REQUESTED] = format_rfc3339(requested_at)
        return requested_at

    def annotations(self, uid: str) -> dict[str, str] | None:
        time.sleep(self.slow_reads)
        return None if uid in self.gone else dict(self.notes.get(uid, {}))

    def carry_out(
        self,
        decision_id: str,
        decision: RequeueCommittedData,
        *,
        evict: bool = True,
        read: Any = None,
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
        if decision.uid in self.refuse_once:
            self.refuse_once.discard(decision.uid)
            raise EvictionRefusedError("refused by a disruption budget (429)")
        self.done.append(decision_id)
        self.evicted_at[decision_id] = time.monotonic()
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
    evictor: FakeEvictor,
    decisions: list[tuple[str, RequeueCommittedData]],
    deadline: float,
    meanwhile: Callable[[], Awaitable[None]] | None = None,
) -> tuple[list[Event], list[tuple[str, float]], EvictorMetrics]:
    """Carry the decisions out in lanes (deadline seconds after each decision, real clock);
    `meanwhile` runs beside them (the workload)."""
    settings = Settings(
        evictor_deadline_seconds=deadline,
        kube_backoff_max_seconds=0.05,
        evictor_concurrency=4,
        evictor_checkpoint_poll_seconds=0.05,
    )
    published: list[Event] = []
    ended: list[tuple[str, float]] = []
    metrics = EvictorMetrics(CollectorRegistry())

    async def main() -> None:
        async def publish(event: Event) -> None:
            published.append(event)
            evictor.published_at[event.id] = time.monotonic()

        runner = DecisionRunner(settings, evictor, publish, asyncio.Event(), metrics)  # type: ignore[arg-type]
        lanes = Lanes()
        start = time.monotonic()
        for event_id, data in decisions:

            async def job(event_id: str = event_id, data: RequeueCommittedData = data) -> None:
                await runner.run(event_id, data)
                ended.append((event_id, time.monotonic() - start))

            lanes.add(data.uid, job)
        if meanwhile is not None:
            await meanwhile()
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


def checkpoint_of(published: list[Event]) -> RequeueCheckpointData:
    (data,) = [event.data for event in published if event.type == "requeue.checkpoint"]
    assert isinstance(data, RequeueCheckpointData)
    return data


def test_no_answer_costs_the_grace_and_the_wait_is_not_held_against_the_deadline() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.notes["pg"] = {CHECKPOINT_GRACE_ANNOTATION: "2s"}
    evictor.refuse_once.add("pg")  # after the wait: retried within the (extended) deadline
    published, ended, metrics = run_lanes(evictor, [("d-1", decision("pg", now))], deadline=1.0)

    data = checkpoint_of(published)
    assert (data.uid, data.decision, data.outcome) == ("pg", "d-1", "timed_out")
    assert data.grace == timedelta(seconds=2)
    assert data.checkpointed_at is None
    assert evictor.requests == [("pg", data.requested_at)]
    assert data.requested_at == data.requested_at.replace(microsecond=0)  # whole seconds
    waited = (data.ended_at - data.requested_at).total_seconds()
    assert 2.0 <= waited < 2.5  # exactly its grace, not less, not much more
    # Published, then evicted; a 1 s deadline did not abandon it (extended by the grace).
    assert [event.id for event in published] == ["d-1.checkpoint"]
    assert evictor.published_at["d-1.checkpoint"] <= evictor.evicted_at["d-1"]
    assert evictor.done == ["d-1"]
    assert len(ended) == 1
    assert metrics.checkpoints.labels("timed_out")._value.get() == 1
    assert metrics.decisions.labels("carried_out")._value.get() == 1


def test_an_acknowledged_checkpoint_ends_the_wait_and_its_latency_is_measured() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.notes["pg"] = {CHECKPOINT_GRACE_ANNOTATION: "30s"}
    saved: list[datetime] = []

    async def workload() -> None:
        while not evictor.requests:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.3)
        saved.append(datetime.now(UTC))
        evictor.notes["pg"][CHECKPOINTED_AT_ANNOTATION] = format_rfc3339(saved[0])

    started = time.monotonic()
    published, _, metrics = run_lanes(evictor, [("d-1", decision("pg", now))], 60.0, workload)

    data = checkpoint_of(published)
    assert data.outcome == "acknowledged"
    assert data.checkpointed_at == saved[0]
    assert data.requested_at <= data.checkpointed_at <= data.ended_at
    assert evictor.evicted_at["d-1"] - started < 2.0  # not the 30 s grace
    assert evictor.published_at["d-1.checkpoint"] <= evictor.evicted_at["d-1"]
    assert metrics.checkpoints.labels("acknowledged")._value.get() == 1
    assert metrics.ack_seconds._sum.get() > 0


def test_a_checkpoint_older_than_the_request_or_in_the_future_does_not_answer_it() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.notes["pg"] = {
        CHECKPOINT_GRACE_ANNOTATION: "1s",
        CHECKPOINTED_AT_ANNOTATION: format_rfc3339(now - timedelta(hours=1)),
    }
    evictor.notes["future"] = {
        CHECKPOINT_GRACE_ANNOTATION: "1s",
        CHECKPOINTED_AT_ANNOTATION: format_rfc3339(now + timedelta(hours=1)),
    }
    published, _, _ = run_lanes(
        evictor, [("d-1", decision("pg", now)), ("d-2", decision("future", now))], 60.0
    )
    outcomes = {
        event.data.uid: event.data.outcome  # type: ignore[attr-defined]
        for event in published
        if event.type == "requeue.checkpoint"
    }
    assert outcomes == {"pg": "timed_out", "future": "timed_out"}


def test_a_podgroup_deleted_mid_wait_ends_it_at_once_and_the_decision_is_abandoned() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.notes["pg"] = {CHECKPOINT_GRACE_ANNOTATION: "30s"}

    async def delete() -> None:
        while not evictor.requests:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.2)
        evictor.gone.add("pg")

    published, ended, metrics = run_lanes(evictor, [("d-1", decision("pg", now))], 60.0, delete)

    assert [event.id for event in published] == ["d-1.checkpoint", "d-1.abandoned"]
    data = checkpoint_of(published)
    assert data.outcome == "gone"
    assert (data.ended_at - data.requested_at).total_seconds() < 2
    assert published[1].data.reason == "not_found"  # type: ignore[attr-defined]
    assert ended[0][1] < 2.0
    assert evictor.done == []
    assert metrics.checkpoints.labels("gone")._value.get() == 1


def test_a_restarted_evictor_resumes_the_pending_request_and_never_asks_twice() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    asked = (now - timedelta(seconds=1)).replace(microsecond=0)
    evictor.notes["pg"] = {
        CHECKPOINT_GRACE_ANNOTATION: "2s",
        REQUESTED: format_rfc3339(asked),
    }
    # An older request (a previous decision's) is not this decision's: asked anew.
    evictor.notes["old"] = {
        CHECKPOINT_GRACE_ANNOTATION: "1s",
        REQUESTED: format_rfc3339(now - timedelta(hours=1)),
    }
    published, _, _ = run_lanes(
        evictor,
        [("d-1", decision("pg", now - timedelta(seconds=2))), ("d-2", decision("old", now))],
        60.0,
    )
    assert [name for name, _ in evictor.requests] == ["old"]
    resumed = next(e.data for e in published if e.id == "d-1.checkpoint")
    assert isinstance(resumed, RequeueCheckpointData)
    assert resumed.requested_at == asked
    assert resumed.outcome == "timed_out"
    assert (resumed.ended_at - asked).total_seconds() < 2.5  # the second left, not 2 s more
    assert sorted(evictor.done) == ["d-1", "d-2"]


def test_an_invalid_grace_means_no_handshake_counted_and_evicted_at_once() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.notes["long"] = {CHECKPOINT_GRACE_ANNOTATION: "45m"}
    evictor.notes["bad"] = {CHECKPOINT_GRACE_ANNOTATION: "soon"}
    published, ended, metrics = run_lanes(
        evictor, [("d-1", decision("long", now)), ("d-2", decision("bad", now))], 60.0
    )
    assert published == []
    assert evictor.requests == []
    assert sorted(evictor.done) == ["d-1", "d-2"]
    assert all(seconds < 0.5 for _, seconds in ended)
    assert metrics.invalid_graces._value.get() == 2


def test_a_done_decision_and_a_late_one_are_not_asked_for_a_checkpoint() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.done.append("d-done")
    for uid in ("done", "late"):
        evictor.notes[uid] = {CHECKPOINT_GRACE_ANNOTATION: "5s"}
    published, _, _ = run_lanes(
        evictor,
        [
            ("d-done", decision("done", now)),
            ("d-late", decision("late", now - timedelta(hours=1))),
        ],
        60.0,
    )
    assert evictor.requests == []
    assert [event.id for event in published] == ["d-late.abandoned"]


def test_a_slow_api_server_does_not_make_the_wait_longer_than_its_grace() -> None:
    now = datetime.now(UTC)
    evictor = FakeEvictor(refusing=set())
    evictor.notes["pg"] = {CHECKPOINT_GRACE_ANNOTATION: "1s"}
    evictor.slow_reads = 3.0
    published, _, _ = run_lanes(evictor, [("d-1", decision("pg", now))], 60.0)
    data = checkpoint_of(published)
    assert data.outcome == "timed_out"
    assert (data.ended_at - data.requested_at).total_seconds() < 1.5  # not the 3 s read
    assert evictor.done == ["d-1"]
