"""Building wire-format events and feeding them through ``apply_batch`` as Kafka would."""

from __future__ import annotations

import itertools
import json
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from minruntime.core import MinRuntimeConfig, Queue, format_duration
from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch

STATE_TABLES = (
    "queue_nodes",
    "queue_tree_version",
    "node_pool_configs",
    "podgroup_state",
    "subgroup_state",
    "pod_state",
    "node_state",
    "nominations",
    "requeue_decision_log",
    "requeue_promises",
    "run_log",
    "event_log",
    "dead_letter_log",
    "consumer_offsets",
    "outbox",
    "projection_snapshots",
    "projection_snapshot_tables",
    "projection_snapshot_podgroups",
)

T0 = datetime(2026, 11, 21, 10, 0, tzinfo=UTC)
GROUP = "test-processor"
_ids = itertools.count(1)


@dataclass(frozen=True)
class Message:
    """A record before it has an offset."""

    topic: str
    key: bytes | None
    value: bytes | None


def cloud_event(
    type_: str,
    subject: str,
    data: Mapping[str, Any],
    *,
    time: datetime = T0,
    id_: str | None = None,
    source: str = "kai-scheduler",
) -> bytes:
    """A CloudEvents 1.0 JSON value as producers write it."""
    return json.dumps(
        {
            "specversion": "1.0",
            "id": id_ or f"evt-{next(_ids)}",
            "source": source,
            "type": type_,
            "time": time.isoformat().replace("+00:00", "Z"),
            "subject": subject,
            "data": dict(data),
        }
    ).encode()


