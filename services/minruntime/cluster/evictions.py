"""Who evicted a pod: KAI's ``Evict`` Events, its ``last-eviction-timestamp`` and the pods'
``DisruptionTarget`` condition, correlated with pod deletions (pure; the clock is passed in).

By default KAI evicts by deleting the pod (pkg/scheduler/cache/evictor/default_evictor.go):
nothing on the pod says why it went. What does say it is podgroup-level: an ``Evict`` Event
on the PodGroup (pkg/scheduler/cache/status_updater/default_status_updater.go: the action,
the evicting podgroup) and the PodGroup's ``kai.scheduler/last-eviction-timestamp``, written
asynchronously. A **signal** is one of those, reduced to a time and what it names; a pod's
deletion and a signal of its PodGroup **belong together** when the deletion was asked for
within the window W of the signal's time (both the cluster's clocks) and the pod existed at
the signal's time. Whichever reaches the bridge first:

- a signal first: it is kept (a few per podgroup, a bounded number of podgroups); the pods
  whose deletion comes next are matched against it;
- a deletion first: a pod already terminating is linked when its signal comes; a pod gone
  (or ended while terminating) is *held* up to W (of the bridge's clock, from when its
  deletion was asked for) for its signal, then sent unattributed.

A signal that comes after its deletion was sent unattributed is *late*: ignored and counted,
never a second release. Every map is capped; bad input is counted by ``Tally`` with a fixed
set of labels (``SIGNALS`` x ``OUTCOMES``), never raised.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Final

from minruntime.cluster import mapping
from minruntime.cluster.objects import ApiObject
from minruntime.core import format_rfc3339
from minruntime.events.types import MAX_LABEL, MAX_NAME

EVICT_REASON: Final = "Evict"
PODGROUP_KIND: Final = "PodGroup"
# The list/watch field selector of the Events the bridge reads.
EVICT_EVENT_SELECTOR: Final = f"involvedObject.kind={PODGROUP_KIND},reason={EVICT_REASON}"
LAST_EVICTION_ANNOTATION: Final = "kai.scheduler/last-eviction-timestamp"
# The Event's annotations (default_status_updater.go, Evicted()).
ACTION_ANNOTATION: Final = "evictor-action-type"
EVICTOR_NAME_ANNOTATION: Final = "evictor-pod-group-name"
EVICTOR_NAMESPACE_ANNOTATION: Final = "evictor-pod-group-namespace"
GANG_ANNOTATION: Final = "num-evicted-pods"
_EVENT_ANNOTATIONS: Final = (
    ACTION_ANNOTATION,
    EVICTOR_NAME_ANNOTATION,
    EVICTOR_NAMESPACE_ANNOTATION,
    GANG_ANNOTATION,
)

EVENT: Final = "event"
ANNOTATION: Final = "annotation"
CONDITION: Final = "condition"
SIGNALS: Final = (EVENT, ANNOTATION, CONDITION)
# What became of a signal (the metric's labels: a fixed set).
ACCEPTED: Final = "accepted"  # kept, to attribute the deletions it belongs to
REPEATED: Final = "repeated"  # the same Event again with a higher count: merged
DUPLICATE: Final = "duplicate"  # the same Event, same count: nothing new
OTHER_SOURCE: Final = "other_source"  # an Evict Event of another component
UNANNOTATED: Final = "unannotated"  # an Event without KAI's annotations: no action, no evictor
MALFORMED: Final = "malformed"  # an annotation that is not a valid action or podgroup name
UNKNOWN_EVICTOR: Final = "unknown_evictor"  # the evicting podgroup is not (or no longer) known
BAD_TIME: Final = "bad_time"  # no readable time
FUTURE: Final = "future"  # later than the bridge's clock + FUTURE_TOLERANCE
STALE: Final = "stale"  # older than the run it would end (or of a PodGroup made again since)
LATE: Final = "late"  # its deletion was already sent unattributed
DROPPED: Final = "dropped"  # a cap made room
OUTCOMES: Final = (
    ACCEPTED,
    REPEATED,
    DUPLICATE,
    OTHER_SOURCE,
    UNANNOTATED,
    MALFORMED,
    UNKNOWN_EVICTOR,
    BAD_TIME,
    FUTURE,
    STALE,
    LATE,
    DROPPED,
)
# The attribution a deletion's release went out with ("none": plain).
ATTRIBUTIONS: Final = (EVENT, ANNOTATION, CONDITION, "none")

MAX_WINDOW_SECONDS: Final = 60.0
# A signal's time may be this far ahead of the bridge's clock (clocks of nodes differ).
FUTURE_TOLERANCE: Final = timedelta(seconds=60)
# Caps: podgroups with kept signals, signals per podgroup, held releases, linked pods, Events
# remembered (for duplicates), podgroups with releases sent unattributed (for late signals).
MAX_SIGNAL_GROUPS: Final = 10_000
MAX_SIGNALS_PER_GROUP: Final = 4
MAX_HELD: Final = 10_000
MAX_LINKS: Final = 50_000
MAX_EVENTS_SEEN: Final = 10_000
MAX_PLAIN_GROUPS: Final = 10_000
MAX_PLAIN_PER_GROUP: Final = 16

_ACTION = re.compile(r"[a-z0-9]([a-z0-9._-]{0,61}[a-z0-9])?")
_NAMESPACE = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?")

GroupKey = tuple[str, str]  # (namespace, PodGroup name)
Tally = Callable[[str, str], None]  # (signal, outcome)
# Values the mirror leaves out of what it sends (minruntime_kube_bridge_ignored_values_total).
QUEUE_DISRUPTION: Final = "queue_disruption"
TOP_OWNER_METADATA: Final = "top_owner_metadata"
IGNORED_VALUES: Final = (QUEUE_DISRUPTION, TOP_OWNER_METADATA)


def no_tally(signal: str, outcome: str) -> None:
    """A Tally that counts nothing."""


@dataclass(frozen=True)
class Signal:
    """What one signal says: when, and (an Event only) by which action and podgroup."""

    source: str  # EVENT | ANNOTATION | CONDITION
    at: datetime
    action: str | None = None
    evictor: str | None = None  # "namespace/name"
    evictor_queue: str | None = None

    def wire(self) -> dict[str, object]:
        """The release's ``eviction`` object (the contract's EvictionAttribution)."""
        named = {"action": self.action, "evictor": self.evictor, "evictorQueue": self.evictor_queue}
        found = {key: value for key, value in named.items() if value is not None}
        return {"source": self.source, "at": format_rfc3339(self.at), **found}

    def merged(self, other: Signal) -> Signal:
        """One eviction said twice (an Event and the annotation, an Event again): the Event's
        time and whatever either names."""
        first, second = (
            (self, other) if self.source == EVENT or other.source != EVENT else (other, self)
        )
        return replace(
            first,
            action=first.action or second.action,
            evictor=first.evictor or second.evictor,
            evictor_queue=first.evictor_queue or second.evictor_queue,
        )


@dataclass(frozen=True)
class EventSignal:
    """An Evict Event read: its PodGroup, that PodGroup's uid (when the Event names it), the
    signal, and what makes a re-delivery of the same Event recognisable."""

    group: GroupKey
    podgroup_uid: str | None
    signal: Signal
    version: tuple[str, str]  # (count, lastTimestamp)


def kept_event(event: ApiObject) -> dict[str, object]:
    """What the bridge keeps of an Event: identity, the involved object, reason, who reported
    it, its times and count, and KAI's four annotations (each cut to a bound)."""
    meta = mapping.metadata(event)
    annotations = meta.get("annotations")
    involved = event.get("involvedObject")
    source = event.get("source")
    kept_meta = {
        key: meta[key]
        for key in ("uid", "name", "namespace", "resourceVersion", "creationTimestamp")
        if meta.get(key) is not None
    }
    if isinstance(annotations, Mapping):
        kept_meta["annotations"] = {
            key: str(annotations[key])[: MAX_NAME + 1]
            for key in _EVENT_ANNOTATIONS
            if key in annotations
        }
    kept: dict[str, object] = {"metadata": kept_meta}
    if isinstance(involved, Mapping):
        kept["involvedObject"] = {
            key: involved[key] for key in ("kind", "namespace", "name", "uid") if key in involved
        }
    if isinstance(source, Mapping) and "component" in source:
        kept["source"] = {"component": source["component"]}
    for key in ("reason", "reportingComponent", "lastTimestamp", "eventTime", "firstTimestamp"):
        if event.get(key) is not None:
            kept[key] = event[key]
    if event.get("count") is not None:
        kept["count"] = event["count"]
    return kept


