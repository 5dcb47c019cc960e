"""The events that make the service agree with the cluster (`minruntime kube diff --repair`).

Pure: the listing, the service's rows and the differences in; events out. The events of what
the cluster holds come from a fresh ``ClusterMirror`` fed the listing as the bridge feeds a
first listing, so they say exactly what the bridge would (queue, priority, node pool, the
allocation's time). Of those, only what a differing field needs is sent:

- the podgroup unknown to the service, or another queue: its ``podgroup.submitted``;
- another status or number of running pods: ``podgroup.allocated`` of each pod the cluster
  runs and the service does not hold, then a ``podgroup.released`` of each pod the service
  holds and the cluster does not run (its end, else ``deleted`` now); with no pod names (a
  role that cannot read them), all pods when the cluster runs none;
- an annotation: ``podgroup.annotated`` with the cluster's value (null: remove);
- gone from the cluster: ``podgroup.deleted``.

Not repaired (answered as notes): a start time (the service's start moves only with a new
run), a podgroup deleted in the service (deletion is final), one the bridge cannot map.

Ids: ``mapping.event_id`` of the podgroup, the event's content and a digest of the service's
row as read. The same repair of the same state sends the same ids (a harmless duplicate);
once the service's row changed, they are new, so a repair is never swallowed as a duplicate
of an event the service applied long ago. Source: ``minruntime/kube-diff``, for the audit.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

from minruntime.cluster import mapping
from minruntime.cluster.drift import (
    COMPARED_ANNOTATIONS,
    DELETED,
    QUEUE,
    RUNNING_PODS,
    START_TIME,
    STATUS,
    ClusterPodGroup,
    Drift,
    ServicePodGroup,
)
from minruntime.cluster.mirror import ClusterMirror, Emission, Kind, MirrorOptions
from minruntime.cluster.objects import ApiObject
from minruntime.events import Event, EventType, new_event

SOURCE: Final = "minruntime/kube-diff"
_ROLE: Final = "podgroups"


@dataclass(frozen=True)
class Repair:
    """The events to send, in order, and what cannot be repaired (one line each)."""

    emissions: tuple[Emission, ...]
    notes: tuple[str, ...]


def mirrored(
    listing: Mapping[Kind, Sequence[ApiObject]],
    options: MirrorOptions,
    clock: Callable[[], datetime],
) -> dict[str, list[Event]]:
    """The podgroup events a bridge without memory sends for ``listing``, by podgroup uid.

    Fed as the bridge feeds a term's first listing: every kind's listing opened first, so
    each podgroup is synced once, with all its pods, when the last one ends.
    """
    found: dict[str, list[Event]] = {}
    for emission in ClusterMirror(options, clock).list_all(listing):
        if emission.role == _ROLE:
            found.setdefault(emission.event.subject, []).append(emission.event)
    return found


def repair(
    drift: Drift,
    cluster: Mapping[str, ClusterPodGroup],
    service: Iterable[ServicePodGroup],
    events: Mapping[str, Sequence[Event]],
    now: datetime,
) -> Repair:
    """What makes each differing podgroup agree (``events``: ``mirrored``'s answer)."""
    rows = {row.uid: row for row in service}
    emissions: list[Emission] = []
    notes: list[str] = []
    fields: dict[str, set[str]] = {}
    for difference in drift.differences:
        fields.setdefault(difference.uid, set()).add(difference.field)
    for uid, differing in fields.items():
        plan = _Plan(uid, cluster.get(uid), rows.get(uid), events.get(uid, ()), now)
        plan.make(differing)
        emissions += plan.emissions
        notes += plan.notes
    return Repair(tuple(emissions), tuple(notes))


@dataclass(eq=False)
class _Plan:
    """The repair of one podgroup."""

    uid: str
    side: ClusterPodGroup | None
    row: ServicePodGroup | None
    events: Sequence[Event]
    now: datetime
    emissions: list[Emission] = dataclasses.field(default_factory=list, init=False)
    notes: list[str] = dataclasses.field(default_factory=list, init=False)

    @functools.cached_property
    def stamp(self) -> str:
        """The service row's digest ("absent": no row), which the repair's event ids carry."""
        return "absent" if self.row is None else mapping.digest(dataclasses.asdict(self.row))

    def make(self, fields: set[str]) -> None:
        side, row = self.side, self.row
        if side is None:
            self._emit(EventType.PODGROUP_DELETED, {"uid": self.uid}, self.now)
            return
        name = f"{mapping.namespace_of(side.podgroup)}/{mapping.name_of(side.podgroup)}"
        if row is not None and row.status == DELETED:
            self.notes.append(f"{name} ({self.uid}): deleted in the service; a deletion is final")
            return
        submitted = [e for e in self.events if e.type == EventType.PODGROUP_SUBMITTED]
        if (row is None or QUEUE in fields) and not submitted:
            self.notes.append(f"{name} ({self.uid}): the bridge cannot map it (a note says why)")
            return
        if row is None or QUEUE in fields:
            self._resend(submitted[-1])
        self._annotate(fields)
        if row is None or fields & {STATUS, RUNNING_PODS}:
            self._allocate()
            self._release(name)
        if START_TIME in fields:
            self.notes.append(
                f"{name} ({self.uid}): start_time not repaired (it moves only with a new run)"
            )

    def _annotate(self, fields: set[str]) -> None:
        assert self.side is not None
        keys = [key for key in COMPARED_ANNOTATIONS if key in fields]
        if self.row is None or not keys:
            return  # an unknown podgroup's submission carries its annotations
        now = mapping.annotations_of(self.side.podgroup)
        data = {"uid": self.uid, "annotations": {key: now.get(key) for key in keys}}
        self._emit(
            EventType.PODGROUP_ANNOTATED, data, mapping.changed_at(self.side.podgroup) or self.now
        )

    def _allocate(self) -> None:
        assert self.side is not None
        running = {mapping.name_of(pod) for pod in self.side.running}
        held = set() if self.row is None or self.row.running is None else set(self.row.running)
        for event in self.events:
            if event.type != EventType.PODGROUP_ALLOCATED:
                continue
            pods = {pod["name"] for pod in _data(event)["pods"]}
            if pods <= running and not pods <= held:
                self._resend(event)

    def _release(self, name: str) -> None:
        side, row = self.side, self.row
        assert side is not None
        if row is None or row.running_pods == 0:
            return
        if row.running is None:
            if side.running:
                self.notes.append(
                    f"{name} ({self.uid}): which pods to release is not known (this database "
                    "role cannot read pod names; the runtime role can)"
                )
            else:
                everything = {"uid": self.uid, "reason": "deleted"}
                self._emit(EventType.PODGROUP_RELEASED, everything, self.now)
            return
        running = {mapping.name_of(pod) for pod in side.running}
        pods = {mapping.name_of(pod): pod for pod in side.pods}
        for pod_name in row.running:
            if pod_name in running:
                continue
            pod = pods.get(pod_name)
            ended = None if pod is None else mapping.finished(pod)
            reason, time = ("deleted", None) if ended is None else (ended.reason, ended.time)
            data: dict[str, object] = {"uid": self.uid, "pods": [pod_name], "reason": reason}
            self._emit(EventType.PODGROUP_RELEASED, data, time or self.now)

    def _resend(self, event: Event) -> None:
        self._emit(EventType(event.type), _data(event), event.time)

    def _emit(self, event_type: EventType, data: Mapping[str, object], time: datetime) -> None:
        content = mapping.content_digest(str(event_type), data, time)
        event = new_event(
            str(event_type),
            data,
            time=time,
            source=SOURCE,
            id=mapping.event_id(self.uid, "repair", self.stamp, content),
        )
        self.emissions.append(Emission(_ROLE, event))


def _data(event: Event) -> dict[str, Any]:
    return event.data.model_dump(mode="json", by_alias=True, exclude_none=True)
