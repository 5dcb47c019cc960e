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

import statistics
import time

import sqlalchemy as sa

from bench_replay import timed_replay, trace_arguments, traced_database
from minruntime.audit.timeline import podgroup_story
from minruntime.store.unit import Units

# An audit should take a small part of a whole-log replay.
RATIO_TARGET = 0.2


def timed_story(engine: sa.Engine, uid: str, repeat: int) -> tuple[float, int, int]:
    """(median seconds, rows, entries replayed) of one podgroup's story."""
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        story = podgroup_story(Units(engine), uid)
        seconds.append(time.perf_counter() - started)
    return statistics.median(seconds), len(story.rows), story.replayed


def main() -> None:
    args = trace_arguments(__doc__.splitlines()[0])
    with traced_database(args, "audit") as (engine, _):
        with engine.connect() as conn:
            uids = list(
                conn.execute(
                    sa.text(
                        "SELECT subject FROM minruntime_state.event_log"
                        " WHERE type = 'podgroup.submitted' ORDER BY seq"
                    )
                ).scalars()
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


if __name__ == "__main__":
    main()
