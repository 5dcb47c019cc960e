"""The projections of a run of decoded events, in memory between loading and writing.

``Projections`` is what ``apply_batch`` and a replay share: the queue tree, the podgroups,
the node-pool configs and the nodes that a run of events touches. ``include`` loads what the
next events will need (the podgroups they name that were not loaded yet, the queue tree once
a queue event comes), ``apply`` applies one event in memory (the core's errors propagate and
change nothing), ``flush`` writes what changed.

A Kafka batch is one run (``apply_batch``: load, apply, flush, inside its transaction). A
replay of the event log makes runs as long as it likes: it includes each page of the log as it
reads it and flushes only when a run holds many podgroups, before a decision (which the
requeue worker's code applies to the stored rows) and at a boundary its caller wants to look
at (there the run goes on from what it wrote: ``flush(keep=True)``), so each podgroup is
loaded about once per run and written once per run or boundary, instead of once per batch.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final

from sqlalchemy import Connection

from minruntime import events as ev
from minruntime.core import (
    IgnoredValue,
    MinRuntimeConfig,
    MinRuntimeError,
    NodePoolConfigs,
    QueueTree,
    RunRules,
    ended_run,
    ignored_values,
)
from minruntime.ingest.podgroups import PodGroupData, PodGroupProjection, podgroup_change
from minruntime.ingest.queues import QueueProjection
from minruntime.ingest.runs import RunLog
from minruntime.store import decisions as stored_decisions
from minruntime.store.decisions import insert_handshakes
from minruntime.store.node_pools import read_node_pool_configs, upsert_configs, write_nodes
from minruntime.store.queues import load_tree, lock_tree
from minruntime.store.schema import StateTables

PODGROUP_TYPES: Final = (
    ev.PodGroupSubmittedData,
    ev.PodGroupAllocatedData,
    ev.PodGroupReleasedData,
    ev.PodGroupAnnotatedData,
    ev.PodGroupDeletedData,
    ev.RequeueNominatedData,
    ev.RequeueAbandonedData,
)
QUEUE_TYPES: Final = (ev.QueueUpsertedData, ev.QueueDeletedData)
_PODGROUP_MODELS: Final = frozenset(PODGROUP_TYPES)
_QUEUE_MODELS: Final = frozenset(QUEUE_TYPES)
_RUN_RULES: Final = "minruntime.run_rules"


class Projections:
    """Every projection a run of input events touches: loaded as needed, written by flush."""

    def __init__(self, conn: Connection, tables: StateTables, *, unstored: bool = False) -> None:
        """``unstored``: ``tables`` hold no podgroup yet (a replay's first run into a new
        shadow; never the live state): the podgroups are not looked for, only folded."""
        if unstored and tables.is_live:
            raise RuntimeError("the live state is never assumed empty")
        self._conn = conn
        self._tables = tables
        self._queues: QueueProjection | None = None
        self.podgroups = PodGroupProjection(conn, tables, (), unstored=unstored)
        self._configs: dict[str, dict[str, Any]] = {}
        self._nodes: dict[str, dict[str, Any] | None] = {}
        self.runs = RunLog(conn, tables)
        # requeue.abandoned events of this run: their decision log rows (written by flush).
        self._abandoned: dict[str, dict[str, Any]] = {}
        # requeue.checkpoint events of this run: their handshake rows, by decision id.
        self._handshakes: dict[str, dict[str, Any]] = {}
        # The rules in force for the runs that end (the tree and configs as of now); None:
        # to be read (again) before the next run's end. The configs this run of events set.
        self._rules: RunRules | None = None
        self._pool_configs: dict[str, MinRuntimeConfig] = {}
        self._changes_tree = False
        # Applied events that carried a value the fold ignored, by field (a warning metric).
        self.ignored: Counter[IgnoredValue] = Counter()

    @property
    def podgroup_count(self) -> int:
        """How many podgroups this run has loaded or touched (what a flush may write)."""
        return self.podgroups.size

    def include(self, events: Iterable[ev.Event]) -> None:
        """Load what ``events`` will need: their podgroups, the queue tree if one is a queue's."""
        uids = []
        for event in events:
            data = event.data
            # By the type's own class, as HANDLERS: an isinstance of a pydantic model costs
            # more (ABCMeta's check); a podgroup event's subject is its uid.
            if type(data) in _PODGROUP_MODELS:
                uids.append(event.subject)
            elif self._queues is None and type(data) in _QUEUE_MODELS:
                self._queues = self._queue_projection()
        self.podgroups.include(uids)

    def include_named(self, uids: Iterable[str], *, queue_tree: bool) -> None:
        """Load what entries not decoded yet will need: the podgroups ``uids`` (their logged
        subjects) and, with ``queue_tree``, the queue tree (a replay decodes each entry just
        before applying it, so that no page of decoded events is kept alive)."""
        if queue_tree and self._queues is None:
            self._queues = self._queue_projection()
        self.podgroups.include(uids)

    def apply(self, event: ev.Event) -> None:
        """Apply one event in memory; the core's errors propagate, changing nothing.

        What ``include`` or ``include_named`` did not load is loaded here, one query each:
        the processor includes its whole batch first, and a replay the subjects the log names
        (an entry whose subject column disagrees with its event is still applied right).
        """
        data = event.data
        handler = HANDLERS.get(type(data))
        if (
            handler is None
        ):  # pragma: no cover - decode_event only returns input types on input topics
            raise MinRuntimeError(f"{event.type} events are not applied by the processor")
        handler(self, event, data)

    # -- one handler per input type, registered in HANDLERS ----------------------------------
    def _podgroup(self, uid: str) -> None:
        if not self.podgroups.included(uid):
            self.podgroups.include((uid,))

    def _fold(self, event: ev.Event, data: PodGroupData) -> None:
        self._podgroup(data.uid)
        change = podgroup_change(data, event.time)
        before = self.podgroups.apply(data.uid, change)
        ignored = ignored_values(before, change)
        if ignored:  # most events (every allocation and release) ignore nothing
            self.ignored.update(ignored)
        ended = ended_run(before, self.podgroups.state(data.uid), change, event.time)
        if ended is not None:
            self.runs.record(ended, event.source, event.id, self._run_rules())

    def _abandon(self, event: ev.Event, data: ev.RequeueAbandonedData) -> None:
        self._fold(event, data)
        self._abandoned[event.id] = abandoned_row(event.id, data, event.time)

    def _nominate(self, event: ev.Event, data: ev.RequeueNominatedData) -> None:
        self._podgroup(data.uid)
        self.podgroups.nominate(data.uid, data.nominated_by, data.reason, event.time)

    def _upsert_queue(self, event: ev.Event, data: ev.QueueUpsertedData) -> None:
        self._queue_tree().upsert(data.to_queue())
        self._rules = None

    def _delete_queue(self, event: ev.Event, data: ev.QueueDeletedData) -> None:
        self._queue_tree().delete(data.name)
        self._rules = None

    def _update_config(self, event: ev.Event, data: ev.ConfigUpdatedData) -> None:
        config = data.to_config()
        self._change_tree()
        self._pool_configs[data.node_pool] = config
        self._rules = None
        self._configs[data.node_pool] = {
            "node_pool": data.node_pool,
            "preempt": config.default_preempt_min_runtime,
            "reclaim": config.default_reclaim_min_runtime,
            "method": str(config.reclaim_resolve_method),
            "delay": config.default_requeue_delay,
            "max_requeues": config.max_requeues,
            "max_requeues_window": config.max_requeues_window,
            "max_evictions": config.max_evictions_per_window,
            "eviction_window": config.eviction_window,
            "min_eviction_gap": config.min_eviction_gap,
        }

    def _checkpoint(self, event: ev.Event, data: ev.RequeueCheckpointData) -> None:
        self._handshakes.setdefault(data.decision, handshake_row(data))

    def _upsert_node(self, event: ev.Event, data: ev.NodeUpsertedData) -> None:
        self._nodes[data.name] = {"name": data.name, "pool": data.node_pool, "gpu": data.gpu}

    def _delete_node(self, event: ev.Event, data: ev.NodeDeletedData) -> None:
        self._nodes[data.name] = None

    def _log_abandoned(self) -> None:
        """The decision log rows of the abandoned requeues (once per event id)."""
        if self._abandoned:
            seen = stored_decisions.recorded_decision_ids(self._conn, self._tables, self._abandoned)
            stored_decisions.insert_decisions(
                self._conn,
                self._tables,
                [row for key, row in self._abandoned.items() if key not in seen],
            )
            self._abandoned = {}

    def _queue_tree(self) -> QueueProjection:
        if self._queues is None:  # nothing of the run touched the tree yet: it is as stored
            self._queues = self._queue_projection()
        return self._queues

    def _queue_projection(self) -> QueueProjection:
        self._change_tree()
        return QueueProjection(self._conn, self._tables)

    def _change_tree(self) -> None:
        """Before the tree or a configuration changes: the tree lock, exclusively."""
        if not self._changes_tree:
            lock_tree(self._conn, self._tables, change=True)
            self._changes_tree = True

    def _run_rules(self) -> RunRules:
        """The rules in force now for a run that ends: the tree and the node pools' configs
        as this run of events has them (read under the tree lock, shared)."""
        if self._rules is None:
            lock_tree(self._conn, self._tables, change=False)
            tree: QueueTree = (
                self._queues.tree
                if self._queues is not None
                else load_tree(self._conn, self._tables)
            )
            stored, _ = read_node_pool_configs(self._conn, self._tables)
            configs = NodePoolConfigs({**stored.by_pool, **self._pool_configs})
            # Kept on the connection while the tree and the configs stay the same: the
            # windows of each queue are resolved once, not once per batch.
            key = (_RUN_RULES, self._tables.schema)
            kept = self._conn.info.get(key)
            if kept is not None and kept[0] is tree and kept[1] == configs:
                self._rules = kept[2]
            else:
                self._rules = RunRules(tree, configs)
                self._conn.info[key] = (tree, configs, self._rules)
        return self._rules

    def flush(self, *, keep: bool = False) -> None:
        """Write everything the run changed (the queue tree, podgroups, configs, nodes).

        ``keep``: the run goes on after it from what it wrote, without loading its podgroups
        again (a replay at a boundary its caller looks at); only while nothing else writes
        their rows. The queue tree is loaded again if a later event needs it.
        """
        if self._queues is not None:
            self._queues.flush()
        self.podgroups.flush(keep=keep)
        upsert_configs(self._conn, self._tables, list(self._configs.values()))
        write_nodes(self._conn, self._tables, self._nodes)
        self.runs.flush()
        self._log_abandoned()
        insert_handshakes(self._conn, self._tables, list(self._handshakes.values()))
        self._handshakes = {}
        if keep:
            self._queues = None
            self._configs = {}
            self._nodes = {}
            self._pool_configs = {}
            self._rules = None


