"""PodGroups and their pods (gangs): the handlers of PodGroups, pods and PriorityClasses.

A gang is synced whenever its PodGroup or one of its pods changes (``sync``): what changed of
its annotations, its shape (a podgroup.submitted), and the transitions of its pods (allocated,
released). A change costs the gang's size, found through the pods-by-group index
(``cluster.cache``); a PriorityClass's change syncs the PodGroups of that class.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Final

from minruntime.cluster import evictions, mapping
from minruntime.cluster.cache import (
    PODGROUPS_BY_CLASS,
    PODGROUPS_BY_NAME,
    PODS_BY_GROUP,
    group_of_pod,
    key_of_podgroup,
)
from minruntime.cluster.context import Context, Emission, Shared, log
from minruntime.cluster.evictions import TOP_OWNER_METADATA
from minruntime.cluster.objects import Action, ApiObject, Kind
from minruntime.cluster.records import PodGroupRecord, PodRecord
from minruntime.cluster.releases import Releases, run_start
from minruntime.events import EventType

# A podgroup's held releases go before these (a pod of the same name may be its successor).
_AFTER_HELD: Final = frozenset({EventType.PODGROUP_SUBMITTED, EventType.PODGROUP_ALLOCATED})


class Gangs(Shared):
    """The PodGroup, Pod and PriorityClass handlers and the sync of a gang."""

    __slots__ = ("_annotation_digests", "_releases")

    def __init__(self, ctx: Context, releases: Releases) -> None:
        super().__init__(ctx)
        self._releases = releases
        self._annotation_digests: dict[str, tuple[str, dict[str, str]]] = {}

    def podgroup(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        """A PodGroup added, changed or deleted (its indexes follow in the cache)."""
        ctx = self._ctx
        self._annotation_digests.pop(uid, None)
        if action == Action.DELETED:
            flushed = self._releases.flush(uid)  # its held releases go before its deletion
            ctx.evictions.forget_group(key_of_podgroup(obj), uid)
            if ctx.deferred is not None:
                ctx.deferred.discard(uid)
            if ctx.memory.podgroups.forget(uid) is None:
                return flushed
            data = {"uid": uid}
            deleted = ctx.emit("podgroups", EventType.PODGROUP_DELETED, data, obj, uid, "deleted")
            return [*flushed, deleted]
        return self._releases.eviction_stamp(uid, obj) + self.sync(uid)

    def pod(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        """A pod added, changed or deleted: its gang synced, or its deletion a release."""
        ctx = self._ctx
        if action != Action.DELETED:
            key = group_of_pod(obj)
            podgroups = ctx.objects[Kind.POD_GROUP]
            podgroup_uid = None if key is None else podgroups.one(PODGROUPS_BY_NAME, key)
            return [] if podgroup_uid is None else self.sync(podgroup_uid, uid)
        record = ctx.memory.pods.get(uid)
        if record is None or not record.get("allocated") or record.get("released"):
            ctx.memory.pods.forget(uid)
            ctx.evictions.unlink(uid)
            return []
        if ctx.evictions.is_held(uid):
            return []
        name = mapping.name_of(obj) or str(record.get("name"))
        podgroup_uid = str(record["podgroup"])
        return self._releases.ended(podgroup_uid, uid, name, obj, mapping.removed(obj), record)

    def priority_class(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        """A PriorityClass's value changed: the PodGroups of that class are synced."""
        priorities = self._ctx.priorities
        name = mapping.name_of(obj)
        value = None if action == Action.DELETED else int(obj.get("value") or 0)
        if priorities.get(name) == value:
            return []
        if value is None:
            priorities.pop(name, None)
        else:
            priorities[name] = value
        members = self._ctx.objects[Kind.POD_GROUP].by_index(PODGROUPS_BY_CLASS, name)
        return [emission for uid in sorted(members) for emission in self.sync(uid, "")]

    def sync(self, uid: str, pod_uid: str | None = None) -> list[Emission]:
        """Send what changed of a podgroup: its annotations, its shape, and the transitions of
        one pod (``pod_uid``: the pod a watch event was about) or of all its pods. Releases
        held for an eviction signal go first when a pod (maybe of the same name) is submitted
        or allocated: the service must see a pod's release before its successor's start."""
        emissions = self._changes(uid, pod_uid)
        if self._ctx.evictions.is_holding(uid) and any(
            emission.event.type in _AFTER_HELD for emission in emissions
        ):
            return [*self._releases.flush(uid), *emissions]
        return emissions

    def _changes(self, uid: str, pod_uid: str | None) -> list[Emission]:
        ctx = self._ctx
        if ctx.deferred is not None:
            ctx.deferred.add(uid)
            return []
        podgroup = ctx.objects[Kind.POD_GROUP].get(uid)
        if podgroup is None:
            return []
        try:
            pods = ctx.objects[Kind.POD]
            members = pods.by_index(PODS_BY_GROUP, key_of_podgroup(podgroup))
            candidates = list(members) if pod_uid is None else [pod_uid]
            emissions: list[Emission] = []
            if self._submitted(uid) is not None:
                emissions += self._annotate(uid, podgroup)  # before a new shape is submitted
            if members:
                emissions += self._submit(uid, podgroup, members, candidates)
            if self._submitted(uid) is None:
                return emissions  # no pod yet: a podgroup.submitted needs at least one
            for candidate in sorted(candidates, key=lambda member: members.get(member, "")):
                pod = pods.get(candidate)
                if pod is not None and candidate in members:
                    emissions += self._pod_transitions(uid, podgroup, pod)
            return emissions
        except mapping.UNMAPPABLE as exc:
            log.warning(
                "cannot map PodGroup %s/%s: %s",
                mapping.namespace_of(podgroup), mapping.name_of(podgroup), exc,
            )  # fmt: skip
            return []

    def _submit(
        self, uid: str, podgroup: ApiObject, members: Mapping[str, str], candidates: Iterable[str]
    ) -> list[Emission]:
        """A podgroup.submitted when the shape changed or a pod is new (a pod that goes away
        is a release, not a new shape). Costs the gang's size only when one is sent."""
        ctx = self._ctx
        priority_class = mapping.priority_class_name(podgroup)
        priority = ctx.priorities.get(priority_class or "", mapping.DEFAULT_PRIORITY)
        label = ctx.options.node_pool_label
        pods = ctx.objects[Kind.POD]
        first_uid = min(members, key=lambda member: members[member])
        first = pods[first_uid]
        pod_memory = ctx.memory.pods
        remembered = self._submitted(uid)
        new_pod = any(
            not (pod_memory.get(candidate) or _NO_POD).get("submitted") for candidate in candidates
        )
        if remembered is not None and not new_pod:
            # Sent before: the shape alone decides (the head, its first pod, says it all).
            head = mapping.submission_data(podgroup, [first], priority, label)
            if remembered.get("shape") == _shape(head):
                return []
        # Each pod read (unpacked) once: the first again for nothing.
        gang = {member: first if member == first_uid else pods[member] for member in members}
        problems: list[str] = []
        data = mapping.submission_data(podgroup, list(gang.values()), priority, label, problems)
        # The same shape as the head's: but for the pods (and the annotations and the top
        # owner, left out), the data reads the PodGroup and its first pod by name only.
        shape = _shape(data)
        for problem in problems:
            log.warning(
                "PodGroup %s/%s: %s; ignored (its ownerReference is used)",
                mapping.namespace_of(podgroup), mapping.name_of(podgroup), problem,
            )  # fmt: skip
            ctx.ignored(TOP_OWNER_METADATA)
        if remembered is None:
            # Annotations travel with the first submission; later changes are
            # podgroup.annotated (sent before this), so a later submission carries none.
            digests = self._digests_of(uid, podgroup)
        else:
            del data["annotations"]
            digests = dict(remembered.get("annotations") or {})
        ctx.memory.podgroups.put(uid, {"shape": shape, "annotations": digests})
        for member in members:
            record = pod_memory.get(member) or pod_record(uid, gang[member])
            if not record.get("submitted"):
                record["submitted"] = True
                pod_memory.put(member, record)
        # The first submission is the PodGroup's creation, KAI's anchor of the preemption
        # delay (PreemptionDelayEnd in pkg/scheduler/api/podgroup_info/job_info.go), even
        # when its pods came later; a later one (the gang's shape changed) is its newest pod.
        anchor = mapping.created_at(podgroup) if remembered is None else None
        created = [mapping.created_at(obj) for obj in (podgroup, *gang.values())]
        known = [moment for moment in created if moment is not None]
        time = anchor or (max(known) if known else None)
        return [
            ctx.emit(
                "podgroups", EventType.PODGROUP_SUBMITTED, data, podgroup, uid, "submitted",
                time=time,
            )
        ]  # fmt: skip

    def _digests_of(self, uid: str, podgroup: ApiObject) -> dict[str, str]:
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

    def _submitted(self, uid: str) -> PodGroupRecord | None:
        """The memory of a podgroup that was submitted (a record with its shape), else None."""
        record = self._ctx.memory.podgroups.get(uid)
        return record if record is not None and "shape" in record else None

    def _annotate(self, uid: str, podgroup: ApiObject) -> list[Emission]:
        ctx = self._ctx
        remembered = ctx.memory.podgroups.get(uid) or PodGroupRecord()
        sent: Mapping[str, str] = remembered.get("annotations") or {}
        digests = self._digests_of(uid, podgroup)
        if digests == sent:
            return []
        now = mapping.annotations_of(podgroup)
        change: dict[str, str | None] = {
            key: now[key] for key, value in digests.items() if sent.get(key) != value
        }
        change.update({key: None for key in sent if key not in digests})
        remembered["annotations"] = dict(digests)
        ctx.memory.podgroups.put(uid, remembered)
        data = {"uid": uid, "annotations": change}
        version = f"annotated/{mapping.version_of(podgroup)}"
        return [ctx.emit("podgroups", EventType.PODGROUP_ANNOTATED, data, podgroup, uid, version)]

    def _pod_transitions(
        self, podgroup_uid: str, podgroup: ApiObject, pod: ApiObject
    ) -> list[Emission]:
        ctx = self._ctx
        pod_uid = mapping.uid_of(pod)
        name = mapping.name_of(pod)
        record = ctx.memory.pods.get(pod_uid) or pod_record(podgroup_uid, pod)
        node = mapping.pod_node(pod)
        emissions: list[Emission] = []
        if node is not None and not record.get("allocated"):
            record["allocated"] = True
            ctx.memory.pods.put(pod_uid, record)
            data = {"uid": podgroup_uid, "pods": [{"name": name, "node": node}]}
            emissions.append(
                ctx.emit(
                    "podgroups", EventType.PODGROUP_ALLOCATED, data, pod, pod_uid, "allocated",
                    time=mapping.allocated_at(pod, podgroup),
                )
            )  # fmt: skip
        ended = mapping.finished(pod)
        if ended is not None and record.get("allocated") and not record.get("released"):
            if evictions.requested_at(pod) is None:  # ran to its end
                emissions.append(self._releases.release(podgroup_uid, pod_uid, name, pod, ended))
            else:  # ended while terminating: its deletion ended it
                emissions += self._releases.ended(podgroup_uid, pod_uid, name, pod, ended, record)
        return emissions

    def unseen_end_of_run(self, uid: str) -> list[Emission]:
        """A podgroup this term knew nothing of (no memory: a first start, a lost ledger)
        that has started a run (KAI's `kai.scheduler/last-start-timestamp`) and holds no
        bound, unfinished pod: its pods were deleted while no bridge watched, and a new term
        does not know their names. Releasing all pods ends such a run (the processor ignores
        it when nothing runs). With memory, each such pod is released by name instead. The
        memory keeps that it was sent (a record without a shape), so it is sent once.
        """
        ctx = self._ctx
        podgroup = ctx.objects[Kind.POD_GROUP].get(uid)
        if podgroup is None or uid in ctx.memory.podgroups:
            return []
        if mapping.LAST_START_ANNOTATION not in mapping.annotations_of(podgroup):
            return []  # never ran: nothing to end (and no placeholder for the service)
        if any(mapping.holds_resources(pod) for pod in ctx.pods_of(podgroup)):
            return []
        data: dict[str, object] = {"uid": uid, "reason": "deleted"}
        start = run_start(podgroup)
        signal = ctx.evictions.match_unseen(key_of_podgroup(podgroup), None, start)
        if signal is not None:
            data.update(reason="evicted", eviction=signal.wire())
        ctx.released("none" if signal is None else signal.source)
        version = f"released-all/{mapping.version_of(podgroup)}"
        ctx.memory.podgroups.put(uid, {"ended": mapping.version_of(podgroup)})
        return [
            ctx.emit(
                "podgroups", EventType.PODGROUP_RELEASED, data, podgroup, uid, version,
                time=ctx.clock(),
            )
        ]  # fmt: skip


_NO_POD: Final[PodRecord] = {}


def _shape(data: Mapping[str, object]) -> str:
    """The digest of a submission's shape: its data but the pods and annotations. Not the top
    owner: KAI sets it once, at creation, and a ledger written before the field must not
    resubmit every podgroup (the processor reads the annotation then)."""
    return mapping.digest(
        {k: v for k, v in data.items() if k not in ("annotations", "pods", "topOwner")}
    )


def pod_record(podgroup_uid: str, pod: ApiObject) -> PodRecord:
    """A pod's first record: nothing of it sent yet."""
    record: PodRecord = {
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