def _duration(value: timedelta | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    return format_duration(value)


def queue(
    name: str,
    parent: str | None = None,
    preempt: timedelta | str | None = None,
    reclaim: timedelta | str | None = None,
    **kw: Any,
) -> Message:
    data: dict[str, Any] = {"name": name}
    if parent is not None:
        data["parentQueue"] = parent
    if preempt is not None:
        data["preemptMinRuntime"] = _duration(preempt)
    if reclaim is not None:
        data["reclaimMinRuntime"] = _duration(reclaim)
    return Message("kai.queues", name.encode(), cloud_event("queue.upserted", name, data, **kw))


def queue_deleted(name: str, **kw: Any) -> Message:
    return Message(
        "kai.queues", name.encode(), cloud_event("queue.deleted", name, {"name": name}, **kw)
    )


def config(node_pool: str = "default", **arguments: Any) -> Message:
    data = {"nodePool": node_pool, **{k: _duration(v) for k, v in arguments.items()}}
    subject = f"config/{node_pool}"
    return Message("kai.queues", subject.encode(), cloud_event("config.updated", subject, data))


def submitted(
    uid: str,
    queue_name: str,
    pods: int | Sequence[Mapping[str, Any]] = 1,
    *,
    node_pool: str | None = None,
    priority: int = 100,
    sub_groups: Sequence[Mapping[str, Any]] | None = None,
    annotations: Mapping[str, str] | None = None,
    preemptible: bool = True,
    preemptibility: str | None = None,
    **kw: Any,
) -> Message:
    pod_list = (
        [{"name": f"{uid}-{i}", "gpu": 1} for i in range(pods)] if isinstance(pods, int) else pods
    )
    data: dict[str, Any] = {
        "uid": uid,
        "name": f"job-{uid}",
        "namespace": "team",
        "queue": queue_name,
        "priority": priority,
        "preemptible": preemptible,
        "pods": list(pod_list),
    }
    if preemptibility is not None:
        # The newer field alone (both given must agree).
        del data["preemptible"]
        data["preemptibility"] = preemptibility
    if node_pool is not None:
        data["nodePool"] = node_pool
    if sub_groups is not None:
        data["subGroups"] = list(sub_groups)
    if annotations is not None:
        data["annotations"] = dict(annotations)
    return Message(
        "kai.podgroups", uid.encode(), cloud_event("podgroup.submitted", uid, data, **kw)
    )


def allocated(
    uid: str,
    pods: Sequence[str] | int = 1,
    *,
    time: datetime = T0,
    node_name: str = "node-1",
    **kw: Any,
) -> Message:
    names = [f"{uid}-{i}" for i in range(pods)] if isinstance(pods, int) else pods
    data = {"uid": uid, "pods": [{"name": name, "node": node_name} for name in names]}
    return Message(
        "kai.podgroups",
        uid.encode(),
        cloud_event("podgroup.allocated", uid, data, time=time, **kw),
    )


def released(
    uid: str,
    pods: Sequence[str] | None = None,
    *,
    time: datetime = T0,
    reason: str | None = None,
    **kw: Any,
) -> Message:
    data: dict[str, Any] = {"uid": uid}
    if pods is not None:
        data["pods"] = list(pods)
    if reason is not None:
        data["reason"] = reason
    return Message(
        "kai.podgroups", uid.encode(), cloud_event("podgroup.released", uid, data, time=time, **kw)
    )


def annotated(uid: str, annotations: Mapping[str, str | None], **kw: Any) -> Message:
    data = {"uid": uid, "annotations": dict(annotations)}
    return Message(
        "kai.podgroups", uid.encode(), cloud_event("podgroup.annotated", uid, data, **kw)
    )


def deleted(uid: str, **kw: Any) -> Message:
    return Message(
        "kai.podgroups", uid.encode(), cloud_event("podgroup.deleted", uid, {"uid": uid}, **kw)
    )


def node(name: str, gpu: float = 8, node_pool: str = "default", **kw: Any) -> Message:
    data = {"name": name, "nodePool": node_pool, "gpu": gpu}
    return Message("kai.nodes", name.encode(), cloud_event("node.upserted", name, data, **kw))


def node_deleted(name: str, **kw: Any) -> Message:
    return Message(
        "kai.nodes", name.encode(), cloud_event("node.deleted", name, {"name": name}, **kw)
    )


def nominated(uid: str, by: str = "proportion", **kw: Any) -> Message:
    data = {"uid": uid, "nominatedBy": by}
    return Message(
        "kai.nominations", uid.encode(), cloud_event("requeue.nominated", uid, data, **kw)
    )


def queue_of(q: Queue) -> Message:
    """The queue.upserted of a core ``Queue``."""
    return queue(q.name, q.parent, q.preempt_min_runtime, q.reclaim_min_runtime)


def config_of(node_pool: str, c: MinRuntimeConfig) -> Message:
    """The config.updated of a core ``MinRuntimeConfig`` (the minimum-runtime arguments)."""
    return config(
        node_pool,
        defaultPreemptMinRuntime=c.default_preempt_min_runtime,
        defaultReclaimMinRuntime=c.default_reclaim_min_runtime,
        reclaimResolveMethod=str(c.reclaim_resolve_method),
    )


def design_tree() -> list[Message]:
    """SEMANTICS.md §4: reclaim A → B(600s) → {C → {leaf1(0s), leaf2(180s)}, D(60s) → {leaf3}};
    preempt B(600s), leaf1(300s)."""
    return [
        queue("A"),
        queue("B", "A", preempt="600s", reclaim="600s"),
        queue("C", "B"),
        queue("leaf1", "C", preempt="300s", reclaim="0s"),
        queue("leaf2", "C", reclaim="180s"),
        queue("D", "B", reclaim="60s"),
        queue("leaf3", "D"),
    ]


def raw(topic: str, value: bytes | None, key: bytes | None = b"k") -> Message:
    return Message(topic, key, value)


class Feed:
    """Assigns Kafka offsets per (topic, partition 0) and applies batches in one transaction."""

    def __init__(self, engine: sa.Engine, group: str = GROUP) -> None:
        self.engine = engine
        self.group = group
        self.offsets: dict[str, int] = defaultdict(int)

    def records(self, *messages: Message) -> list[InboundRecord]:
        out = []
        for message in messages:
            offset = self.offsets[message.topic]
            self.offsets[message.topic] += 1
            out.append(InboundRecord(message.topic, 0, offset, message.key, message.value, None))
        return out

    def apply(self, records: Sequence[InboundRecord]) -> BatchOutcome:
        with self.engine.begin() as conn:
            return apply_batch(conn, records, consumer_group=self.group)

    def send(self, *messages: Message) -> BatchOutcome:
        return self.apply(self.records(*messages))


def rows(engine: sa.Engine, query: str, **params: Any) -> list[Any]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text(query), params))


def scalar(engine: sa.Engine, query: str, **params: Any) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.text(query), params).scalar()


def reset_state(engine: sa.Engine) -> None:
    """Empty every state table (what each test starts from; hypothesis examples call it too)."""
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE "
                + ", ".join(f"minruntime_state.{table}" for table in STATE_TABLES)
                + " RESTART IDENTITY"
            )
        )


def assert_replay_equal(engine: sa.Engine, name: str) -> None:
    """A replay of the whole log into shadow ``name`` rebuilds every projection exactly."""
    from minruntime.audit.asof import snapshot
    from minruntime.audit.replay import read_log, replay
    from minruntime.audit.verify import compare
    from minruntime.store.shadows import create_shadow

    with snapshot(engine) as conn:
        shadow = create_shadow(conn, name)
        replay(conn, read_log(conn), into=shadow.tables)
        assert [check.table for check in compare(conn, shadow) if not check.equal] == []
