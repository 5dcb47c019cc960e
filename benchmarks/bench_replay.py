"""Benchmark replay: rebuilding every projection from the event log, verify, and as-of answers.

Uses the ingest benchmark's deterministic cluster trace (seed 20261121: a queue tree, nodes,
podgroups submitted -> allocated -> released, annotations). The trace is applied once with
``apply_batch`` in batches of 2,000 (as the processor would, without Kafka: "live apply"),
then, on that database:

(a) replay: the whole event log into a temporary shadow schema (``minruntime replay``);
(b) verify: per-table checksums of the shadow against the live tables (``--verify``);
    then ``replay --verify`` whole, in one process and in parts (``--jobs``: 2 and this
    machine's default);
(c) as-of: ``minruntime protection --at T`` for T in the middle of the log (a replay up to T
    plus the ``preempt_protection(T)`` query).

    .venv/bin/python benchmarks/bench_replay.py [--podgroups 20000] [--queues 2000]
        [--nodes 1000] [--repeat 3] [--run 100000]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import sqlalchemy as sa

from bench_ingest import generate
from benchkit import scratch_database, sized_arguments
from minruntime.audit import replay as replay_module
from minruntime.audit.asof import state_at
from minruntime.audit.parallel import default_parts
from minruntime.audit.replay import read_log, replay
from minruntime.audit.verify import compare
from minruntime.events import DEFAULT_TOPICS, decode_event
from minruntime.ingest import InboundRecord, apply_batch
from minruntime.ingest.memory import collected_rarely
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.shadows import create_shadow, temporary_name
from minruntime.store.unit import Units
from pipeline import INPUT_ROLES
from replay_after import replay_verify

# Issue 10: a replay at >= 5x the live rate (here: apply_batch in the processor's batches,
# without Kafka, which is faster than the processor itself).
SPEEDUP_TARGET = 5.0
# The processor's batches (MINRUNTIME_BATCH_MAX_EVENTS).
LIVE_BATCH = Settings().batch_max_events


def verdict(speedup: float) -> str:
    return "met" if speedup >= SPEEDUP_TARGET else "missed"


def timed_decode(engine: sa.Engine) -> float:
    """Seconds to decode every logged event with the processor's decoder (and read the log):
    the floor of any replay that runs the processor's code."""
    with repeatable_read(engine) as conn:
        started = time.perf_counter()
        for entry in read_log(conn):
            decode_event(entry.value)
        return time.perf_counter() - started


def live_apply(engine: sa.Engine, trace_events: list[tuple[str, bytes, bytes]]) -> float:
    """Apply the trace as the processor would (one partition per topic); seconds."""
    offsets: dict[str, int] = defaultdict(int)
    records = []
    for role, key, value in trace_events:
        topic = DEFAULT_TOPICS[role]
        records.append(InboundRecord(topic, 0, offsets[topic], key, value))
        offsets[topic] += 1
    started = time.perf_counter()
    with collected_rarely():  # as the processor (bootstrap.tune_gc) and replay do
        for i in range(0, len(records), LIVE_BATCH):
            with engine.begin() as conn:
                apply_batch(conn, records[i : i + LIVE_BATCH], consumer_group="bench-live")
    return time.perf_counter() - started


def timed_replay(engine: sa.Engine) -> tuple[float, float, int]:
    """(replay seconds, verify seconds, events) for one replay of the whole log."""
    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, temporary_name("bench_replay"))
        started = time.perf_counter()
        report = replay(conn, read_log(conn), into=shadow.tables)
        replayed = time.perf_counter() - started
        started = time.perf_counter()
        checks = compare(conn, shadow)
        verified = time.perf_counter() - started
    differing = [check.table for check in checks if not check.equal]
    if differing or report.rejected:
        raise SystemExit(f"replay differs: {differing} {report.rejected}")
    return replayed, verified, report.applied


