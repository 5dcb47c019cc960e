"""The whole story of one podgroup, told from the event log (``minruntime audit UID``).

The log is read once, in its order, and replayed with the service's own projection code
into a temporary shadow (``minruntime.audit.replay``), stopping after each of the
podgroup's events to read the state the service had right then: status, pods, run, cooldown,
standing nominations, and the preempt protection window that ``S.preempt_protection(at)``
resolves under the queue tree and configuration then in force. While the podgroup runs, the
replay also stops after each queue or configuration event; one that moved its window
becomes a row of the story too.

Only the podgroup's own events (subject = its uid: submission, allocations, releases,
annotations, deletion, nominations, requeue decisions) and the queue and configuration
events are replayed: nothing else in the log (other podgroups, nodes) can change this
podgroup's state or its window, so leaving it out changes no answer and keeps an audit
fast on a long log. The transaction is rolled back: nothing is left behind.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.audit.replay import LogEntry, read_log, replay
from minruntime.audit.timeline_model import (
    Change,
    Decision,
    Nomination,
    Row,
    Run,
    Story,
    Window,
    WindowSpan,
)
from minruntime.audit.timeline_text import TreeChanges, describe_event
from minruntime.errors import UnknownPodGroupError
from minruntime.events import (
    ROLE_TYPES,
    Event,
    EventData,
    EventRejected,
    PodGroupDeletedData,
    PodGroupReleasedData,
    RequeueAbandonedData,
    RequeueCommittedData,
    RequeueNominatedData,
    RequeueRolledBackData,
    RequeueSkippedData,
    decode_event,
)
from minruntime.ingest.decisions import decision_row
from minruntime.ingest.projection import abandoned_row
from minruntime.store import read_surface
from minruntime.store.event_log import About
from minruntime.store.shadows import Shadow, create_shadow, temporary_name
from minruntime.store.unit import Units

# Events that change the queue tree or a node pool's configuration: they move windows.
TREE_TYPES: Final = ROLE_TYPES["queues"]
# Subjects of these are node names: never about a podgroup, whatever the name.
_NODE_TYPES: Final = ROLE_TYPES["nodes"]


def podgroup_story(units: Units, uid: str) -> Story:
    """The story of podgroup ``uid``; UnknownPodGroupError when the log never mentions it."""
    with units.read() as live:
        conn = live.connection
        entries, times = _read_entries(conn, uid)
        if not any(_is_own(entry, uid) for entry in entries):
            raise UnknownPodGroupError(f"no podgroup with uid {uid!r} in the event log")
        shadow = create_shadow(conn, temporary_name("minruntime_audit"))
        teller = _Teller(conn, shadow, uid, times)
        report = replay(
            conn, entries, into=shadow.tables, boundary=teller.wants, after_boundary=teller.after
        )
        return teller.story(report.events + report.decisions)


def _read_entries(
    conn: Connection, uid: str
) -> tuple[list[LogEntry], dict[int, tuple[datetime, datetime]]]:
    # This podgroup's own events, and every change of the tree or a configuration.
    about = About(
        uid, other=tuple(sorted(TREE_TYPES | _NODE_TYPES)), shared=tuple(sorted(TREE_TYPES))
    )
    entries = list(read_log(conn, about=about, full=True))
    times = {
        entry.seq: (entry.event_time, entry.applied_at)
        for entry in entries
        if entry.event_time is not None and entry.applied_at is not None
    }
    return entries, times


def _is_own(entry: LogEntry, uid: str) -> bool:
    return entry.subject == uid and entry.type not in TREE_TYPES


@dataclass(frozen=True, slots=True)
class _State:
    """The podgroup as the shadow's read surface shows it after an event."""

    status: str
    running_pods: int
    start_time: datetime | None
    queue: str | None
    node_pool: str
    priority: int | None
    name: str | None
    namespace: str | None
    expected_runtime: timedelta | None
    requeue_not_before: datetime | None
    awaiting_release: bool
    nominations: tuple[str, ...]
    window: Window | None

    @property
    def running(self) -> bool:
        return self.status == "running"


# The fields of _State a row reports when they change, in this order.
_TRACKED: Final = (
    "status",
    "running_pods",
    "start_time",
    "queue",
    "expected_runtime",
    "requeue_not_before",
    "awaiting_release",
    "nominations",
)
_FIELD_NAMES: Final = {"start_time": "run_start"}
# The fields of _State a story tells of the podgroup.
_STORY_FIELDS: Final = ("name", "namespace", "queue", "node_pool", "priority", "status")
# A podgroup the service does not know yet: no pods, no nominations, nothing awaited.
_UNKNOWN: Final[dict[str, Any]] = {"running_pods": 0, "awaiting_release": False, "nominations": ()}


