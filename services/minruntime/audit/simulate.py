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
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import Connection, Engine

from minruntime import events as ev
from minruntime.audit.parallel import MOST_PARTS, ForkedParts, default_parts
from minruntime.audit.replay import LogEntry, Progress, read_log
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
from minruntime.ingest import outcome_of
from minruntime.ingest.decisions import decision_data
from minruntime.ingest.memory import collected_rarely
from minruntime.ingest.podgroups import PodGroupData, podgroup_change
from minruntime.store.log_span import (
    LogSpan,
    committed_beneficiaries,
    dead_letters_between,
    log_span,
)
from minruntime.store.parts import Part
from minruntime.store.read_transactions import read_only, repeatable_read
from minruntime.store.schema import LIVE

_FOLDED: Final = (
    ev.PodGroupSubmittedData,
    ev.PodGroupAllocatedData,
    ev.PodGroupReleasedData,
    ev.PodGroupAnnotatedData,
    ev.PodGroupDeletedData,
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
            if isinstance(data, ev.QueueUpsertedData):
                queues[data.name] = data.to_queue()
            elif isinstance(data, ev.QueueDeletedData):
                queues[data.name] = None
            elif isinstance(data, ev.ConfigUpdatedData):
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
    jobs: int | None = None,
) -> SimulationReport:
    """Judge the log's window ``[since, until]`` as recorded and under ``change``, in
    ``jobs`` processes (None: ``parallel.default_parts`` of the log's length)."""
    if not change:
        raise SimulationError("nothing to simulate: give -f FILE with a queue or config change")
    if until <= since:
        raise SimulationError(
            f"--until {format_rfc3339(until)} is not after --since {format_rfc3339(since)}"
        )
    if queue is not None and not queue:
        raise SimulationError("--queue '': name a queue")
    if jobs is not None and not 1 <= jobs <= MOST_PARTS:
        raise SimulationError(f"--jobs {jobs}: give 1 to {MOST_PARTS}")
    pinned = policy_change(change)
    try:
        Worlds(pinned)
    except MinRuntimeError as error:
        raise SimulationError(f"the change cannot be applied: {error}") from None
    window = Window(pinned, since, until, queue)
    started = time.perf_counter()
    with repeatable_read(engine) as conn:
        read_only(conn)
        span = log_span(conn, LIVE)
        _check_window(span, since, until)
        parts = jobs or default_parts(span.entries)
        beneficiaries = committed_beneficiaries(conn, LIVE)
        if parts == 1:
            folded = [fold_part(read_log(conn), window, beneficiaries, shared=True)]
        else:
            folded = fold_in_parts(engine, conn, parts, window, beneficiaries)
        dead_letters = dead_letters_between(conn, LIVE, since, until)
    # The rules in force at the end of the log, once ``_decided`` has applied every entry.
    worlds = Worlds(pinned)
    report = SimulationReport(_decided(folded, window, worlds), queue, change, span)
    report.dead_letters = dead_letters
    for part in folded:
        report.entries += part.entries
        report.in_window += part.in_window
        report.skipped += part.skipped
        report.skipped_lines.extend(part.skipped_lines)
        report.result.absorb(part.result)
    del report.skipped_lines[SHOWN_SKIPPED:]
    if queue is not None and queue not in report.result.queues and not _known(worlds, queue):
        raise SimulationError(f"--queue {queue!r}: no queue of that name in the log or the change")
    if report.in_window == 0:
        raise _no_event(span, since, until)
    if span.first is not None and since < span.first:
        report.missing = (since, span.first)
    report.notes = _notes(report, sum(part.conflicts for part in folded))
    report.seconds = time.perf_counter() - started
    return report


@dataclass(frozen=True)
class Window:
    """What every part simulates: the change, the window, the queue asked for."""

    change: PolicyChange
    since: datetime
    until: datetime
    queue: str | None


# A queue or configuration entry of the log, as the worlds take it.
Shared = tuple[str, Any]
# The Shared value of each queue or configuration event's data.
_SHARED: Final[Mapping[type[ev.EventData], Callable[[Any], Shared]]] = {
    ev.QueueUpsertedData: lambda data: ("upsert", data.to_queue()),
    ev.QueueDeletedData: lambda data: ("delete", data.name),
    ev.ConfigUpdatedData: lambda data: ("config", (data.node_pool, data.to_config())),
}


@dataclass
class FoldedPart:
    """What one part of the log gave: its runs' figures, the decisions (judged afterwards, in
    log order, with every part's facts about their beneficiaries) and its counts."""

    result: SimulationResult
    decisions: list[tuple[int, RecordedDecision]] = field(default_factory=list)
    # The queue and configuration entries (seq, entry): the first part's only.
    shared: list[tuple[int, Shared]] = field(default_factory=list)
    # Beneficiaries of a committed requeue that this part folds: each run start and its queue,
    # and the queue they had last.
    starts: dict[str, list[tuple[datetime, str | None]]] = field(default_factory=dict)
    queues: dict[str, str | None] = field(default_factory=dict)
    entries: int = 0
    in_window: int = 0
    skipped: int = 0
    skipped_lines: list[str] = field(default_factory=list)
    conflicts: int = 0


