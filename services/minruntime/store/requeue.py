"""What the requeue worker reads and locks: one cycle's rows, the last decisions, the runs
whose protection ends, and the leader lock.

Every read of a cycle goes through one ``StateTables``, so a cycle reads one schema. Rows
come straight from psycopg cursors: a cycle at the benchmark's scale reads tens of thousands
of pods, and SQLAlchemy's per-row objects would cost more than the queries.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Final, NamedTuple

import psycopg
import sqlalchemy as sa
from sqlalchemy import Connection

from minruntime.core import NodePoolConfigs
from minruntime.store.engine import driver_cursor
from minruntime.store.node_pools import read_configs
from minruntime.store.schema import StateTables

_NODES: Final = "SELECT name, node_pool, gpu FROM minruntime_state.node_state ORDER BY name"
# Times the planner can use: psycopg cannot even return a year-0 or year-10000 value (or
# PostgreSQL's infinity), so such rows are recognised in SQL, with a day's margin for the
# session's time zone, and excluded by the reader with their reason.
_SANE_TIME: Final = "BETWEEN '0001-01-02 00:00:00+00' AND '9999-12-30 00:00:00+00'"


def _guarded_time(column: str) -> str:
    return (
        f"CASE WHEN {column} {_SANE_TIME} THEN {column} END,"
        f" ({column} IS NOT NULL AND {column} NOT {_SANE_TIME})"
    )


_PODGROUPS: Final = (
    "SELECT uid, queue, node_pool, priority, preemptibility, status,"
    f" {_guarded_time('start_time')}, annotations, awaiting_release,"
    f" {_guarded_time('submitted_at')}, {_guarded_time('preemption_delay_ends_at')},"
    " owner_kind, owner_name, owner_uid"
    " FROM minruntime_state.podgroup_state"
    " WHERE submitted AND status IN ('running', 'pending') ORDER BY uid"
)
_PODS: Final = (
    "SELECT p.uid, p.name, p.subgroup, p.gpu, p.node, p.allocated"
    " FROM minruntime_state.pod_state p JOIN minruntime_state.podgroup_state g USING (uid)"
    " WHERE g.submitted AND g.status IN ('running', 'pending') ORDER BY p.uid, p.name"
)
_SUBGROUPS: Final = (
    "SELECT s.uid, s.name, s.min_available FROM minruntime_state.subgroup_state s"
    " JOIN minruntime_state.podgroup_state g USING (uid)"
    " WHERE g.submitted AND g.status IN ('running', 'pending') ORDER BY s.uid, s.ctid"
)
_PROMISES: Final = (
    "SELECT r.beneficiary, r.node, sum(r.gpu) FROM minruntime_state.requeue_promises r"
    " JOIN minruntime_state.podgroup_state g ON g.uid = r.beneficiary AND g.status = 'pending'"
    " WHERE r.expires_at > %(now)s GROUP BY r.beneficiary, r.node"
)
_NOMINATIONS: Final = (
    "SELECT n.uid, n.nominated_by FROM minruntime_state.nominations n"
    " LEFT JOIN minruntime_state.podgroup_state g USING (uid)"
    " WHERE g.start_time IS NULL OR g.start_time <= n.nominated_at ORDER BY n.uid, n.nominated_by"
)
_LAST_DECISIONS: Final = (
    "SELECT DISTINCT ON (uid) uid, outcome, reason, nominated_by, run_start"
    " FROM minruntime_state.requeue_decision_log WHERE uid = ANY(%(uids)s)"
    " ORDER BY uid, seq DESC"
)
# The requeue cap (SEMANTICS.md §10): per podgroup, its newest committed requeues after a
# window start, at most as many as its cap (more cannot change the verdict). One query, an
# index range scan per podgroup (ix_requeue_decision_log_committed).
_REQUEUE_HISTORY: Final = (
    "SELECT u.uid, d.decided_at FROM unnest(%(uids)s::text[], %(limits)s::int[],"
    " %(since)s::timestamptz[]) AS u(uid, cap, since) CROSS JOIN LATERAL ("
    " SELECT decided_at FROM minruntime_state.requeue_decision_log"
    " WHERE uid = u.uid AND outcome = 'committed' AND decided_at > u.since"
    f" AND decided_at {_SANE_TIME} ORDER BY decided_at DESC LIMIT u.cap) d"
)
_LOCK_PODGROUPS: Final = (
    "SELECT uid FROM minruntime_state.podgroup_state WHERE uid = ANY(:uids) ORDER BY uid FOR UPDATE"
)
# Running podgroups with a window that may end in (after, until]: a start time in
# (after - span, until - span] for one of the minimum runtimes in use. The ranges are merged
# into one multirange once per query, so each running row costs one containment test (a
# per-row subquery over the spans was ten times slower at 50,000 running podgroups). The
# arithmetic is done in UTC (timestamp, not timestamptz): in a session time zone with daylight
# saving, timestamptz minus '1 day' is 23 or 25 hours across the change, while a timedelta day
# is always 24.
_RUNS_ENDING: Final = (
    "SELECT uid, queue, node_pool, start_time FROM minruntime_state.podgroup_state"
    " WHERE status = 'running' AND start_time <@ ("
    "  SELECT range_agg(tstzrange((:after - s.span) AT TIME ZONE 'UTC',"
    "   (:until - s.span) AT TIME ZONE 'UTC', '(]'))"
    "  FROM unnest(CAST(:spans AS interval[])) AS s(span))"
)
# The channel the projection notifies (at commit) when it applied a nomination.
NOMINATIONS_CHANNEL: Final = "minruntime_nominations"
_NOTIFY_NOMINATED: Final = sa.text(f"NOTIFY {NOMINATIONS_CHANNEL}")

_TRY_LOCK: Final = sa.text("SELECT pg_try_advisory_lock(:key)")
# Which of these backends (notification senders) run as this session's role. A sender that
# already disconnected is not found.
_OWN_ROLE_SENDERS: Final = sa.text(
    "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(:pids) AND usename = session_user"
)


class CycleRows(NamedTuple):
    """One cycle's rows as stored, before the core's checks (``requeue.cycle_inputs`` builds)."""

    # (name, node_pool, gpu)
    nodes: list[tuple[Any, ...]]
    # The columns of ``requeue.cycle_inputs._Row``.
    podgroups: list[tuple[Any, ...]]
    # (uid, name, subgroup, gpu, node, allocated)
    pods: list[tuple[Any, ...]]
    # (uid, name, min_available)
    subgroups: list[tuple[Any, ...]]
    # (beneficiary, node, gpu) of the promises in force
    promises: list[tuple[Any, ...]]
    configs: NodePoolConfigs
    # Node pools whose stored row is unusable.
    bad_pools: set[str]
    # (uid, nominator) of the nominations that concern the current run
    nominations: list[tuple[Any, ...]]


def read_cycle_rows(conn: Connection, tables: StateTables, now: datetime) -> CycleRows:
    """Every row one requeue cycle reads at ``now``, from ``tables`` only."""
    with driver_cursor(conn) as cursor:
        nodes = _rows(cursor, tables, _NODES)
        podgroups = _rows(cursor, tables, _PODGROUPS)
        pods = _rows(cursor, tables, _PODS)
        subgroups = _rows(cursor, tables, _SUBGROUPS)
        promises = _rows(cursor, tables, _PROMISES, {"now": now})
        configs, bad_pools = read_configs(cursor, tables)
        nominations = _rows(cursor, tables, _NOMINATIONS)
    return CycleRows(nodes, podgroups, pods, subgroups, promises, configs, bad_pools, nominations)


def _rows(
    cursor: psycopg.Cursor[Any],
    tables: StateTables,
    statement: str,
    params: dict[str, Any] | None = None,
) -> list[tuple[Any, ...]]:
    cursor.execute(tables.sql(statement), params)
    fetched: list[tuple[Any, ...]] = cursor.fetchall()
    return fetched


def last_decision_rows(
    conn: Connection, tables: StateTables, uids: Sequence[str]
) -> list[tuple[Any, ...]]:
    """(uid, outcome, reason, nominated_by, run_start) of the newest decision of each uid."""
    if not uids:
        return []
    with driver_cursor(conn) as cursor:
        return _rows(cursor, tables, _LAST_DECISIONS, {"uids": list(uids)})


def requeue_history_rows(
    conn: Connection, tables: StateTables, asks: Sequence[tuple[str, int, datetime]]
) -> list[tuple[Any, ...]]:
    """(uid, decided_at) of the newest committed requeues of each (uid, cap, after) asked:
    at most ``cap`` of them, decided after ``after``."""
    if not asks:
        return []
    uids, limits, since = zip(*asks, strict=True)
    params = {"uids": list(uids), "limits": list(limits), "since": list(since)}
    with driver_cursor(conn) as cursor:
        return _rows(cursor, tables, _REQUEUE_HISTORY, params)


# Disruption budgets and pacing (core.disruption): every eviction since a window start, with
# the podgroup's queue and top-owner annotation: the service's committed requeues (not those
# the evictor abandoned) and the scheduler's evictions it observed (runs an eviction ended,
# other than its own requeues, which the first part counts).
_DISRUPTIONS: Final = (
    # The stored top owner's uid (the submission's topOwner), else the annotation to read.
    "SELECT p.queue, p.owner_uid, p.annotations ->> 'kai.scheduler/top-owner-metadata',"
    " d.decided_at"
    " FROM minruntime_state.requeue_decision_log d"
    " JOIN minruntime_state.podgroup_state p ON p.uid = d.uid"
    " WHERE d.outcome = 'committed' AND d.decided_at > %(since)s"
    f" AND d.decided_at {_SANE_TIME} AND NOT EXISTS ("
    "  SELECT 1 FROM minruntime_state.requeue_decision_log a"
    "  WHERE a.decision_id = d.decision_id || '.abandoned')"
    " UNION ALL"
    " SELECT r.queue, coalesce(r.owner_uid, p.owner_uid),"
    " p.annotations ->> 'kai.scheduler/top-owner-metadata', r.run_end"
    " FROM minruntime_state.run_log r"
    " LEFT JOIN minruntime_state.podgroup_state p ON p.uid = r.uid"
    " WHERE r.eviction AND r.ended_by <> 'requeued' AND r.run_end > %(since)s"
    f" AND r.run_end {_SANE_TIME}"
)


def disruption_rows(
    conn: Connection, tables: StateTables, since: datetime
) -> list[tuple[Any, ...]]:
    """(queue, stored top-owner uid, top-owner annotation, when) of every eviction after
    ``since``."""
    with driver_cursor(conn) as cursor:
        return _rows(cursor, tables, _DISRUPTIONS, {"since": since})


def lock_podgroups(conn: Connection, tables: StateTables, uids: Sequence[str]) -> None:
    """Lock these podgroups' rows until commit (in uid order: no deadlock between lockers)."""
    conn.execute(tables.text(_LOCK_PODGROUPS), {"uids": list(uids)})


