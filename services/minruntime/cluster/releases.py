"""Releases of pods and what ends them: a run to its end, a deletion, an eviction.

A bound pod ended by its deletion is released with the eviction signal it belongs to (KAI's
Evict Event on its PodGroup, its ``last-eviction-timestamp`` annotation, its own
DisruptionTarget condition: ``cluster.evictions``), else held up to the window for one. The
Event kind's handler is here: an Evict Event is not kept, its signal is.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

from minruntime.cluster import evictions, mapping
from minruntime.cluster.cache import PODGROUPS_BY_NAME, GroupKey, group_of_pod, key_of_podgroup
from minruntime.cluster.context import Emission, Shared, log
from minruntime.cluster.evictions import Held, Signal
from minruntime.cluster.objects import Action, ApiObject, Kind
from minruntime.cluster.records import PodRecord
from minruntime.events import EventType
from minruntime.events.types import MAX_NAME


class Releases(Shared):
    """Pods' releases, held releases, and the eviction signals they are attributed to."""

    __slots__ = ()

    def ended(
        self,
        podgroup_uid: str,
        pod_uid: str,
        name: str,
        pod: ApiObject,
        release: mapping.Release,
        record: PodRecord,
    ) -> list[Emission]:
        """A bound pod ended by its deletion: released with the eviction signal it belongs
        to, else held up to the window for one (gone unseen: the newest signal since it was
        made, at once)."""
        ctx = self._ctx
        signals = ctx.evictions
        if signals.is_held(pod_uid):
            return []
        podgroup = ctx.objects[Kind.POD_GROUP].get(podgroup_uid)
        group = key_of_podgroup(podgroup) if podgroup is not None else group_of_pod(pod)
        created = mapping.created_at(pod) or mapping.parse_time(record.get("created"))
        requested = evictions.requested_at(pod) or ctx.clock()
        held = Held(
            podgroup_uid, pod_uid, name, group, pod, release, requested, created, ctx.clock()
        )
        if ctx.unseen:
            signal = signals.match_unseen(group, created, run_start(podgroup))
            return [self.send(held, signal)]
        signal = signals.linked(pod_uid) or signals.match(group, requested, created)
        deadline = None if signal is not None else signals.deadline(requested)
        if deadline is None:
            return [self.send(held, signal)]
        overflow = signals.hold(replace(held, deadline=deadline))
        return [] if overflow is None else [self.send(overflow, None)]

    def send(self, held: Held, signal: Signal | None) -> Emission:
        """The release of a pod ended by its deletion, attributed to ``signal`` (else to its
        own DisruptionTarget condition, else to nothing)."""
        ctx = self._ctx
        ctx.evictions.unlink(held.pod_uid)
        if signal is None:
            signal = evictions.condition_signal(held.pod, ctx.evictions.tally)
            if signal is None:
                ctx.evictions.sent_plain(held.group, held.requested, held.created)
        ctx.released("none" if signal is None else signal.source)
        if held.pod_uid not in ctx.objects[Kind.POD]:  # gone: nothing more to remember
            ctx.memory.pods.forget(held.pod_uid)
        return self.release(
            held.podgroup_uid, held.pod_uid, held.name, held.pod, held.release, signal
        )

    def flush(self, podgroup_uid: str) -> list[Emission]:
        """Send a podgroup's held releases now, with the signals they belong to if any."""
        signals = self._ctx.evictions
        emissions: list[Emission] = []
        for held in signals.held_of(podgroup_uid):
            signals.take(held.pod_uid)
            signal = signals.match(held.group, held.requested, held.created)
            emissions.append(self.send(held, signal))
        return emissions

    def due(self) -> list[Emission]:
        """The held releases whose window has passed, sent without a PodGroup signal."""
        return [self.send(held, None) for held in self._ctx.evictions.due()]

    def signal(self, group: GroupKey, signal: Signal) -> list[Emission]:
        """A PodGroup's eviction signal: kept for the deletions to come; the held releases it
        belongs to are sent, the terminating pods it belongs to linked."""
        ctx = self._ctx
        signals = ctx.evictions
        podgroups = ctx.objects[Kind.POD_GROUP]
        podgroup_uid = podgroups.one(PODGROUPS_BY_NAME, group)
        podgroup = podgroups.get(podgroup_uid or "")
        if not signals.admit(signal, run_start(podgroup)):
            return []
        signals.remember(group, signal)
        if podgroup is None or podgroup_uid is None:
            return []
        emissions: list[Emission] = []
        for held in signals.held_of(podgroup_uid):
            matched = signals.match(held.group, held.requested, held.created)
            if matched is not None:
                signals.take(held.pod_uid)
                emissions.append(self.send(held, matched))
        for pod in ctx.pods_of(podgroup):
            requested = evictions.requested_at(pod)
            if requested is not None and mapping.pod_node(pod) is not None:
                matched = signals.match(group, requested, mapping.created_at(pod))
                if matched is not None:
                    signals.link(mapping.uid_of(pod), matched)
        return emissions

    def event(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        """The Event kind's handler: an Evict Event of a PodGroup (each delivery; a higher
        count is the same eviction said again, merged). The Event itself is not kept: its
        signal is, capped."""
        ctx = self._ctx
        ctx.objects[Kind.EVENT].drop(uid)
        if action == Action.DELETED:
            ctx.evictions.forget_event(uid)
            return []
        tally = ctx.evictions.tally
        read = evictions.read_event(obj, ctx.options.eviction_components, tally)
        if read is None or ctx.evictions.seen_event(uid, read.version):
            return []
        podgroups = ctx.objects[Kind.POD_GROUP]
        known = podgroups.one(PODGROUPS_BY_NAME, read.group)
        if read.podgroup_uid is not None and known is not None and read.podgroup_uid != known:
            tally(evictions.EVENT, evictions.STALE)  # about an earlier PodGroup of that name
            return []
        signal = read.signal
        if signal.evictor is not None:
            namespace, _, name = signal.evictor.partition("/")
            evictor = podgroups.get(podgroups.one(PODGROUPS_BY_NAME, (namespace, name)) or "")
            queue = queue_of(evictor) if evictor is not None else None
            if queue is None:
                tally(evictions.EVENT, evictions.UNKNOWN_EVICTOR)
            else:
                signal = replace(signal, evictor_queue=queue)
        return self.signal(read.group, signal)

    def eviction_stamp(self, uid: str, podgroup: ApiObject) -> list[Emission]:
        """KAI's kai.scheduler/last-eviction-timestamp, when it changed, as a signal."""
        signals = self._ctx.evictions
        stamp = mapping.annotations_of(podgroup).get(evictions.LAST_EVICTION_ANNOTATION)
        stamps = signals.stamps
        if stamp is None or stamps.get(uid) == stamp:
            if stamp is None:
                stamps.pop(uid, None)
            return []
        stamps[uid] = stamp
        at = mapping.parse_time(stamp)
        if at is None:
            signals.tally(evictions.ANNOTATION, evictions.BAD_TIME)
            return []
        return self.signal(key_of_podgroup(podgroup), Signal(evictions.ANNOTATION, at))

    def release(
        self,
        podgroup_uid: str,
        pod_uid: str,
        name: str,
        pod: ApiObject,
        release: mapping.Release,
        eviction: Signal | None = None,
    ) -> Emission:
        """The podgroup.released of one pod (remembered as released)."""
        ctx = self._ctx
        record = ctx.memory.pods.get(pod_uid)
        if record is not None:
            record["released"] = True
            ctx.memory.pods.put(pod_uid, record)
        data: dict[str, object] = {"uid": podgroup_uid, "pods": [name], "reason": release.reason}
        if eviction is not None:
            attributed = {**data, "reason": "evicted", "eviction": eviction.wire()}
            try:
                return ctx.emit(
                    "podgroups", EventType.PODGROUP_RELEASED, attributed, pod, pod_uid,
                    "released", time=release.time,
                )  # fmt: skip
            except mapping.UNMAPPABLE as exc:  # sanitised before; never lose the release for it
                log.warning("pod %s: eviction attribution not sent: %s", name, exc)
                data["reason"] = "evicted"
        return ctx.emit(
            "podgroups", EventType.PODGROUP_RELEASED, data, pod, pod_uid, "released",
            time=release.time,
        )  # fmt: skip


def run_start(podgroup: ApiObject | None) -> datetime | None:
    """KAI's kai.scheduler/last-start-timestamp of the PodGroup (its run's start), if readable."""
    if podgroup is None:
        return None
    return mapping.parse_time(mapping.annotations_of(podgroup).get(mapping.LAST_START_ANNOTATION))


def queue_of(podgroup: ApiObject) -> str | None:
    """A PodGroup's queue (spec.queue, else the queue label), when it is a bounded name."""
    queue = mapping.podgroup_spec(podgroup).get("queue") or mapping.labels_of(podgroup).get(
        mapping.QUEUE_LABEL
    )
    return queue if isinstance(queue, str) and 0 < len(queue) <= MAX_NAME else None
