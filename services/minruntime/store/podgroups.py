"""Podgroups as stored: the one loader of the fold's states and their one writer.

``load_podgroups`` reads the podgroups a batch touches (three queries: states, pods,
subgroups) into the core's ``PodGroupState`` values; ``write_podgroups`` writes the states a
batch changed (the ``podgroup_state`` row with every derived column), writes only the pod rows
that differ from the stored ones (inserted, updated in place, deleted: an allocation or a
release touches a podgroup's pods, not the rows of its other pods), replaces the subgroups of
those whose spec changed, and drops the promises of beneficiaries that left ``pending``;
``write_nominations`` keeps the latest nomination per nominator.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from types import MappingProxyType
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.core import (
    DelaySource,
    MemberPod,
    PodGroupSpec,
    PodGroupState,
    Preemptibility,
    PreemptionDelay,
    SubGroup,
)
from minruntime.core.disruption import TopOwner
from minruntime.store.bulk import (
    delete_many,
    execute_statement,
    insert_many,
    insert_tuples,
    json_list,
    update_many,
)
from minruntime.store.engine import driver_cursor, pipelined
from minruntime.store.schema import StateTables

# The rows of a batch's uids, one JSON array (``store.bulk.json_list``): ``= ANY`` of the array
# made once, so each table is read through its primary key. (``IN (SELECT ...)`` was planned as
# a hash join over a scan of the whole table: the function's rows are estimated at 100, and
# every batch then read every stored podgroup, pod and subgroup row, a cost per event that grew
# with the table: docs/pipeline.md.)
_UIDS: Final = "ANY(ARRAY(SELECT json_array_elements_text(%(uids)s::json)))"


# psycopg placeholders: these run on the driver's cursor (plain tuples: a batch's pods number
# in the hundreds of thousands per minute, and SQLAlchemy's Row objects cost more than the
# queries).
_LOAD_STATES: Final = (
    # No annotations (most podgroups) come back as NULL: no JSON to parse.
    "SELECT uid, status, submitted, start_time, last_start_time, ended_at,"
    " NULLIF(annotations, '{}'::jsonb) AS annotations,"
    " submitted_at, awaiting_release,"
    # PodGroupSpec's fields, in its order (its subgroups aside).
    " name, namespace, queue, node_pool, priority, preemptibility,"
    " submitted_preemption_delay, submitted_preemption_delay_pod,"
    " evicted_at, eviction_annotated_at, owner_kind, owner_name, owner_uid"
    " FROM minruntime_state.podgroup_state WHERE uid = " + _UIDS
)
# The live rows are locked until the batch commits, in uid order (as the requeue worker locks
# them: no deadlock between the two): another writer of a podgroup — the worker committing a
# requeue (cooldown, awaiting_release), another topic's batch (a nomination) — waits for this
# batch or is waited for, so a batch never writes back a row older than what was committed.
_LOCKING: Final = " ORDER BY uid FOR UPDATE"
_PREEMPTIBILITY: Final[Mapping[str, Preemptibility]] = {kind.value: kind for kind in Preemptibility}
_LOAD_PODS: Final = (
    "SELECT uid, name, subgroup, gpu, node, allocated FROM minruntime_state.pod_state"
    " WHERE uid = " + _UIDS + " ORDER BY uid, name"
)
# Declaration order is insertion order (the subgroups of a podgroup are written together).
_LOAD_SUBGROUPS: Final = (
    "SELECT uid, name, min_available FROM minruntime_state.subgroup_state"
    " WHERE uid = " + _UIDS + " ORDER BY uid, ctid"
)
_STATE_COLUMNS: Final = {
    "uid": "text",
    "name": "text",
    "namespace": "text",
    "queue": "text",
    "node_pool": "text",
    "priority": "bigint",
    "preemptible": "boolean",
    "status": "text",
    "start_time": "timestamptz",
    "last_start_time": "timestamptz",
    "ended_at": "timestamptz",
    "running_pods": "integer",
    "is_elastic": "boolean",
    "protected_evictable_pods": "integer",
    "annotations": "jsonb",
    "expected_runtime": "interval",
    "requeue_not_before": "timestamptz",
    "submitted": "boolean",
    "submitted_at": "timestamptz",
    "awaiting_release": "boolean",
    "preemptibility": "text",
    "submitted_preemption_delay": "interval",
    "submitted_preemption_delay_pod": "text",
    "evicted_at": "timestamptz",
    "eviction_annotated_at": "timestamptz",
    "preemption_delay_ends_at": "timestamptz",
    "owner_kind": "text",
    "owner_name": "text",
    "owner_uid": "text",
}
_PLACEHOLDER_CONFLICT: Final = "ON CONFLICT (uid) DO NOTHING"
_STATE_CONFLICT: Final = (
    "ON CONFLICT (uid) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in list(_STATE_COLUMNS)[1:])
    + ", updated_at = now()"
)
_POD_COLUMNS: Final = {
    "uid": "text",
    "name": "text",
    "subgroup": "text",
    "gpu": "numeric",
    "node": "text",
    "allocated": "boolean",
}
_POD_KEY: Final = ("uid", "name")
_SUBGROUP_COLUMNS: Final = {"uid": "text", "name": "text", "min_available": "integer"}
_NOMINATION_COLUMNS: Final = {
    "uid": "text",
    "nominated_by": "text",
    "reason": "text",
    "nominated_at": "timestamptz",
}
_NOMINATION_CONFLICT: Final = (
    "ON CONFLICT (uid, nominated_by) DO UPDATE SET reason = excluded.reason,"
    " nominated_at = excluded.nominated_at"
)
_DELETE_SUBGROUPS: Final = (
    "DELETE FROM minruntime_state.subgroup_state"
    " WHERE uid = ANY(ARRAY(SELECT json_array_elements_text(%(uids)s::json)))"
)
# A beneficiary that was allocated, finished or deleted no longer needs its promise.
_DELETE_PROMISES: Final = (
    "DELETE FROM minruntime_state.requeue_promises WHERE beneficiary = ANY(%(uids)s)"
)


@dataclass(frozen=True)
class StoredPodGroups:
    """The stored podgroups of some uids (unknown uids are absent)."""

    states: dict[str, PodGroupState]
    # The uids stored as ``pending``: the ones whose promises go when they leave it.
    pending: frozenset[str]


def load_podgroups(
    conn: Connection, tables: StateTables, uids: Iterable[str], *, lock: bool = True
) -> StoredPodGroups:
    """The stored state of each of ``uids`` that is known, with its pods and subgroups.

    ``lock``: a writer's read, the live rows locked until commit (a batch, the worker). A
    reader (`explain`) passes False: it takes no lock, so it holds no writer back and runs on a
    read-only standby too."""
    wanted = sorted(set(uids))
    if not wanted:
        return StoredPodGroups({}, frozenset())
    uids_json = json_list(wanted)
    # The three queries in one round trip (pipeline mode, in this order: the pods are read
    # after the states are locked), the pods and subgroups of every uid asked for.
    with (
        pipelined(conn),
        driver_cursor(conn) as state_cursor,
        driver_cursor(conn) as pod_cursor,
        driver_cursor(conn) as subgroup_cursor,
    ):
        # A shadow is one transaction's own: nothing to wait for there.
        load = _LOAD_STATES + _LOCKING if lock and tables.is_live else _LOAD_STATES
        state_cursor.execute(tables.sql(load), {"uids": uids_json})
        pod_cursor.execute(tables.sql(_LOAD_PODS), {"uids": uids_json})
        subgroup_cursor.execute(tables.sql(_LOAD_SUBGROUPS), {"uids": uids_json})
        rows = state_cursor.fetchall()
        pod_rows = pod_cursor.fetchall()
        subgroup_rows = subgroup_cursor.fetchall()
    if not rows:
        return StoredPodGroups({}, frozenset())
    # The pods and subgroups of a uid not stored are read (none are written for one) but
    # never looked up: only the stored states below are.
    pods: dict[str, dict[str, MemberPod]] = {}
    # A pod's node is kept while it holds resources (the fold clears it on release).
    allocated: dict[str, dict[str, str | None]] = {}
    # In uid order: each podgroup's pods are consecutive.
    members: dict[str, MemberPod] = {}
    last = None
    for uid, name, subgroup, gpu, node, is_allocated in pod_rows:
        if uid != last:
            members = pods[uid] = {}
            last = uid
        members[name] = MemberPod(subgroup, gpu)
        if is_allocated:
            allocated.setdefault(uid, {})[name] = node
    subgroups: dict[str, list[SubGroup]] = {}
    for uid, name, min_available in subgroup_rows:
        subgroups.setdefault(uid, []).append(SubGroup(name, min_available))
    states: dict[str, PodGroupState] = {}
    pending = []
    # The columns of ``_LOAD_STATES`` unpacked in its order (no named tuple made per row).
    for (
        uid,
        status,
        submitted,
        start_time,
        last_start_time,
        ended_at,
        stored_annotations,
        submitted_at,
        awaiting_release,
        name,
        namespace,
        queue,
        node_pool,
        priority,
        preemptibility,
        submitted_preemption_delay,
        submitted_preemption_delay_pod,
        evicted_at,
        eviction_annotated_at,
        owner_kind,
        owner_name,
        owner_uid,
    ) in rows:
        spec = None
        if submitted:
            spec = PodGroupSpec(
                name,
                namespace,
                queue,
                node_pool,
                priority,
                # A dict's lookup, not the enum's call (an unknown value still raises there).
                _PREEMPTIBILITY.get(preemptibility) or Preemptibility(preemptibility),
                tuple(subgroups.get(uid, ())),
                _submitted_delay(submitted_preemption_delay, submitted_preemption_delay_pod),
                _stored_owner(owner_kind, owner_name, owner_uid),
            )
        states[uid] = PodGroupState(
            uid,
            spec,
            allocated.get(uid, {}),
            start_time,
            last_start_time,
            ended_at,
            pods.get(uid, {}),
            stored_annotations or {},
            submitted_at,
            status == "deleted",
            awaiting_release,
            evicted_at,
            eviction_annotated_at,
        )
        if status == "pending":
            pending.append(uid)
    return StoredPodGroups(states, frozenset(pending))


def write_podgroups(
    conn: Connection,
    tables: StateTables,
    changed: Sequence[PodGroupState],
    *,
    stored: Mapping[str, PodGroupState],
    pods_changed: Sequence[PodGroupState] = (),
    subgroups_changed: Sequence[PodGroupState] = (),
    left_pending: Sequence[str] = (),
    placeholders: Sequence[PodGroupState] = (),
) -> None:
    """Upsert ``changed``; write the pods of ``pods_changed`` that differ from ``stored``
    (uid -> the state as loaded, what its pod and subgroup rows hold; a uid not in it has
    none), replace the subgroups of ``subgroups_changed``.

    ``left_pending``: uids stored as pending that are not any more; their promises go.
    ``placeholders``: podgroups not stored when loaded that nothing changed (named only by a
    nomination): inserted unless a row appeared meanwhile — another topic's batch may have
    submitted the podgroup, and its row is kept.
    """
    inserted: list[_PodRow] = []
    groups: list[dict[str, Any]] = []
    # The statements COPY does not run are sent in one pipeline, each as soon as it is built:
    # PostgreSQL runs the state upsert while Python sorts out the pods' changes, and so on.
    # Their order is as before; the COPYs follow once all of them ran (the pods' inserts
    # share no key with their deletes; the subgroups' inserts follow their deletes).
    with pipelined(conn):
        for states, conflict in (
            (changed, _STATE_CONFLICT),
            (placeholders, _PLACEHOLDER_CONFLICT),
        ):
            insert_tuples(
                conn,
                tables.podgroup_state,
                _STATE_COLUMNS,
                [_state_values(state) for state in states],
                conflict=conflict,
            )
        if pods_changed:
            inserted, updated, deleted = _pod_changes(pods_changed, stored)
            key = {column: _POD_COLUMNS[column] for column in _POD_KEY}
            delete_many(conn, tables.pod_state, key, deleted)
            update_many(conn, tables.pod_state, _POD_KEY, _POD_COLUMNS, updated)
        if subgroups_changed:
            # Only a stored spec has subgroup rows (a new podgroup or a placeholder has none).
            replaced = [
                state.uid for state in subgroups_changed if _has_spec(stored.get(state.uid))
            ]
            if replaced:
                execute_statement(
                    conn, tables.sql(_DELETE_SUBGROUPS), {"uids": json_list(replaced)}
                )
            groups = [
                {"uid": state.uid, "name": subgroup.name, "min_available": subgroup.min_available}
                for state in subgroups_changed
                for subgroup in state.subgroups
            ]
        if left_pending:
            execute_statement(conn, tables.sql(_DELETE_PROMISES), {"uids": list(left_pending)})
    insert_many(conn, tables.pod_state, _POD_COLUMNS, inserted)
    insert_many(conn, tables.subgroup_state, _SUBGROUP_COLUMNS, groups)


_PodRow = dict[str, Any]
# What a podgroup not stored yet has.
_NO_PODS: Final[Mapping[str, MemberPod]] = MappingProxyType({})
_NO_NODES: Final[Mapping[str, str | None]] = MappingProxyType({})


def _has_spec(state: PodGroupState | None) -> bool:
    return state is not None and state.spec is not None


def _pod_changes(
    states: Sequence[PodGroupState], stored: Mapping[str, PodGroupState]
) -> tuple[list[_PodRow], list[_PodRow], list[_PodRow]]:
    """The pod rows to insert, to update and to delete for ``states`` to be stored.

    A pod's row is (subgroup, gpu, node, allocated): it differs when its ``MemberPod`` or its
    node (allocated or not) differs from the stored state's. Only the rows written are built.
    """
    inserted: list[_PodRow] = []
    updated: list[_PodRow] = []
    deleted: list[_PodRow] = []
    for state in states:
        uid, pods, allocated = state.uid, state.pods, state.allocated
        before = stored.get(uid)
        old_pods = _NO_PODS if before is None else before.pods
        old_allocated = _NO_NODES if before is None else before.allocated
        for name, pod in pods.items():
            was = old_pods.get(name)
            node = allocated.get(name)
            is_allocated = name in allocated
            if (
                was is not None
                and (was == pod or _same_pod(was, pod))
                and old_allocated.get(name) == node
                and (name in old_allocated) == is_allocated
            ):
                continue
            row = {
                "uid": uid,
                "name": name,
                "subgroup": pod.subgroup,
                "gpu": pod.gpu,
                "node": node,
                "allocated": is_allocated,
            }
            (inserted if was is None else updated).append(row)
        deleted.extend({"uid": uid, "name": name} for name in old_pods if name not in pods)
    return inserted, updated, deleted


def _same_pod(stored: MemberPod, pod: MemberPod) -> bool:
    """The same row: a stored gpu comes back as Decimal, an event's is a float written as
    its str(), so 0.1 is stored as 0.1 but Decimal("0.1") != 0.1: compare the texts' values."""
    if stored.subgroup != pod.subgroup or (stored.gpu is None) != (pod.gpu is None):
        return False
    return stored.gpu is None or Decimal(str(stored.gpu)) == Decimal(str(pod.gpu))