def fold_part(
    entries: Iterable[LogEntry],
    window: Window,
    beneficiaries: frozenset[str],
    *,
    shared: bool,
) -> FoldedPart:
    """Fold ``entries`` (the whole log, or one part's): the runs are judged as they end; the
    decisions are kept for ``_decided`` (``shared``: this part reports the queue and config
    entries, which every part applies)."""
    worlds = Worlds(window.change)
    simulation = Simulation(worlds, window.since, window.until, queue=window.queue)
    folder = _Folder(simulation, window, beneficiaries, shared=shared)
    # The fold holds every podgroup's state (millions of objects on a long log): with the
    # default thresholds the collector re-scans them ever more often as they pile up; the
    # processor's setting, as a replay (minruntime.ingest.memory): no cycle is made here.
    with collected_rarely():
        for entry in entries:
            folder.entry(entry)
    part = folder.part
    part.result = simulation.result(folder.open_runs())
    # Every part folds the queue tree's entries; the one that reports them counts conflicts.
    part.conflicts = worlds.conflicts if shared else 0
    return part


def fold_in_parts(
    engine: Engine,
    conn: Connection,
    parts: int,
    window: Window,
    beneficiaries: frozenset[str],
) -> list[FoldedPart]:
    """Fold the log of ``conn``'s snapshot in ``parts`` forked processes; their results in order.

    A podgroup's log entries depend on no other podgroup's (``store.parts``), so each part
    reads the entries of one part of the podgroups (and the queue and configuration entries,
    which every part applies) and folds them: their runs are judged there. The decisions and
    the facts about the beneficiaries of committed requeues come back here, where ``_decided``
    judges the decisions in log order. Every part imports ``conn``'s exported REPEATABLE READ
    snapshot, READ ONLY: the parts read exactly one log, as one process would, and write
    nothing. As in ``audit.parallel``, each part opens its own connection.
    """
    url = engine.url.render_as_string(hide_password=False)

    def fold(part_conn: Connection, part: Part, progress: Progress) -> FoldedPart:
        read_only(part_conn)
        return fold_part(read_log(part_conn, part=part), window, beneficiaries, shared=part.first)

    with ForkedParts("simulation", url, parts, fold) as split:
        return split.results(conn)


def _decided(folded: Sequence[FoldedPart], window: Window, worlds: Worlds) -> SimulationResult:
    """Every decision judged in log order, with the rules in force at it (``worlds``, fresh,
    follows the log's queue and configuration entries) and the facts the parts found about
    its beneficiaries."""
    starts: dict[str, list[tuple[datetime, str | None]]] = {}
    queues: dict[str, str | None] = {}
    for part in folded:
        starts.update(part.starts)
        queues.update(part.queues)
    merged: list[tuple[int, int, Any]] = [
        (seq, 0, what) for part in folded for seq, what in part.shared
    ]
    merged += [(seq, 1, decision) for part in folded for seq, decision in part.decisions]
    merged.sort(key=lambda item: (item[0], item[1]))
    simulation = Simulation(worlds, window.since, window.until, queue=window.queue)
    for _, kind, what in merged:
        if kind == 0:
            try:
                _apply_shared(worlds, what)
            except MinRuntimeError:
                continue  # the part that folded it counted it as skipped
            continue
        decision: RecordedDecision = what
        facts = tuple(
            _beneficiary(uid, decision.decided_at, starts.get(uid, ()), queues.get(uid))
            for uid, _, _ in decision.beneficiaries
        )
        simulation.decision(decision._replace(beneficiaries=facts))
    return simulation.result()


def _beneficiary(
    uid: str,
    decided_at: datetime,
    starts: Sequence[tuple[datetime, str | None]],
    last_queue: str | None,
) -> Beneficiary:
    for start, queue in starts:
        if start >= decided_at:
            return Beneficiary(uid, queue, start)
    return Beneficiary(uid, last_queue, None)


def _apply_shared(worlds: Worlds, what: Shared) -> None:
    kind, value = what
    if kind == "upsert":
        worlds.queue_upserted(value)
    elif kind == "delete":
        worlds.queue_deleted(value)
    else:
        pool, config = value
        worlds.config_updated(pool, config)


def _check_window(span: LogSpan, since: datetime, until: datetime) -> None:
    if span.entries == 0 or span.first is None or span.last is None:
        raise SimulationError("the event log is empty: there is nothing to simulate")
    if until < span.first or since > span.last:
        raise _no_event(span, since, until)


