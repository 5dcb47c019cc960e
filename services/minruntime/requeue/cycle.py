"""One requeue cycle inside one database transaction: read, nominate, plan, record.

``run_cycle`` is everything the active worker does per cycle, and nothing else (no
leadership, no Kafka, no metrics), so tests and the benchmark call it directly:

1. read the inputs (``cycle_inputs.load_cycle_inputs``) in the caller's REPEATABLE READ
   transaction;
2. nominate with the built-in expected-runtime nominator, merge the external nominations
   (``collect_candidates``), and plan (``plan_requeue_cycle``) — the pure core. Steps 1–2 are
   ``plan_cycle``: plain reads, no write, no lock; the dry run (``minruntime requeue plan``,
   ``preview.py``) runs exactly it, in a READ ONLY transaction;
3. lock the rows of the committed victims and their beneficiaries (``FOR UPDATE``): under
   REPEATABLE READ this fails with a serialization error if the processor changed one of
   them since the inputs were read, and the caller retries the cycle on fresh state;
4. record the decisions (``record_decisions``): projection, event log and outbox, in the
   same transaction. A rolled-back or skipped decision identical to the newest one recorded
   for the same podgroup and run is not recorded again (the audit log shows changes, not a
   row per cycle); commits are always recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from time import perf_counter
from typing import Final

from sqlalchemy import Connection

from minruntime.collector import collector_paused
from minruntime.core import (
    CyclePlan,
    Exclusion,
    NominationReport,
    RequeueDecision,
    RequeueOutcome,
    collect_candidates,
    expected_runtime_nominations,
    plan_requeue_cycle,
)
from minruntime.core.proportion import QuotaVerdict, ShareView
from minruntime.events import (
    Event,
    EventType,
    PromisedPod,
    RequeueCommittedData,
    RequeueRolledBackData,
    RequeueSkippedData,
    UncommittedDecisionData,
    new_event,
)
from minruntime.events.outputs import QueueShareView, QuotaShares
from minruntime.ingest import record_decisions
from minruntime.requeue.cycle_inputs import (
    CycleInputs,
    LastDecision,
    last_decisions,
    load_cycle_inputs,
)
from minruntime.store.requeue import lock_podgroups
from minruntime.store.schema import LIVE
from minruntime.store.unit import ReadUnit

WORKER_SOURCE: Final = "minruntime/requeue-worker"
"""The CloudEvents ``source`` of every decision event."""

_UNCOMMITTED: Final[dict[RequeueOutcome, tuple[EventType, type[UncommittedDecisionData]]]] = {
    RequeueOutcome.ROLLED_BACK: (EventType.REQUEUE_ROLLED_BACK, RequeueRolledBackData),
    RequeueOutcome.SKIPPED: (EventType.REQUEUE_SKIPPED, RequeueSkippedData),
}


@dataclass(frozen=True)
class PlannedCycle:
    """A cycle's reading and planning: what it read, nominated and decided, nothing written."""

    now: datetime
    inputs: CycleInputs
    nominations: NominationReport
    # uid -> its nominators, the planner's input.
    candidates: Mapping[str, frozenset[str]]
    plan: CyclePlan
    # Seconds spent reading ("load") and planning ("plan").
    timings: Mapping[str, float]

    @property
    def excluded(self) -> tuple[Exclusion, ...]:
        """What the cycle left out: unusable stored values, then undecidable candidates."""
        return (*self.inputs.excluded, *self.plan.excluded)

    @cached_property
    def run_starts(self) -> Mapping[str, datetime | None]:
        """uid -> start time (None: none) of every running podgroup read; the others absent."""
        return {podgroup.uid: podgroup.start_time for podgroup in self.inputs.cluster.running}


@dataclass(frozen=True)
class CycleReport(PlannedCycle):
    """What one cycle saw, decided and recorded (its timings: "write" too)."""

    decided_at: datetime
    # The decision events written (projection + event log + outbox), in order.
    recorded: tuple[Event, ...]
    # Decisions equal to the newest recorded one for the same run: counted, not recorded.
    repeats: int

    @property
    def committed(self) -> tuple[RequeueDecision, ...]:
        """The decisions that evict a podgroup."""
        return self.plan.committed()


def plan_cycle(unit: ReadUnit, *, now: datetime) -> PlannedCycle:
    """Read one cycle's inputs from the unit's state and plan it at ``now``; reads only, no
    lock."""
    started = perf_counter()
    # Reading and planning build ~10^5 small acyclic objects that all die with the cycle;
    # the cyclic garbage collector would only re-scan them (a tenth of the cycle at scale).
    with collector_paused():
        inputs = load_cycle_inputs(unit.connection, now, unit.state.tables)
        loaded = perf_counter()
        cluster = inputs.cluster
        nominations = expected_runtime_nominations(cluster.running, now)
        candidates = collect_candidates(nominations.nominated, inputs.external)
        plan = plan_requeue_cycle(
            cluster, candidates, tree=inputs.tree, configs=inputs.configs, now=now
        )
        planned = perf_counter()
    return PlannedCycle(
        now,
        inputs,
        nominations,
        candidates,
        plan,
        {"load": loaded - started, "plan": planned - loaded},
    )