def read_event(
    event: ApiObject, components: Iterable[str], tally: Tally = no_tally
) -> EventSignal | None:
    """An Evict Event of a PodGroup from one of ``components`` as a signal; None (counted)
    for anything else. The evicting podgroup's queue is left for the caller to look up."""
    involved = event.get("involvedObject")
    if (
        not isinstance(involved, Mapping)
        or involved.get("kind") != PODGROUP_KIND
        or event.get("reason") != EVICT_REASON
    ):
        return None  # the field selector lets none through; a watch line may still lie
    source = event.get("source")
    reporters = {
        str(source.get("component") or "") if isinstance(source, Mapping) else "",
        str(event.get("reportingComponent") or ""),
    } - {""}
    if not reporters & set(components):
        tally(EVENT, OTHER_SOURCE)
        return None
    namespace, name = involved.get("namespace"), involved.get("name")
    if not isinstance(name, str) or not name:
        tally(EVENT, MALFORMED)
        return None
    at = next(
        (
            moment
            for key in ("lastTimestamp", "eventTime", "firstTimestamp")
            if (moment := mapping.parse_time(event.get(key))) is not None
        ),
        mapping.created_at(event),
    )
    if at is None:
        tally(EVENT, BAD_TIME)
        return None
    action, evictor = _attribution(mapping.metadata(event).get("annotations"), tally)
    uid = involved.get("uid")
    count = event.get("count")
    version = (str(count), str(event.get("lastTimestamp") or event.get("eventTime") or ""))
    return EventSignal(
        (str(namespace or mapping.namespace_of(event)), name),
        uid if isinstance(uid, str) and uid else None,
        Signal(EVENT, at, action, evictor),
        version,
    )


