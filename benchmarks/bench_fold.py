"""Benchmark the podgroup fold alone (``core.fold``): no Kafka, no database.

Decodes the podgroup events of ``bench_ingest``'s deterministic trace (submitted ->
allocated twice -> annotated on every tenth -> released) once, maps them to the core's change
values (``ingest.podgroups.podgroup_change``), then times, in batches as the processor cuts
them, (1) folding every event into its podgroup's state and (2) computing, once per touched
podgroup per batch, the derived values the store writes (status, running pods, elasticity,
parsed annotations, awaiting_release as stored).

    .venv/bin/python benchmarks/bench_fold.py [--podgroups 50000] [--batch 2000] [--repeat 5]
"""

from __future__ import annotations

import os
import platform
import time
from typing import Any

from bench_ingest import generate
from benchkit import sized_arguments
from minruntime.core import PodGroupChange, PodGroupState, fold
from minruntime.events import decode_event
from minruntime.ingest.podgroups import podgroup_change


def podgroup_changes(podgroups: int) -> list[tuple[str, PodGroupChange]]:
    """(uid, change) of every podgroup event of the trace, in production order."""
    changes = []
    for role, _, value in generate(queues=10, nodes=100, podgroups=podgroups).events:
        if role != "podgroups":
            continue
        event = decode_event(value, "kai.podgroups")
        changes.append((str(event.data.uid), podgroup_change(event.data, event.time)))  # type: ignore[union-attr]
    return changes


def derived(state: PodGroupState) -> tuple[Any, ...]:
    """What the store writer reads from a state besides its fields."""
    return (
        state.status,
        state.running_pods,
        state.elasticity(),
        state.expected_runtime,
        state.requeue_not_before,
        state.stored_awaiting_release,
    )


def run_once(changes: list[tuple[str, PodGroupChange]], batch: int) -> tuple[float, float, int]:
    """Seconds folding, seconds deriving, podgroup writes (touched podgroups per batch)."""
    stored: dict[str, PodGroupState] = {}
    folding = deriving = 0.0
    writes = 0
    for start in range(0, len(changes), batch):
        began = time.perf_counter()
        touched: dict[str, PodGroupState] = {}
        for uid, change in changes[start : start + batch]:
            state = touched.get(uid)
            if state is None:
                state = stored.get(uid) or PodGroupState(uid)
            touched[uid] = fold(state, change)
        folded = time.perf_counter()
        for state in touched.values():
            derived(state)
        deriving += time.perf_counter() - folded
        folding += folded - began
        writes += len(touched)
        stored.update(touched)
    return folding, deriving, writes


def main() -> None:
    parser = sized_arguments(__doc__.splitlines()[0], podgroups=50_000, batch=2000, repeat=5)
    args = parser.parse_args()
    changes = podgroup_changes(args.podgroups)
    print(
        f"{len(changes):,} podgroup events ({args.podgroups:,} podgroups), batches of "
        f"{args.batch}; Python {platform.python_version()}, load {os.getloadavg()[0]:.2f}"
    )
    runs = [run_once(changes, args.batch) for _ in range(args.repeat)]
    folding, deriving, writes = min(runs, key=lambda run: run[0] + run[1])
    events = len(changes)
    print(
        f"fold: {folding:.3f} s = {folding / events * 1e6:.2f} us/event "
        f"({events / folding:,.0f} events/s)"
    )
    print(
        f"derived values: {deriving:.3f} s for {writes:,} podgroup writes = "
        f"{deriving / writes * 1e6:.2f} us/write"
    )
    print(
        f"fold + derived: {(folding + deriving) / events * 1e6:.2f} us/event "
        f"({events / (folding + deriving):,.0f} events/s); best of {args.repeat}"
    )


if __name__ == "__main__":
    main()
