"""What the operator commands ask a read surface: the live one or a shadow's.

Protection tables (``protection_rows``), explain's facts about one podgroup, the timeline's
rows (``timeline_state``, ``judged_run``) and what-if's current queue rows. Every function
takes the ``Shadow`` it reads (``shadows.LIVE`` for the live schemas), so one answer never
mixes two states. The numbers are the SQL functions' own (``S.preempt_protection(at)``,
``S.reclaim_protection(q, at)``, ``S.min_runtime_for``, ``S.is_protected``); the queue tree
and the node-pool configs come from their one loader each (``store.queues``,
``store.node_pools``), run on the shadow's state tables. The violations report names its read
surface by schema (``violating_runs``): a shadow kept by ``replay --into`` is only a name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, Final

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.exc import ProgrammingError

from minruntime.core import NodePoolConfigs
from minruntime.store.engine import driver_rows
from minruntime.store.failures import sqlstate
from minruntime.store.node_pools import read_node_pool_configs
from minruntime.store.queues import StoredTree, stored_tree
from minruntime.store.shadows import Shadow
from minruntime.store.tables import READ_SCHEMA, pod_state

_PROTECTION_COLUMNS: Final = (
    "r.uid, r.queue, p.node_pool, r.start_time, r.min_runtime, r.resolved_from,"
    " r.protected_until, r.is_protected, r.evictable_pods"
)


# -- protection ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProtectionRow:
    """One running podgroup's protection window, as the SQL read surface resolves it."""

    uid: str
    queue: str | None
    node_pool: str
    start_time: datetime | None
    min_runtime: timedelta
    # The queue whose value applied; None: the node pool's default.
    resolved_from: str | None
    protected_until: datetime | None
    is_protected: bool
    evictable_pods: int


def protection_rows(
    conn: Connection,
    shadow: Shadow,
    at: datetime,
    reclaimer_queue: str | None = None,
    uid: str | None = None,
) -> tuple[ProtectionRow, ...]:
    """The protection function's rows at ``at`` (the preempt rule, or the reclaim rule of
    ``reclaimer_queue``), with each podgroup's node pool: all running podgroups, or only
    ``uid``; by uid."""
    read = shadow.read_schema
    source = (
        f"{read}.preempt_protection(%(at)s)"
        if reclaimer_queue is None
        else f"{read}.reclaim_protection(%(reclaimer)s, %(at)s)"
    )
    # Straight from the driver, in binary: a table at an instant has every running podgroup
    # (tens of thousands of rows), and SQLAlchemy's rows cost three times the query. Its
    # errors are raised as SQLAlchemy's, as every other read's (the commands' one line).
    statement = (
        f"SELECT {_PROTECTION_COLUMNS} FROM {source} r JOIN {read}.podgroups p USING (uid)"
        " WHERE CAST(%(uid)s AS text) IS NULL OR r.uid = %(uid)s ORDER BY r.uid"
    )
    params = {"at": at, "reclaimer": reclaimer_queue, "uid": uid}
    rows = driver_rows(conn, statement, params, binary=True)
    return tuple(
        ProtectionRow(row_uid, queue, pool, start, minimum, source_, until, bool(on), int(pods))
        for row_uid, queue, pool, start, minimum, source_, until, on, pods in rows
    )


def _row(conn: Connection, statement: str, **params: Any) -> Mapping[str, Any] | None:
    """The first row of ``statement`` by column (None: no row)."""
    row = conn.execute(sa.text(statement), params).first()
    return None if row is None else row._asdict()


def _scalar(conn: Connection, statement: str, **params: Any) -> Any:
    return conn.execute(sa.text(statement), params).scalar_one()


def queue_exists(conn: Connection, shadow: Shadow, name: str) -> bool:
    """True when the shadow's queue tree has a queue called ``name``."""
    found = _row(conn, f"SELECT 1 FROM {shadow.read_schema}.queues WHERE name = :name", name=name)
    return found is not None


def is_protected(conn: Connection, shadow: Shadow, uid: str, preemptor: str, at: datetime) -> bool:
    """``S.is_protected(uid, preemptor, at)``: the SQL verdict against a preemptor's queue."""
    statement = f"SELECT {shadow.read_schema}.is_protected(:uid, :q, :at)"
    return bool(_scalar(conn, statement, uid=uid, q=preemptor, at=at))