@dataclass
class _OpenRun:
    number: int
    start: datetime
    windows: list[WindowSpan] = field(default_factory=list)

    def closed(
        self, end: datetime | None, ended_by: str | None, judged: tuple[Any, ...] | None = None
    ) -> Run:
        protection, eviction, cut_short, *attributed = judged or (None, False, None)
        return Run(
            self.number,
            self.start,
            end,
            ended_by,
            tuple(self.windows),
            protection,
            bool(eviction),
            cut_short,
            *attributed,
        )

    def follow(self, since: datetime, window: Window | None) -> None:
        """Record the window in force from ``since`` when it differs from the last one."""
        if window is None:
            return
        last = self.windows[-1] if self.windows else None
        if last is None or (last.min_runtime, last.resolved_from) != (
            window.min_runtime,
            window.resolved_from,
        ):
            self.windows.append(
                WindowSpan(since, window.min_runtime, window.resolved_from, window.protected_until)
            )


class _Teller:
    """Reads the shadow after the replay's boundaries and builds the rows and runs."""

    def __init__(
        self,
        conn: Connection,
        shadow: Shadow,
        uid: str,
        times: dict[int, tuple[datetime, datetime]],
    ) -> None:
        self.conn = conn
        self.uid = uid
        self.times = times
        self.state: _State | None = None
        self.rows: list[Row] = []
        self.runs: list[Run] = []
        self.open_run: _OpenRun | None = None
        self.tree = TreeChanges()
        # What the tree event being applied changed (read before it is applied).
        self.tree_change = ""
        self.shadow = shadow

    # -- the replay's hooks -----------------------------------------------------------------
    def wants(self, entry: LogEntry) -> bool:
        """Stop after the podgroup's own events, and after tree events while it runs."""
        if _is_own(entry, self.uid):
            return True
        if entry.type in TREE_TYPES:
            event = _decode(entry)
            self.tree_change = self.tree.note(event) if event else entry.type
            return self.state is not None and self.state.running
        return False

    def after(self, entry: LogEntry) -> None:
        """The boundary's entry is applied: read the state and write down what changed."""
        time, applied_at = self.times[entry.seq]
        before, after = self.state, self._read(time)
        self.state = after
        if not _is_own(entry, self.uid):
            if _window_of(before) == _window_of(after):
                return
            if self.open_run is not None:
                self.open_run.follow(time, after.window if after else None)
            self._add_row(
                entry, time, applied_at, "window", f"window changed: {self.tree_change}", before
            )
            return
        event = _decode(entry)
        run = self._follow_run(time, before, after, event)
        summary = describe_event(event, entry.type)
        self._add_row(entry, time, applied_at, _kind(event), summary, before, run=run, event=event)

    # -- building -----------------------------------------------------------------------------
    def story(self, replayed: int) -> Story:
        runs = list(self.runs)
        if self.open_run is not None:
            runs.append(self.open_run.closed(None, None))
        # What the last state read says of the podgroup (None: the service never knew it).
        known = {name: getattr(self.state, name, None) for name in _STORY_FIELDS}
        return Story(self.uid, **known, rows=tuple(self.rows), runs=tuple(runs), replayed=replayed)

    def _judged(self, event: Event | None) -> tuple[Any, ...] | None:
        if event is None:
            return None
        return read_surface.judged_run(self.conn, self.shadow, self.uid, event.source, event.id)

    def _read(self, at: datetime) -> _State | None:
        row = read_surface.timeline_state(self.conn, self.shadow, self.uid, at)
        if row is None:
            return None
        window = (
            Window(row.min_runtime, row.resolved_from, row.protected_until, bool(row.is_protected))
            if row.protected_until is not None
            else None
        )
        return _State(
            status=row.status,
            running_pods=int(row.running_pods),
            start_time=row.start_time,
            queue=row.queue,
            node_pool=row.node_pool,
            priority=row.priority,
            name=row.name,
            namespace=row.namespace,
            expected_runtime=row.expected_runtime,
            requeue_not_before=row.requeue_not_before,
            awaiting_release=bool(row.awaiting_release),
            nominations=tuple(row.nominations),
            window=window,
        )

    def _follow_run(
        self, time: datetime, before: _State | None, after: _State | None, event: Event | None
    ) -> int | None:
        """Open, close or carry on the run; the number of the run the event belongs to."""
        was_running = before is not None and before.running
        running = after is not None and after.running
        current = self.open_run
        if current is not None and (
            not running or (after is not None and after.start_time != current.start)
        ):
            self.runs.append(current.closed(time, _ended_by(before, event), self._judged(event)))
            self.open_run = None
        if running and after is not None and after.start_time is not None:
            if self.open_run is None:
                self.open_run = _OpenRun(len(self.runs) + 1, after.start_time)
            self.open_run.follow(time, after.window)
            return self.open_run.number
        return current.number if current is not None and was_running else None

    def _add_row(
        self,
        entry: LogEntry,
        time: datetime,
        applied_at: datetime,
        kind: str,
        summary: str,
        before: _State | None,
        *,
        run: int | None = None,
        event: Event | None = None,
    ) -> None:
        after = self.state
        if run is None and self.open_run is not None:
            run = self.open_run.number
        self.rows.append(
            Row(
                seq=entry.seq,
                time=time,
                applied_at=applied_at,
                type=entry.type,
                kind=kind,
                summary=summary,
                changes=tuple(_changes(before, after)),
                status=after.status if after else None,
                running_pods=after.running_pods if after else 0,
                run_start=after.start_time if after else None,
                run=run,
                window=after.window if after else None,
                nomination=_nomination(event),
                decision=_decision(event),
            )
        )