def write_nominations(
    conn: Connection, tables: StateTables, nominations: Sequence[Mapping[str, Any]]
) -> None:
    """Upsert nominations (uid, nominated_by, reason, nominated_at): the latest per nominator."""
    insert_many(
        conn,
        tables.nominations,
        _NOMINATION_COLUMNS,
        nominations,
        conflict=_NOMINATION_CONFLICT,
    )


def _submitted_delay(delay: timedelta | None, pod: str | None) -> PreemptionDelay | None:
    if delay is None:
        return None
    if pod is None:
        return PreemptionDelay(delay, DelaySource.SPEC)
    return PreemptionDelay(delay, DelaySource.POD, pod)


def _stored_owner(kind: str | None, name: str | None, uid: str | None) -> TopOwner | None:
    return TopOwner(kind, name, uid) if kind and name and uid else None


def _state_values(state: PodGroupState) -> tuple[Any, ...]:
    """The ``podgroup_state`` row of ``state``: its values in ``_STATE_COLUMNS``' order (a
    tuple, not a mapping: one is made for every podgroup a batch changes)."""
    elastic, protected_evictable = state.elasticity()
    spec = state.spec
    window = state.delay_window()
    annotations = state.annotations
    if spec is None:
        name = namespace = queue = priority = None
        submitted_delay = owner = None
    else:
        name, namespace, queue, priority = spec.name, spec.namespace, spec.queue, spec.priority
        submitted_delay = spec.submitted_delay
        # The submission's topOwner only: what a replay of the log folds again.
        owner = spec.owner
    return (
        state.uid,
        name,
        namespace,
        queue,
        state.node_pool,
        priority,
        state.preemptible,
        state.status,
        state.start_time,
        state.last_start_time,
        state.ended_at,
        state.running_pods,
        elastic,
        protected_evictable,
        # The JSON serialiser takes no mapping proxy (a placeholder's empty default is one).
        annotations if type(annotations) is dict else dict(annotations),
        state.expected_runtime,
        state.requeue_not_before,
        state.submitted,
        state.submitted_at,
        state.stored_awaiting_release,
        state.preemptibility.value,
        None if submitted_delay is None else submitted_delay.delay,
        None if submitted_delay is None else submitted_delay.pod,
        state.evicted_at,
        state.eviction_annotated_at,
        None if window is None else window.ends_at,  # preemption_delay_ends_at
        None if owner is None else owner.kind,
        None if owner is None else owner.name,
        None if owner is None else owner.uid,
    )
