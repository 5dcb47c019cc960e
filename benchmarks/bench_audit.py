"""Benchmark `minruntime audit UID`: one podgroup's story from a long event log.

Uses the ingest benchmark's deterministic cluster trace (seed 20261121), applied once with
``apply_batch`` as the processor would (``bench_replay.live_apply``). Then, on that database,
the story of podgroups taken from the start, the middle and the end of the log
(``audit.timeline.podgroup_story``: one filtered read of the log, a replay of the podgroup's
own events and the queue tree's into a temporary shadow, one read of the state per boundary),
against a replay of the whole log (what an audit built on ``read_log`` would cost).

    .venv/bin/python benchmarks/bench_audit.py [--podgroups 20000] [--queues 2000]
        [--nodes 1000] [--repeat 3]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import statistics
import time

import sqlalchemy as sa

from bench_ingest import generate
from bench_replay import live_apply, timed_replay
from minruntime.audit.timeline import podgroup_story
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime.store.scratch import create_scratch_database, drop_scratch_database

# An audit should take a small part of a whole-log replay.
RATIO_TARGET = 0.2


def timed_story(engine: sa.Engine, uid: str, repeat: int) -> tuple[float, int, int]:
    """(median seconds, rows, entries replayed) of one podgroup's story."""
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        story = podgroup_story(engine, uid)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), len(story.rows), story.replayed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--podgroups", type=int, default=20_000)
    parser.add_argument("--queues", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    settings = Settings()
    trace = generate(args.queues, args.nodes, args.podgroups)
    url = create_scratch_database(settings, "minruntime_test_bench_audit")
    try:
        upgrade(url)
        engine = engine_from(url)
        live_apply(engine, trace.events)
        with engine.connect() as conn:
            uids = list(
                conn.execute(
                    sa.text(
                        "SELECT subject FROM minruntime_state.event_log"
                        " WHERE type = 'podgroup.submitted' ORDER BY seq"
                    )
                ).scalars()
            )
        print(
            f"event log: {len(trace.events):,} events ({args.queues:,} queues, "
            f"{args.nodes:,} nodes, {args.podgroups:,} podgroups)"
        )
        whole = statistics.median(timed_replay(engine)[0] for _ in range(args.repeat))
        print(f"replay of the whole log (median of {args.repeat}): {whole:.2f} s")
        for where, uid in (
            ("first", uids[0]),
            ("middle", uids[len(uids) // 2]),
            ("last", uids[-1]),
        ):
            seconds, rows, replayed = timed_story(engine, uid, args.repeat)
            ratio = seconds / whole
            print(
                f"audit of the {where} podgroup (median): {seconds:.2f} s, {rows} rows, "
                f"{replayed:,} entries replayed; ratio audit/whole replay = {ratio:.2f} "
                f"(target <= {RATIO_TARGET}: {'met' if ratio <= RATIO_TARGET else 'missed'})"
            )
        engine.dispose()
    finally:
        drop_scratch_database(settings, url)


if __name__ == "__main__":
    main()
