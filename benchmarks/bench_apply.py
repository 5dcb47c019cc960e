"""Benchmark ``apply_batch`` alone, without Kafka: wall time and the process's own CPU per event.

Applies ``bench_ingest``'s deterministic trace (the same generator and seed), topic by topic
as the processor would (queues, podgroups, nodes; one partition each, offsets in order), in
batches, each in its own transaction, to a scratch database migrated to head. The CPU time
(``time.process_time``) is this Python process only — decoding, folding, building rows,
the driver — and is far less sensitive to a shared machine's load than the wall time, which
also waits for PostgreSQL. It imports only ``minruntime.ingest``/``store``/``settings``, so
the same script measures an older revision with ``PYTHONPATH=<its checkout>/services``.

    .venv/bin/python benchmarks/bench_apply.py [--podgroups 10000] [--queues 1000]
        [--nodes 500] [--batch 2000]

Needs the local stack's PostgreSQL (``minruntime stack up``).
"""

from __future__ import annotations

import gc
import os
import time

from bench_ingest import generate
from benchkit import sized_arguments
from minruntime.ingest import InboundRecord, apply_batch
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime_dev.scratch import (
    create_scratch_database,
    drop_scratch_database,
    scratch_owner_url,
)

ORDER = ("queues", "podgroups", "nodes")


def records(podgroups: int, queues: int, nodes: int) -> dict[str, list[InboundRecord]]:
    """The trace as records per topic (topic = role), offsets in production order."""
    by_topic: dict[str, list[InboundRecord]] = {role: [] for role in ORDER}
    for role, key, value in generate(queues, nodes, podgroups).events:
        topic = by_topic[role]
        topic.append(InboundRecord(role, 0, len(topic), key, value))
    return by_topic


def main() -> None:
    parser = sized_arguments(
        __doc__.splitlines()[0], podgroups=10_000, queues=1000, nodes=500, batch=2000
    )
    args = parser.parse_args()
    by_topic = records(args.podgroups, args.queues, args.nodes)
    roles = {role: role for role in ORDER}
    settings = Settings()
    url = create_scratch_database(settings, "minruntime_test_bench_apply")
    try:
        upgrade(scratch_owner_url(settings, url))
        engine = engine_from(url)
        load = os.getloadavg()[0]
        applied, wall, cpu = 0, 0.0, 0.0
        for topic in ORDER:
            topic_records = by_topic[topic]
            for start in range(0, len(topic_records), args.batch):
                began, began_cpu = time.perf_counter(), time.process_time()
                with engine.begin() as conn:
                    outcome = apply_batch(
                        conn,
                        topic_records[start : start + args.batch],
                        consumer_group="bench",
                        topic_roles=roles,
                    )
                wall += time.perf_counter() - began
                cpu += time.process_time() - began_cpu
                applied += outcome.applied
        engine.dispose()
        gen0, gen1, gen2 = (stats["collections"] for stats in gc.get_stats())
        print(
            f"apply_batch alone (no Kafka, batches of {args.batch}): {applied:,} events; "
            f"wall {wall:.2f} s = {applied / wall:,.0f} events/s; "
            f"CPU of this process {cpu:.2f} s = {cpu / applied * 1e6:.1f} us/event; "
            f"collections {gen0}/{gen1}/{gen2}; load {load:.2f} -> {os.getloadavg()[0]:.2f}"
        )
    finally:
        drop_scratch_database(settings, url)


if __name__ == "__main__":
    main()
