"""Projection snapshots: taking one of the live state, and checking them against the log.

``take`` copies the live projections at one event-log position (``minruntime snapshot``, run
by cron: docs/audit.md#snapshots). It takes the snapshot lock exclusively — every writer of
the live log holds it shared from its append to its commit — only for the moment it needs to
take a database snapshot, exports that snapshot to a second connection and lets go: the
processors wait milliseconds, not for the copy. The copy then sees every log entry up to the
largest ``seq`` it sees, and their whole effect, and nothing after.

``SnapshotChecker`` checks each stored snapshot while ``replay --verify`` replays the log: when
the replay reaches a snapshot's position, the snapshot is restored beside the replay and
compared table by table with the same checksums as the live state — the first one whole, each
later one for what can have changed since the one before, so checking every snapshot of a long
log costs about what the snapshots stored, not one whole state per snapshot.
``replay_checked`` is ``replay --verify`` itself (the command's one process, or each part of
a replay in parts): the replay with its snapshot checks, then the comparison with live.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import ExitStack
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Final

from sqlalchemy import Connection

from minruntime.audit.replay import LogEntry, Progress, ReplayReport, replay
from minruntime.audit.verify import (
    SHOWN_ROWS,
    RowDifference,
    TableCheck,
    checksums_beside,
    compare,
    compare_schemas,
    md5_of,
)
from minruntime.audit.verify import merge_parts as merge_checks
from minruntime.store import parts
from minruntime.store import snapshots as stored
from minruntime.store.parts import Part
from minruntime.store.read_transactions import (
    begin_repeatable_read,
    database_now,
    export_snapshot,
    import_snapshot,
)
from minruntime.store.schema import LIVE, StateTables
from minruntime.store.shadows import SNAPSHOTTED, Shadow, empty, scratch_state
from minruntime.store.snapshots import LogPosition, Snapshot
from minruntime.store.unit import Units


@dataclass(frozen=True)
class SnapshotPolicy:
    """When a snapshot is due: when an answer starting from the newest one would replay
    more than ``every_bytes`` of log payloads or ``every_events`` entries, or after
    ``every_minutes`` (and >= 1 entry)."""

    every_events: int
    every_minutes: float
    # What a tail costs to replay grows with its payloads' size, not only their number.
    every_bytes: int | None = None


@dataclass(frozen=True)
class Taken:
    """What ``take`` did: the new snapshot (None: none was due), where the log was."""

    snapshot: Snapshot | None
    position: LogPosition
    previous: Snapshot | None
    reason: str


def due(
    previous: Snapshot | None, at: LogPosition, policy: SnapshotPolicy, now: datetime
) -> str | None:
    """Why a snapshot is due at ``at`` (None: it is not)."""
    if at.events == 0:
        return None
    if previous is None:
        return "no snapshot yet"
    new = at.events - previous.events
    if new <= 0:
        return None
    if new >= policy.every_events:
        return f"{new:,} entries since the newest snapshot (every {policy.every_events:,})"
    if policy.every_bytes is not None and at.bytes >= policy.every_bytes:
        return (
            f"{new:,} entries of {at.bytes:,} bytes since the newest snapshot "
            f"(every {policy.every_bytes:,} bytes)"
        )
    if now - previous.taken_at >= timedelta(minutes=policy.every_minutes):
        return f"{policy.every_minutes:g} minutes since the newest snapshot, {new:,} new entries"
    return None


def take(
    units: Units,
    policy: SnapshotPolicy,
    *,
    force: bool = False,
    lock_timeout: str = stored.LOCK_TIMEOUT,
) -> Taken:
    """Snapshot the live projections if one is due (``force``: whenever the log grew).

    Two connections: one takes the log's lock and exports its database snapshot, the other
    imports it and writes (the log's writers go on as soon as the export is made)."""
    engine = units.engine
    with engine.connect() as locker, engine.connect() as conn:
        if not stored.take_lock(locker, lock_timeout):
            return Taken(None, stored.LogPosition(0, 0, None), None, "the log's writers were busy")
        exported = export_snapshot(locker)
        begin_repeatable_read(conn)
        import_snapshot(conn, exported)
        # conn now sees exactly what locker saw; the log's writers may go on.
        locker.rollback()
        previous = stored.newest(conn)
        at = stored.position(conn, previous)
        now = database_now(conn)
        reason = due(previous, at, policy, now)
        if reason is None and force and at.events > (previous.events if previous else 0):
            reason = "forced"
        if reason is None:
            conn.rollback()
            return Taken(None, at, previous, "not due")
        snapshot = stored.write(conn, LIVE, SNAPSHOTTED, at, previous)
        conn.commit()
        return Taken(snapshot, at, previous, reason)


# The tables a snapshot holds whole (the rest are the podgroups', as documents).
WHOLE_TABLES: Final = [table for table in SNAPSHOTTED if table not in stored.PODGROUP_TABLES]
ACTIVE_LIST: Final = "podgroups pending or running (the snapshot's list)"
ACTIVE_BLOCK: Final = "podgroup_state of the podgroups pending or running (the snapshot's block)"


def check(
    conn: Connection,
    snapshot: Snapshot,
    replay: StateTables,
    scratch: StateTables,
    previous: Snapshot | None = None,
    part: Part | None = None,
) -> list[TableCheck]:
    """Compare ``snapshot`` with ``replay`` (the replay at its position), restoring it into the
    (empty) ``scratch`` tables.

    With ``previous`` (a snapshot already checked at an earlier position) only what can have
    changed since is compared: the whole tables, and of the podgroup tables the rows of the
    podgroups the log's entries in between name or that ``snapshot`` stores a document of;
    every other podgroup's rows equal both the previous snapshot's and the replay's there.
    Without it, everything. Either way the list of pending and running podgroups too, and
    their ``podgroup_state`` rows stored as one block (what answers that restore only those
    read). ``part``: only that part of the state (a parallel replay's, ``store.parts``).
    """
    if previous is None:
        stored.restore(conn, snapshot, scratch)
        checks = compare_schemas(conn, scratch, replay, SNAPSHOTTED, part=part)
    else:
        changed = stored.changed_since(conn, previous, snapshot)
        if part is not None:
            changed = parts.only(conn, part, changed)
        stored.restore(conn, snapshot, scratch, changed, active=False)
        checks = compare_schemas(conn, scratch, replay, WHOLE_TABLES, part=part)
        checks += compare_schemas(conn, scratch, replay, stored.PODGROUP_TABLES, changed, part=part)
    return [
        *checks,
        _active_list(conn, snapshot, replay, part),
        *_active_block(conn, snapshot, replay, scratch, part),
    ]


def _active_block(
    conn: Connection,
    snapshot: Snapshot,
    replay: StateTables,
    scratch: StateTables,
    part: Part | None,
) -> list[TableCheck]:
    """The snapshot's block against the replay's rows of its pending and running podgroups
    (none: a snapshot taken before blocks)."""
    empty(conn, scratch, [stored.ACTIVE_BLOCK])
    if stored.active_block(conn, snapshot, scratch) is None:
        return []
    uids = sorted({*stored.active_uids(conn, scratch), *stored.active_uids(conn, replay)})
    checks = compare_schemas(conn, scratch, replay, [stored.ACTIVE_BLOCK], uids, part=part)
    return [replace(found, table=ACTIVE_BLOCK) for found in checks]


def _active_list(
    conn: Connection, snapshot: Snapshot, replay: StateTables, part: Part | None
) -> TableCheck:
    listed, active = stored.active_list(conn, snapshot), stored.active_uids(conn, replay)
    if part is not None:
        listed, active = parts.only(conn, part, listed), parts.only(conn, part, active)
    only = sorted(set(listed) ^ set(active))
    differences = [
        RowDifference(uid, "listed", None) if uid in listed else RowDifference(uid, None, "listed")
        for uid in only[:SHOWN_ROWS]
    ]
    return TableCheck(
        ACTIVE_LIST,
        len(listed),
        len(active),
        md5_of(listed),
        md5_of(active),
        differences,
        len(only),
    )


@dataclass(frozen=True)
class SnapshotCheck:
    """One stored snapshot, checked against the replay at its position (or why not)."""

    snapshot: Snapshot
    tables: list[TableCheck] = field(default_factory=list)
    # Why it could not be compared (None: it was).
    problem: str | None = None

    @property
    def equal(self) -> bool:
        return self.problem is None and all(check.equal for check in self.tables)


class SnapshotChecker:
    """The replay's hooks (``boundary``/``after_boundary``): check each snapshot at its seq.

    The first snapshot is checked whole, each later one for what changed since the one before
    (``check``); ``finish`` drops the scratch tables the snapshots were restored into.
    """

    def __init__(
        self,
        conn: Connection,
        replay: StateTables,
        snapshots: list[Snapshot],
        part: Part | None = None,
    ) -> None:
        self._conn = conn
        self._replay = replay
        self._part = part
        self._pending = {snapshot.log_seq: snapshot for snapshot in snapshots}
        self._previous: Snapshot | None = None
        self._scratch = ExitStack()
        self._tables: StateTables | None = None
        self.results: list[SnapshotCheck] = []

    def wants(self, entry: LogEntry) -> bool:
        return entry.seq in self._pending

    def after(self, entry: LogEntry) -> None:
        snapshot = self._pending.pop(entry.seq)
        if self._tables is None:
            self._tables = self._scratch.enter_context(scratch_state(self._conn, SNAPSHOTTED))
        else:
            empty(self._conn, self._tables, SNAPSHOTTED)
        checks = check(self._conn, snapshot, self._replay, self._tables, self._previous, self._part)
        self.results.append(SnapshotCheck(snapshot, checks))
        self._previous = snapshot

    def finish(self) -> list[SnapshotCheck]:
        """Every snapshot's check, oldest first; one the replay never reached is a problem."""
        self._scratch.close()
        self._tables = None
        for snapshot in self._pending.values():
            problem = f"no event-log entry has its position (seq {snapshot.log_seq})"
            self.results.append(SnapshotCheck(snapshot, problem=problem))
        self._pending.clear()
        return sorted(self.results, key=lambda result: result.snapshot.log_seq)


@dataclass
class CheckedReplay:
    """What ``replay --verify`` found: the replay's report, the comparison of its end with
    the live state, the snapshots checked at their positions."""

    report: ReplayReport
    checks: list[TableCheck] = field(default_factory=list)
    snapshots: list[SnapshotCheck] = field(default_factory=list)


def replay_checked(
    conn: Connection,
    shadow: Shadow,
    entries: Iterable[LogEntry],
    snapshots: list[Snapshot],
    *,
    verify: bool,
    part: Part | None = None,
    progress: Progress | None = None,
    input_topics: Mapping[str, str] | None = None,
    live_beside: bool = True,
) -> CheckedReplay:
    """Replay ``entries`` into ``shadow`` (just made: empty), checking each of ``snapshots``
    when the replay reaches its position; with ``verify``, compare the end with the live
    state (with ``live_beside``, its checksums computed while the log is folded:
    ``verify.checksums_beside``; else after it). ``part``: of that part of the state only (a
    parallel replay's, ``store.parts``)."""
    checker = SnapshotChecker(conn, shadow.tables, snapshots, part)
    with ExitStack() as beside:
        # The live side's checksums are computed while the log is folded (the shadow was
        # just made: its first run of entries looks no podgroup up).
        live_checksums = (
            beside.enter_context(checksums_beside(conn, part)) if verify and live_beside else None
        )
        report = replay(
            conn,
            entries,
            into=shadow.tables,
            progress=progress,
            input_topics=input_topics,
            boundary=checker.wants,
            after_boundary=checker.after,
            new_shadow=True,
        )
        checks = (
            compare(
                conn,
                shadow,
                part=part,
                live_checksums=None if live_checksums is None else live_checksums(),
            )
            if verify
            else []
        )
    return CheckedReplay(report, checks, checker.finish())


def merge_parts(per_part: Iterable[Sequence[SnapshotCheck]]) -> list[SnapshotCheck]:
    """The snapshot checks of the parts of a parallel replay as one per snapshot (oldest
    first): each table's checks merged (``verify.merge_parts``), the first problem kept."""
    by_id: dict[int, list[SnapshotCheck]] = {}
    for results in per_part:
        for result in results:
            by_id.setdefault(result.snapshot.id, []).append(result)
    merged = [
        SnapshotCheck(
            results[0].snapshot,
            merge_checks(result.tables for result in results),
            next((result.problem for result in results if result.problem), None),
        )
        for results in by_id.values()
    ]
    return sorted(merged, key=lambda result: result.snapshot.log_seq)


def snapshots_in(conn: Connection) -> list[Snapshot]:
    """The stored snapshots, oldest first (none when the tables are not there yet)."""
    return stored.snapshots(conn) if stored.available(conn) else []
