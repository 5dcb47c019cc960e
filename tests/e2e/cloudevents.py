"""CloudEvents as an outside producer writes them: plain dicts, JSON on the wire.

Deliberately independent of `minruntime.events`, so the e2e suites test the wire contract
(CONTRACT.md §1) rather than our own encoder.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)


def at(seconds: float, base: datetime = T0) -> str:
    """RFC3339 time `seconds` after `base`."""
    return (base + timedelta(seconds=seconds)).isoformat().replace("+00:00", "Z")


def event(
    type_: str, subject: str, data: Mapping[str, Any], time: str, id_: str | None = None
) -> dict[str, Any]:
    """One structured-mode CloudEvent."""
    return {
        "specversion": "1.0",
        "id": id_ or str(uuid.uuid4()),
        "source": "tests/e2e",
        "type": type_,
        "time": time,
        "subject": subject,
        "data": dict(data),
    }


def queue(
    name: str,
    parent: str | None = None,
    preempt: str | None = None,
    reclaim: str | None = None,
    time: str = at(0),
) -> dict[str, Any]:
    """queue.upserted."""
    data: dict[str, Any] = {"name": name}
    if parent is not None:
        data["parentQueue"] = parent
    if preempt is not None:
        data["preemptMinRuntime"] = preempt
    if reclaim is not None:
        data["reclaimMinRuntime"] = reclaim
    return event("queue.upserted", name, data, time)


def config(node_pool: str = "default", time: str = at(0), **arguments: str) -> dict[str, Any]:
    """config.updated (plugin argument names as keyword arguments)."""
    return event(
        "config.updated", f"config/{node_pool}", {"nodePool": node_pool, **arguments}, time
    )


def submitted(
    uid: str,
    queue_name: str,
    pods: Sequence[str] = ("p0",),
    *,
    priority: int = 50,
    min_available: int | None = None,
    gpu: float = 1.0,
    annotations: Mapping[str, str] | None = None,
    node_pool: str | None = None,
    time: str = at(0),
) -> dict[str, Any]:
    """podgroup.submitted with one subgroup."""
    data: dict[str, Any] = {
        "uid": uid,
        "name": f"job-{uid}",
        "namespace": "team",
        "queue": queue_name,
        "priority": priority,
        "pods": [{"name": p, "gpu": gpu} for p in pods],
    }
    if min_available is not None:
        data["subGroups"] = [{"name": "default", "minAvailable": min_available}]
    if annotations:
        data["annotations"] = dict(annotations)
    if node_pool:
        data["nodePool"] = node_pool
    return event("podgroup.submitted", uid, data, time)


def allocated(uid: str, pods: Sequence[str], time: str, node: str = "node-1") -> dict[str, Any]:
    """podgroup.allocated."""
    return event(
        "podgroup.allocated",
        uid,
        {"uid": uid, "pods": [{"name": p, "node": node} for p in pods]},
        time,
    )


def released(uid: str, time: str, pods: Sequence[str] | None = None) -> dict[str, Any]:
    """podgroup.released (all pods when `pods` is None)."""
    data: dict[str, Any] = {"uid": uid, "reason": "completed"}
    if pods is not None:
        data["pods"] = list(pods)
    return event("podgroup.released", uid, data, time)


def design_tree(time: str = at(0)) -> list[dict[str, Any]]:
    """SEMANTICS.md §4's tree: reclaim A → B(600s) → {C → {leaf1(0s), leaf2(180s)}, D(60s) →
    {leaf3}}; preempt B(600s), leaf1(300s)."""
    return [
        queue("A", time=time),
        queue("B", "A", preempt="600s", reclaim="600s", time=time),
        queue("C", "B", time=time),
        queue("D", "B", reclaim="60s", time=time),
        queue("leaf1", "C", preempt="300s", reclaim="0s", time=time),
        queue("leaf2", "C", reclaim="180s", time=time),
        queue("leaf3", "D", time=time),
    ]
