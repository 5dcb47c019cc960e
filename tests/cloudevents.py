"""The tests' one CloudEvent builder: plain dicts as an outside producer writes them.

Every builder returns the structured-mode event (a dict) with the same defaults; the adapters
turn it into what a test feeds: the JSON value (`wire`), the SDK's binary or structured Kafka
message (`binary`, `structured`), or the integration tests' `Message` (`message`).
Deliberately independent of `minruntime.events`, so the tests check the wire contract
(CONTRACT.md §1) rather than our own encoder. Pass a value explicitly when a test depends on it.
"""

from __future__ import annotations

import json
import random
import string
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from minruntime.core import MinRuntimeConfig, Queue, format_duration

Event = dict[str, Any]

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
SOURCE = "kai-scheduler"
# A hostile identifier of 100,000 characters, incompressible as a real one would be: PostgreSQL
# compresses an index row before it checks its size, so "x" * 100,000 would fit.
LONG = "".join(random.Random(12).choices(string.ascii_letters + string.digits, k=100_000))
TOPICS = {
    "queue": "kai.queues",
    "config": "kai.queues",
    "podgroup": "kai.podgroups",
    "node": "kai.nodes",
    "requeue": "kai.nominations",
}


def stamp(moment: datetime | str) -> str:
    """RFC3339 in UTC, as producers write event times (a string is taken as written)."""
    if isinstance(moment, str):
        return moment
    return moment.isoformat().replace("+00:00", "Z")


def at(seconds: float, base: datetime = T0) -> str:
    """RFC3339 time `seconds` after `base`."""
    return stamp(base + timedelta(seconds=seconds))


def event(
    type_: str, subject: str, data: Any, time: datetime | str = T0, **attributes: Any
) -> Event:
    """One CloudEvent; `attributes` add to or replace the envelope's (id, source, ...)."""
    return {
        "specversion": "1.0",
        "id": str(uuid.uuid4()),
        "source": SOURCE,
        "type": type_,
        "time": stamp(time),
        "subject": subject,
        "data": dict(data) if isinstance(data, Mapping) else data,
        **attributes,
    }


def with_data(document: Event, **data: Any) -> Event:
    """The event with these data fields set, whatever their names and values (bad ones too)."""
    return {**document, "data": {**document["data"], **data}}


