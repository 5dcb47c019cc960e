"""The handlers of the kinds that stand alone: Queues, the scheduler's ConfigMap, Nodes.

Each sends its object's data when its digest changed since it was last sent (the memory's
``ContentRecord``), and a Queue's or Node's deletion when it had been sent.
"""

from __future__ import annotations

from minruntime.cluster import mapping
from minruntime.cluster.context import Context, Emission, log
from minruntime.cluster.evictions import QUEUE_DISRUPTION
from minruntime.cluster.memory import Records
from minruntime.cluster.objects import Action, ApiObject
from minruntime.cluster.records import ContentRecord
from minruntime.events import EventType


class QueueHandler:
    """Queues: queue.upserted, queue.deleted."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def __call__(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        ctx = self._ctx
        if action == Action.DELETED:
            return named_deleted(
                ctx, ctx.memory.queues, "queues", EventType.QUEUE_DELETED, obj, uid
            )
        problems: list[str] = []
        upsert = mapping.queue_data(obj, ctx.options.node_pool_label, problems).model_dump(
            mode="json", by_alias=True
        )
        for problem in problems:
            log.warning("%s", problem)
            ctx.ignored(QUEUE_DISRUPTION)
        if not changed_content(ctx.memory.queues, uid, upsert, mapping.name_of(obj)):
            return []
        version = f"upserted/{mapping.generation_of(obj)}"
        return [ctx.emit("queues", EventType.QUEUE_UPSERTED, upsert, obj, uid, version)]


class ConfigMapHandler:
    """The scheduler's ConfigMap: config.updated."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def __call__(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        if action == Action.DELETED:
            # KAI keeps its last config; so does the service (docs/kubernetes.md). The memory
            # stays too: the same ConfigMap made again with the same content sends nothing.
            return []
        ctx = self._ctx
        data = mapping.config_data(obj, ctx.options.config_node_pool)
        update = data.model_dump(mode="json", by_alias=True)
        if not changed_content(ctx.memory.configs, uid, update, mapping.name_of(obj)):
            return []
        version = f"config/{mapping.version_of(obj)}"
        return [ctx.emit("queues", EventType.CONFIG_UPDATED, update, obj, uid, version)]


class NodeHandler:
    """Nodes: node.upserted, node.deleted."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: Context) -> None:
        self._ctx = ctx

    def __call__(self, action: Action, obj: ApiObject, uid: str) -> list[Emission]:
        ctx = self._ctx
        if action == Action.DELETED:
            return named_deleted(ctx, ctx.memory.nodes, "nodes", EventType.NODE_DELETED, obj, uid)
        data = mapping.node_data(obj, ctx.options.node_pool_label)
        if not changed_content(ctx.memory.nodes, uid, data, mapping.name_of(obj)):
            return []
        version = f"upserted/{mapping.version_of(obj)}"
        return [ctx.emit("nodes", EventType.NODE_UPSERTED, data, obj, uid, version)]


def named_deleted(
    ctx: Context,
    records: Records[ContentRecord],
    role: str,
    event_type: EventType,
    obj: ApiObject,
    uid: str,
) -> list[Emission]:
    """A deleted queue or node: its deletion, named, when the mirror had sent it."""
    record = records.forget(uid)
    if record is None:
        return []
    data = {"name": mapping.name_of(obj) or str(record.get("name"))}
    return [ctx.emit(role, event_type, data, obj, uid, "deleted")]


def changed_content(records: Records[ContentRecord], uid: str, content: object, name: str) -> bool:
    """Whether ``content`` differs from what was last sent for ``uid`` (then remembered)."""
    shape = mapping.digest(content)
    record = records.get(uid)
    if record is not None and record.get("digest") == shape:
        return False
    records.put(uid, {"digest": shape, "name": name})
    return True