def min_runtime_rule(
    conn: Connection, shadow: Shadow, victim: str, preemptor: str, node_pool: str
) -> str:
    """The rule ``S.min_runtime_for`` applies to a victim in ``victim`` and a preemptor in
    ``preemptor`` on ``node_pool``."""
    statement = f"SELECT rule FROM {shadow.read_schema}.min_runtime_for(:victim, :preemptor, :pool)"
    return str(_scalar(conn, statement, victim=victim, preemptor=preemptor, pool=node_pool))


# -- one podgroup (explain) --------------------------------------------------------------------


def podgroup_facts(conn: Connection, shadow: Shadow, uid: str) -> Mapping[str, Any] | None:
    """The podgroups view's row of ``uid`` (None: no such podgroup): what explain states."""
    return _row(
        conn,
        "SELECT uid, name, namespace, queue, node_pool, status, preemptible, start_time,"
        " last_start_time, ended_at, running_pods, is_elastic, preemptibility"
        f" FROM {shadow.read_schema}.podgroups WHERE uid = :uid",
        uid=uid,
    )


def podgroup_annotations(conn: Connection, shadow: Shadow, uid: str) -> Any:
    """The annotations of podgroup ``uid`` as stored (a JSON object, or None)."""
    statement = f"SELECT annotations FROM {shadow.read_schema}.podgroups WHERE uid = :uid"
    return _scalar(conn, statement, uid=uid)


def committed_requeues(
    conn: Connection, shadow: Shadow, uid: str, at: datetime, most: int
) -> list[datetime]:
    """When the newest ``most`` committed requeues of ``uid`` up to ``at`` were decided,
    newest first."""
    statement = (
        f"SELECT decided_at FROM {shadow.read_schema}.requeue_decisions WHERE uid = :uid"
        " AND outcome = 'committed' AND decided_at <= :at ORDER BY decided_at DESC LIMIT :most"
    )
    return list(conn.execute(sa.text(statement), {"uid": uid, "at": at, "most": most}).scalars())


def newest_quota_shares(
    conn: Connection, shadow: Shadow, uid: str, at: datetime
) -> dict[str, Any] | None:
    """The shares of ``uid``'s newest decision up to ``at`` if it was rolled back for
    beneficiary_over_quota (None: it was not, or there is none)."""
    statement = (
        f"SELECT reason, quota_shares FROM {shadow.read_schema}.requeue_decisions"
        " WHERE uid = :uid AND decided_at <= :at ORDER BY decided_at DESC, seq DESC LIMIT 1"
    )
    row = conn.execute(sa.text(statement), {"uid": uid, "at": at}).first()
    if row is None or row[0] != "beneficiary_over_quota" or not isinstance(row[1], dict):
        return None
    return dict(row[1])


def newest_abandoned(
    conn: Connection, shadow: Shadow, uid: str, at: datetime
) -> tuple[datetime, str, datetime | None] | None:
    """When and why ``uid``'s newest decision up to ``at`` was abandoned by the evictor, and
    the cooldown it cleared (None: the newest decision is not an abandonment, or none)."""
    statement = (
        f"SELECT outcome, decided_at, reason, requeue_not_before FROM {shadow.read_schema}"
        ".requeue_decisions WHERE uid = :uid AND decided_at <= :at"
        " ORDER BY decided_at DESC, seq DESC LIMIT 1"
    )
    row = conn.execute(sa.text(statement), {"uid": uid, "at": at}).first()
    if row is None or row[0] != "abandoned":
        return None
    return row[1], str(row[2]), row[3]


def newest_handshake(
    conn: Connection, shadow: Shadow, uid: str, at: datetime
) -> sa.Row[Any] | None:
    """``uid``'s newest checkpoint handshake requested up to ``at`` (``outcome, requested_at,
    grace, ended_at, checkpointed_at, decision_id``; None: none)."""
    statement = (
        "SELECT outcome, requested_at, grace, ended_at, checkpointed_at, decision_id"
        f" FROM {shadow.read_schema}.checkpoint_handshakes WHERE uid = :uid"
        " AND requested_at <= :at ORDER BY requested_at DESC LIMIT 1"
    )
    return conn.execute(sa.text(statement), {"uid": uid, "at": at}).first()


def service_podgroups(
    conn: Connection, namespace: str | None, uids: Sequence[str]
) -> Sequence[sa.RowMapping]:
    """The live podgroups view's rows (of ``namespace`` and ``uids``, or all) that a
    comparison with the cluster needs."""
    query = (
        "SELECT uid, status, name, namespace, queue, start_time, running_pods, annotations,"
        f" updated_at FROM {READ_SCHEMA}.podgroups"
    )
    params: dict[str, Any] = {}
    if namespace is not None:
        query += " WHERE namespace = :namespace OR uid = ANY(:uids)"
        params = {"namespace": namespace, "uids": list(uids)}
    return conn.execute(sa.text(query), params).mappings().all()


def held_pods(conn: Connection, uids: Sequence[str] | None) -> dict[str, list[str]] | None:
    """Pod names holding resources, by podgroup (of ``uids``, or all); None when this role
    may not read them."""
    statement = sa.select(pod_state.c.uid, pod_state.c.name).where(pod_state.c.allocated)
    if uids is not None:
        statement = statement.where(pod_state.c.uid.in_(uids))
    try:
        with conn.begin_nested():
            found = conn.execute(statement).all()
    except ProgrammingError as error:
        if sqlstate(error) != "42501":  # insufficient_privilege: the reader role
            raise
        return None
    held: dict[str, list[str]] = {}
    for uid, name in found:
        held.setdefault(uid, []).append(name)
    return held


# -- the tree and the configuration -------------------------------------------------------


def queue_tree(conn: Connection, shadow: Shadow) -> StoredTree:
    """The shadow's queue tree, with every queue's stored path from the root in each node
    pool's tree (``StoredTree.path_in``)."""
    return stored_tree(conn, shadow.tables)


def node_pool_configs(conn: Connection, shadow: Shadow) -> NodePoolConfigs:
    """The shadow's node-pool configs (a pool whose stored row is unusable is left out, as the
    requeue worker leaves it out)."""
    return read_node_pool_configs(conn, shadow.tables)[0]


def queue_node_pool(conn: Connection, shadow: Shadow, name: str) -> str | None:
    """The node pool queue ``name`` belongs to (None: every pool's, or no such queue)."""
    found = _row(
        conn, f"SELECT node_pool FROM {shadow.read_schema}.queues WHERE name = :name", name=name
    )
    return None if found is None else found["node_pool"]


def queue_row(conn: Connection, shadow: Shadow, name: str) -> Mapping[str, Any] | None:
    """Queue ``name``'s parent, own min-runtimes and node pool (None: no such queue)."""
    return _row(
        conn,
        "SELECT parent, preempt_min_runtime, reclaim_min_runtime, node_pool"
        f" FROM {shadow.read_schema}.queues WHERE name = :name",
        name=name,
    )


# -- the timeline ------------------------------------------------------------------------------


def timeline_state(conn: Connection, shadow: Shadow, uid: str, at: datetime) -> sa.Row[Any] | None:
    """Podgroup ``uid`` at ``at`` as the timeline tells it: its row of the podgroups view, its
    preempt window then (NULLs: none) and the standing nominations (None: no such podgroup)."""
    return conn.execute(_timeline_state(shadow.read_schema), {"uid": uid, "at": at}).first()


def judged_run(
    conn: Connection, shadow: Shadow, uid: str, source: str, event_id: str
) -> tuple[Any, ...] | None:
    """The run of ``uid`` that the event (``source``, ``event_id``) ended, as the runs view
    judges it against every preemptor, and under the rule the attributed eviction met:
    (protection, eviction, cut_short, exact_verdict, applied_cut_short, eviction_action,
    evictor, evictor_queue); None: none."""
    params = {"uid": uid, "source": source, "id": event_id}
    row = conn.execute(_judged_run(shadow.read_schema), params).first()
    return None if row is None else tuple(row)


