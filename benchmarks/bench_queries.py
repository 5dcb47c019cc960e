"""Benchmark the SQL read surface at scale: reclaim_protection(q) and is_protected(uid, q).

Builds a scratch database (never the service's own), migrated to head, with 5,000 queues
(depth ~6, several roots, values unset/0/set) and 50,000 running podgroups fed through
``apply_batch`` exactly as the processor would, then prints medians against the targets.

    .venv/bin/python benchmarks/bench_queries.py [--queues 5000] [--podgroups 50000]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import psycopg

from benchkit import RecordBatches, scratch_database, sized_arguments
from cluster import build_tree, queue_upserts
from minruntime.ingest import InboundRecord, apply_batch
from minruntime.settings import Settings
from minruntime.store import engine_from

RECLAIM_TARGET_MS = 200.0
IS_PROTECTED_TARGET_MS = 2.0
BATCH = 2000


def records(rng: random.Random, queues: int, podgroups: int) -> Iterator[list[InboundRecord]]:
    """Batches of records: queues and configs, then submissions and allocations."""
    now = datetime.now(UTC)
    tree = build_tree(rng, queues)
    batches = RecordBatches(BATCH)
    emit = batches.emit
    for name, data in queue_upserts(rng, tree):
        if (full := emit("kai.queues", name, "queue.upserted", data, now)) is not None:
            yield full
    for pool, method in (("default", "lca"), ("pool-b", "queue")):
        data = {"nodePool": pool, "defaultReclaimMinRuntime": "5m", "reclaimResolveMethod": method}
        if (full := emit("kai.queues", f"config/{pool}", "config.updated", data, now)) is not None:
            yield full
    deep = [name for name, _, depth in tree if depth >= 3]
    for i in range(podgroups):
        uid = f"pg-{i}"
        pool = "pool-b" if i % 5 == 0 else "default"
        submitted = {
            "uid": uid,
            "name": uid,
            "namespace": "bench",
            "queue": rng.choice(deep),
            "nodePool": pool,
            "priority": rng.randint(0, 200),
            "pods": [{"name": f"{uid}-{p}", "gpu": 1} for p in range(2)],
        }
        if (full := emit("kai.podgroups", uid, "podgroup.submitted", submitted, now)) is not None:
            yield full
        started = now - timedelta(seconds=rng.randint(0, 7200))
        allocated = {"uid": uid, "pods": [{"name": f"{uid}-{p}", "node": "n"} for p in range(2)]}
        if (
            full := emit("kai.podgroups", uid, "podgroup.allocated", allocated, started)
        ) is not None:
            yield full
    yield from batches.rest()


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def main() -> None:
    parser = sized_arguments(
        __doc__.splitlines()[0],
        queues=5000,
        podgroups=50_000,
        reclaim_runs=25,
        is_protected_calls=2000,
    )
    parser.add_argument("--keep", action="store_true", help="keep the scratch database")
    args = parser.parse_args()
    settings = Settings()
    rng = random.Random(20261121)
    with scratch_database(settings, "minruntime_test_bench", keep=args.keep) as url:
        engine = engine_from(url)
        started = time.perf_counter()
        applied = 0
        for batch in records(rng, args.queues, args.podgroups):
            with engine.begin() as conn:
                applied += apply_batch(conn, batch, consumer_group="bench").applied
        load = time.perf_counter() - started
        engine.dispose()
        print(
            f"loaded {applied} events through apply_batch in {load:.1f}s "
            f"({applied / load:,.0f} events/s, batches of {BATCH})"
        )
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
            running = conn.execute(
                "SELECT count(*) FROM minruntime.podgroups WHERE status = 'running'"
            ).fetchone()
            queue_names = [r[0] for r in conn.execute("SELECT name FROM minruntime.queues")]
            print(f"{running[0] if running else 0} running podgroups, {len(queue_names)} queues")
            reclaimers = [*rng.sample(queue_names, args.reclaim_runs), "no-such-queue"]
            fetch, server = [], []
            for q in reclaimers:
                t = time.perf_counter()
                rows = conn.execute("SELECT * FROM minruntime.reclaim_protection(%s)", (q,))
                count = len(rows.fetchall())
                fetch.append(time.perf_counter() - t)
                t = time.perf_counter()
                conn.execute("SELECT count(*) FROM minruntime.reclaim_protection(%s)", (q,))
                server.append(time.perf_counter() - t)
            assert count == (running[0] if running else 0)
            uids = [r[0] for r in conn.execute("SELECT uid FROM minruntime.podgroups")]
            calls = []
            for _ in range(args.is_protected_calls):
                uid, q = rng.choice(uids), rng.choice(queue_names)
                t = time.perf_counter()
                conn.execute("SELECT minruntime.is_protected(%s, %s)", (uid, q), prepare=True)
                calls.append(time.perf_counter() - t)
        reclaim = median_ms(fetch)
        print(
            f"reclaim_protection(q), all rows fetched: median {reclaim:.1f} ms over "
            f"{len(fetch)} queues (max {max(fetch) * 1000:.1f} ms); "
            f"target {RECLAIM_TARGET_MS:.0f} ms -> {reclaim / RECLAIM_TARGET_MS:.2f}x of target"
        )
        print(f"reclaim_protection(q), count(*) only: median {median_ms(server):.1f} ms")
        protected = median_ms(calls)
        print(
            f"is_protected(uid, q): median {protected:.3f} ms over {len(calls)} calls "
            f"(p99 {sorted(calls)[int(len(calls) * 0.99)] * 1000:.3f} ms); "
            f"target {IS_PROTECTED_TARGET_MS:.0f} ms -> "
            f"{protected / IS_PROTECTED_TARGET_MS:.2f}x of target"
        )


if __name__ == "__main__":
    main()
