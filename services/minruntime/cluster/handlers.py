"""The handlers of the kinds that stand alone: Queues, the scheduler's ConfigMap, Nodes.

Each sends its object's data when its digest changed since it was last sent (the memory's
``ContentRecord``), and a Queue's or Node's deletion when it had been sent. What differs per
kind (its data, its topic, its events) is a ``ContentKind``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from minruntime.cluster import mapping
from minruntime.cluster.context import Context, Emission, Shared, log
from minruntime.cluster.evictions import QUEUE_DISRUPTION
from minruntime.cluster.memory import Memory, Records
from minruntime.cluster.objects import Action, ApiObject
from minruntime.cluster.records import ContentRecord
from minruntime.events import EventType


@dataclass(frozen=True, slots=True)
class ContentKind:
    """What one such kind sends: its data, its topic's role, its events and their version."""

    records: Callable[[Memory], Records[ContentRecord]]
    data: Callable[[Context, ApiObject], Mapping[str, object]]
    role: str
    upserted: EventType
    version: Callable[[ApiObject], str]
    deleted: EventType | None  # None: a deletion sends nothing, its record stays


class ContentHandler(Shared):
    """A Queue, Node or ConfigMap added, changed or deleted (``ContentKind``)."""

    __slots__ = ("_kind",)

    def __init__(self, ctx: Context, kind: ContentKind) -> None:
        super().__init__(ctx)
        self._kind = kind

    def __call__(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        ctx, kind = self._ctx, self._kind
        records = kind.records(ctx.memory)
        if action == Action.DELETED:
            # KAI keeps its last config; so does the service (docs/kubernetes.md). The memory
            # stays too: the same ConfigMap made again with the same content sends nothing.
            record = None if kind.deleted is None else records.forget(uid)
            if kind.deleted is None or record is None:
                return []
            named = {"name": mapping.name_of(obj) or str(record.get("name"))}
            return [ctx.emit(kind.role, kind.deleted, named, obj, uid, "deleted")]
        data = kind.data(ctx, obj)
        if not changed_content(records, uid, data, mapping.name_of(obj)):
            return []
        version = kind.version(obj)
        return [ctx.emit(kind.role, kind.upserted, data, obj, uid, version)]


def changed_content(records: Records[ContentRecord], uid: str, content: object, name: str) -> bool:
    """Whether ``content`` differs from what was last sent for ``uid`` (then remembered)."""
    shape = mapping.digest(content)
    record = records.get(uid)
    if record is not None and record.get("digest") == shape:
        return False
    records.put(uid, {"digest": shape, "name": name})
    return True


def _queue_data(ctx: Context, obj: ApiObject) -> dict[str, object]:
    problems: list[str] = []
    data = mapping.queue_data(obj, ctx.options.node_pool_label, problems)
    for problem in problems:
        log.warning("%s", problem)
        ctx.ignored(QUEUE_DISRUPTION)
    return data.model_dump(mode="json", by_alias=True)


def _config_data(ctx: Context, obj: ApiObject) -> dict[str, object]:
    data = mapping.config_data(obj, ctx.options.config_node_pool)
    return data.model_dump(mode="json", by_alias=True)


def _node_data(ctx: Context, obj: ApiObject) -> dict[str, object]:
    return mapping.node_data(obj, ctx.options.node_pool_label)


QUEUES: Final = ContentKind(
    lambda memory: memory.queues,
    _queue_data,
    "queues",
    EventType.QUEUE_UPSERTED,
    lambda obj: f"upserted/{mapping.generation_of(obj)}",
    EventType.QUEUE_DELETED,
)
CONFIG_MAPS: Final = ContentKind(
    lambda memory: memory.configs,
    _config_data,
    "queues",
    EventType.CONFIG_UPDATED,
    lambda obj: f"config/{mapping.version_of(obj)}",
    None,
)
NODES: Final = ContentKind(
    lambda memory: memory.nodes,
    _node_data,
    "nodes",
    EventType.NODE_UPSERTED,
    lambda obj: f"upserted/{mapping.version_of(obj)}",
    EventType.NODE_DELETED,
)