def runs_ending_rows(
    conn: Connection,
    tables: StateTables,
    spans: Sequence[timedelta],
    after: datetime,
    until: datetime,
) -> list[tuple[Any, ...]]:
    """(uid, queue, node_pool, start_time) of running podgroups whose start + a span is in
    (after, until]."""
    bounds = {"after": _utc_naive(after), "until": _utc_naive(until)}
    return [
        tuple(row)
        for row in conn.execute(tables.text(_RUNS_ENDING), {"spans": list(spans), **bounds})
    ]


def _utc_naive(moment: datetime) -> datetime:
    # Sent as a timestamp without time zone, read as UTC by the query.
    return moment.astimezone(UTC).replace(tzinfo=None)


def try_leader_lock(conn: Connection, key: int) -> bool:
    """Take the session advisory lock ``key`` if free (released when the session ends)."""
    return bool(conn.execute(_TRY_LOCK, {"key": key}).scalar_one())


def own_role_senders(conn: Connection, pids: Sequence[int]) -> int:
    """How many of the backends ``pids`` run as this session's role."""
    return int(conn.execute(_OWN_ROLE_SENDERS, {"pids": list(pids)}).scalar_one())


def notify_nominated(conn: Connection) -> None:
    """Wake the requeue worker when ``conn``'s transaction commits: a nomination was applied."""
    conn.execute(_NOTIFY_NOMINATED)


def listen_for_nominations(conn: Connection) -> None:
    """Have ``conn``'s session hear ``notify_nominated`` (from the next commit on)."""
    conn.exec_driver_sql(f"LISTEN {NOMINATIONS_CHANNEL}")