def repeated_decisions(unit: ReadUnit, planned: PlannedCycle) -> frozenset[str]:
    """The uids whose decision repeats the newest one recorded for the same run (not recorded
    again)."""
    newest = last_decisions(unit.connection, list(planned.candidates), unit.state.tables)
    return frozenset(
        decision.uid
        for decision in planned.plan.decisions
        if _repeats(newest.get(decision.uid), decision, planned.run_starts.get(decision.uid))
    )


def run_cycle(
    conn: Connection,
    *,
    now: datetime,
    topic: str,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> CycleReport:
    """Run one cycle at ``now`` in the caller's transaction; the caller commits."""
    live = ReadUnit(conn)
    planned = plan_cycle(live, now=now)
    writing = perf_counter()
    plan = planned.plan
    repeated = repeated_decisions(live, planned)
    decided_at = clock()
    # The decision time is the commit time: the cooldown starts when the eviction does.
    shift = max(decided_at - now, timedelta(0))
    events: list[Event] = []
    repeats = 0
    for decision in plan.decisions:
        if decision.uid in repeated:
            repeats += 1
            continue
        events.append(decision_event(decision, planned.run_starts.get(decision.uid), shift))
    locked = sorted(
        {uid for decision in plan.committed() for uid in (decision.uid, *decision.beneficiaries)}
    )
    if locked:
        lock_podgroups(conn, LIVE, locked)
    if events:
        record_decisions(conn, events, topic=topic)
    written = perf_counter()
    return CycleReport(
        now=now,
        inputs=planned.inputs,
        nominations=planned.nominations,
        candidates=planned.candidates,
        plan=plan,
        timings={**planned.timings, "write": written - writing},
        decided_at=now + shift,
        recorded=tuple(events),
        repeats=repeats,
    )


def _repeats(
    last: LastDecision | None, decision: RequeueDecision, run_start: datetime | None
) -> bool:
    if last is None or decision.outcome is RequeueOutcome.COMMITTED:
        return False
    return (
        last.outcome == decision.outcome.value
        and last.reason == (None if decision.reason is None else decision.reason.value)
        and last.nominated_by == decision.nominated_by
        and last.run_start == run_start
    )


def quota_shares(verdict: QuotaVerdict) -> QuotaShares:
    """The wire form of a share verdict (rolled back for beneficiary_over_quota)."""

    def view(share: ShareView) -> QueueShareView:
        return QueueShareView.model_validate(share, from_attributes=True)

    return QuotaShares(
        rule=verdict.rule.value,
        queue=verdict.queue,
        beneficiary=view(verdict.beneficiary),
        victim=view(verdict.victim),
    )


def decision_event(
    decision: RequeueDecision, run_start: datetime | None, shift: timedelta = timedelta(0)
) -> Event:
    """The decision as the event published on ``kai.requeue-decisions`` (a fresh id)."""
    decided_at = decision.decided_at + shift
    if decision.outcome is RequeueOutcome.COMMITTED:
        assert decision.requeue_not_before is not None
        committed = RequeueCommittedData(
            uid=decision.uid,
            nominated_by=decision.nominated_by,
            beneficiaries=decision.beneficiaries,
            requeue_not_before=decision.requeue_not_before + shift,
            decided_at=decided_at,
            run_start=run_start,
            placements=tuple(
                PromisedPod(
                    podgroup=placement.podgroup,
                    pod=placement.pod,
                    node=placement.node,
                    gpu=placement.gpu,
                )
                for placement in decision.placements
            ),
            delay_problem=decision.delay_problem,
        )
        return new_event(
            EventType.REQUEUE_COMMITTED, committed, time=decided_at, source=WORKER_SOURCE
        )
    assert decision.reason is not None
    event_type, model = _UNCOMMITTED[decision.outcome]
    # Only a rollback for preemption_delay says until when, and one for
    # beneficiary_over_quota which shares decided it (fields of a rolled-back event).
    extra: dict[str, object] = {}
    if decision.delay_ends_at is not None:
        extra["delay_ends_at"] = decision.delay_ends_at + shift
    if decision.quota is not None:
        extra["quota_shares"] = quota_shares(decision.quota)
    data = model(
        uid=decision.uid,
        nominated_by=decision.nominated_by,
        reason=decision.reason.value,
        decided_at=decided_at,
        run_start=run_start,
        **extra,
    )
    return new_event(event_type, data, time=decided_at, source=WORKER_SOURCE)
