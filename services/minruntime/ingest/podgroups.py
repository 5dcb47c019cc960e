"""The podgroup projection of a batch: decode -> fold -> store.

The podgroups a batch touches are loaded once (``store.podgroups.load_podgroups``), each
event is mapped to the core's change value (``podgroup_change``) and folded into its
podgroup's state with ``core.fold``, and the states that changed are written once
(``store.podgroups.write_podgroups``). Nominations are not podgroup state: the latest one
per (podgroup, nominator) is kept here and written beside them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any, Final, TypeAlias

from sqlalchemy import Connection

from minruntime.core import (
    PREEMPTION_DELAY_ANNOTATION,
    Abandonment,
    Allocation,
    Annotation,
    Attribution,
    Deletion,
    PodGroupChange,
    PodGroupState,
    Release,
    Submission,
    fold,
)
from minruntime.core.disruption import TopOwner
from minruntime.events import (
    EventData,
    PodGroupAllocatedData,
    PodGroupAnnotatedData,
    PodGroupDeletedData,
    PodGroupReleasedData,
    PodGroupSubmittedData,
    RequeueAbandonedData,
)
from minruntime.store.podgroups import load_podgroups, write_nominations, write_podgroups
from minruntime.store.schema import StateTables

_DELETION = Deletion()


PodGroupData: TypeAlias = (
    PodGroupSubmittedData
    | PodGroupAllocatedData
    | PodGroupReleasedData
    | PodGroupAnnotatedData
    | PodGroupDeletedData
    | RequeueAbandonedData
)
"""The data of the events folded into a podgroup's state (``CHANGES``)."""


def podgroup_change(data: EventData, at: datetime) -> PodGroupChange:
    """The core's change value for a podgroup event's data (``at``: the event's time)."""
    change = CHANGES.get(type(data))
    if change is None:
        raise TypeError(f"{type(data).__name__} is not a podgroup event")
    return change(data, at)


def _release(data: PodGroupReleasedData, at: datetime) -> PodGroupChange:
    eviction = data.eviction
    if eviction is None:
        return Release(data.pods, at, data.reason)
    attribution = Attribution(
        eviction.source, eviction.action, eviction.evictor, eviction.evictor_queue, eviction.at
    )
    return Release(data.pods, at, data.reason, attribution)


def _submission(data: PodGroupSubmittedData, at: datetime) -> PodGroupChange:
    return Submission(
        name=data.name,
        namespace=data.namespace,
        queue=data.queue,
        node_pool=data.node_pool,
        priority=data.priority,
        preemptibility=data.resolved_preemptibility(),
        subgroups=data.to_subgroups(),
        pods=tuple((pod.name, pod.sub_group, pod.gpu) for pod in data.pods),
        annotations=data.annotations,
        at=at,
        preemption_delay=data.preemption_delay,
        pod_preemption_delays=tuple(
            (pod.name, pod.annotations[PREEMPTION_DELAY_ANNOTATION])
            for pod in data.pods
            if pod.annotations and PREEMPTION_DELAY_ANNOTATION in pod.annotations
        ),
        owner=None
        if data.top_owner is None
        else TopOwner(data.top_owner.kind, data.top_owner.name, data.top_owner.uid),
    )


CHANGES: Final[Mapping[type[EventData], Callable[[Any, datetime], PodGroupChange]]] = {
    PodGroupSubmittedData: _submission,
    PodGroupAllocatedData: lambda data, at: Allocation(
        tuple((pod.name, pod.node) for pod in data.pods), at
    ),
    PodGroupReleasedData: _release,
    PodGroupAnnotatedData: lambda data, at: Annotation(data.annotations, at),
    PodGroupDeletedData: lambda data, at: _DELETION,
    RequeueAbandonedData: lambda data, at: Abandonment(data.requeue_not_before),
}
"""The podgroup fold's change value of each podgroup event's data."""


