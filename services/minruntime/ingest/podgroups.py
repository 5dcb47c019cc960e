"""The podgroup projection: load the touched podgroups once, fold the batch in memory, write once.

Start times, elasticity and evictable pods come from the core (``apply_allocated``,
``apply_released``, ``is_elastic``, ``evictable_pods``); this module only keeps the rows.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.core import (
    DEFAULT_NODE_POOL,
    DEFAULT_SUBGROUP,
    EXPECTED_RUNTIME_ANNOTATION,
    NOT_STARTED,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    MinRuntimeError,
    PodGroupPods,
    RunState,
    SubGroup,
    apply_allocated,
    apply_released,
    evictable_pods,
    is_elastic,
    parse_duration,
    parse_rfc3339,
)
from minruntime.ingest.bulk import insert_many
from minruntime.store.state_schema import state_sql, state_text


@dataclass
class Pod:
    """One pod of a podgroup; ``gpu`` is unknown (None) until the submission says."""

    subgroup: str
    gpu: float | Decimal | None = None
    node: str | None = None


@dataclass
class PodGroupDraft:
    """A podgroup being changed by a batch (every field as the views need it)."""

    uid: str
    submitted: bool = False
    name: str | None = None
    namespace: str | None = None
    queue: str | None = None
    node_pool: str = DEFAULT_NODE_POOL
    priority: int | None = None
    preemptible: bool = True
    deleted: bool = False
    run: RunState = NOT_STARTED
    # Declaration order; a placeholder has none until its submission arrives.
    subgroups: dict[str, int] = field(default_factory=dict)
    pods: dict[str, Pod] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    # Event time of the first submission (contenders of equal priority: oldest first).
    submitted_at: datetime | None = None
    # A committed requeue of the current run waits for the cluster to release it.
    awaiting_release: bool = False
    # The status stored before this batch ('' for a podgroup the store did not know).
    loaded_status: str = ""
    pods_dirty: bool = False
    subgroups_dirty: bool = False

    def submit(
        self,
        *,
        name: str,
        namespace: str,
        queue: str,
        node_pool: str | None,
        priority: int,
        preemptible: bool,
        subgroups: Iterable[SubGroup],
        pods: Iterable[tuple[str, str, float]],
        annotations: Mapping[str, str],
        at: datetime,
    ) -> None:
        """Fill in (or replace) the spec; allocations already seen are kept, start time too."""
        if self.submitted_at is None:
            self.submitted_at = at
        self.name, self.namespace, self.queue = name, namespace, queue
        self.node_pool = node_pool or DEFAULT_NODE_POOL
        self.priority, self.preemptible = priority, preemptible
        self.subgroups = {subgroup.name: subgroup.min_available for subgroup in subgroups}
        old = self.pods
        self.pods = {
            pod: Pod(subgroup, gpu, old[pod].node if pod in old else None)
            for pod, subgroup, gpu in pods
        }
        # Pods allocated before the submission named them stay, in the fallback subgroup:
        # dropping them would lose capacity that is really in use.
        fallback = self.fallback_subgroup()
        for pod in self.run.allocated - self.pods.keys():
            self.pods[pod] = Pod(fallback, None, old[pod].node if pod in old else None)
        # The submission's annotations win over ones seen earlier (placeholder), others stay.
        self.annotations = {**self.annotations, **annotations}
        self.submitted = True
        self.pods_dirty = self.subgroups_dirty = True

    def fallback_subgroup(self) -> str:
        """Where a pod the submission did not list is counted."""
        if not self.subgroups or DEFAULT_SUBGROUP in self.subgroups:
            return DEFAULT_SUBGROUP
        return next(iter(self.subgroups))

    def allocate(self, pods: Iterable[tuple[str, str]], at: datetime) -> None:
        """Pods now hold resources on nodes; 0 -> 1+ pods starts a run at the event's time."""
        names = []
        for pod, node in pods:
            names.append(pod)
            known = self.pods.get(pod)
            if known is None:
                self.pods[pod] = Pod(self.fallback_subgroup(), None, node)
            else:
                known.node = node
        self.run = apply_allocated(self.run, names, at)
        self.pods_dirty = True

    def release(self, pods: Iterable[str] | None, at: datetime) -> None:
        """Pods (None: all) released their resources; releasing the last one ends the run."""
        released = self.run.allocated if pods is None else frozenset(pods) & self.run.allocated
        self.run = apply_released(self.run, pods, at)
        for pod in released:
            self.pods[pod].node = None
        if not self.run.running:
            # The run a requeue was committed for is over: the next run starts afresh.
            self.awaiting_release = False
        self.pods_dirty = True

    def annotate(self, changes: Mapping[str, str | None]) -> None:
        """Merge annotations; a None value removes the key."""
        for key, value in changes.items():
            if value is None:
                self.annotations.pop(key, None)
            else:
                self.annotations[key] = value

    @property
    def status(self) -> str:
        """pending | running | finished | deleted, as the podgroups view shows it."""
        if self.deleted:
            return "deleted"
        if self.run.running:
            return "running"
        return "finished" if self.run.last_start_time is not None else "pending"

    def elasticity(self) -> tuple[bool, int]:
        """(is_elastic, pods it may lose while protected), from the core."""
        if not self.submitted:
            # Unknown gang shape: treated as a non-elastic gang, the side that protects.
            return False, 0
        podgroup = PodGroupPods(
            uid=self.uid,
            pods={name: pod.subgroup for name, pod in self.pods.items()},
            running=self.run.allocated,
            subgroups=tuple(SubGroup(name, count) for name, count in self.subgroups.items()),
        )
        return is_elastic(podgroup), evictable_pods(podgroup, protected=True)


