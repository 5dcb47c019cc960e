"""The bridge's state held packed: read back equal, never shared, a fraction of the memory."""

from __future__ import annotations

import gc
import tracemalloc
from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

import pytest

from minruntime.cluster.mirror import ClusterMirror, Kept, Kind, MirrorOptions
from minruntime.cluster.packed import Packed
from tests.unit.test_cluster_wire import full_pod

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)


def test_what_is_stored_reads_back_equal_and_unshared() -> None:
    store: Packed[Any] = Packed(Kept)
    pod = full_pod()
    store["a"] = pod
    first, second = store["a"], store.get("a")
    assert first == second == pod
    assert isinstance(first, Kept)
    assert first is not second  # a new object each time: changed only by assignment
    first["metadata"]["name"] = "changed"
    assert store["a"]["metadata"]["name"] == pod["metadata"]["name"]
    assert "a" in store
    assert "b" not in store
    assert list(store) == ["a"]
    assert len(store) == 1
    assert store.get("b") is None
    assert store.get("b", 1) == 1
    assert store.pop("b", None) is None
    with pytest.raises(KeyError):
        store.pop("b")
    with pytest.raises(KeyError):
        store["b"]
    assert store.pop("a") == pod
    assert not store


def test_a_value_marshal_cannot_write_is_held_as_it_is() -> None:
    store: Packed[Mapping[str, Any]] = Packed(dict)
    odd = {"metadata": MappingProxyType({"uid": "u"})}
    store["odd"] = odd
    assert store["odd"] is odd


def test_a_listed_pod_costs_the_mirror_under_a_kilobyte_and_a_half() -> None:
    """Kept as dicts, a pod and its record cost the mirror about 4.3 KB (docs/benchmarks.md)."""
    count = 2_000
    pods = []
    for index in range(count):
        pod = full_pod(index)
        pod["metadata"]["annotations"]["pod-group-name"] = f"g-{index // 4}"
        pod["metadata"].pop("deletionTimestamp")
        pod["status"] = {"phase": "Running", "startTime": "2026-11-29T10:00:06Z"}
        pods.append(pod)
    groups = [
        {"metadata": {"name": f"g-{index}", "namespace": "team-a", "uid": f"pg-{index}",
                      "resourceVersion": "1", "creationTimestamp": "2026-11-29T09:00:00Z"},
         "spec": {"queue": "research", "minMember": 4}}
        for index in range(count // 4)
    ]  # fmt: skip
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        mirror = ClusterMirror(MirrorOptions(), lambda: NOW)
        sent = list(mirror.list_all({Kind.POD_GROUP: groups, Kind.POD: pods}))
        changes = mirror.take_changes()
        del sent, changes, pods, groups
        gc.collect()
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert len(mirror.memory()) == count + count // 4
    assert held / count < 1_500