def _decode(entry: LogEntry) -> Event | None:
    try:
        return decode_event(entry.value)
    except EventRejected:
        # Logged events were valid when applied; a newer schema may refuse an old one.
        return None


def _kind(event: Event | None) -> str:
    return "other" if event is None else _KINDS.get(event.type, "other")


def _nomination(event: Event | None) -> Nomination | None:
    if event is None or not isinstance(event.data, RequeueNominatedData):
        return None
    return Nomination(event.data.nominated_by, event.data.reason)


def _decision(event: Event | None) -> Decision | None:
    """A decision (or an abandoned one) as its decision log row has it."""
    row_of = None if event is None else _DECISION_ROWS.get(type(event.data))
    if event is None or row_of is None:
        return None
    row = row_of(event, event.data)
    row.update(nominated_by=tuple(row["nominated_by"]), beneficiaries=tuple(row["beneficiaries"]))
    return Decision(**{field.name: row[field.name] for field in fields(Decision)})


# The kind of a podgroup's own event in its story, by type (anything else: "other"); the
# evictor's two types on the podgroups topic are not the podgroup's (later entries win).
_KINDS: Final[Mapping[str, str]] = {
    **dict.fromkeys(ROLE_TYPES["podgroups"], "podgroup"),
    **dict.fromkeys(ROLE_TYPES["requeue_decisions"], "decision"),
    "requeue.abandoned": "decision",
    "requeue.checkpoint": "checkpoint",
    "requeue.nominated": "nomination",
}
# The decision log row of each type that is a decision.
_DECISION_ROWS: Final[Mapping[type[EventData], Callable[[Event, Any], dict[str, Any]]]] = {
    RequeueCommittedData: lambda event, data: decision_row(event),
    RequeueRolledBackData: lambda event, data: decision_row(event),
    RequeueSkippedData: lambda event, data: decision_row(event),
    RequeueAbandonedData: lambda event, data: abandoned_row(event.id, data, event.time),
}


def _ended_by(before: _State | None, event: Event | None) -> str:
    data = event.data if event is not None else None
    if isinstance(data, PodGroupDeletedData):
        return "deleted"
    reason = data.reason if isinstance(data, PodGroupReleasedData) else None
    eviction = data.eviction if isinstance(data, PodGroupReleasedData) else None
    awaiting = before is not None and before.awaiting_release
    if eviction is not None and not awaiting and reason not in ("requeued", "preempted"):
        # The scheduler said who evicted (core.evictions): an eviction whatever the reason.
        return "evicted" + (f" by {eviction.action}" if eviction.action else "")
    if awaiting or reason == "requeued":
        return "requeued"
    return f"released ({reason})" if reason else "released"


def _window_of(state: _State | None) -> tuple[timedelta, str | None, datetime] | None:
    window = state.window if state else None
    if window is None:
        return None
    return window.min_runtime, window.resolved_from, window.protected_until


def _changes(before: _State | None, after: _State | None) -> Iterable[Change]:
    for name in _TRACKED:
        old = getattr(before, name) if before else _UNKNOWN.get(name)
        new = getattr(after, name) if after else _UNKNOWN.get(name)
        if old != new:
            yield Change(_FIELD_NAMES.get(name, name), _plain(old), _plain(new))
    old_window = before.window if before else None
    new_window = after.window if after else None
    # A window that moved during a run (queue, configuration or podgroup change).
    if old_window is not None and new_window is not None:
        for name in ("min_runtime", "resolved_from", "protected_until"):
            if getattr(old_window, name) != getattr(new_window, name):
                yield Change(name, getattr(old_window, name), getattr(new_window, name))


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, Sequence) and not isinstance(value, str) else value