def _duration(value: timedelta | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return format_duration(value)


def queue(
    name: str,
    parent: str | None = None,
    preempt: timedelta | str | None = None,
    reclaim: timedelta | str | None = None,
    node_pool: str | None = None,
    **attributes: Any,
) -> Event:
    """queue.upserted (``node_pool`` None: no nodePool, the queue is in every pool's tree)."""
    data: dict[str, Any] = {"name": name}
    if parent is not None:
        data["parentQueue"] = parent
    if node_pool is not None:
        data["nodePool"] = node_pool
    if preempt is not None:
        data["preemptMinRuntime"] = _duration(preempt)
    if reclaim is not None:
        data["reclaimMinRuntime"] = _duration(reclaim)
    return event("queue.upserted", name, data, **attributes)


def queue_deleted(name: str, **attributes: Any) -> Event:
    return event("queue.deleted", name, {"name": name}, **attributes)


def config(
    node_pool: str = "default", *, time: datetime | str = T0, **arguments: timedelta | str
) -> Event:
    """config.updated (plugin argument names as keyword arguments)."""
    data = {"nodePool": node_pool, **{k: _duration(v) for k, v in arguments.items()}}
    return event("config.updated", f"config/{node_pool}", data, time)


def config_with(node_pool: str = "default", **data: Any) -> Event:
    """config.updated with ``data``'s fields as the wire names them (the budgets, the cap)."""
    return with_data(config(node_pool), **data)


def submitted(
    uid: str,
    queue_name: str,
    pods: int | Sequence[str] | Sequence[Mapping[str, Any]] = 1,
    *,
    priority: Any = 100,
    gpu: float = 1,
    name: str | None = None,
    namespace: str = "team",
    min_available: int | None = None,
    sub_groups: Sequence[Mapping[str, Any]] | None = None,
    node_pool: str | None = None,
    annotations: Mapping[str, str] | None = None,
    preemptible: bool | None = None,
    preemptibility: str | None = None,
    **attributes: Any,
) -> Event:
    """podgroup.submitted: `pods` is a count (named uid-0, uid-1 ...), names or pod objects;
    `min_available` makes the one subgroup "default" explicit."""
    names: Sequence[str | Mapping[str, Any]] = (
        [f"{uid}-{i}" for i in range(pods)] if isinstance(pods, int) else pods
    )
    data: dict[str, Any] = {
        "uid": uid,
        "name": name or f"job-{uid}",
        "namespace": namespace,
        "queue": queue_name,
        "priority": priority,
        "pods": [{"name": p, "gpu": gpu} if isinstance(p, str) else dict(p) for p in names],
    }
    if preemptible is not None:
        data["preemptible"] = preemptible
    if preemptibility is not None:
        data["preemptibility"] = preemptibility
    if node_pool is not None:
        data["nodePool"] = node_pool
    if min_available is not None:
        data["subGroups"] = [{"name": "default", "minAvailable": min_available}]
    if sub_groups is not None:
        data["subGroups"] = list(sub_groups)
    if annotations is not None:
        data["annotations"] = dict(annotations)
    return event("podgroup.submitted", uid, data, **attributes)


def allocated(
    uid: str,
    pods: int | Sequence[str] = 1,
    time: datetime | str = T0,
    node: str = "node-1",
    **attributes: Any,
) -> Event:
    """podgroup.allocated of `pods` (a count, named as `submitted` names them, or names)."""
    names = [f"{uid}-{i}" for i in range(pods)] if isinstance(pods, int) else pods
    data = {"uid": uid, "pods": [{"name": name, "node": node} for name in names]}
    return event("podgroup.allocated", uid, data, time, **attributes)


def released(
    uid: str,
    pods: Sequence[str] | None = None,
    *,
    time: datetime | str = T0,
    reason: str | None = None,
    **attributes: Any,
) -> Event:
    """podgroup.released (all pods when `pods` is None)."""
    data: dict[str, Any] = {"uid": uid}
    if pods is not None:
        data["pods"] = list(pods)
    if reason is not None:
        data["reason"] = reason
    return event("podgroup.released", uid, data, time, **attributes)


def annotated(uid: str, annotations: Mapping[str, str | None], **attributes: Any) -> Event:
    data = {"uid": uid, "annotations": dict(annotations)}
    return event("podgroup.annotated", uid, data, **attributes)


def deleted(uid: str, **attributes: Any) -> Event:
    return event("podgroup.deleted", uid, {"uid": uid}, **attributes)


def node(name: str, gpu: float = 8, node_pool: str = "default", **attributes: Any) -> Event:
    data = {"name": name, "nodePool": node_pool, "gpu": gpu}
    return event("node.upserted", name, data, **attributes)


def node_deleted(name: str, **attributes: Any) -> Event:
    return event("node.deleted", name, {"name": name}, **attributes)


def nominated(
    uid: str, by: str = "proportion", reason: str | None = None, **attributes: Any
) -> Event:
    data = {"uid": uid, "nominatedBy": by}
    if reason is not None:
        data["reason"] = reason
    return event("requeue.nominated", uid, data, **attributes)


def queue_of(q: Queue) -> Event:
    """The queue.upserted of a core ``Queue``."""
    return queue(q.name, q.parent, q.preempt_min_runtime, q.reclaim_min_runtime, q.node_pool)


def config_of(node_pool: str, c: MinRuntimeConfig) -> Event:
    """The config.updated of a core ``MinRuntimeConfig`` (the minimum-runtime arguments)."""
    return config(
        node_pool,
        defaultPreemptMinRuntime=c.default_preempt_min_runtime,
        defaultReclaimMinRuntime=c.default_reclaim_min_runtime,
        reclaimResolveMethod=str(c.reclaim_resolve_method),
    )


def design_tree(time: datetime | str = T0) -> list[Event]:
    """SEMANTICS.md §4: reclaim A → B(600s) → {C → {leaf1(0s), leaf2(180s)}, D(60s) → {leaf3}};
    preempt B(600s), leaf1(300s)."""
    return [
        queue("A", time=time),
        queue("B", "A", preempt="600s", reclaim="600s", time=time),
        queue("C", "B", time=time),
        queue("leaf1", "C", preempt="300s", reclaim="0s", time=time),
        queue("leaf2", "C", reclaim="180s", time=time),
        queue("D", "B", reclaim="60s", time=time),
        queue("leaf3", "D", time=time),
    ]


# --- adapters ---------------------------------------------------------------------------------


def wire(document: Any) -> bytes:
    """The structured-mode record value: the event as JSON."""
    return json.dumps(document).encode()


def with_extension(document: Event, literal: str) -> bytes:
    """The event's JSON with an extension attribute whose value is a bare literal (NaN ...)."""
    return wire(document).replace(b'"specversion"', f'"ext": {literal}, "specversion"'.encode(), 1)


@dataclass(frozen=True)
class Message:
    """A record before it has an offset (what the integration tests' `Feed` applies)."""

    topic: str
    key: bytes | None
    value: bytes | None


def message(document: Event) -> Message:
    """The event as a record on its type's input topic, keyed by its subject."""
    topic = TOPICS[str(document["type"]).split(".")[0]]
    return Message(topic, str(document["subject"]).encode(), wire(document))


def raw(topic: str, value: bytes | None, key: bytes | None = b"k") -> Message:
    """Any value as a record (bad ones too)."""
    return Message(topic, key, value)


def sdk_event(document: Event) -> Any:
    """The official CloudEvents SDK's own reading of the event (its JSON format)."""
    from cloudevents.core.formats.json import JSONFormat

    return JSONFormat().read(None, wire(document))


def binary(document: Event, **options: Any) -> Any:
    """The SDK's binary-mode Kafka message of the event (`options` go to its binding)."""
    from cloudevents.core.bindings import kafka

    return kafka.to_binary_event(sdk_event(document), **options)


def structured(document: Event) -> Any:
    """The SDK's structured-mode Kafka message of the event."""
    from cloudevents.core.bindings import kafka

    return kafka.to_structured_event(sdk_event(document))
