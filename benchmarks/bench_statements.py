"""What PostgreSQL spends ``apply_batch``'s statements on: wall time and backend CPU per statement.

Applies ``bench_ingest``'s issue trace (the same generator and seed, one allocation step, no
annotations) as ``bench_apply.py`` does, batches in their own transactions on a scratch database
migrated to head, with every psycopg ``execute``/``copy`` timed and the batch connection's
backend CPU (``utime + stime`` of ``/proc/<pg_backend_pid()>/stat``: the server must run on this
machine) read around each statement. pg_stat_statements needs ``shared_preload_libraries`` and
auto_explain a superuser; the local stack has neither. ``--explain N``: every statement of the
Nth batch also runs first under ``EXPLAIN (ANALYZE, BUFFERS, WAL)`` in a savepoint rolled back.
Prints the statements by wall time, then HOT updates and sizes of the projection tables.

    .venv/bin/python benchmarks/bench_statements.py [--podgroups 20000] [--explain 15]
        [--reset-fillfactor]
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import psycopg
import sqlalchemy as sa

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
TICK = os.sysconf("SC_CLK_TCK")
# statement (its first 100 characters) -> [count, wall s, backend CPU s]
STATS: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0])
PLANS: list[tuple[str, str]] = []
BATCH = {"now": 0, "explain": -1}


def backend_cpu(pid: int | None) -> float:
    if pid is None:
        return 0.0
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def _key(query: Any) -> str:
    return re.sub(r"\s+", " ", str(query)).strip()[:100]


_execute = psycopg.Cursor.execute
_copy = psycopg.Cursor.copy


def _timed_execute(cursor: psycopg.Cursor[Any], query: Any, params: Any = None, **kw: Any) -> Any:
    key = _key(query)
    if BATCH["now"] == BATCH["explain"] and re.match(r"(INSERT|UPDATE|DELETE|SELECT)", key):
        _execute(cursor, "SAVEPOINT bench_statements")
        _execute(cursor, "EXPLAIN (ANALYZE, BUFFERS, WAL) " + query, params, **kw)
        PLANS.append((key, "\n".join(row[0] for row in cursor.fetchall())))
        _execute(cursor, "ROLLBACK TO SAVEPOINT bench_statements")
    pid = getattr(cursor.connection, "bench_pid", None)
    cpu, began = backend_cpu(pid), time.perf_counter()
    result = _execute(cursor, query, params, **kw)
    _count(key, began, pid, cpu)
    return result


@contextlib.contextmanager
def _timed_copy(cursor: psycopg.Cursor[Any], statement: Any, *a: Any, **kw: Any) -> Iterator[Any]:
    pid = getattr(cursor.connection, "bench_pid", None)
    cpu, began = backend_cpu(pid), time.perf_counter()
    with _copy(cursor, statement, *a, **kw) as copy:
        yield copy
    _count(_key(statement), began, pid, cpu)


def _count(key: str, began: float, pid: int | None, cpu: float) -> None:
    stats = STATS[key]
    stats[0] += 1
    stats[1] += time.perf_counter() - began
    stats[2] += backend_cpu(pid) - cpu


def main() -> None:
    parser = sized_arguments(__doc__.splitlines()[0], podgroups=20_000, batch=2000)
    parser.add_argument("--explain", type=int, default=-1, help="EXPLAIN this batch's statements")
    parser.add_argument(
        "--reset-fillfactor", action="store_true", help="pod_state at the default fillfactor"
    )
    args = parser.parse_args()
    BATCH["explain"] = args.explain
    by_topic: dict[str, list[InboundRecord]] = {role: [] for role in ORDER}
    for role, key, value in generate(
        1000, 500, args.podgroups, allocation_steps=1, annotate_every=0
    ).events:
        by_topic[role].append(InboundRecord(role, 0, len(by_topic[role]), key, value))
    settings = Settings()
    url = create_scratch_database(settings, "minruntime_test_bench_statements")
    try:
        owner = scratch_owner_url(settings, url)
        upgrade(owner)
        if args.reset_fillfactor:
            with psycopg.connect(owner) as conn:
                conn.execute("ALTER TABLE minruntime_state.pod_state RESET (fillfactor)")
        engine = engine_from(url)
        psycopg.Cursor.execute = _timed_execute  # type: ignore[method-assign,assignment]
        psycopg.Cursor.copy = _timed_copy  # type: ignore[method-assign,assignment]
        load, cpu0, wall, applied, pids = os.getloadavg()[0], time.process_time(), 0.0, 0, set()
        for topic in ORDER:
            records = by_topic[topic]
            for start in range(0, len(records), args.batch):
                BATCH["now"] += 1
                began = time.perf_counter()
                with engine.begin() as conn:
                    pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
                    pids.add(pid)
                    conn.connection.driver_connection.bench_pid = pid  # type: ignore[union-attr]
                    outcome = apply_batch(
                        conn,
                        records[start : start + args.batch],
                        consumer_group="bench",
                        topic_roles={role: role for role in ORDER},
                    )
                wall += time.perf_counter() - began
                applied += outcome.applied
        python = time.process_time() - cpu0
        backend = sum(backend_cpu(pid) for pid in pids)
        print(
            f"{applied:,} events, wall {wall:.2f} s ({applied / wall:,.0f}/s), Python CPU"
            f" {python:.2f} s, backend CPU {backend:.2f} s ({backend / applied * 1e6:.0f}"
            f" us/event, start-up included), load {load:.1f} -> {os.getloadavg()[0]:.1f}"
        )
        print("wall us/event  backend CPU us/event  count  statement")
        for key, (count, seconds, cpu) in sorted(STATS.items(), key=lambda kv: -kv[1][1])[:16]:
            print(
                f"{seconds / applied * 1e6:13.1f}  {cpu / applied * 1e6:20.1f}  {count:5.0f}  {key}"
            )
        for key, plan in PLANS:
            print(f"===== {key}\n{plan}")
        with engine.connect() as conn:
            for row in conn.execute(
                sa.text(
                    "SELECT relname, n_tup_upd, n_tup_hot_upd,"
                    " pg_size_pretty(pg_relation_size(relid)) FROM pg_stat_user_tables"
                    " WHERE relname IN ('pod_state', 'podgroup_state')"
                )
            ):
                print("{}: {} updates, {} HOT, {}".format(*row))
        engine.dispose()
    finally:
        drop_scratch_database(settings, url)


if __name__ == "__main__":
    main()