def _known(worlds: Worlds, queue: str) -> bool:
    return queue in worlds.recorded.tree or queue in worlds.changed.tree


def _no_event(span: LogSpan, since: datetime, until: datetime) -> SimulationError:
    # _check_window let only a log with a first and a last entry through.
    assert span.first is not None
    assert span.last is not None
    return SimulationError(
        f"no event in the window {format_rfc3339(since)} .. {format_rfc3339(until)}: "
        f"the log holds {span.entries} entries from {format_rfc3339(span.first)} "
        f"to {format_rfc3339(span.last)}"
    )


def _notes(report: SimulationReport, conflicts: int) -> list[str]:
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
    if conflicts:
        notes.append(
            f"{conflicts} recorded queue event(s) would close a cycle with a queue of "
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
    """Log entries, one by one, into the podgroup fold, the worlds and the simulation."""

    def __init__(
        self,
        simulation: Simulation,
        window: Window,
        beneficiaries: frozenset[str],
        *,
        shared: bool,
    ) -> None:
        self._simulation = simulation
        self._worlds = simulation.worlds
        self._until = window.until
        self._since = window.since
        self._beneficiaries = beneficiaries
        self._shared = shared
        self._states: dict[str, PodGroupState] = {}
        self.part = FoldedPart(SimulationResult(window.since, window.until))

    def entry(self, entry: LogEntry) -> None:
        part = self.part
        if entry.foreign:
            return
        if not entry.borrowed:
            part.entries += 1
        try:
            event = ev.decode_event(entry.value)
        except ev.EventRejected as error:
            self._skip(entry, f"invalid: {error}")
            return
        at = event.time
        if at > self._until:
            return
        if at >= self._since and not entry.borrowed:
            part.in_window += 1
        data = event.data
        try:
            if entry.is_decision:
                if not entry.borrowed:
                    self._decision(entry.seq, event)
            elif isinstance(data, _FOLDED):
                self._podgroup(data, at)
            elif (shared := _SHARED.get(type(data))) is not None:
                what = shared(data)
                _apply_shared(self._worlds, what)
                if self._shared and not entry.borrowed:
                    part.shared.append((entry.seq, what))
        except MinRuntimeError as error:
            self._skip(entry, f"not applied: {error.kind}: {error}")

    def _skip(self, entry: LogEntry, why: str) -> None:
        if entry.borrowed:
            return  # the part that owns it counts it
        part = self.part
        part.skipped += 1
        if len(part.skipped_lines) < SHOWN_SKIPPED:
            part.skipped_lines.append(f"seq {entry.seq} ({entry.type}): {why}")

    def _podgroup(self, data: PodGroupData, at: datetime) -> None:
        uid = data.uid
        before = self._states.get(uid) or PodGroupState(uid)
        change = podgroup_change(data, at)
        after = fold(before, change)
        ended = ended_run(before, after, change, at)
        if ended is not None:
            self._simulation.run_ended(ended)
        if uid in self._beneficiaries:
            queue = _queue_of(after)
            self.part.queues[uid] = queue
            if after.start_time is not None and after.start_time != before.start_time:
                self.part.starts.setdefault(uid, []).append((after.start_time, queue))
        if after.deleted and after.status != "running":
            # Nothing a deleted podgroup does later is a run: its memory is given back.
            self._states.pop(uid, None)
        else:
            self._states[uid] = after

    def _decision(self, seq: int, event: ev.Event) -> None:
        data = decision_data(event)
        state = self._states.get(data.uid) or PodGroupState(data.uid)
        beneficiaries: tuple[Beneficiary, ...] = ()
        if isinstance(data, ev.RequeueCommittedData):
            # As the store does (store.decisions): the committed run now waits for its release.
            state = state._replace(
                awaiting_release=state.status == "running" and state.start_time == data.run_start
            )
            self._states[data.uid] = state
            beneficiaries = tuple(Beneficiary(uid, None) for uid in data.beneficiaries)
        decision = RecordedDecision(
            uid=data.uid,
            outcome=outcome_of(event),
            reason=getattr(data, "reason", None),
            decided_at=data.decided_at,
            run_start=data.run_start,
            queue=_queue_of(state),
            node_pool=state.node_pool,
            gpus=held_gpus(state) if state.status == "running" else None,
            beneficiaries=beneficiaries,
            annotations=dict(state.annotations),
        )
        self.part.decisions.append((seq, decision))

    def open_runs(self) -> list[tuple[str | None, str, datetime, Decimal | None]]:
        """The runs still going at the window's end: queue, node pool, start, GPUs."""
        found = []
        for state in self._states.values():
            if state.status == "running" and state.start_time is not None:
                found.append(
                    (_queue_of(state), state.node_pool, state.start_time, held_gpus(state))
                )
        return found


def _queue_of(state: PodGroupState | None) -> str | None:
    if state is None or state.spec is None:
        return None
    return state.spec.queue