def timed_as_of(engine: sa.Engine, at: datetime) -> tuple[float, int]:
    """(seconds, rows) of the protection table as the service had it at ``at``."""
    started = time.perf_counter()
    with state_at(Units(engine), at) as unit:
        conn, shadow = unit.connection, unit.state
        rows = conn.execute(
            sa.text(f"SELECT * FROM {shadow.read_schema}.preempt_protection(:at)"), {"at": at}
        ).all()
    return time.perf_counter() - started, len(rows)


def trace_arguments(description: str) -> argparse.Namespace:
    """The trace's size and the repetitions, from the command line."""
    parser = sized_arguments(description, podgroups=20_000, queues=2000, nodes=1000, repeat=3)
    parser.add_argument(
        "--run", type=int, default=0, help="podgroups per replay run (0: the default)"
    )
    return parser.parse_args()


@contextmanager
def traced_database(args: argparse.Namespace, name: str) -> Iterator[tuple[sa.Engine, float]]:
    """A scratch database holding the trace, applied live: (engine, live apply seconds)."""
    settings = Settings()
    trace = generate(args.queues, args.nodes, args.podgroups)
    with scratch_database(settings, f"minruntime_test_bench_{name}") as url:
        engine = engine_from(url)
        try:
            live = live_apply(engine, trace.events)
            print(
                f"trace: {len(trace.events):,} events ({args.queues:,} queues, {args.nodes:,} "
                f"nodes, {args.podgroups:,} podgroups); live apply (apply_batch, batches of "
                f"{LIVE_BATCH:,}): {live:.2f} s = {len(trace.events) / live:,.0f} events/s"
            )
            yield engine, live
        finally:
            engine.dispose()


def main() -> None:
    args = trace_arguments(__doc__.splitlines()[0])
    if args.run:
        replay_module.RUN_PODGROUPS = args.run
    assert set(INPUT_ROLES) <= set(DEFAULT_TOPICS)
    with traced_database(args, "replay") as (engine, live):
        url = engine.url.render_as_string(hide_password=False)
        runs = [timed_replay(engine) for _ in range(args.repeat)]
        events = runs[0][2]
        replay_s = statistics.median(r[0] for r in runs)
        verify_s = statistics.median(r[1] for r in runs)
        speedup = live / replay_s
        print(
            f"replay (median of {args.repeat}, runs of up to {replay_module.RUN_PODGROUPS:,} "
            f"podgroups): "
            f"{replay_s:.2f} s = {events / replay_s:,.0f} events/s; speedup over live apply "
            f"= {speedup:.2f}x "
            f"(target >= {SPEEDUP_TARGET:.0f}x: {verdict(speedup)})"
        )
        decode_s = statistics.median(timed_decode(engine) for _ in range(args.repeat))
        print(
            f"read + decode every logged event (median): {decode_s:.2f} s = "
            f"{decode_s / replay_s:.0%} of the replay; the floor of a replay running the "
            f"processor's code is {live / decode_s:.1f}x live apply"
        )
        print(f"verify (checksums of 9 tables, median): {verify_s:.2f} s")
        one = statistics.median(replay_verify(url, 1).seconds for _ in range(args.repeat))
        print(
            f"replay --verify in one process (median): {one:.2f} s = {events / one:,.0f} events/s"
        )
        for parts in sorted({2, default_parts(events)}):
            runs = [replay_verify(url, parts) for _ in range(args.repeat)]
            if not all(run.equal for run in runs):
                raise SystemExit(f"replay --verify in {parts} parts differs")
            wall = statistics.median(run.seconds for run in runs)
            print(
                f"replay --verify --jobs {parts} (median): {wall:.2f} s = "
                f"{events / wall:,.0f} events/s; {one / wall:.2f}x one process, "
                f"{live / wall:.2f}x live apply"
            )
        with engine.connect() as conn:
            first, last = conn.execute(
                sa.text("SELECT min(applied_at), max(applied_at) FROM minruntime_state.event_log")
            ).one()
        middle = first + (last - first) / 2
        as_of = [timed_as_of(engine, middle) for _ in range(args.repeat)]
        print(
            f"protection --at (the middle of the log; replay up to T + query, median): "
            f"{statistics.median(a[0] for a in as_of):.2f} s, {as_of[0][1]:,} rows"
        )


if __name__ == "__main__":
    main()
