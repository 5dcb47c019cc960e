"""Benchmark the bridge's eviction correlation (``cluster.evictions`` through the pure
``ClusterMirror``): no API server, no Kafka.

2,000 running gangs of 4 pods; then every pod is deleted, as the watch reports it, in three
ways: without a window and without Events (the bridge before it attributed evictions), with
KAI's Evict Event of each gang first (W = 5 s: each deletion is released at once, attributed),
and without Events (W = 5 s: each deletion is held, then falls due). Prints the CPU per
deleted pod (wall clock, best of three), the Event's own handling included.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_evictions.py
"""

from __future__ import annotations

import time
from datetime import timedelta

from tests.unit.test_cluster_evictions import RUN_START, T0, evict_event
from tests.unit.test_cluster_mirror import pod, podgroup

from minruntime.cluster.mirror import ADDED, DELETED, ClusterMirror, Kind, MirrorOptions
from minruntime.core import format_rfc3339

GANGS, SIZE = 2000, 4


def per_pod(window: timedelta, events: bool) -> float:
    """µs per deleted pod."""
    now = [T0]
    mirror = ClusterMirror(MirrorOptions(eviction_window=window), lambda: now[0])
    started = {"kai.scheduler/last-start-timestamp": RUN_START}
    for gang in range(GANGS):
        mirror.observe(
            Kind.POD_GROUP, ADDED, podgroup(f"g{gang}", f"pg-{gang}", annotations=started)
        )
        for index in range(SIZE):
            member = pod(f"g{gang}-{index}", f"p-{gang}-{index}", group=f"g{gang}", node="n1")
            mirror.observe(Kind.POD, ADDED, member)
    begin = time.perf_counter()
    for gang in range(GANGS):
        if events:
            event = evict_event(f"ev-{gang}", group=f"g{gang}", group_uid=f"pg-{gang}")
            mirror.observe(Kind.EVENT, ADDED, event)
        for index in range(SIZE):
            gone = pod(
                f"g{gang}-{index}", f"p-{gang}-{index}", group=f"g{gang}", node="n1",
                deletionTimestamp=format_rfc3339(T0), deletionGracePeriodSeconds=0,
            )  # fmt: skip
            mirror.observe(Kind.POD, DELETED, gone)
    now[0] = T0 + timedelta(seconds=10)
    mirror.due()
    return (time.perf_counter() - begin) / (GANGS * SIZE) * 1e6


def main() -> None:
    """Print the three figures."""
    for label, window, events in (
        ("no window, no Events (before)", timedelta(0), False),
        ("Evict Event first, W = 5 s", timedelta(seconds=5), True),
        ("no Event: held, then due, W = 5 s", timedelta(seconds=5), False),
    ):
        best = min(per_pod(window, events) for _ in range(3))
        print(f"{label}: {best:.0f} µs per deleted pod")


if __name__ == "__main__":
    main()