_LAST_EVICTION: Final = (
    "SELECT r.run_start, r.run_end, r.ended_by, r.protection, r.eviction_source,"
    " r.eviction_action, r.evictor, r.evictor_queue, r.evicted_at, r.exact_verdict,"
    " r.applied_min_runtime, r.applied_cut_short"
    f" FROM {READ_SCHEMA}.runs r"
    f" JOIN {READ_SCHEMA}.event_log e ON e.source = r.end_source AND e.id = r.end_event_id"
    " WHERE r.uid = :uid AND r.eviction AND e.applied_at <= :at"
    " ORDER BY e.seq DESC LIMIT 1"
)


def last_eviction(conn: Connection, uid: str, at: datetime) -> sa.Row[Any] | None:
    """The last run of ``uid`` an eviction ended, among the runs the service had ended by
    ``at`` (live history: runs are never changed once written): run_start, run_end, ended_by,
    protection, eviction_source, eviction_action, evictor, evictor_queue, evicted_at,
    exact_verdict, applied_min_runtime, applied_cut_short; None: none."""
    return conn.execute(sa.text(_LAST_EVICTION), {"uid": uid, "at": at}).first()


# The timeline asks these after every boundary of a replay: each is made once per schema.
@lru_cache(maxsize=64)
def _timeline_state(read: str) -> sa.TextClause:
    return sa.text(
        "SELECT p.status, p.running_pods, p.start_time, p.queue, p.node_pool, p.priority,"
        " p.name, p.namespace, p.expected_runtime, p.requeue_not_before,"
        " p.awaiting_release, w.min_runtime, w.resolved_from, w.protected_until,"
        " w.is_protected,"
        f" ARRAY(SELECT n.nominated_by FROM {read}.nominations n WHERE n.uid = p.uid"
        "       ORDER BY n.nominated_by) AS nominations"
        f" FROM {read}.podgroups p"
        f" LEFT JOIN {read}.preempt_protection(:at) w ON w.uid = p.uid"
        " WHERE p.uid = :uid"
    )


@lru_cache(maxsize=64)
def _judged_run(read: str) -> sa.TextClause:
    return sa.text(
        "SELECT protection, eviction, cut_short, exact_verdict, applied_cut_short,"
        f" eviction_action, evictor, evictor_queue FROM {read}.runs"
        " WHERE uid = :uid AND end_source = :source AND end_event_id = :id"
    )


# -- violations ----------------------------------------------------------------------------

_VIOLATIONS: Final = (
    "SELECT r.uid, r.queue, r.node_pool, r.preemptibility, r.run_start, r.run_end, r.ended_by,"
    # The windows as stored (text): runs of one queue share them, so each is read once.
    " r.gpus, r.gpu_seconds, r.protection, r.cut_short, r.windows_text, e.seq, {attribution},"
    " {checkpoint}"
    " FROM {schema}.runs r"
    # The log is the live schema's: a kept shadow's runs were replayed from it.
    f" LEFT JOIN {READ_SCHEMA}.event_log e ON e.source = r.end_source AND e.id = r.end_event_id"
    # Inlined, this is the partial index's predicate (run_log.ix_run_log_violations).
    " WHERE r.eviction AND ({violating})"
    " AND (CAST(:since AS timestamptz) IS NULL OR r.run_end >= :since)"
    " AND (CAST(:queue AS text) IS NULL OR r.queue = :queue)"
    " ORDER BY r.run_end, r.uid, r.end_source, r.end_event_id"
)
# Who evicted, the exact verdict and the rule that applied (migration 0018); a read surface
# kept before it (``replay --into``) has none: NULLs.
_ATTRIBUTION: Final = (
    "r.core_pods, r.eviction_source, r.eviction_action, r.evictor, r.evictor_queue,"
    " r.evicted_at, r.exact_verdict, CAST(r.applied_window AS text)"
)
_NO_ATTRIBUTION: Final = "0, " + ", ".join(["NULL"] * 7)
# The run's last checkpoint and the GPU-seconds since it (migration 0022); NULLs before it.
_CHECKPOINT: Final = "r.last_checkpoint, r.gpu_seconds_since_checkpoint"
_NO_CHECKPOINT: Final = "CAST(NULL AS timestamptz), CAST(NULL AS numeric)"
_VIOLATING: Final = "r.protection <> 'none' OR r.exact_verdict = 'violated'"
_VIOLATING_0013: Final = "r.protection <> 'none'"
_HAS_ATTRIBUTION: Final = (
    "SELECT EXISTS (SELECT FROM pg_attribute"
    " WHERE attrelid = to_regclass(:runs) AND attname = 'exact_verdict' AND NOT attisdropped)"
)
_HAS_CHECKPOINT: Final = (
    "SELECT EXISTS (SELECT FROM pg_attribute WHERE attrelid = to_regclass(:runs)"
    " AND attname = 'gpu_seconds_since_checkpoint' AND NOT attisdropped)"
)
_EVICTED: Final = (
    "SELECT count(*) FROM {schema}.runs r WHERE r.eviction"
    " AND (CAST(:since AS timestamptz) IS NULL OR r.run_end >= :since)"
    " AND (CAST(:queue AS text) IS NULL OR r.queue = :queue)"
)
_QUEUE_KNOWN: Final = (
    "SELECT EXISTS (SELECT FROM {schema}.queues WHERE name = :queue)"
    " OR EXISTS (SELECT FROM {schema}.runs WHERE queue = :queue)"
)


