"""`minruntime simulate`: the event log of a window judged as recorded and under a change.

The log is read once, in order, in one REPEATABLE READ transaction made READ ONLY: nothing is
written anywhere, no lock is taken, no shadow is made. Each input event is decoded by the
processor's decoder and folded in memory by the pure core (``core.fold``, ``core.ended_run``:
the podgroup fold the processor runs); queue and configuration events feed both rule worlds
(``core.policy_worlds``); each run that ends, each requeue decision and each start goes to
the difference fold (``core.simulation``). Entries the processor's code rejects are skipped
and counted, as a replay skips them; records the processor dead-lettered never reached the
log, and the ones of the window are counted.

The fold starts at the log's first entry whatever ``since`` is (the runs going at ``since``
started before it, and the rules in force then were set before it); only what ends or is
decided inside ``[since, until]`` (event time) is counted.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Final

from sqlalchemy import Engine

from minruntime.audit.replay import LogEntry, read_log
from minruntime.audit.whatif import ChangeEvent
from minruntime.core import (
    MinRuntimeError,
    PodGroupState,
    ended_run,
    fold,
    format_duration,
    format_rfc3339,
)
from minruntime.core.policy_worlds import PolicyChange, Worlds
from minruntime.core.queue_tree import Queue
from minruntime.core.runs import held_gpus
from minruntime.core.simulation import (
    Beneficiary,
    RecordedDecision,
    Simulation,
    SimulationResult,
)
from minruntime.errors import UserError
from minruntime.events import (
    ConfigUpdatedData,
    Event,
    EventRejected,
    PodGroupAllocatedData,
    PodGroupAnnotatedData,
    PodGroupDeletedData,
    PodGroupReleasedData,
    PodGroupSubmittedData,
    QueueDeletedData,
    QueueUpsertedData,
    RequeueCommittedData,
    decode_event,
)
from minruntime.ingest import outcome_of
from minruntime.ingest.decisions import decision_data
from minruntime.ingest.podgroups import podgroup_change
from minruntime.store.log_span import LogSpan, dead_letters_between, log_span
from minruntime.store.read_transactions import read_only, repeatable_read
from minruntime.store.schema import LIVE

_FOLDED: Final = (
    PodGroupSubmittedData,
    PodGroupAllocatedData,
    PodGroupReleasedData,
    PodGroupAnnotatedData,
    PodGroupDeletedData,
)
# Skipped entries listed one by one (the rest are counted).
SHOWN_SKIPPED: Final = 10


class SimulationError(UserError):
    """The simulation cannot run: bad window, bad change, empty log (one line)."""


@dataclass
class SimulationReport:
    """The differences and what they were made from."""

    result: SimulationResult
    queue: str | None
    change: Sequence[ChangeEvent]
    span: LogSpan
    entries: int = 0
    in_window: int = 0
    skipped: int = 0
    skipped_lines: list[str] = field(default_factory=list)
    dead_letters: int = 0
    # What part of the window the log does not hold (None: all of it is there).
    missing: tuple[datetime, datetime] | None = None
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0


def policy_change(events: Sequence[ChangeEvent]) -> PolicyChange:
    """What the change events pin (a later event about the same queue or pool wins)."""
    queues: dict[str, Queue | None] = {}
    configs = {}
    for item in events:
        data = item.event.data
        try:
            if isinstance(data, QueueUpsertedData):
                queues[data.name] = data.to_queue()
            elif isinstance(data, QueueDeletedData):
                queues[data.name] = None
            elif isinstance(data, ConfigUpdatedData):
                configs[data.node_pool] = data.to_config()
        except MinRuntimeError as error:
            raise SimulationError(f"{item.origin}: {error}") from None
    return PolicyChange(queues, configs)


def simulate(
    engine: Engine,
    change: Sequence[ChangeEvent],
    *,
    since: datetime,
    until: datetime,
    queue: str | None = None,
) -> SimulationReport:
    """Judge the log's window ``[since, until]`` as recorded and under ``change``."""
    if not change:
        raise SimulationError("nothing to simulate: give -f FILE with a queue or config change")
    if until <= since:
        raise SimulationError(
            f"--until {format_rfc3339(until)} is not after --since {format_rfc3339(since)}"
        )
    if queue is not None and not queue:
        raise SimulationError("--queue '': name a queue")
    pinned = policy_change(change)
    try:
        worlds = Worlds(pinned)
    except MinRuntimeError as error:
        raise SimulationError(f"the change cannot be applied: {error}") from None
    started = time.perf_counter()
    with repeatable_read(engine) as conn:
        read_only(conn)
        span = log_span(conn, LIVE)
        _check_window(span, since, until)
        simulation = Simulation(worlds, since, until, queue=queue)
        report = SimulationReport(SimulationResult(since, until), queue, change, span)
        folder = _Folder(simulation, report, until)
        for entry in read_log(conn):
            folder.entry(entry)
        report.dead_letters = dead_letters_between(conn, LIVE, since, until)
    report.result = simulation.result(folder.open_runs())
    if queue is not None and queue not in report.result.queues and not _known(worlds, queue):
        raise SimulationError(f"--queue {queue!r}: no queue of that name in the log or the change")
    if report.in_window == 0:
        raise SimulationError(
            f"no event in the window {format_rfc3339(since)} .. {format_rfc3339(until)}: "
            f"{_span_text(span)}"
        )
    if span.first is not None and since < span.first:
        report.missing = (since, span.first)
    report.notes = _notes(report, worlds)
    report.seconds = time.perf_counter() - started
    return report