def _expected_runtime(annotations: Mapping[str, str]) -> timedelta | None:
    text = annotations.get(EXPECTED_RUNTIME_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_duration(text)
    except MinRuntimeError:
        return None


def _requeue_not_before(annotations: Mapping[str, str]) -> datetime | None:
    text = annotations.get(REQUEUE_NOT_BEFORE_ANNOTATION)
    if text is None:
        return None
    try:
        return parse_rfc3339(text)
    except MinRuntimeError:
        return None


# psycopg placeholders: these run on the driver's cursor (see PodGroupProjection._load).
_LOAD_STATE: Final = (
    "SELECT uid, submitted, name, namespace, queue, node_pool, priority, preemptible, status,"
    " start_time, last_start_time, ended_at, annotations, submitted_at, awaiting_release"
    " FROM minruntime_state.podgroup_state WHERE uid = ANY(%(uids)s)"
)
_LOAD_PODS: Final = (
    "SELECT uid, name, subgroup, gpu, node, allocated FROM minruntime_state.pod_state"
    " WHERE uid = ANY(%(uids)s) ORDER BY uid, name"
)
_LOAD_SUBGROUPS: Final = (
    "SELECT uid, name, min_available FROM minruntime_state.subgroup_state"
    " WHERE uid = ANY(%(uids)s) ORDER BY uid, ctid"
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
}
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
_DELETE_PODS: Final = "DELETE FROM minruntime_state.pod_state WHERE uid = ANY(:uids)"
_DELETE_SUBGROUPS: Final = "DELETE FROM minruntime_state.subgroup_state WHERE uid = ANY(:uids)"
# A beneficiary that was allocated, finished or deleted no longer needs its promise.
_DELETE_PROMISES: Final = (
    "DELETE FROM minruntime_state.requeue_promises WHERE beneficiary = ANY(:uids)"
)


class PodGroupProjection:
    """The podgroups a batch touches: loaded in three queries, written in a handful."""

    def __init__(self, conn: Connection, uids: Iterable[str]) -> None:
        self._conn = conn
        self._drafts: dict[str, PodGroupDraft] = {}
        self._touched: dict[str, PodGroupDraft] = {}
        self._nominations: dict[tuple[str, str], dict[str, Any]] = {}
        wanted = sorted(set(uids))
        if wanted:
            self._load(wanted)

    def _load(self, uids: list[str]) -> None:
        # Plain tuples straight from psycopg (same transaction): the rows of a batch's
        # podgroups, pods and subgroups number in the hundreds of thousands per minute, and
        # SQLAlchemy's per-row Row objects cost more than the queries.
        driver = self._conn.connection.driver_connection
        assert driver is not None
        drafts = self._drafts
        with driver.cursor() as cursor:
            cursor.execute(state_sql(self._conn, _LOAD_STATE), {"uids": uids})
            for (
                uid,
                submitted,
                name,
                namespace,
                queue,
                node_pool,
                priority,
                preemptible,
                status,
                start_time,
                last_start_time,
                ended_at,
                annotations,
                submitted_at,
                awaiting_release,
            ) in cursor.fetchall():
                drafts[uid] = PodGroupDraft(
                    uid=uid,
                    submitted=submitted,
                    name=name,
                    namespace=namespace,
                    queue=queue,
                    node_pool=node_pool,
                    priority=priority,
                    preemptible=preemptible,
                    deleted=status == "deleted",
                    run=RunState(frozenset(), start_time, last_start_time, ended_at),
                    annotations=dict(annotations),
                    submitted_at=submitted_at,
                    awaiting_release=awaiting_release,
                    loaded_status=status,
                )
            found = list(drafts)
            if not found:
                return
            allocated: dict[str, set[str]] = {}
            cursor.execute(state_sql(self._conn, _LOAD_PODS), {"uids": found})
            for uid, name, subgroup, gpu, node, is_allocated in cursor.fetchall():
                drafts[uid].pods[name] = Pod(subgroup, gpu, node)
                if is_allocated:
                    allocated.setdefault(uid, set()).add(name)
            for uid, pods in allocated.items():
                draft = drafts[uid]
                run = draft.run
                draft.run = RunState(
                    frozenset(pods), run.start_time, run.last_start_time, run.ended_at
                )
            cursor.execute(state_sql(self._conn, _LOAD_SUBGROUPS), {"uids": found})
            for uid, name, min_available in cursor.fetchall():
                drafts[uid].subgroups[name] = min_available

    def draft(self, uid: str) -> PodGroupDraft:
        """The podgroup to change; a placeholder (submitted=False) when it is not known yet."""
        draft = self._drafts.get(uid)
        if draft is None:
            draft = self._drafts[uid] = PodGroupDraft(uid=uid, pods_dirty=True)
        self._touched[uid] = draft
        return draft

    def nominate(self, uid: str, nominated_by: str, reason: str | None, at: datetime) -> None:
        """Record a requeue nomination (the latest one per nominator counts)."""
        self.draft(uid)
        self._nominations[(uid, nominated_by)] = {
            "uid": uid,
            "nominated_by": nominated_by,
            "reason": reason,
            "nominated_at": at,
        }

    def flush(self) -> None:
        """Write every touched podgroup, its pods and subgroups when they changed."""
        if not self._touched:
            return
        drafts = list(self._touched.values())
        insert_many(
            self._conn,
            "minruntime_state.podgroup_state",
            _STATE_COLUMNS,
            [_state_params(draft) for draft in drafts],
            conflict=_STATE_CONFLICT,
        )
        pod_owners = [draft for draft in drafts if draft.pods_dirty]
        if pod_owners:
            self._conn.execute(
                state_text(self._conn, _DELETE_PODS), {"uids": [draft.uid for draft in pod_owners]}
            )
            pods = [
                {
                    "uid": draft.uid,
                    "name": name,
                    "subgroup": pod.subgroup,
                    "gpu": pod.gpu,
                    "node": pod.node,
                    "allocated": name in draft.run.allocated,
                }
                for draft in pod_owners
                for name, pod in draft.pods.items()
            ]
            insert_many(self._conn, "minruntime_state.pod_state", _POD_COLUMNS, pods)
        group_owners = [draft for draft in drafts if draft.subgroups_dirty]
        if group_owners:
            self._conn.execute(
                state_text(self._conn, _DELETE_SUBGROUPS),
                {"uids": [draft.uid for draft in group_owners]},
            )
            groups = [
                {"uid": draft.uid, "name": name, "min_available": count}
                for draft in group_owners
                for name, count in draft.subgroups.items()
            ]
            insert_many(self._conn, "minruntime_state.subgroup_state", _SUBGROUP_COLUMNS, groups)
        kept = [d.uid for d in drafts if d.loaded_status == "pending" and d.status != "pending"]
        if kept:
            self._conn.execute(state_text(self._conn, _DELETE_PROMISES), {"uids": kept})
        insert_many(
            self._conn,
            "minruntime_state.nominations",
            _NOMINATION_COLUMNS,
            list(self._nominations.values()),
            conflict=_NOMINATION_CONFLICT,
        )


def _state_params(draft: PodGroupDraft) -> dict[str, Any]:
    elastic, protected_evictable = draft.elasticity()
    run = draft.run
    return {
        "uid": draft.uid,
        "name": draft.name,
        "namespace": draft.namespace,
        "queue": draft.queue,
        "node_pool": draft.node_pool,
        "priority": draft.priority,
        "preemptible": draft.preemptible,
        "status": draft.status,
        "start_time": run.start_time,
        "last_start_time": run.last_start_time,
        "ended_at": run.ended_at,
        "running_pods": run.running_pods,
        "is_elastic": elastic,
        "protected_evictable_pods": protected_evictable,
        "annotations": draft.annotations,
        "expected_runtime": _expected_runtime(draft.annotations),
        "requeue_not_before": _requeue_not_before(draft.annotations),
        "submitted": draft.submitted,
        "submitted_at": draft.submitted_at,
        "awaiting_release": draft.awaiting_release and draft.status == "running",
    }