def _attribution(annotations: object, tally: Tally) -> tuple[str | None, str | None]:
    """The action and the evicting podgroup an Event's annotations name (sanitised: a value
    that is not a bounded lower-case action, or a valid namespace and name, is left out)."""
    if not isinstance(annotations, Mapping) or not (
        annotations.keys() & {ACTION_ANNOTATION, EVICTOR_NAME_ANNOTATION}
    ):
        tally(EVENT, UNANNOTATED)
        return None, None
    bad = False
    action = str(annotations.get(ACTION_ANNOTATION) or "").strip().lower()
    if not (len(action) <= MAX_LABEL and _ACTION.fullmatch(action)):
        action, bad = "", bad or ACTION_ANNOTATION in annotations
    name = str(annotations.get(EVICTOR_NAME_ANNOTATION) or "")
    namespace = str(annotations.get(EVICTOR_NAMESPACE_ANNOTATION) or "")
    evictor = f"{namespace}/{name}"
    valid = _NAMESPACE.fullmatch(namespace) and _NAME.fullmatch(name) and len(evictor) <= MAX_NAME
    if not valid:
        bad = bad or bool(name or namespace)
    if bad:
        tally(EVENT, MALFORMED)
    return action or None, evictor if valid else None


def condition_signal(pod: ApiObject, tally: Tally = no_tally) -> Signal | None:
    """The pod's DisruptionTarget condition (the Eviction API's, or KAI's with its
    --update-pod-eviction-condition) as a signal of this pod alone; None without one."""
    condition = mapping.condition(pod, "DisruptionTarget")
    if condition is None:
        return None
    at = mapping.parse_time(condition.get("lastTransitionTime"))
    if at is None:
        tally(CONDITION, BAD_TIME)
        at = mapping.deleted_at(pod) or mapping.changed_at(pod)
    if at is None:
        return None
    tally(CONDITION, ACCEPTED)
    return Signal(CONDITION, at)