def _known(worlds: Worlds, queue: str) -> bool:
    return queue in worlds.recorded.tree or queue in worlds.changed.tree


def _check_window(span: LogSpan, since: datetime, until: datetime) -> None:
    if span.entries == 0 or span.first is None or span.last is None:
        raise SimulationError("the event log is empty: there is nothing to simulate")
    if until < span.first or since > span.last:
        raise SimulationError(
            f"no event in the window {format_rfc3339(since)} .. {format_rfc3339(until)}: "
            f"{_span_text(span)}"
        )


def _span_text(span: LogSpan) -> str:
    if span.first is None or span.last is None:
        return "the event log is empty"
    return (
        f"the log holds {span.entries} entries from {format_rfc3339(span.first)} "
        f"to {format_rfc3339(span.last)}"
    )


def _notes(report: SimulationReport, worlds: Worlds) -> list[str]:
    notes = []
    if report.missing is not None:
        since, first = report.missing
        notes.append(
            f"the window starts {format_duration(first - since)} before the log's first entry "
            f"({format_rfc3339(first)}): nothing from {format_rfc3339(since)} to "
            f"{format_rfc3339(first)} is in the figures, and runs going at the log's start "
            "are not known"
        )
    if not report.result.rules_differ:
        notes.append(
            "the change does nothing: every queue and node-pool configuration it names is "
            "what the log has throughout"
        )
    elif not report.result.total.differs:
        notes.append(
            "the change alters the rules, but no run, eviction or decision in the window is "
            "judged differently"
        )
    if worlds.conflicts:
        notes.append(
            f"{worlds.conflicts} recorded queue event(s) would close a cycle with a queue of "
            "the change: the changed tree kept its shape there"
        )
    if report.skipped:
        notes.append(
            f"{report.skipped} log entr{'y was' if report.skipped == 1 else 'ies were'} skipped "
            "as a replay skips them (not applicable by the processor's code)"
        )
    if report.dead_letters:
        notes.append(
            f"{report.dead_letters} record(s) were dead-lettered by the processor in the window: "
            "never applied live, so not in the log and not simulated"
        )
    if report.result.waiting_at_end:
        notes.append(
            f"{report.result.waiting_at_end} beneficiary wait(s) had not ended by the window's "
            "end: counted up to it"
        )
    return notes


