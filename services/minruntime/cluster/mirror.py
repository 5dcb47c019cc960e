"""The bridge's view of the cluster: watch notifications in, contract events out.

Pure (no I/O; the clock is passed in and read only when the cluster gives no time). Fed by
the watch loops with every ADDED / MODIFIED / DELETED object and with whole relists; answers
the events to send, in the order to send them. It keeps only what it needs to tell a change
from a repeat: the content last sent per object, and which pods it reported allocated and
released. After a restart it starts empty, so it sends the current state again under the same
deterministic ids (docs/kubernetes.md, "Event ids").
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, Final

from minruntime.cluster import mapping
from minruntime.cluster.mapping import ObjectError
from minruntime.core import format_rfc3339
from minruntime.events import Event, EventType, new_event

log = logging.getLogger(__name__)

ADDED: Final = "ADDED"
MODIFIED: Final = "MODIFIED"
DELETED: Final = "DELETED"


class Kind(StrEnum):
    """The object kinds the bridge watches."""

    PRIORITY_CLASS = "PriorityClass"
    CONFIG_MAP = "ConfigMap"
    QUEUE = "Queue"
    NODE = "Node"
    POD_GROUP = "PodGroup"
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


@dataclass
class _PodGroupSent:
    submitted: str | None = None
    """Digest of the last submission without its pods and annotations."""
    pods: frozenset[str] = frozenset()
    annotations: dict[str, str] = field(default_factory=dict)


class ClusterMirror:
    """Turns watch notifications into contract events (see the module docstring)."""

    def __init__(self, options: MirrorOptions, clock: Callable[[], datetime]) -> None:
        self._options = options
        self._clock = clock
        self._objects: dict[Kind, dict[str, Mapping[str, Any]]] = {kind: {} for kind in Kind}
        self._sent: dict[str, str] = {}
        self._podgroups_by_name: dict[tuple[str, str], str] = {}
        self._podgroup_sent: dict[str, _PodGroupSent] = {}
        self._allocated: set[str] = set()
        self._released: set[str] = set()
        self._priorities: dict[str, int] = {}

    # -- input -----------------------------------------------------------------------------

    def observe(self, kind: Kind, action: str, obj: Mapping[str, Any]) -> list[Emission]:
        """The events one watch notification causes (often none)."""
        try:
            uid = mapping.uid_of(obj)
        except ObjectError as exc:
            log.warning("ignored %s: %s", kind.value, exc)
            return []
        objects = self._objects[kind]
        if action == DELETED:
            objects.pop(uid, None)
        else:
            objects[uid] = obj
        handler = _HANDLERS[kind]
        try:
            return handler(self, action, obj, uid)
        except ValueError as exc:  # ObjectError, or an event the contract refuses
            log.warning("cannot map %s %s: %s", kind.value, mapping.name_of(obj), exc)
            return []

    def relisted(self, kind: Kind, objs: Iterable[Mapping[str, Any]]) -> list[Emission]:
        """A full list of `kind` (after a start or a 410 Gone): the gone ones count as deleted.

        Their deletion was not seen, so its time is the bridge's clock at the relist.
        """
        listed = list(objs)
        present = {mapping.metadata(obj).get("uid") for obj in listed}
        emissions: list[Emission] = []
        for uid, known in list(self._objects[kind].items()):
            if uid not in present:
                emissions += self.observe(kind, DELETED, self._deleted_now(known))
        for obj in listed:
            emissions += self.observe(kind, MODIFIED, obj)
        return emissions

    def listed_everything(self) -> list[Emission]:
        """After a term's first listing: end the runs of podgroups that hold no pod any more.

        Pods deleted while no bridge was watching are not in any list, and a new term does not
        know their names; releasing all pods of a podgroup that has started a run (KAI's
        `kai.scheduler/last-start-timestamp`) and holds no bound, unfinished pod ends such a
        run (the processor ignores it when nothing runs). The id carries the PodGroup's
        resourceVersion, so a restart with nothing changed sends the same id.
        """
        emissions: list[Emission] = []
        for uid, podgroup in self._objects[Kind.POD_GROUP].items():
            if mapping.LAST_START_ANNOTATION not in mapping.annotations_of(podgroup):
                continue  # never ran: nothing to end (and no placeholder for the service)
            holding = [
                pod
                for pod in self._pods_of(podgroup)
                if mapping.pod_node(pod) is not None and mapping.finished(pod) is None
            ]
            if not holding:
                data = {"uid": uid, "reason": "deleted"}
                version = f"released-all/{mapping.version_of(podgroup)}"
                emissions.append(
                    self._emit(
                        "podgroups", EventType.PODGROUP_RELEASED, data, podgroup, uid, version,
                        time=self._clock(),
                    )
                )  # fmt: skip
        return emissions

    def _deleted_now(self, obj: Mapping[str, Any]) -> Mapping[str, Any]:
        meta = dict(mapping.metadata(obj))
        meta.setdefault("deletionTimestamp", format_rfc3339(self._clock()))
        return {**obj, "metadata": meta}

    # -- queues, config, nodes, priority classes -------------------------------------------

    def _queue(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action == DELETED:
            self._sent.pop(f"queue/{uid}", None)
            data = {"name": mapping.name_of(obj)}
            return [self._emit("queues", EventType.QUEUE_DELETED, data, obj, uid, "deleted")]
        upsert = mapping.queue_data(obj).model_dump(mode="json", by_alias=True)
        if not self._changed(f"queue/{uid}", upsert):
            return []
        version = f"upserted/{mapping.generation_of(obj)}"
        return [self._emit("queues", EventType.QUEUE_UPSERTED, upsert, obj, uid, version)]

    def _config_map(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action == DELETED:
            return []  # KAI keeps its last config; so does the service (docs/kubernetes.md)
        data = mapping.config_data(obj, self._options.config_node_pool)
        update = data.model_dump(mode="json", by_alias=True)
        if not self._changed(f"config/{uid}", update):
            return []
        version = f"config/{mapping.version_of(obj)}"
        return [self._emit("queues", EventType.CONFIG_UPDATED, update, obj, uid, version)]

    def _node(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        if action == DELETED:
            self._sent.pop(f"node/{uid}", None)
            data = {"name": mapping.name_of(obj)}
            return [self._emit("nodes", EventType.NODE_DELETED, data, obj, uid, "deleted")]
        data = mapping.node_data(obj, self._options.node_pool_label)
        if not self._changed(f"node/{uid}", data):
            return []
        version = f"upserted/{mapping.version_of(obj)}"
        return [self._emit("nodes", EventType.NODE_UPSERTED, data, obj, uid, version)]

    def _priority_class(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        name = mapping.name_of(obj)
        if action == DELETED:
            self._priorities.pop(name, None)
        else:
            self._priorities[name] = int(obj.get("value") or 0)
        emissions: list[Emission] = []
        for podgroup_uid, podgroup in list(self._objects[Kind.POD_GROUP].items()):
            if mapping.priority_class_name(podgroup) == name:
                emissions += self._sync_podgroup(podgroup_uid)
        return emissions

    # -- podgroups and pods ----------------------------------------------------------------

    def _podgroup(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        key = (mapping.namespace_of(obj), mapping.name_of(obj))
        if action == DELETED:
            if self._podgroups_by_name.get(key) == uid:
                del self._podgroups_by_name[key]
            if self._podgroup_sent.pop(uid, None) is None:
                return []
            data = {"uid": uid}
            return [self._emit("podgroups", EventType.PODGROUP_DELETED, data, obj, uid, "deleted")]
        self._podgroups_by_name[key] = uid
        return self._sync_podgroup(uid)

    def _pod(self, action: str, obj: Mapping[str, Any], uid: str) -> list[Emission]:
        podgroup_uid = self._podgroup_of(obj)
        if action != DELETED:
            return [] if podgroup_uid is None else self._sync_podgroup(podgroup_uid)
        emissions: list[Emission] = []
        if podgroup_uid is not None and uid in self._allocated and uid not in self._released:
            emissions.append(self._release(podgroup_uid, obj, mapping.removed(obj)))
        self._allocated.discard(uid)
        self._released.discard(uid)
        return emissions

    def _podgroup_of(self, pod: Mapping[str, Any]) -> str | None:
        name = mapping.pod_group_name(pod)
        if name is None:
            return None
        return self._podgroups_by_name.get((mapping.namespace_of(pod), name))

    def _pods_of(self, podgroup: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        namespace, name = mapping.namespace_of(podgroup), mapping.name_of(podgroup)
        return [
            pod
            for pod in self._objects[Kind.POD].values()
            if mapping.namespace_of(pod) == namespace and mapping.pod_group_name(pod) == name
        ]

    def _sync_podgroup(self, uid: str) -> list[Emission]:
        podgroup = self._objects[Kind.POD_GROUP].get(uid)
        if podgroup is None:
            return []
        pods = self._pods_of(podgroup)
        sent = self._podgroup_sent.get(uid)
        emissions: list[Emission] = []
        if pods:
            emissions += self._submit(uid, podgroup, pods, sent)
            sent = self._podgroup_sent[uid]
        if sent is None:
            return emissions  # no pod yet: a podgroup.submitted needs at least one
        emissions += self._annotate(uid, podgroup, sent)
        for pod in sorted(pods, key=mapping.name_of):
            emissions += self._pod_transitions(uid, podgroup, pod)
        return emissions

    def _submit(
        self,
        uid: str,
        podgroup: Mapping[str, Any],
        pods: list[Mapping[str, Any]],
        sent: _PodGroupSent | None,
    ) -> list[Emission]:
        priority_class = mapping.priority_class_name(podgroup)
        priority = self._priorities.get(priority_class or "", mapping.DEFAULT_PRIORITY)
        data = mapping.submission_data(podgroup, pods, priority, self._options.node_pool_label)
        # Annotations travel with the first submission; later changes are podgroup.annotated.
        # A pod that goes away is a release, not a new shape: only new pods resubmit.
        rest = mapping.digest({k: v for k, v in data.items() if k not in ("annotations", "pods")})
        names = frozenset(pod["name"] for pod in data["pods"])
        if sent is not None and sent.submitted == rest and names <= sent.pods:
            return []
        if sent is None:
            sent = self._podgroup_sent[uid] = _PodGroupSent(annotations=dict(data["annotations"]))
        else:
            data["annotations"] = dict(sent.annotations)
        sent.submitted, sent.pods = rest, names
        shape = mapping.digest({k: v for k, v in data.items() if k != "annotations"})
        created = [mapping.created_at(obj) for obj in (podgroup, *pods)]
        known = [moment for moment in created if moment is not None]
        time = max(known) if known else None
        return [
            self._emit(
                "podgroups", EventType.PODGROUP_SUBMITTED, data, podgroup, uid,
                f"submitted/{shape}", time=time,
            )
        ]  # fmt: skip

    def _annotate(
        self, uid: str, podgroup: Mapping[str, Any], sent: _PodGroupSent
    ) -> list[Emission]:
        now = mapping.annotations_of(podgroup)
        if now == sent.annotations:
            return []
        change: dict[str, str | None] = {
            key: value for key, value in now.items() if sent.annotations.get(key) != value
        }
        change.update({key: None for key in sent.annotations if key not in now})
        sent.annotations = now
        data = {"uid": uid, "annotations": change}
        version = f"annotated/{mapping.version_of(podgroup)}"
        return [self._emit("podgroups", EventType.PODGROUP_ANNOTATED, data, podgroup, uid, version)]

    def _pod_transitions(
        self, podgroup_uid: str, podgroup: Mapping[str, Any], pod: Mapping[str, Any]
    ) -> list[Emission]:
        pod_uid = mapping.uid_of(pod)
        node = mapping.pod_node(pod)
        emissions: list[Emission] = []
        if node is not None and pod_uid not in self._allocated:
            self._allocated.add(pod_uid)
            data = {"uid": podgroup_uid, "pods": [{"name": mapping.name_of(pod), "node": node}]}
            emissions.append(
                self._emit(
                    "podgroups", EventType.PODGROUP_ALLOCATED, data, pod, pod_uid, "allocated",
                    time=mapping.allocated_at(pod, podgroup),
                )
            )  # fmt: skip
        ended = mapping.finished(pod)
        if ended is not None and pod_uid in self._allocated and pod_uid not in self._released:
            emissions.append(self._release(podgroup_uid, pod, ended))
        return emissions

    def _release(
        self, podgroup_uid: str, pod: Mapping[str, Any], release: mapping.Release
    ) -> Emission:
        pod_uid = mapping.uid_of(pod)
        self._released.add(pod_uid)
        data = {"uid": podgroup_uid, "pods": [mapping.name_of(pod)], "reason": release.reason}
        return self._emit(
            "podgroups", EventType.PODGROUP_RELEASED, data, pod, pod_uid, "released",
            time=release.time,
        )  # fmt: skip

    # -- helpers ---------------------------------------------------------------------------

    def _changed(self, key: str, content: Any) -> bool:
        shape = mapping.digest(content)
        if self._sent.get(key) == shape:
            return False
        self._sent[key] = shape
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
        event = new_event(
            str(event_type),
            data,
            time=time or self._clock(),
            source=mapping.SOURCE,
            id=mapping.event_id(uid, transition),
        )
        return Emission(role, event)


_Handler = Callable[[ClusterMirror, str, Mapping[str, Any], str], list[Emission]]
_HANDLERS: Final[Mapping[Kind, _Handler]] = {
    Kind.PRIORITY_CLASS: ClusterMirror._priority_class,
    Kind.CONFIG_MAP: ClusterMirror._config_map,
    Kind.QUEUE: ClusterMirror._queue,
    Kind.NODE: ClusterMirror._node,
    Kind.POD_GROUP: ClusterMirror._podgroup,
    Kind.POD: ClusterMirror._pod,
}
