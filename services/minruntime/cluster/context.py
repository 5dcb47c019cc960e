"""What the mirror's per-kind handlers share: the options, the clock, the caches, the memory
of what was sent, the eviction signals, and how an event to send is made (``emit``)."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

from minruntime.cluster import evictions, mapping
from minruntime.cluster.cache import (
    POD_INDEXES,
    PODGROUP_INDEXES,
    PODS_BY_GROUP,
    Cache,
    key_of_podgroup,
)
from minruntime.cluster.evictions import Evictions
from minruntime.cluster.memory import Memory
from minruntime.cluster.objects import ApiObject, Kept, Kind
from minruntime.events import Event, EventType, new_event

log = logging.getLogger("minruntime.cluster.mirror")


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


def kept(kind: Kind, obj: ApiObject, options: MirrorOptions) -> Kept:
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


_INDEXES: Final = {Kind.POD: POD_INDEXES, Kind.POD_GROUP: PODGROUP_INDEXES}


def _caches() -> dict[Kind, Cache]:
    return {kind: Cache(_INDEXES.get(kind)) for kind in Kind}


@dataclass(slots=True, eq=False)
class Context:
    """The state the handlers share (one per mirror)."""

    options: MirrorOptions
    clock: Callable[[], datetime]
    memory: Memory
    evictions: Evictions
    released: Callable[[str], None]  # counts deletions' releases by attribution
    ignored: Callable[[str], None]  # counts a value left out (IGNORED_VALUES)
    # Held packed (cluster.packed): a tenth of the memory of the kept dicts.
    objects: Mapping[Kind, Cache] = field(init=False, default_factory=_caches)
    unseen: bool = field(init=False, default=False)  # handling deletions missing from a listing
    # A listing in progress: the podgroups to sync at its end (None: none in progress).
    deferred: set[str] | None = field(init=False, default=None)
    priorities: dict[str, int] = field(init=False, default_factory=dict)  # class name -> value

    def pods_of(self, podgroup: ApiObject) -> list[Kept]:
        """The kept pods that name ``podgroup``."""
        pods = self.objects[Kind.POD]
        return [pods[uid] for uid in pods.by_index(PODS_BY_GROUP, key_of_podgroup(podgroup))]

    def emit(
        self,
        role: str,
        event_type: EventType,
        data: Mapping[str, object],
        obj: ApiObject,
        uid: str,
        transition: str,
        *,
        time: datetime | None = None,
    ) -> Emission:
        """The event of one transition of one object (its id: ``mapping.event_id``); its time
        the one given, else the object's (its deletion's, or its last change's), else now."""
        if time is None:
            time = mapping.deleted_at(obj) if transition == "deleted" else mapping.changed_at(obj)
        moment = time or self.clock()
        content = mapping.content_digest(str(event_type), data, moment)
        event = new_event(
            str(event_type),
            data,
            time=moment,
            source=mapping.SOURCE,
            id=mapping.event_id(uid, transition, "", content),
        )
        return Emission(role, event)


class Shared:
    """A handler (or a part of one) over the mirror's shared context."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx
