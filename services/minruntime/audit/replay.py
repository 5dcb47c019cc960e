"""Replay: rebuild every projection from the event log, with the live projection code.

The log is read in its order (``event_log.seq``: the order the service applied it) and fed
to the same code the service runs, on a connection pointed at a shadow schema:

- input events of the log go through the processor's decoder and its projections
  (``ingest.projection.Projections``: the queue tree, the podgroup fold, configs, nodes) in
  long runs: each page of the log is loaded and applied in memory, each event decoded just
  before it is applied; a run is written and ended when it holds ``RUN_PODGROUPS`` podgroups
  and before a decision (the worker's code writes the rows it decides about), and written and
  continued at a boundary the caller asked for (the caller only reads there). What the
  processor does around them for Kafka is not repeated: every logged event was
  applied exactly once (the log is unique by ``(source, id)``, in the order of application),
  so there are no offsets to store, no duplicates to look for, and the shadow gets no copy
  of the log, which stays the live one;
- records read back from Kafka (``input_topics``: a rebuild after the database was lost) go
  through ``apply_batch``, exactly as the processor applies them: they can hold duplicates
  and invalid records, which are skipped and dead-lettered in the shadow as live;
- the requeue worker's decisions go through ``apply_decisions``, as they were made.

Replay is deterministic: the same log gives the same projection content
(``minruntime.audit.verify`` checksums it), whatever the page and run sizes.

``until`` stops at the state the service had at that instant: the events it had applied by
then (``applied_at <= until``), which is what its answers at that time were made from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from minruntime.core import MinRuntimeError
from minruntime.events import (
    DATA_MODELS,
    ROLE_TYPES,
    Event,
    EventRejected,
    EventType,
    Header,
    decode_event,
)
from minruntime.ingest import (
    BatchOutcome,
    InboundRecord,
    apply_batch,
    apply_decisions,
    log_decisions,
)
from minruntime.ingest.memory import collected_rarely
from minruntime.ingest.offsets import laps, rewind_to
from minruntime.ingest.projection import PODGROUP_TYPES, QUEUE_TYPES, Projections
from minruntime.store import event_log
from minruntime.store.event_log import About, OfPart
from minruntime.store.parts import Part
from minruntime.store.schema import LIVE, StateTables

REPLAY_GROUP: Final = "minruntime-replay"
DECISION_TYPES: Final = ROLE_TYPES["requeue_decisions"]
_PODGROUP_TYPE_NAMES: Final = frozenset(
    event_type for event_type, model in DATA_MODELS.items() if issubclass(model, PODGROUP_TYPES)
)
_QUEUE_TYPE_NAMES: Final = frozenset(
    event_type for event_type, model in DATA_MODELS.items() if issubclass(model, QUEUE_TYPES)
)
# The entries about one podgroup (their subject): split by podgroup in a parallel replay.
SCOPED_TYPES: Final = tuple(sorted(_PODGROUP_TYPE_NAMES | DECISION_TYPES))
# The decisions that promise capacity to other podgroups (requeue_promises rows).
PROMISING_TYPE: Final = EventType.REQUEUE_COMMITTED.value
# The entries every part of a parallel replay applies: the queue tree's and the node pools'
# configurations (the windows of the runs a part's podgroups end are resolved in them).
SHARED_TYPES: Final = tuple(sorted(ROLE_TYPES["queues"]))
_ROLE_OF_TYPE: Final = {
    event_type: role
    for role, types in ROLE_TYPES.items()
    if role != "requeue_decisions"
    for event_type in types
}
# Rows per read of the event log; log entries applied in memory between two loads of the
# podgroups they name.
PAGE_SIZE: Final = 5_000
# Podgroups a run of log entries holds in memory before it is written (~3.7 KB each with their
# run rows, measured on the benchmark trace: docs/audit.md): each is loaded and written once
# per run, so the longer the run the fewer loads and writes.
RUN_PODGROUPS: Final = 100_000
# Kafka records per ``apply_batch`` call (a rebuild from Kafka): ten times the processor's.
BATCH_SIZE: Final = 20_000
# Rejections listed one by one in a report (the rest are counted).
SHOWN_REJECTIONS: Final = 20


class LogEntry(NamedTuple):
    """One logged event: an input record (with its Kafka position) or a decision.

    A named tuple, not a dataclass: a replay makes one per entry of the log.
    """

    seq: int
    topic: str
    partition: int | None
    offset: int | None
    type: str
    subject: str | None
    value: bytes
    # When it happened in the cluster, and when the service applied it (None from Kafka).
    event_time: datetime | None = None
    applied_at: datetime | None = None
    # Another part's entry, read only because a snapshot's position is there (``of_part``):
    # a boundary, not applied.
    foreign: bool = False
    # Applied but not counted: another part's decision, for the promises it makes to this
    # part; a queue or configuration entry that the first part counts (every part applies it).
    borrowed: bool = False
    # The Kafka record's headers (read from Kafka only): a binary-mode CloudEvent's attributes.
    headers: Sequence[Header] = ()

    @property
    def is_decision(self) -> bool:
        return self.type in DECISION_TYPES


@dataclass
class ReplayReport:
    events: int = 0
    decisions: int = 0
    # Logged events of other types (nothing to project) and inputs the replay had to reject.
    ignored: int = 0
    rejected: list[str] = field(default_factory=list)
    # The log position (seq) of each line of ``rejected``: a replay in parts lists the
    # first ones of all its parts in log order.
    rejected_at: list[int] = field(default_factory=list)
    # How many were rejected in all (``rejected`` lists the first SHOWN_REJECTIONS).
    rejected_count: int = 0
    # Kafka records that are not valid events (dead-lettered in the shadow, as live).
    dead_lettered: int = 0
    batches: int = 0
    seconds: float = 0.0
    last_seq: int | None = None

    @property
    def applied(self) -> int:
        return self.events + self.decisions

    @property
    def rate(self) -> float:
        return self.applied / self.seconds if self.seconds > 0 else 0.0


Progress = Callable[[int], None]
"""Called after each applied batch with the number of log entries done so far."""


def read_log(
    conn: Connection,
    until: datetime | None = None,
    *,
    about: About | None = None,
    after: int = 0,
    full: bool = False,
    part: Part | None = None,
    positions: Collection[int] = (),
    first: Sequence[event_log.LoggedRow] | None = None,
) -> Iterator[LogEntry]:
    """The live event log in order (pages by ``seq``, in the caller's transaction; each page
    read while the caller applies the one before).

    ``about`` keeps only the entries about one subject (and the shared ones); ``after``
    starts after that ``seq`` (the position of a snapshot). Without ``full`` the entries'
    offset and times are None: what a replay of the log needs, read faster. ``part`` keeps
    the entries of that part of the state (``store.parts``), another part's committed
    requeues that promise capacity to its podgroups (marked ``borrowed``) and the entries at
    ``positions`` (marked ``foreign`` when they are another part's). ``first``: the first
    page, already read by the caller (``read_first_page``), not read again.
    """
    of_part = None
    foreign: Collection[int] = ()
    borrowed: Collection[int] = ()
    # Entries every part applies and only the first counts.
    shared_here: Collection[str] = ()
    if part is not None:
        of_part = OfPart(part, SCOPED_TYPES, tuple(positions), PROMISING_TYPE, SHARED_TYPES)
        marked = event_log.marks(conn, LIVE, of_part)
        foreign, borrowed = marked.foreign, marked.borrowed
        shared_here = () if part.first else SHARED_TYPES

    def page(after: int) -> list[event_log.LoggedRow]:
        return event_log.read_page(
            conn,
            LIVE,
            after=after,
            until=until,
            limit=PAGE_SIZE,
            about=about,
            full=full,
            of_part=of_part,
        )

    # The next page is read while the caller applies this one: the server turns its payloads
    # into text (most of a read) while this process folds. The caller's connection serves
    # both (psycopg serialises them; the page reads only the live log, which nothing in the
    # transaction writes); the reader is waited for before the generator ends, however.
    with ThreadPoolExecutor(1, thread_name_prefix="minruntime-log-reader") as reader:
        rows = list(first) if first is not None else page(after)
        while True:
            ahead = reader.submit(page, rows[-1][0]) if len(rows) == PAGE_SIZE else None
            for seq, topic, partition, offset, type_, subject, event_time, applied_at, text in rows:
                yield LogEntry(
                    seq=seq,
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    type=type_,
                    subject=subject,
                    value=text.encode(),
                    event_time=event_time,
                    applied_at=applied_at,
                    foreign=seq in foreign,
                    borrowed=seq in borrowed or type_ in shared_here,
                )
            if ahead is None:
                return
            rows = ahead.result()


def read_first_page(
    conn: Connection, until: datetime | None, after: int
) -> list[event_log.LoggedRow]:
    """The first page ``read_log(conn, until, after=after)`` reads (for ``first``): fewer
    than ``PAGE_SIZE`` entries are the whole of that log."""
    return event_log.read_page(conn, LIVE, after=after, until=until, limit=PAGE_SIZE)


def replay(
    conn: Connection,
    entries: Iterable[LogEntry],
    *,
    into: StateTables,
    progress: Progress | None = None,
    boundary: Callable[[LogEntry], bool] | None = None,
    after_boundary: Callable[[LogEntry], None] | None = None,
    input_topics: Mapping[str, str] | None = None,
    new_shadow: bool = False,
) -> ReplayReport:
    """Apply ``entries`` in order to the state tables ``into`` (a shadow's), on ``conn``.

    ``boundary(entry)`` true makes the replay apply everything up to and including that
    entry before going on, then call ``after_boundary(entry)``: a caller can look at the
    state right after chosen events (``minruntime audit`` does, for one podgroup).
    ``input_topics`` (topic -> role) routes records of those topics to the processor's
    code whatever they contain (a Kafka replay: invalid records are dead-lettered); without
    it an entry's role follows from its (valid, logged) type. ``new_shadow``: ``into`` was
    just made and holds no podgroup, so the first run of log entries looks none up (the runs
    after a write do: the shadow has rows then).
    """
    roles = dict(input_topics or {})
    if into.is_live:
        raise RuntimeError("replay writes a shadow schema, never the live state")
    report = ReplayReport()
    started = time.perf_counter()
    inputs: _LoggedEvents | _KafkaRecords = (
        _KafkaRecords(conn, into, report, roles)
        if roles
        else _LoggedEvents(conn, into, report, unstored=new_shadow)
    )
    pending: list[LogEntry] = []
    seen = 0

    def apply_pending(*, write: bool, keep: bool = False) -> None:
        if pending:
            inputs.add(pending)
            pending.clear()
            if progress is not None:
                progress(seen)
        if write:
            inputs.write(keep=keep)

    with collected_rarely():  # a run holds many objects (minruntime.ingest.memory)
        for entry in entries:
            seen += 1
            report.last_seq = entry.seq
            if entry.foreign:
                pass
            elif entry.is_decision:
                apply_pending(write=True)
                _apply_decision(conn, into, entry, report, counted=not entry.borrowed)
            elif entry.partition is not None and (
                entry.type in _ROLE_OF_TYPE or entry.topic in roles
            ):
                pending.append(entry)
                if len(pending) >= inputs.page:
                    apply_pending(write=False)
            else:
                report.ignored += 1
            if boundary is not None and boundary(entry):
                # The caller only reads the state here: the run goes on from what it wrote.
                apply_pending(write=True, keep=True)
                if after_boundary is not None:
                    after_boundary(entry)
        apply_pending(write=True)
    if progress is not None:
        progress(seen)
    report.seconds = time.perf_counter() - started
    return report


class _LoggedEvents:
    """Input events of the event log, applied in long runs of in-memory projections."""

    page = PAGE_SIZE

    def __init__(
        self,
        conn: Connection,
        tables: StateTables,
        report: ReplayReport,
        *,
        unstored: bool = False,
    ) -> None:
        self._conn = conn
        self._tables = tables
        self._report = report
        # What borrowed entries would count (nothing reads it).
        self._uncounted = ReplayReport()
        self._run: Projections | None = None
        # The shadow holds no podgroup yet: the first run looks none up. Only until a run is
        # written and ended (or a decision is applied to the stored rows): a run written and
        # continued (a boundary) holds everything it wrote.
        self._unstored = unstored

    def add(self, entries: Sequence[LogEntry]) -> None:
        run = self._run
        if run is None:
            run = self._run = Projections(self._conn, self._tables, unstored=self._unstored)
        # The page's podgroups are loaded by the subjects the log names (an event's subject is
        # its podgroup's uid), so each entry is decoded just before it is applied and dropped
        # after: a page of decoded events kept alive made decoding half as fast again.
        run.include_named(
            (
                entry.subject
                for entry in entries
                if entry.type in _PODGROUP_TYPE_NAMES and entry.subject is not None
            ),
            queue_tree=any(entry.type in _QUEUE_TYPE_NAMES for entry in entries),
        )
        for entry in entries:
            # A borrowed entry is the first part's to count (and to report when rejected).
            report = self._uncounted if entry.borrowed else self._report
            try:
                event = decode_event(entry.value)
            except EventRejected as error:
                _reject(
                    report,
                    entry.seq,
                    f"event at seq {entry.seq} ({entry.type}) is invalid: {error}",
                )
                continue
            try:
                run.apply(event)
            except MinRuntimeError as error:
                _reject(
                    report,
                    entry.seq,
                    f"event at seq {entry.seq} ({entry.type}) was not applied on replay: "
                    f"{error.kind}: {error}",
                )
                continue
            report.events += 1
        self._report.batches += 1
        if run.podgroup_count >= RUN_PODGROUPS:
            self.write()

    def write(self, *, keep: bool = False) -> None:
        """Write the run to the shadow (``keep``: and go on from it, the shadow's rows written
        by nothing else meanwhile)."""
        if self._run is not None:
            self._run.flush(keep=keep)
            if not keep:
                self._run = None
        if not keep:
            self._unstored = False


@dataclass
class _KafkaRecords:
    """Records read back from Kafka, applied as the processor applies a batch."""

    conn: Connection
    tables: StateTables
    report: ReplayReport
    roles: Mapping[str, str]
    page = BATCH_SIZE

    def add(self, entries: Sequence[LogEntry]) -> None:
        records = [
            InboundRecord(
                topic=entry.topic,
                partition=entry.partition or 0,
                offset=entry.offset if entry.offset is not None else entry.seq,
                key=entry.subject.encode() if entry.subject is not None else None,
                value=entry.value,
                headers=entry.headers,
            )
            for entry in entries
        ]
        roles = {
            entry.topic: self.roles.get(entry.topic) or _ROLE_OF_TYPE[entry.type]
            for entry in entries
        }
        outcome = BatchOutcome()
        for lap in laps(records):
            # A later life of a topic (recreated, another cluster) numbers its records from 0
            # again.
            rewind_to(self.conn, self.tables, REPLAY_GROUP, lap)
            outcome.add(
                apply_batch(
                    self.conn,
                    lap,
                    consumer_group=REPLAY_GROUP,
                    topic_roles=roles,
                    tables=self.tables,
                )
            )
        report = self.report
        report.batches += 1
        report.events += outcome.applied
        # Records the processor rejected are rejected again, as dead letters in the shadow:
        # they are not a difference.
        report.dead_lettered += outcome.dead_lettered
        if outcome.records != outcome.applied + outcome.dead_lettered:
            _reject(
                report,
                entries[-1].seq,
                f"{outcome.records - outcome.applied} of the {len(records)} records up to "
                f"seq {entries[-1].seq} were not applied on replay "
                f"(dead-lettered {outcome.dead_lettered}: {dict(outcome.dead_letter_kinds)}; "
                f"duplicates {outcome.duplicate_ids}; old offsets {outcome.skipped_offsets})",
            )

    def write(self, *, keep: bool = False) -> None:
        return None  # every batch was written as it was applied


def _reject(report: ReplayReport, seq: int, line: str) -> None:
    report.rejected_count += 1
    if len(report.rejected) < SHOWN_REJECTIONS:
        report.rejected.append(line)
        report.rejected_at.append(seq)


def _apply_decision(
    conn: Connection,
    tables: StateTables,
    entry: LogEntry,
    report: ReplayReport,
    *,
    counted: bool = True,
) -> None:
    try:
        event: Event = decode_event(entry.value)
    except EventRejected as error:
        _reject(
            report, entry.seq, f"decision at seq {entry.seq} ({entry.topic}) is invalid: {error}"
        )
        return
    # A decision seen twice (a relay re-published it after a crash) is applied once.
    if apply_decisions(conn, [event], tables=tables):
        log_decisions(conn, [event], topic=entry.topic, tables=tables)
        report.decisions += counted


def describe(report: ReplayReport) -> dict[str, Any]:
    """The report as plain data (for --json and logs)."""
    return {
        "events": report.events,
        "decisions": report.decisions,
        "ignored": report.ignored,
        "rejected": report.rejected,
        "rejected_count": report.rejected_count,
        "dead_lettered": report.dead_lettered,
        "batches": report.batches,
        "seconds": round(report.seconds, 3),
        "events_per_second": round(report.rate, 1),
        "last_seq": report.last_seq,
    }
