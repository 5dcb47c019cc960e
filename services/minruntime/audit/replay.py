"""Replay: rebuild every projection from the event log, with the live projection code.

The log is read in its order (``event_log.seq``: the order the service applied it) and fed
to the same functions the service runs — ``apply_batch`` for input events, exactly as the
processor does, and ``record_decisions`` for the requeue worker's decisions — on a
connection pointed at a shadow schema. Replay is deterministic: the same log gives the same
projection content (``minruntime.audit.verify`` checksums it), whatever the batch size.

``until`` stops at the state the service had at that instant: the events it had applied by
then (``applied_at <= until``), which is what its answers at that time were made from.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import Connection

from minruntime.events import ROLE_TYPES, Event, EventRejected, decode_event
from minruntime.ingest import (
    BatchOutcome,
    InboundRecord,
    apply_batch,
    apply_decisions,
    log_decisions,
)
from minruntime.ingest.offsets import laps, rewind_to
from minruntime.store.state_schema import is_live

REPLAY_GROUP: Final = "minruntime-replay"
DECISION_TYPES: Final = ROLE_TYPES["requeue_decisions"]
_ROLE_OF_TYPE: Final = {
    event_type: role
    for role, types in ROLE_TYPES.items()
    if role != "requeue_decisions"
    for event_type in types
}
# Rows per read of the event log, and input records per apply_batch call: ten times the
# processor's batches (a replay has the records at hand; every batch loads and writes the
# podgroups it touches once, whatever its size). The same log gives the same state whatever
# the size (tests/integration/test_replay.py).
PAGE_SIZE: Final = 5_000
BATCH_SIZE: Final = 20_000

_PAGE = (
    'SELECT seq, topic, partition, "offset", type, subject, event_time, applied_at,'
    " payload::text AS payload FROM minruntime_state.event_log"
    " WHERE seq > :after AND (CAST(:until AS timestamptz) IS NULL OR applied_at <= :until)"
    " AND ({where}) ORDER BY seq LIMIT :limit"
)
_COUNT = sa.text(
    "SELECT count(*) FROM minruntime_state.event_log"
    " WHERE seq > :after AND (CAST(:until AS timestamptz) IS NULL OR applied_at <= :until)"
)


@dataclass(frozen=True)
class LogEntry:
    """One logged event: an input record (with its Kafka position) or a decision."""

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

    @property
    def is_decision(self) -> bool:
        return self.type in DECISION_TYPES


@dataclass
class ReplayReport:
    """What a replay did."""

    events: int = 0
    decisions: int = 0
    # Logged events of other types (nothing to project) and inputs the replay had to reject.
    ignored: int = 0
    rejected: list[str] = field(default_factory=list)
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


def count_log(conn: Connection, until: datetime | None = None, after: int = 0) -> int:
    """How many live event-log entries a replay up to ``until`` (from ``after``) reads."""
    return int(conn.execute(_COUNT, {"until": until, "after": after}).scalar_one())


def read_log(
    conn: Connection,
    until: datetime | None = None,
    *,
    where: str = "TRUE",
    params: Mapping[str, Any] | None = None,
    after: int = 0,
) -> Iterator[LogEntry]:
    """The live event log in order (pages by ``seq``, in the caller's transaction).

    ``where`` (SQL over the event_log columns, with ``params``) keeps only some entries;
    ``after`` starts after that ``seq`` (the position of a snapshot).
    """
    page = sa.text(_PAGE.format(where=where))
    while True:
        rows = conn.execute(
            page, {**(params or {}), "after": after, "until": until, "limit": PAGE_SIZE}
        ).all()
        for row in rows:
            yield LogEntry(
                seq=row.seq,
                topic=row.topic,
                partition=row.partition,
                offset=row.offset,
                type=row.type,
                subject=row.subject,
                # jsonb's own text: the event as logged, without a parse and a dump here.
                value=row.payload.encode(),
                event_time=row.event_time,
                applied_at=row.applied_at,
            )
        if len(rows) < PAGE_SIZE:
            return
        after = rows[-1].seq


def replay(
    conn: Connection,
    entries: Iterable[LogEntry],
    *,
    progress: Progress | None = None,
    boundary: Callable[[LogEntry], bool] | None = None,
    after_boundary: Callable[[LogEntry], None] | None = None,
    input_topics: Mapping[str, str] | None = None,
) -> ReplayReport:
    """Apply ``entries`` in order on ``conn`` (pointed at a shadow's state schema).

    ``boundary(entry)`` true makes the replay apply everything up to and including that
    entry before going on, then call ``after_boundary(entry)``: a caller can look at the
    state right after chosen events (``minruntime audit`` does, for one podgroup).
    ``input_topics`` (topic -> role) routes records of those topics to the processor's
    code whatever they contain (a Kafka replay: invalid records are dead-lettered); without
    it an entry's role follows from its (valid, logged) type.
    """
    roles = dict(input_topics or {})
    if is_live(conn):
        raise RuntimeError("replay writes a shadow schema, never the live state")
    report = ReplayReport()
    started = time.perf_counter()
    pending: list[LogEntry] = []
    seen = 0

    def flush() -> None:
        if pending:
            _apply_inputs(conn, pending, report, roles)
            pending.clear()
            if progress is not None:
                progress(seen)

    for entry in entries:
        seen += 1
        report.last_seq = entry.seq
        if entry.is_decision:
            flush()
            _apply_decision(conn, entry, report)
        elif entry.partition is not None and (entry.type in _ROLE_OF_TYPE or entry.topic in roles):
            pending.append(entry)
            if len(pending) >= BATCH_SIZE:
                flush()
        else:
            report.ignored += 1
        if boundary is not None and boundary(entry):
            flush()
            if after_boundary is not None:
                after_boundary(entry)
    flush()
    if progress is not None:
        progress(seen)
    report.seconds = time.perf_counter() - started
    return report


def _apply_inputs(
    conn: Connection,
    entries: Sequence[LogEntry],
    report: ReplayReport,
    topic_roles: Mapping[str, str],
) -> None:
    records = [
        InboundRecord(
            topic=entry.topic,
            partition=entry.partition or 0,
            offset=entry.offset if entry.offset is not None else entry.seq,
            key=entry.subject.encode() if entry.subject is not None else None,
            value=entry.value,
        )
        for entry in entries
    ]
    # The role of each logged topic follows from the types it carried: a replay does not
    # depend on today's topic configuration.
    roles = {
        entry.topic: topic_roles.get(entry.topic) or _ROLE_OF_TYPE[entry.type] for entry in entries
    }
    outcome = BatchOutcome()
    for lap in laps(records):
        # A later life of a topic (recreated, another cluster) numbers its records from 0 again.
        rewind_to(conn, REPLAY_GROUP, lap)
        outcome.add(apply_batch(conn, lap, consumer_group=REPLAY_GROUP, topic_roles=roles))
    report.batches += 1
    report.events += outcome.applied
    if topic_roles:
        # A Kafka replay meets the records the processor rejected too: rejected again, as
        # dead letters in the shadow, they are not a difference.
        report.dead_lettered += outcome.dead_lettered
        if outcome.records == outcome.applied + outcome.dead_lettered:
            return
    if outcome.records != outcome.applied:
        report.rejected.append(
            f"{outcome.records - outcome.applied} of the {len(records)} events up to "
            f"seq {entries[-1].seq} were not applied on replay "
            f"(dead-lettered {outcome.dead_lettered}: {dict(outcome.dead_letter_kinds)}; "
            f"duplicates {outcome.duplicate_ids}; old offsets {outcome.skipped_offsets})"
        )


def _apply_decision(conn: Connection, entry: LogEntry, report: ReplayReport) -> None:
    try:
        event: Event = decode_event(entry.value)
    except EventRejected as error:
        report.rejected.append(f"decision at seq {entry.seq} ({entry.topic}) is invalid: {error}")
        return
    # A decision seen twice (a relay re-published it after a crash) is applied once.
    if apply_decisions(conn, [event]):
        log_decisions(conn, [event], topic=entry.topic)
        report.decisions += 1


def describe(report: ReplayReport) -> dict[str, Any]:
    """The report as plain data (for --json and logs)."""
    return {
        "events": report.events,
        "decisions": report.decisions,
        "ignored": report.ignored,
        "rejected": report.rejected,
        "dead_lettered": report.dead_lettered,
        "batches": report.batches,
        "seconds": round(report.seconds, 3),
        "events_per_second": round(report.rate, 1),
        "last_seq": report.last_seq,
    }