def requested_at(pod: ApiObject) -> datetime | None:
    """When the pod's deletion was asked for: deletionTimestamp minus its grace period (the
    API server sets both), else deletionTimestamp; None when it has none."""
    deleted = mapping.deleted_at(pod)
    if deleted is None:
        return None
    grace = mapping.metadata(pod).get("deletionGracePeriodSeconds")
    if isinstance(grace, int) and not isinstance(grace, bool) and 0 <= grace <= 10**9:
        return deleted - timedelta(seconds=grace)
    return deleted


@dataclass(frozen=True)
class Held:
    """A release waiting up to its deadline for a signal of its PodGroup."""

    podgroup_uid: str
    pod_uid: str
    name: str
    group: GroupKey | None
    pod: ApiObject
    release: mapping.Release
    requested: datetime
    created: datetime | None
    deadline: datetime


class Evictions:
    """The correlation state (see the module docstring): signals per podgroup, held releases,
    terminating pods already attributed, and what was sent unattributed."""

    def __init__(
        self, window: timedelta, clock: Callable[[], datetime], tally: Tally = no_tally
    ) -> None:
        self.window = min(max(window, timedelta(0)), timedelta(seconds=MAX_WINDOW_SECONDS))
        self._clock = clock
        self.tally = tally
        self._signals: OrderedDict[GroupKey, list[Signal]] = OrderedDict()
        self._held: dict[str, Held] = {}
        self._held_by_podgroup: dict[str, set[str]] = {}
        self._links: OrderedDict[str, Signal] = OrderedDict()
        self._events: OrderedDict[str, tuple[str, str]] = OrderedDict()
        self._plain: OrderedDict[GroupKey, deque[tuple[datetime, datetime | None]]] = OrderedDict()
        self.stamps: dict[str, str] = {}  # PodGroup uid -> last-eviction-timestamp seen

    def seen_event(self, uid: str, version: tuple[str, str]) -> bool:
        """Whether this delivery of Event ``uid`` says nothing new (counted as a duplicate);
        a higher count is a repetition (counted), and new."""
        before = self._events.get(uid)
        if before == version:
            self.tally(EVENT, DUPLICATE)
            return True
        if before is not None:
            self.tally(EVENT, REPEATED)
        self._events[uid] = version
        self._events.move_to_end(uid)
        while len(self._events) > MAX_EVENTS_SEEN:
            self._events.popitem(last=False)
        return False

    def forget_event(self, uid: str) -> None:
        """An Event deleted (its TTL): nothing left to recognise."""
        self._events.pop(uid, None)

    def admit(self, signal: Signal, run_start: datetime | None) -> bool:
        """Whether a signal's time is believable: not after the bridge's clock (beyond
        FUTURE_TOLERANCE) nor before the run it would end (counted when not)."""
        if signal.at > self._clock() + FUTURE_TOLERANCE:
            self.tally(signal.source, FUTURE)
            return False
        if run_start is not None and signal.at < run_start:
            self.tally(signal.source, STALE)
            return False
        return True

    def remember(self, group: GroupKey, signal: Signal) -> None:
        """Keep an admitted signal for the deletions it belongs to (merged with one of the
        same eviction: within W, the same evictor or none); late when a deletion it belongs
        to was sent unattributed already."""
        late = any(
            self._belongs(signal, requested, created)
            for requested, created in self._plain.get(group, ())
        )
        self.tally(signal.source, LATE if late else ACCEPTED)
        kept = self._signals.pop(group, [])
        for index, other in enumerate(kept):
            same_evictor = (
                None in (other.evictor, signal.evictor) or other.evictor == signal.evictor
            )
            if abs(other.at - signal.at) <= self.window and same_evictor:
                kept[index] = other.merged(signal)
                break
        else:
            kept.append(signal)
            kept.sort(key=lambda known: known.at)
            del kept[:-MAX_SIGNALS_PER_GROUP]
        self._signals[group] = kept
        if len(self._signals) > MAX_SIGNAL_GROUPS:
            self._signals.popitem(last=False)
            self.tally(signal.source, DROPPED)

    def forget_group(self, group: GroupKey, podgroup_uid: str) -> None:
        """A PodGroup deleted: its signals and sent releases go (its held ones are flushed by
        the caller first)."""
        self._signals.pop(group, None)
        self._plain.pop(group, None)
        self.stamps.pop(podgroup_uid, None)

    def _belongs(self, signal: Signal, requested: datetime, created: datetime | None) -> bool:
        return abs(requested - signal.at) <= self.window and (
            created is None or created <= signal.at
        )

    def match(
        self, group: GroupKey | None, requested: datetime, created: datetime | None
    ) -> Signal | None:
        """The kept signal a deletion asked for at ``requested`` belongs to (the nearest)."""
        if group is None:
            return None
        fitting = [s for s in self._signals.get(group, ()) if self._belongs(s, requested, created)]
        return min(fitting, key=lambda s: abs(s.at - requested)) if fitting else None

    def match_unseen(
        self, group: GroupKey | None, created: datetime | None, run_start: datetime | None
    ) -> Signal | None:
        """For a pod gone while no bridge watched (its deletion time unknown): the newest
        signal after the pod was made and the run started."""
        if group is None:
            return None
        since = max((moment for moment in (created, run_start) if moment is not None), default=None)
        fitting = [s for s in self._signals.get(group, ()) if since is None or s.at >= since]
        return fitting[-1] if fitting else None

    def link(self, pod_uid: str, signal: Signal) -> None:
        """A terminating pod's deletion belongs to ``signal``: its release will say so."""
        self._links[pod_uid] = signal
        self._links.move_to_end(pod_uid)
        if len(self._links) > MAX_LINKS:
            self._links.popitem(last=False)
            self.tally(signal.source, DROPPED)

    def linked(self, pod_uid: str) -> Signal | None:
        return self._links.get(pod_uid)

    def unlink(self, pod_uid: str) -> None:
        """The pod is gone (its release sent, or it never ran)."""
        self._links.pop(pod_uid, None)

    def sent_plain(
        self, group: GroupKey | None, requested: datetime, created: datetime | None
    ) -> None:
        """A deletion was sent without an attribution: a signal it belonged to is late."""
        if group is None:
            return
        sent = self._plain.pop(group, None) or deque(maxlen=MAX_PLAIN_PER_GROUP)
        sent.append((requested, created))
        self._plain[group] = sent
        if len(self._plain) > MAX_PLAIN_GROUPS:
            self._plain.popitem(last=False)

    def deadline(self, requested: datetime) -> datetime | None:
        """Until when a deletion asked for at ``requested`` waits for its signal (at most W
        from now: the bridge's clock may differ from the cluster's); None: not at all."""
        now = self._clock()
        if not self.window:
            return None
        until = min(max(requested + self.window, now), now + self.window)
        return until if until > now else None

    def hold(self, held: Held) -> Held | None:
        """Hold a release; the oldest held one when the cap is reached (to send now)."""
        self._held[held.pod_uid] = held
        self._held_by_podgroup.setdefault(held.podgroup_uid, set()).add(held.pod_uid)
        if len(self._held) <= MAX_HELD:
            return None
        oldest = min(self._held.values(), key=lambda entry: entry.deadline)
        return self.take(oldest.pod_uid)

    def is_holding(self, podgroup_uid: str) -> bool:
        return podgroup_uid in self._held_by_podgroup

    def is_held(self, pod_uid: str) -> bool:
        return pod_uid in self._held

    def held_of(self, podgroup_uid: str) -> list[Held]:
        """The held releases of a podgroup, by deadline (not removed)."""
        members = self._held_by_podgroup.get(podgroup_uid, ())
        return sorted((self._held[uid] for uid in members), key=lambda h: h.deadline)

    def take(self, pod_uid: str) -> Held | None:
        """Stop holding a release (to send it)."""
        held = self._held.pop(pod_uid, None)
        if held is not None:
            members = self._held_by_podgroup[held.podgroup_uid]
            members.discard(pod_uid)
            if not members:
                del self._held_by_podgroup[held.podgroup_uid]
        return held

    def due(self) -> list[Held]:
        """The held releases whose deadline has passed, removed, oldest first."""
        if not self._held:
            return []
        now = self._clock()
        due = sorted(
            (h for h in self._held.values() if h.deadline <= now), key=lambda h: h.deadline
        )
        for held in due:
            self.take(held.pod_uid)
        return due

    @property
    def held_count(self) -> int:
        return len(self._held)