HANDLERS: Final[Mapping[type[ev.EventData], Callable[[Projections, ev.Event, Any], None]]] = {
    ev.PodGroupSubmittedData: Projections._fold,
    ev.PodGroupAllocatedData: Projections._fold,
    ev.PodGroupReleasedData: Projections._fold,
    ev.PodGroupAnnotatedData: Projections._fold,
    ev.PodGroupDeletedData: Projections._fold,
    ev.RequeueAbandonedData: Projections._abandon,
    ev.RequeueNominatedData: Projections._nominate,
    ev.QueueUpsertedData: Projections._upsert_queue,
    ev.QueueDeletedData: Projections._delete_queue,
    ev.ConfigUpdatedData: Projections._update_config,
    ev.RequeueCheckpointData: Projections._checkpoint,
    ev.NodeUpsertedData: Projections._upsert_node,
    ev.NodeDeletedData: Projections._delete_node,
}
"""What ``Projections.apply`` does with each input type's data (one entry per input type:
tests/unit/test_event_registry.py)."""


def abandoned_row(event_id: str, data: ev.RequeueAbandonedData, at: datetime) -> dict[str, Any]:
    """The ``requeue_decision_log`` row of a ``requeue.abandoned`` event (decided at ``at``,
    when the evictor gave up; the reason; the cooldown the abandoned decision had written)."""
    return {
        "decision_id": event_id,
        "uid": data.uid,
        "decided_at": at,
        "outcome": "abandoned",
        "nominated_by": list(data.nominated_by),
        "run_start": None,
        "reason": data.reason,
        "beneficiaries": [],
        "requeue_not_before": data.requeue_not_before,
        "delay_problem": None,
        "placements": [],
        "delay_ends_at": None,
        "quota_shares": None,
    }


def handshake_row(data: ev.RequeueCheckpointData) -> dict[str, Any]:
    """The ``checkpoint_handshakes`` row of a ``requeue.checkpoint`` event."""
    return {
        "decision_id": data.decision,
        "uid": data.uid,
        "outcome": data.outcome,
        "requested_at": data.requested_at,
        "grace": data.grace,
        "ended_at": data.ended_at,
        "checkpointed_at": data.checkpointed_at,
    }