class PodGroupProjection:
    """The podgroups a run of events touches: loaded as asked for, folded, written by flush."""

    def __init__(
        self,
        conn: Connection,
        tables: StateTables,
        uids: Iterable[str],
        *,
        unstored: bool = False,
    ) -> None:
        self._conn = conn
        self._tables = tables
        # The tables hold no podgroup this projection did not write itself (a replay's first
        # run into a new shadow): nothing to load, every uid asked for starts unknown.
        self._unstored = unstored
        # The stored state of every uid asked for so far (unknown uids are absent).
        self._stored: dict[str, PodGroupState] = {}
        self._pending: set[str] = set()
        self._asked: set[str] = set()
        # Every podgroup the run touched, as folded so far (written by flush when changed).
        self._states: dict[str, PodGroupState] = {}
        self._nominations: dict[tuple[str, str], dict[str, Any]] = {}
        # Podgroups touched without being asked for first (``size`` counts them too).
        self._touched_unasked = 0
        self.include(uids)

    @property
    def size(self) -> int:
        """How many podgroups were loaded (asked for) or touched so far."""
        return len(self._asked) + self._touched_unasked

    def include(self, uids: Iterable[str]) -> None:
        """Load the stored state of the ``uids`` not asked for yet (one round of queries)."""
        wanted = set(uids) - self._asked
        if not wanted:
            return
        self._asked |= wanted
        self._touched_unasked -= len(wanted & self._states.keys())
        if self._unstored:
            return
        stored = load_podgroups(self._conn, self._tables, wanted)
        self._stored.update(stored.states)
        self._pending |= stored.pending

    def included(self, uid: str) -> bool:
        """Whether ``uid`` was asked for (loaded) or touched already."""
        return uid in self._asked or uid in self._states

    def state(self, uid: str) -> PodGroupState:
        """The podgroup as folded so far; a placeholder when it is not known yet."""
        state = self._states.get(uid)
        if state is None:
            state = self._stored.get(uid)
            if state is None:
                state = PodGroupState(uid)
            self._states[uid] = state
            if uid not in self._asked:
                self._touched_unasked += 1
        return state

    def apply(self, uid: str, change: PodGroupChange) -> PodGroupState:
        """Fold ``change`` into the podgroup (the core's errors propagate; nothing changes);
        the state before it."""
        before = self.state(uid)
        self._states[uid] = fold(before, change)
        return before

    def nominate(self, uid: str, nominated_by: str, reason: str | None, at: datetime) -> None:
        """Record a requeue nomination (the latest one per nominator counts)."""
        self.state(uid)
        self._nominations[(uid, nominated_by)] = {
            "uid": uid,
            "nominated_by": nominated_by,
            "reason": reason,
            "nominated_at": at,
        }

    def flush(self, *, keep: bool = False) -> None:
        """Write the podgroups the run changed, their pods and subgroups when they changed,
        placeholders for the podgroups only named (nominations) and the nominations.

        A podgroup the run only named is not written back (its row, locked when loaded, is as
        stored): no statement touches what did not change. ``keep``: the run goes on from
        what it wrote (the written states become the stored ones), so the podgroups it holds
        are not loaded again; only while nothing else writes their rows.
        """
        if not self._states:
            return
        stored = self._stored
        changed, placeholders = [], []
        for state in self._states.values():
            before = stored.get(state.uid)
            if state is before:
                continue
            if before is None and state == PodGroupState(state.uid):
                placeholders.append(state)
            else:
                changed.append(state)
        pods_changed, subgroups_changed = [], []
        for state in changed:
            before = stored.get(state.uid)
            # The fold returns the same values for what it did not change.
            if (
                before is None
                or state.pods is not before.pods
                or state.allocated is not before.allocated
            ):
                pods_changed.append(state)
            if state.spec is not (None if before is None else before.spec):
                subgroups_changed.append(state)
        pending = self._pending
        left_pending = [
            state.uid for state in changed if state.uid in pending and state.status != "pending"
        ]
        write_podgroups(
            self._conn,
            self._tables,
            changed,
            stored=stored,
            pods_changed=pods_changed,
            subgroups_changed=subgroups_changed,
            left_pending=left_pending,
            placeholders=placeholders,
        )
        write_nominations(self._conn, self._tables, list(self._nominations.values()))
        if keep:
            # What was written is what is stored now; the next flush looks only at the states
            # touched after this one.
            for state in (*changed, *placeholders):
                if state.status == "pending":
                    pending.add(state.uid)
                else:
                    pending.discard(state.uid)
            self._stored.update(self._states)
            self._asked |= self._states.keys()
            self._touched_unasked = 0
            self._states = {}
            self._nominations.clear()
