"""The bridge's view of the cluster: watch notifications in, contract events out.

Pure (no I/O; the clock is passed in and read only when the cluster gives no time). Fed by
the watchers with every ADDED / MODIFIED / DELETED object and with listings (page by page,
between ``start_listing`` and ``finish_listing``); answers the events to send, in order.

It holds two things:

- **the objects**, as much of each as the mapping reads (``kept``), indexed so that a change
  costs the size of its gang, never the cluster's: pods by their PodGroup's namespace/name,
  PodGroups by name and by priority class;
- **its memory of what was sent** (``memory``): per object one small JSON-able record (a
  digest of the content last sent, which pods were submitted, allocated, released). The bridge
  writes the records that changed with the events that changed them, in one Kafka
  transaction, to its compacted ledger topic (``cluster.ledger``), and a new term starts from
  them: an unchanged cluster sends nothing again, a change made while no bridge watched is
  sent once, and an object that went away meanwhile is found missing from the listing.

Every event id is deterministic and names its content (``mapping.event_id``): a re-send of
the same state is a true duplicate, never a ``conflicting_duplicate``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, Final

from minruntime.cluster import evictions, mapping
from minruntime.cluster.evictions import (
    QUEUE_DISRUPTION,
    TOP_OWNER_METADATA,
    Evictions,
    Held,
    Signal,
    Tally,
    no_tally,
)
from minruntime.cluster.mapping import ObjectError
from minruntime.cluster.packed import Packed
from minruntime.core import MinRuntimeError, format_rfc3339
from minruntime.events import Event, EventRejected, EventType, new_event
from minruntime.events.types import MAX_NAME

log = logging.getLogger(__name__)

# What a cluster object that cannot be translated raises (the mapping's refusal, the
# contract's, the core's): the object is logged and dropped, never a crash. Anything else is a
# bug and propagates.
UNMAPPABLE: Final = (ObjectError, EventRejected, MinRuntimeError)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"

# The memory's record kinds (the ledger's keys are "<kind>/<uid>").
QUEUE_MEMORY: Final = "queue"
NODE_MEMORY: Final = "node"
CONFIG_MEMORY: Final = "config"
PODGROUP_MEMORY: Final = "podgroup"
POD_MEMORY: Final = "pod"
MEMORY_KINDS: Final = (QUEUE_MEMORY, NODE_MEMORY, CONFIG_MEMORY, PODGROUP_MEMORY, POD_MEMORY)

Record = dict[str, Any]


class Kind(StrEnum):
    """The object kinds the bridge watches."""

    PRIORITY_CLASS = "PriorityClass"
    CONFIG_MAP = "ConfigMap"
    QUEUE = "Queue"
    NODE = "Node"
    POD_GROUP = "PodGroup"
    EVENT = "Event"  # KAI's Evict Events on PodGroups (cluster.evictions)
    POD = "Pod"


@dataclass(frozen=True)
class Emission:
    """One event to send and the role of the topic it goes to (queues, podgroups, nodes)."""

    role: str
    event: Event


@dataclass(frozen=True)
class MirrorOptions:
    """What the mapping needs from the settings."""

    node_pool_label: str = mapping.NODE_POOL_LABEL
    config_node_pool: str = "default"
    # How long a deletion and a signal of its PodGroup's eviction may be apart (and a deletion
    # waits for one); 0: not at all (cluster.evictions).
    eviction_window: timedelta = timedelta(0)
    # The components whose Evict Events count (KAI's recorder: the scheduler's name).
    eviction_components: tuple[str, ...] = field(default=("kai-scheduler",))


class Kept(dict[str, Any]):
    """An object reduced to what the bridge keeps (``kept``): not reduced again."""


def kept(kind: Kind, obj: Mapping[str, Any], options: MirrorOptions) -> Mapping[str, Any]:
    """What the bridge keeps of an object of ``kind`` (the fields the mapping reads)."""
    if isinstance(obj, Kept):
        return obj
    if kind == Kind.POD:
        return Kept(mapping.kept_pod(obj, options.node_pool_label))
    if kind == Kind.POD_GROUP:
        dropped = mapping.dropped_annotations(obj)
        if dropped:
            log.warning(
                "PodGroup %s/%s: %d annotation(s) over the contract's bounds not sent: %s",
                mapping.namespace_of(obj), mapping.name_of(obj), len(dropped),
                ", ".join(sorted(dropped))[:300],
            )  # fmt: skip
        return Kept(mapping.kept_podgroup(obj, options.node_pool_label))
    if kind == Kind.NODE:
        return Kept(mapping.kept_node(obj, options.node_pool_label))
    if kind == Kind.EVENT:
        return Kept(evictions.kept_event(obj))
    return Kept(mapping.kept_object(obj))


def split_key(key: str) -> tuple[str, str] | None:
    """A ledger key "<kind>/<uid>" as (kind, uid); None when it is not one."""
    kind, slash, uid = key.partition("/")
    return (kind, uid) if slash and kind in MEMORY_KINDS and uid else None


_GroupKey = tuple[str, str]  # (namespace, PodGroup name)


class ClusterMirror:
    """Turns watch notifications into contract events (see the module docstring)."""

    def __init__(
        self,
        options: MirrorOptions,
        clock: Callable[[], datetime],
        memory: Mapping[str, Mapping[str, Any]] | None = None,
        *,
        tally: Tally = no_tally,
        released: Callable[[str], None] = lambda attribution: None,
        ignored: Callable[[str], None] = lambda value: None,
    ) -> None:
        self._options = options
        self._ignored = ignored  # counts a value left out (IGNORED_VALUES)
        self._clock = clock
        self.evictions = Evictions(options.eviction_window, clock, tally)
        self._released = released  # counts deletions' releases by attribution
        self._unseen = False  # handling deletions found missing from a listing
        # Held packed (cluster.packed): a tenth of the memory of the kept dicts.
        self._objects: dict[Kind, MutableMapping[str, Mapping[str, Any]]] = {
            kind: Packed(Kept) for kind in Kind
        }
        self._pods_by_group: dict[_GroupKey, dict[str, str]] = {}  # pod uid -> pod name
        self._podgroups_by_name: dict[_GroupKey, str] = {}
        self._podgroups_by_class: dict[str, set[str]] = {}
        self._priorities: dict[str, int] = {}
        self._memory: dict[str, Packed[Record]] = {kind: Packed() for kind in MEMORY_KINDS}
        if isinstance(memory, Packed):  # as read from the ledger: moved, not unpacked
            for key, item in memory.packed_items():
                parts = split_key(key)
                if parts is not None:
                    self._memory[parts[0]].put_packed(parts[1], item)
        else:
            for key, record in (memory or {}).items():
                parts = split_key(key)
                if parts is not None:
                    self._memory[parts[0]][parts[1]] = dict(record)
        self._changed: set[str] = set()
        self._annotation_digests: dict[str, tuple[str, dict[str, str]]] = {}
        # A listing in progress: the uids seen per kind, the podgroups to sync at its end.
        self._present: dict[Kind, set[str]] = {}
        self._deferred: set[str] | None = None

    # -- input -----------------------------------------------------------------------------

    def observe(self, kind: Kind, action: str, obj: Mapping[str, Any]) -> list[Emission]:
        """The events one watch notification causes (often none)."""
        try:
            uid = mapping.uid_of(obj)
        except ObjectError as exc:
            log.warning("ignored %s: %s", kind.value, exc)
            return []
        objects = self._objects[kind]
        before = objects.get(uid)
        if action == DELETED:
            objects.pop(uid, None)
        else:
            obj = kept(kind, obj, self._options)
            objects[uid] = obj
        if kind == Kind.POD:
            self._index_pod(uid, before, None if action == DELETED else obj)
        handler = _HANDLERS[kind]
        try:
            return handler(self, action, obj, uid)
        except UNMAPPABLE as exc:
            log.warning("cannot map %s %s: %s", kind.value, mapping.name_of(obj), exc)
            return []

    def start_listing(self, kinds: Iterable[Kind]) -> None:
        """A listing of ``kinds`` begins (a term's first, or a relist after 410 Gone).

        Until ``finish_listing``, podgroups are synced once at the end rather than on every
        object: a first listing submits each gang once, with all its pods.
        """
        for kind in kinds:
            self._present[kind] = set()
        if self._deferred is None:
            self._deferred = set()

    def restart_listing(self, kind: Kind) -> None:
        """The listing of ``kind`` starts over (an expired continue token): forget what it saw."""
        self._present[kind] = set()

    def listed(self, kind: Kind, objs: Iterable[Mapping[str, Any]]) -> list[Emission]:
        """One page of a listing of ``kind``."""
        present = self._present.setdefault(kind, set())
        emissions: list[Emission] = []
        for obj in objs:
            uid = mapping.metadata(obj).get("uid")
            if isinstance(uid, str):
                present.add(uid)
            emissions += self.observe(kind, MODIFIED, obj)
        return emissions

    def finish_listing(self, kinds: Iterable[Kind]) -> Iterator[Emission]:
        """End the listing of ``kinds``: what was known and not listed went away unseen.

        Their deletion was not seen, so its time is the bridge's clock now. When no listing
        is left in progress, every podgroup the listing touched is synced (lazily: the caller
        sends the events in chunks while they are made).
        """
        for kind in kinds:
            present = self._present.pop(kind, set())
            yield from self._gone(kind, present)
        if self._present or self._deferred is None:
            return
        deferred, self._deferred = self._deferred, None
        for uid in sorted(deferred):
            fresh = uid not in self._memory[PODGROUP_MEMORY]
            yield from self._sync_podgroup(uid)
            if fresh:
                yield from self._unseen_end_of_run(uid)

    def list_all(self, listing: Mapping[Kind, Iterable[Mapping[str, Any]]]) -> Iterator[Emission]:
        """Whole listings of several kinds, in the mapping's order, as a term's first listing
        is fed (every kind opened first, so each podgroup is synced once, at the end)."""
        kinds = list(listing)
        self.start_listing(kinds)
        for kind in kinds:
            yield from self.listed(kind, listing[kind])
            yield from self.finish_listing([kind])

    def relisted(self, kind: Kind, objs: Iterable[Mapping[str, Any]]) -> list[Emission]:
        """A whole listing of ``kind`` in one call (after a 410 Gone)."""
        return list(self.list_all({kind: objs}))

    # -- memory ----------------------------------------------------------------------------

    def memory(self) -> dict[str, Record]:
        """Every record of what was sent, by ledger key."""
        return {
            f"{kind}/{uid}": dict(record)
            for kind, records in self._memory.items()
            for uid, record in records.items()
        }

    def take_changes(self) -> dict[str, Record | None]:
        """The records changed since the last call (None: forgotten), by ledger key."""
        changes: dict[str, Record | None] = {}
        for key in sorted(self._changed):
            kind, _, uid = key.partition("/")
            record = self._memory[kind].get(uid)
            changes[key] = None if record is None else dict(record)
        self._changed.clear()
        return changes

    def _remember(self, kind: str, uid: str, record: Record) -> None:
        self._memory[kind][uid] = record
        self._changed.add(f"{kind}/{uid}")

    def _forget(self, kind: str, uid: str) -> Record | None:
        record = self._memory[kind].pop(uid, None)
        if record is not None:
            self._changed.add(f"{kind}/{uid}")
        return record

    # -- deletions nobody saw --------------------------------------------------------------

    def _gone(self, kind: Kind, present: set[str]) -> Iterator[Emission]:
        memory_kind = _MEMORY_OF.get(kind)
        known = set(self._objects[kind])
        if memory_kind is not None:
            known |= set(self._memory[memory_kind])
        for uid in sorted(known - present):
            obj = self._objects[kind].get(uid) or self._remembered_object(kind, uid)
            self._unseen = True
            try:
                emissions = self.observe(kind, DELETED, self._deleted_now(obj))
            finally:
                self._unseen = False
            yield from emissions

    def _remembered_object(self, kind: Kind, uid: str) -> Mapping[str, Any]:
        """A stand-in for an object known only from memory (its uid and name)."""
        record = self._memory[_MEMORY_OF[kind]].get(uid) or {}
        return {"metadata": {"uid": uid, "name": str(record.get("name") or "")}}

    def _deleted_now(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = dict(mapping.metadata(obj))
        meta.setdefault("deletionTimestamp", format_rfc3339(self._clock()))
        return {**obj, "metadata": meta}

    def _unseen_end_of_run(self, uid: str) -> list[Emission]:
        """A podgroup this term knew nothing of (no memory: a first start, a lost ledger)
        that has started a run (KAI's `kai.scheduler/last-start-timestamp`) and holds no
        bound, unfinished pod: its pods were deleted while no bridge watched, and a new term
        does not know their names. Releasing all pods ends such a run (the processor ignores
        it when nothing runs). With memory, each such pod is released by name instead. The
        memory keeps that it was sent (a record without a shape), so it is sent once.
        """
        podgroup = self._objects[Kind.POD_GROUP].get(uid)
        if podgroup is None or uid in self._memory[PODGROUP_MEMORY]:
            return []
        if mapping.LAST_START_ANNOTATION not in mapping.annotations_of(podgroup):
            return []  # never ran: nothing to end (and no placeholder for the service)
        if any(
            mapping.pod_node(pod) is not None and mapping.finished(pod) is None
            for pod in self._pods_of(podgroup)
        ):
            return []
        data: dict[str, Any] = {"uid": uid, "reason": "deleted"}
        signal = self.evictions.match_unseen(_podgroup_key(podgroup), None, _run_start(podgroup))
        if signal is not None:
            data.update(reason="evicted", eviction=signal.wire())
        self._released("none" if signal is None else signal.source)
        version = f"released-all/{mapping.version_of(podgroup)}"
        self._remember(PODGROUP_MEMORY, uid, {"ended": mapping.version_of(podgroup)})
        return [
            self._emit(
                "podgroups", EventType.PODGROUP_RELEASED, data, podgroup, uid, version,
                time=self._clock(),
            )
        ]  # fmt: skip

    # -- queues, config, nodes, priority classes -------------------------------------------

    def _queue(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action == DELETED:
            return self._named_deleted(QUEUE_MEMORY, "queues", EventType.QUEUE_DELETED, obj, uid)
        problems: list[str] = []
        upsert = mapping.queue_data(obj, self._options.node_pool_label, problems).model_dump(
            mode="json", by_alias=True
        )
        for problem in problems:
            log.warning("%s", problem)
            self._ignored(QUEUE_DISRUPTION)
        if not self._changed_content(QUEUE_MEMORY, uid, upsert, mapping.name_of(obj)):
            return []
        version = f"upserted/{mapping.generation_of(obj)}"
        return [self._emit("queues", EventType.QUEUE_UPSERTED, upsert, obj, uid, version)]

    def _config_map(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action == DELETED:
            # KAI keeps its last config; so does the service (docs/kubernetes.md). The memory
            # stays too: the same ConfigMap made again with the same content sends nothing.
            return []
        data = mapping.config_data(obj, self._options.config_node_pool)
        update = data.model_dump(mode="json", by_alias=True)
        if not self._changed_content(CONFIG_MEMORY, uid, update, mapping.name_of(obj)):
            return []
        version = f"config/{mapping.version_of(obj)}"
        return [self._emit("queues", EventType.CONFIG_UPDATED, update, obj, uid, version)]

    def _node(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action == DELETED:
            return self._named_deleted(NODE_MEMORY, "nodes", EventType.NODE_DELETED, obj, uid)
        data = mapping.node_data(obj, self._options.node_pool_label)
        if not self._changed_content(NODE_MEMORY, uid, data, mapping.name_of(obj)):
            return []
        version = f"upserted/{mapping.version_of(obj)}"
        return [self._emit("nodes", EventType.NODE_UPSERTED, data, obj, uid, version)]

    def _named_deleted(
        self, memory: str, role: str, event_type: EventType, obj: Mapping[str, Any], uid: str
    ) -> list[Emission]:
        """A deleted queue or node: its deletion, named, when the mirror had sent it."""
        record = self._forget(memory, uid)
        if record is None:
            return []
        data = {"name": mapping.name_of(obj) or str(record.get("name"))}
        return [self._emit(role, event_type, data, obj, uid, "deleted")]

    def _priority_class(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        name = mapping.name_of(obj)
        value = None if action == DELETED else int(obj.get("value") or 0)
        if self._priorities.get(name) == value:
            return []
        if value is None:
            self._priorities.pop(name, None)
        else:
            self._priorities[name] = value
        emissions: list[Emission] = []
        for podgroup_uid in sorted(self._podgroups_by_class.get(name, ())):
            emissions += self._sync_podgroup(podgroup_uid, "")
        return emissions

    # -- podgroups and pods ----------------------------------------------------------------

    def _podgroup(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        key = (mapping.namespace_of(obj), mapping.name_of(obj))
        for members in self._podgroups_by_class.values():
            members.discard(uid)
        self._annotation_digests.pop(uid, None)
        if action == DELETED:
            flushed = self._flush(uid)  # its held releases go before its deletion
            self.evictions.forget_group(key, uid)
            if self._podgroups_by_name.get(key) == uid:
                del self._podgroups_by_name[key]
            if self._deferred is not None:
                self._deferred.discard(uid)
            if self._forget(PODGROUP_MEMORY, uid) is None:
                return flushed
            data = {"uid": uid}
            deleted = self._emit("podgroups", EventType.PODGROUP_DELETED, data, obj, uid, "deleted")
            return [*flushed, deleted]
        self._podgroups_by_name[key] = uid
        priority_class = mapping.priority_class_name(obj)
        if priority_class is not None:
            self._podgroups_by_class.setdefault(priority_class, set()).add(uid)
        return self._eviction_stamp(uid, obj) + self._sync_podgroup(uid)

    def _pod(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action != DELETED:
            podgroup_uid = self._podgroup_of(obj)
            return [] if podgroup_uid is None else self._sync_podgroup(podgroup_uid, uid)
        record = self._memory[POD_MEMORY].get(uid)
        if record is None or not record.get("allocated") or record.get("released"):
            self._forget(POD_MEMORY, uid)
            self.evictions.unlink(uid)
            return []
        if self.evictions.is_held(uid):
            return []
        name = mapping.name_of(obj) or str(record.get("name"))
        return self._ended(str(record["podgroup"]), uid, name, obj, mapping.removed(obj), record)

    def _index_pod(
        self, uid: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None
    ) -> None:
        old = _group_key(before)
        new = _group_key(after)
        if old is not None and old != new:
            members = self._pods_by_group.get(old)
            if members is not None:
                members.pop(uid, None)
                if not members:
                    del self._pods_by_group[old]
        if new is not None and after is not None:
            self._pods_by_group.setdefault(new, {})[uid] = mapping.name_of(after)

    def _podgroup_of(self, pod: Mapping[str, Any]) -> str | None:
        key = _group_key(pod)
        return None if key is None else self._podgroups_by_name.get(key)

    def _pods_of(self, podgroup: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        members = self._pods_by_group.get(
            (mapping.namespace_of(podgroup), mapping.name_of(podgroup)), {}
        )
        pods = self._objects[Kind.POD]
        return [pods[uid] for uid in members]

    def _sync_podgroup(self, uid: str, pod_uid: str | None = None) -> list[Emission]:
        """Send what changed of a podgroup: its annotations, its shape, and the transitions of
        one pod (``pod_uid``: the pod a watch event was about) or of all its pods. Releases
        held for an eviction signal go first when a pod (maybe of the same name) is submitted
        or allocated: the service must see a pod's release before its successor's start."""
        emissions = self._podgroup_changes(uid, pod_uid)
        if self.evictions.is_holding(uid) and any(
            emission.event.type in _AFTER_HELD for emission in emissions
        ):
            return [*self._flush(uid), *emissions]
        return emissions

    def _podgroup_changes(self, uid: str, pod_uid: str | None) -> list[Emission]:
        if self._deferred is not None:
            self._deferred.add(uid)
            return []
        podgroup = self._objects[Kind.POD_GROUP].get(uid)
        if podgroup is None:
            return []
        try:
            members = self._pods_by_group.get(
                (mapping.namespace_of(podgroup), mapping.name_of(podgroup)), {}
            )
            candidates = list(members) if pod_uid is None else [pod_uid]
            emissions: list[Emission] = []
            if self._submitted(uid) is not None:
                emissions += self._annotate(uid, podgroup)  # before a new shape is submitted
            if members:
                emissions += self._submit(uid, podgroup, members, candidates)
            if self._submitted(uid) is None:
                return emissions  # no pod yet: a podgroup.submitted needs at least one
            pods = self._objects[Kind.POD]
            for candidate in sorted(candidates, key=lambda member: members.get(member, "")):
                pod = pods.get(candidate)
                if pod is not None and candidate in members:
                    emissions += self._pod_transitions(uid, podgroup, pod)
            return emissions
        except UNMAPPABLE as exc:
            log.warning(
                "cannot map PodGroup %s/%s: %s",
                mapping.namespace_of(podgroup), mapping.name_of(podgroup), exc,
            )  # fmt: skip
            return []

    def _submit(
        self,
        uid: str,
        podgroup: Mapping[str, Any],
        members: Mapping[str, str],
        candidates: Iterable[str],
    ) -> list[Emission]:
        """A podgroup.submitted when the shape changed or a pod is new (a pod that goes away
        is a release, not a new shape). Costs the gang's size only when one is sent."""
        priority_class = mapping.priority_class_name(podgroup)
        priority = self._priorities.get(priority_class or "", mapping.DEFAULT_PRIORITY)
        label = self._options.node_pool_label
        pods = self._objects[Kind.POD]
        first_uid = min(members, key=lambda member: members[member])
        first = pods[first_uid]
        head = mapping.submission_data(podgroup, [first], priority, label)  # the pods aside
        # Not the top owner: KAI sets it once, at creation, and a ledger written before the
        # field must not resubmit every podgroup (the processor reads the annotation then).
        shape = mapping.digest(
            {k: v for k, v in head.items() if k not in ("annotations", "pods", "topOwner")}
        )
        pod_memory = self._memory[POD_MEMORY]
        remembered = self._submitted(uid)
        new_pod = any(
            not pod_memory.get(candidate, {}).get("submitted") for candidate in candidates
        )
        if remembered is not None and remembered.get("shape") == shape and not new_pod:
            return []
        # Each pod read (unpacked) once: the first again for nothing.
        gang = {member: first if member == first_uid else pods[member] for member in members}
        problems: list[str] = []
        data = mapping.submission_data(podgroup, list(gang.values()), priority, label, problems)
        for problem in problems:
            log.warning(
                "PodGroup %s/%s: %s; ignored (its ownerReference is used)",
                mapping.namespace_of(podgroup), mapping.name_of(podgroup), problem,
            )  # fmt: skip
            self._ignored(TOP_OWNER_METADATA)
        if remembered is None:
            # Annotations travel with the first submission; later changes are
            # podgroup.annotated (sent before this), so a later submission carries none.
            digests = self._digests_of(uid, podgroup)
        else:
            del data["annotations"]
            digests = dict(remembered.get("annotations") or {})
        self._remember(PODGROUP_MEMORY, uid, {"shape": shape, "annotations": digests})
        for member in members:
            record = pod_memory.get(member) or _pod_record(uid, gang[member])
            if not record.get("submitted"):
                self._remember(POD_MEMORY, member, {**record, "submitted": True})
        # The first submission is the PodGroup's creation, KAI's anchor of the preemption
        # delay (PreemptionDelayEnd in pkg/scheduler/api/podgroup_info/job_info.go), even
        # when its pods came later; a later one (the gang's shape changed) is its newest pod.
        anchor = mapping.created_at(podgroup) if remembered is None else None
        created = [mapping.created_at(obj) for obj in (podgroup, *gang.values())]
        known = [moment for moment in created if moment is not None]
        time = anchor or (max(known) if known else None)
        return [
            self._emit(
                "podgroups", EventType.PODGROUP_SUBMITTED, data, podgroup, uid, "submitted",
                time=time,
            )
        ]  # fmt: skip

    def _digests_of(self, uid: str, podgroup: Mapping[str, Any]) -> dict[str, str]:
        """A digest per annotation value (cached per resourceVersion: every pod change of a
        gang syncs its PodGroup)."""
        version = mapping.version_of(podgroup)
        cached = self._annotation_digests.get(uid)
        if cached is not None and cached[0] == version:
            return cached[1]
        digests = {
            key: mapping.digest(value) for key, value in mapping.annotations_of(podgroup).items()
        }
        self._annotation_digests[uid] = (version, digests)
        return digests

    def _submitted(self, uid: str) -> Record | None:
        """The memory of a podgroup that was submitted (a record with its shape), else None."""
        record = self._memory[PODGROUP_MEMORY].get(uid)
        return record if record is not None and "shape" in record else None

    def _annotate(self, uid: str, podgroup: Mapping[str, Any]) -> list[Emission]:
        remembered = self._memory[PODGROUP_MEMORY][uid]
        sent: Mapping[str, str] = remembered.get("annotations") or {}
        digests = self._digests_of(uid, podgroup)
        if digests == sent:
            return []
        now = mapping.annotations_of(podgroup)
        change: dict[str, str | None] = {
            key: now[key] for key, value in digests.items() if sent.get(key) != value
        }
        change.update({key: None for key in sent if key not in digests})
        self._remember(PODGROUP_MEMORY, uid, {**remembered, "annotations": dict(digests)})
        data = {"uid": uid, "annotations": change}
        version = f"annotated/{mapping.version_of(podgroup)}"
        return [self._emit("podgroups", EventType.PODGROUP_ANNOTATED, data, podgroup, uid, version)]

    def _pod_transitions(
        self, podgroup_uid: str, podgroup: Mapping[str, Any], pod: Mapping[str, Any]
    ) -> list[Emission]:
        pod_uid = mapping.uid_of(pod)
        name = mapping.name_of(pod)
        record = self._memory[POD_MEMORY].get(pod_uid) or _pod_record(podgroup_uid, pod)
        node = mapping.pod_node(pod)
        emissions: list[Emission] = []
        if node is not None and not record.get("allocated"):
            record = {**record, "allocated": True}
            self._remember(POD_MEMORY, pod_uid, record)
            data = {"uid": podgroup_uid, "pods": [{"name": name, "node": node}]}
            emissions.append(
                self._emit(
                    "podgroups", EventType.PODGROUP_ALLOCATED, data, pod, pod_uid, "allocated",
                    time=mapping.allocated_at(pod, podgroup),
                )
            )  # fmt: skip
        ended = mapping.finished(pod)
        if ended is not None and record.get("allocated") and not record.get("released"):
            if evictions.requested_at(pod) is None:  # ran to its end
                emissions.append(self._release(podgroup_uid, pod_uid, name, pod, ended))
            else:  # ended while terminating: its deletion ended it
                emissions += self._ended(podgroup_uid, pod_uid, name, pod, ended, record)
        return emissions

    # -- deletions and evictions (cluster.evictions) ----------------------------------------

    def _ended(
        self,
        podgroup_uid: str,
        pod_uid: str,
        name: str,
        pod: Mapping[str, Any],
        release: mapping.Release,
        record: Record,
    ) -> list[Emission]:
        """A bound pod ended by its deletion: released with the eviction signal it belongs
        to, else held up to the window for one (gone unseen: the newest signal since it was
        made, at once)."""
        if self.evictions.is_held(pod_uid):
            return []
        podgroup = self._objects[Kind.POD_GROUP].get(podgroup_uid)
        group = _podgroup_key(podgroup) if podgroup is not None else _group_key(pod)
        created = mapping.created_at(pod) or mapping.parse_time(record.get("created"))
        requested = evictions.requested_at(pod) or self._clock()
        held = Held(
            podgroup_uid, pod_uid, name, group, pod, release, requested, created, self._clock()
        )
        if self._unseen:
            signal = self.evictions.match_unseen(group, created, _run_start(podgroup))
            return [self._send(held, signal)]
        signal = self.evictions.linked(pod_uid) or self.evictions.match(group, requested, created)
        deadline = None if signal is not None else self.evictions.deadline(requested)
        if deadline is None:
            return [self._send(held, signal)]
        overflow = self.evictions.hold(replace(held, deadline=deadline))
        return [] if overflow is None else [self._send(overflow, None)]

    def _send(self, held: Held, signal: Signal | None) -> Emission:
        """The release of a pod ended by its deletion, attributed to ``signal`` (else to its
        own DisruptionTarget condition, else to nothing)."""
        self.evictions.unlink(held.pod_uid)
        if signal is None:
            signal = evictions.condition_signal(held.pod, self.evictions.tally)
            if signal is None:
                self.evictions.sent_plain(held.group, held.requested, held.created)
        self._released("none" if signal is None else signal.source)
        if held.pod_uid not in self._objects[Kind.POD]:  # gone: nothing more to remember
            self._forget(POD_MEMORY, held.pod_uid)
        return self._release(
            held.podgroup_uid, held.pod_uid, held.name, held.pod, held.release, signal
        )

    def _flush(self, podgroup_uid: str) -> list[Emission]:
        """Send a podgroup's held releases now, with the signals they belong to if any."""
        emissions: list[Emission] = []
        for held in self.evictions.held_of(podgroup_uid):
            self.evictions.take(held.pod_uid)
            signal = self.evictions.match(held.group, held.requested, held.created)
            emissions.append(self._send(held, signal))
        return emissions

    def due(self) -> list[Emission]:
        """The held releases whose window has passed, sent without a PodGroup signal."""
        return [self._send(held, None) for held in self.evictions.due()]

    def _signal(self, group: evictions.GroupKey, signal: Signal) -> list[Emission]:
        """A PodGroup's eviction signal: kept for the deletions to come; the held releases it
        belongs to are sent, the terminating pods it belongs to linked."""
        podgroup_uid = self._podgroups_by_name.get(group)
        podgroup = self._objects[Kind.POD_GROUP].get(podgroup_uid or "")
        if not self.evictions.admit(signal, _run_start(podgroup)):
            return []
        self.evictions.remember(group, signal)
        if podgroup is None or podgroup_uid is None:
            return []
        emissions: list[Emission] = []
        for held in self.evictions.held_of(podgroup_uid):
            matched = self.evictions.match(held.group, held.requested, held.created)
            if matched is not None:
                self.evictions.take(held.pod_uid)
                emissions.append(self._send(held, matched))
        for pod in self._pods_of(podgroup):
            requested = evictions.requested_at(pod)
            if requested is not None and mapping.pod_node(pod) is not None:
                matched = self.evictions.match(group, requested, mapping.created_at(pod))
                if matched is not None:
                    self.evictions.link(mapping.uid_of(pod), matched)
        return emissions

    def _event(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        """An Evict Event of a PodGroup (each delivery; a higher count is the same eviction
        said again, merged). The Event itself is not kept: its signal is, capped."""
        self._objects[Kind.EVENT].pop(uid, None)
        if action == DELETED:
            self.evictions.forget_event(uid)
            return []
        tally = self.evictions.tally
        read = evictions.read_event(obj, self._options.eviction_components, tally)
        if read is None or self.evictions.seen_event(uid, read.version):
            return []
        known = self._podgroups_by_name.get(read.group)
        if read.podgroup_uid is not None and known is not None and read.podgroup_uid != known:
            tally(evictions.EVENT, evictions.STALE)  # about an earlier PodGroup of that name
            return []
        signal = read.signal
        if signal.evictor is not None:
            namespace, _, name = signal.evictor.partition("/")
            evictor = self._objects[Kind.POD_GROUP].get(
                self._podgroups_by_name.get((namespace, name)) or ""
            )
            queue = _queue_of(evictor) if evictor is not None else None
            if queue is None:
                tally(evictions.EVENT, evictions.UNKNOWN_EVICTOR)
            else:
                signal = replace(signal, evictor_queue=queue)
        return self._signal(read.group, signal)

    def _eviction_stamp(self, uid: str, podgroup: Mapping[str, Any]) -> list[Emission]:
        """KAI's kai.scheduler/last-eviction-timestamp, when it changed, as a signal."""
        stamp = mapping.annotations_of(podgroup).get(evictions.LAST_EVICTION_ANNOTATION)
        stamps = self.evictions.stamps
        if stamp is None or stamps.get(uid) == stamp:
            if stamp is None:
                stamps.pop(uid, None)
            return []
        stamps[uid] = stamp
        at = mapping.parse_time(stamp)
        if at is None:
            self.evictions.tally(evictions.ANNOTATION, evictions.BAD_TIME)
            return []
        return self._signal(_podgroup_key(podgroup), Signal(evictions.ANNOTATION, at))

    def _release(
        self,
        podgroup_uid: str,
        pod_uid: str,
        name: str,
        pod: Mapping[str, Any],
        release: mapping.Release,
        eviction: Signal | None = None,
    ) -> Emission:
        record = self._memory[POD_MEMORY].get(pod_uid)
        if record is not None:
            self._remember(POD_MEMORY, pod_uid, {**record, "released": True})
        data: dict[str, Any] = {"uid": podgroup_uid, "pods": [name], "reason": release.reason}
        if eviction is not None:
            attributed = {**data, "reason": "evicted", "eviction": eviction.wire()}
            try:
                return self._emit(
                    "podgroups", EventType.PODGROUP_RELEASED, attributed, pod, pod_uid,
                    "released", time=release.time,
                )  # fmt: skip
            except UNMAPPABLE as exc:  # sanitised before; never lose the release for it
                log.warning("pod %s: eviction attribution not sent: %s", name, exc)
                data["reason"] = "evicted"
        return self._emit(
            "podgroups", EventType.PODGROUP_RELEASED, data, pod, pod_uid, "released",
            time=release.time,
        )  # fmt: skip

    # -- helpers ---------------------------------------------------------------------------

    def _changed_content(self, kind: str, uid: str, content: Any, name: str) -> bool:
        shape = mapping.digest(content)
        record = self._memory[kind].get(uid)
        if record is not None and record.get("digest") == shape:
            return False
        self._remember(kind, uid, {"digest": shape, "name": name})
        return True

    def _emit(
        self,
        role: str,
        event_type: EventType,
        data: Mapping[str, Any],
        obj: Mapping[str, Any],
        uid: str,
        transition: str,
        *,
        time: datetime | None = None,
    ) -> Emission:
        if time is None:
            time = mapping.deleted_at(obj) if transition == "deleted" else mapping.changed_at(obj)
        moment = time or self._clock()
        content = mapping.content_digest(str(event_type), data, moment)
        event = new_event(
            str(event_type),
            data,
            time=moment,
            source=mapping.SOURCE,
            id=mapping.event_id(uid, transition, "", content),
        )
        return Emission(role, event)


def _pod_record(podgroup_uid: str, pod: Mapping[str, Any]) -> Record:
    record: Record = {
        "podgroup": podgroup_uid,
        "name": mapping.name_of(pod),
        "submitted": False,
        "allocated": False,
        "released": False,
    }
    # When the pod was made: a term that finds it gone unseen matches eviction signals after it.
    created = mapping.metadata(pod).get("creationTimestamp")
    if isinstance(created, str):
        record["created"] = created
    return record


def _podgroup_key(podgroup: Mapping[str, Any]) -> _GroupKey:
    return (mapping.namespace_of(podgroup), mapping.name_of(podgroup))


def _run_start(podgroup: Mapping[str, Any] | None) -> datetime | None:
    """KAI's kai.scheduler/last-start-timestamp of the PodGroup (its run's start), if readable."""
    if podgroup is None:
        return None
    return mapping.parse_time(mapping.annotations_of(podgroup).get(mapping.LAST_START_ANNOTATION))


def _queue_of(podgroup: Mapping[str, Any]) -> str | None:
    """A PodGroup's queue (spec.queue, else the queue label), when it is a bounded name."""
    queue = mapping.podgroup_spec(podgroup).get("queue") or mapping.labels_of(podgroup).get(
        mapping.QUEUE_LABEL
    )
    return queue if isinstance(queue, str) and 0 < len(queue) <= MAX_NAME else None


# A podgroup's held releases go before these (a pod of the same name may be its successor).
_AFTER_HELD: Final = frozenset({EventType.PODGROUP_SUBMITTED, EventType.PODGROUP_ALLOCATED})


def _group_key(pod: Mapping[str, Any] | None) -> _GroupKey | None:
    if pod is None:
        return None
    name = mapping.pod_group_name(pod)
    return None if name is None else (mapping.namespace_of(pod), name)


_MEMORY_OF: Final[Mapping[Kind, str]] = {
    Kind.QUEUE: QUEUE_MEMORY,
    Kind.NODE: NODE_MEMORY,
    Kind.POD_GROUP: PODGROUP_MEMORY,
    Kind.POD: POD_MEMORY,
}

_Handler = Callable[[ClusterMirror, str, Mapping[str, Any], str], list[Emission]]
_HANDLERS: Final[Mapping[Kind, _Handler]] = {
    Kind.PRIORITY_CLASS: ClusterMirror._priority_class,
    Kind.CONFIG_MAP: ClusterMirror._config_map,
    Kind.QUEUE: ClusterMirror._queue,
    Kind.NODE: ClusterMirror._node,
    Kind.POD_GROUP: ClusterMirror._podgroup,
    Kind.EVENT: ClusterMirror._event,
    Kind.POD: ClusterMirror._pod,
}