class _Folder:
    """The log, entry by entry, into the podgroup fold and the simulation."""

    def __init__(self, simulation: Simulation, report: SimulationReport, until: datetime) -> None:
        self._simulation = simulation
        self._worlds = simulation.worlds
        self._report = report
        self._until = until
        self._since = report.result.since
        self._states: dict[str, PodGroupState] = {}

    def entry(self, entry: LogEntry) -> None:
        report = self._report
        report.entries += 1
        try:
            event = decode_event(entry.value)
        except EventRejected as error:
            self._skip(entry, f"invalid: {error}")
            return
        at = event.time
        if at > self._until:
            return
        if at >= self._since:
            report.in_window += 1
        data = event.data
        try:
            if entry.is_decision:
                self._decision(event)
            elif isinstance(data, _FOLDED):
                self._podgroup(data, at)
            elif isinstance(data, QueueUpsertedData):
                self._worlds.queue_upserted(data.to_queue())
            elif isinstance(data, QueueDeletedData):
                self._worlds.queue_deleted(data.name)
            elif isinstance(data, ConfigUpdatedData):
                self._worlds.config_updated(data.node_pool, data.to_config())
        except MinRuntimeError as error:
            self._skip(entry, f"not applied: {error.kind}: {error}")

    def _skip(self, entry: LogEntry, why: str) -> None:
        report = self._report
        report.skipped += 1
        if len(report.skipped_lines) < SHOWN_SKIPPED:
            report.skipped_lines.append(f"seq {entry.seq} ({entry.type}): {why}")

    def _podgroup(
        self,
        data: PodGroupSubmittedData
        | PodGroupAllocatedData
        | PodGroupReleasedData
        | PodGroupAnnotatedData
        | PodGroupDeletedData,
        at: datetime,
    ) -> None:
        uid = data.uid
        before = self._states.get(uid) or PodGroupState(uid)
        change = podgroup_change(data, at)
        after = fold(before, change)
        ended = ended_run(before, after, change, at)
        if ended is not None:
            self._simulation.run_ended(ended)
        if after.start_time is not None and after.start_time != before.start_time:
            self._simulation.started(uid, after.start_time)
        if after.deleted and after.status != "running":
            # Nothing a deleted podgroup does later is a run: its memory is given back.
            self._states.pop(uid, None)
        else:
            self._states[uid] = after

    def _decision(self, event: Event) -> None:
        data = decision_data(event)
        state = self._states.get(data.uid) or PodGroupState(data.uid)
        beneficiaries: tuple[Beneficiary, ...] = ()
        if isinstance(data, RequeueCommittedData):
            # As the store does (store.decisions): the committed run now waits for its release.
            state = state._replace(
                awaiting_release=state.status == "running" and state.start_time == data.run_start
            )
            self._states[data.uid] = state
            beneficiaries = tuple(
                Beneficiary(uid, _queue_of(self._states.get(uid))) for uid in data.beneficiaries
            )
        spec = state.spec
        self._simulation.decision(
            RecordedDecision(
                uid=data.uid,
                outcome=outcome_of(event),
                reason=getattr(data, "reason", None),
                decided_at=data.decided_at,
                run_start=data.run_start,
                queue=None if spec is None else spec.queue,
                node_pool=state.node_pool,
                gpus=held_gpus(state) if state.status == "running" else None,
                beneficiaries=beneficiaries,
                annotations=state.annotations,
            )
        )

    def open_runs(self) -> list[tuple[str | None, str, datetime, Decimal | None]]:
        """The runs still going at the window's end: queue, node pool, start, GPUs."""
        found = []
        for state in self._states.values():
            if state.status == "running" and state.start_time is not None:
                spec = state.spec
                queue = None if spec is None else spec.queue
                found.append((queue, state.node_pool, state.start_time, held_gpus(state)))
        return found


def _queue_of(state: PodGroupState | None) -> str | None:
    if state is None or state.spec is None:
        return None
    return state.spec.queue