def has_runs(conn: Connection, schema: str) -> bool:
    """True when the read surface ``schema`` has a runs view."""
    return _scalar(conn, "SELECT to_regclass(:runs)", runs=f"{schema}.runs") is not None


def queue_known(conn: Connection, schema: str, queue: str) -> bool:
    """True when ``queue`` is in the tree of ``schema`` now, or in one of its runs."""
    return bool(_scalar(conn, _QUEUE_KNOWN.format(schema=schema), queue=queue))


def evicted_runs(conn: Connection, schema: str, since: datetime | None, queue: str | None) -> int:
    """How many runs an eviction ended at or after ``since``, in ``queue`` (None: all)."""
    return int(_scalar(conn, _EVICTED.format(schema=schema), since=since, queue=queue))


def violating_runs(
    conn: Connection, schema: str, since: datetime | None, queue: str | None
) -> Sequence[sa.Row[Any]]:
    """The runs an eviction ended inside a window, or whose attributed eviction broke the rule
    that applied (at or after ``since``, in ``queue``), in the order they ended: uid, queue,
    node_pool, preemptibility, run_start, run_end, ended_by, gpus, gpu_seconds, protection,
    cut_short, windows_text, the log seq of the end, core_pods, eviction_source,
    eviction_action, evictor, evictor_queue, evicted_at, exact_verdict, applied_window,
    last_checkpoint, gpu_seconds_since_checkpoint."""
    params = {"since": since, "queue": queue}
    attributed = _scalar(conn, _HAS_ATTRIBUTION, runs=f"{schema}.runs")
    checkpointed = _scalar(conn, _HAS_CHECKPOINT, runs=f"{schema}.runs")
    query = _VIOLATIONS.format(
        schema=schema,
        attribution=_ATTRIBUTION if attributed else _NO_ATTRIBUTION,
        checkpoint=_CHECKPOINT if checkpointed else _NO_CHECKPOINT,
        violating=_VIOLATING if attributed else _VIOLATING_0013,
    )
    return conn.execute(sa.text(query), params).all()


_ABANDONED: Final = (
    "SELECT d.decided_at, d.uid, p.queue, d.reason FROM {schema}.requeue_decisions d"
    " LEFT JOIN {schema}.podgroups p ON p.uid = d.uid WHERE d.outcome = 'abandoned'"
    " AND (CAST(:since AS timestamptz) IS NULL OR d.decided_at >= :since)"
    " AND (CAST(:queue AS text) IS NULL OR p.queue = :queue)"
    " ORDER BY d.decided_at, d.seq"
)


def abandoned_requeues(
    conn: Connection, schema: str, since: datetime | None, queue: str | None
) -> list[tuple[Any, ...]]:
    """The requeues the evictor abandoned at or after ``since`` (podgroups of ``queue``; None:
    all), oldest first: when, uid, queue, reason (pdb, forbidden, not_found, ...)."""
    query = _ABANDONED.format(schema=schema)
    return [tuple(row) for row in conn.execute(sa.text(query), {"since": since, "queue": queue})]
