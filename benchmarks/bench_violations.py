"""Benchmark `minruntime violations` on a 1M-event log (target: <= 10 s), and what recording the
runs costs the processor's apply.

Builds, once, the ingest benchmark's deterministic trace (seed 20261121) at ``--podgroups``
(240,000: about 1,000,000 events) with ``--evicted-share`` of the releases evictions (evicted,
preempted, requeued; the rest completions) in a scratch database, with the projection code
(``apply_batch`` in the processor's batches, one transaction each): ``run_log`` is filled as the
processor fills it. ``--keep`` keeps that database (its URL in
``benchmarks/out/violations-database.txt``); ``--reuse`` measures it again.

Then it times what a user runs: the installed CLI in a subprocess (interpreter start
included), ``minruntime violations --json`` and ``minruntime violations`` (the table), output
to a file, ``--repeat`` times each (median and worst); and the report alone in this process
(``audit.violations.find_violations``). ``--verify`` also times ``replay --verify`` of the
whole log (``run_log`` compared with the rest).

``--apply-cost N`` measures the apply cost: a trace of N podgroups applied with
``apply_batch`` into two fresh databases, alternately, once as the processor runs and once with
the run recording switched off (``ingest.projection.ended_run`` returning None: no tree lock,
no judging, no ``run_log`` rows); the best of ``--repeat`` each.

    .venv/bin/python benchmarks/bench_violations.py [--podgroups 240000] [--evicted-share 0.2]
        [--repeat 3] [--keep | --reuse] [--verify] [--apply-cost 30000]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import time
from pathlib import Path
from unittest import mock

import sqlalchemy as sa

from bench_ingest import generate
from bench_replay import LIVE_BATCH, live_apply
from benchkit import built_log, log_arguments, migrated_scratch_database, scratch_database
from minruntime.audit.violations import find_violations
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.unit import ReadUnit
from proc_cpu import process_cpu
from replay_after import replay_verify

TARGET_SECONDS = 10.0
KEPT = Path(__file__).parent / "out" / "violations-database.txt"
MINRUNTIME = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "minruntime"


def trace_of(args: argparse.Namespace, podgroups: int) -> list[tuple[str, bytes, bytes]]:
    """The trace's events (role, key, value) in production order."""
    return generate(args.queues, args.nodes, podgroups, evicted_share=args.evicted_share).events


def apply_timed(url: str, events: list[tuple[str, bytes, bytes]]) -> tuple[float, float, float]:
    """(wall seconds, this process's CPU seconds, its PostgreSQL backend's CPU seconds) of
    applying ``events``: CPU seconds, unlike wall time, hardly move with the machine's load."""
    engine = engine_from(url, pool_size=1)
    try:
        with engine.connect() as conn:  # the one pooled connection: its backend does it all
            backend = int(conn.exec_driver_sql("SELECT pg_backend_pid()").scalar_one())
        cpu, server = time.process_time(), process_cpu(backend)
        seconds = live_apply(engine, events)
        return seconds, time.process_time() - cpu, process_cpu(backend) - server
    finally:
        engine.dispose()


def build(args: argparse.Namespace, settings: Settings) -> str:
    """A scratch database holding the trace; its owner URL."""
    events = trace_of(args, args.podgroups)
    url = migrated_scratch_database(settings, "minruntime_test_bench_violations")
    seconds = apply_timed(url, events)[0]  # as the processor would (bench_replay.live_apply)
    print(
        f"built: {len(events):,} events applied in {seconds:.0f} s "
        f"({len(events) / seconds:,.0f} events/s, batches of {LIVE_BATCH:,})"
    )
    return url


def cli(url: str, *args: str, out: Path) -> float:
    """Seconds of ``minruntime violations ARGS`` as a user runs it, stdout to ``out``."""
    env = {**os.environ, "MINRUNTIME_DATABASE_URL": url, "MINRUNTIME_OWNER_DATABASE_URL": url}
    with out.open("w") as sink:
        started = time.perf_counter()
        done = subprocess.run(
            [str(MINRUNTIME), "violations", *args], env=env, stdout=sink, stderr=subprocess.PIPE
        )
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"minruntime violations {' '.join(args)} failed: {done.stderr.decode()}")
    return seconds


def measure(url: str, args: argparse.Namespace) -> None:
    engine = engine_from(url)
    try:
        with engine.connect() as conn:
            events, runs, evicted = conn.execute(
                sa.text(
                    "SELECT (SELECT count(*) FROM minruntime.event_log), count(*),"
                    " count(*) FILTER (WHERE eviction) FROM minruntime.runs"
                )
            ).one()
        with repeatable_read(engine) as conn:
            started = time.perf_counter()
            report = find_violations(ReadUnit(conn))
            in_process = time.perf_counter() - started
    finally:
        engine.dispose()
    definite = sum(v.verdict == "definite" for v in report.violations)
    print(
        f"log: {events:,} events, {runs:,} runs, {evicted:,} ended by an eviction, "
        f"{len(report.violations):,} violations ({definite:,} definite, "
        f"{len(report.violations) - definite:,} possible)"
    )
    print(f"find_violations in this process: {in_process:.2f} s")
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    worst = 0.0
    for name, extra in (("--json", ("--json",)), ("table", ())):
        seconds = [cli(url, *extra, out=out / "violations.out") for _ in range(args.repeat)]
        size = (out / "violations.out").stat().st_size
        worst = max(worst, *seconds)
        print(
            f"minruntime violations {name}: median {statistics.median(seconds):.2f} s, worst "
            f"{max(seconds):.2f} s over {args.repeat} ({size / 1e6:.1f} MB of output)"
        )
    met = "met" if worst <= TARGET_SECONDS else "missed"
    print(f"worst of all: {worst:.2f} s (target <= {TARGET_SECONDS:.0f} s: {met})")


def _no_run(*_: object) -> None:
    """``ended_run`` switched off: no event ends a run (a plain function: a mock costs µs)."""


def apply_cost(args: argparse.Namespace, settings: Settings) -> None:
    """The apply cost with and without recording the runs, alternately: wall time (best of
    repeat) and CPU seconds per event of this process and of its PostgreSQL backend (median)."""
    events = trace_of(args, args.apply_cost)
    measured: dict[str, list[tuple[float, float, float]]] = {"with runs": [], "without runs": []}
    for _ in range(args.repeat):
        for name, runs in measured.items():
            with scratch_database(settings, "minruntime_test_bench_runcost") as url:
                if name == "with runs":
                    runs.append(apply_timed(url, events))
                else:
                    with mock.patch("minruntime.ingest.projection.ended_run", new=_no_run):
                        runs.append(apply_timed(url, events))
            wall, cpu, server = runs[-1]
            print(
                f"  {name}: {len(events) / wall:,.0f} events/s, CPU {cpu * 1e6 / len(events):.0f}"
                f" + {server * 1e6 / len(events):.0f} µs/event (Python + PostgreSQL)",
                flush=True,
            )
    figures = {}
    for name, runs in measured.items():
        wall = min(run[0] for run in runs)
        cpu = statistics.median(run[1] + run[2] for run in runs) * 1e6 / len(events)
        figures[name] = (wall, cpu)
        print(
            f"{name}: best {len(events) / wall:,.0f} events/s; median CPU {cpu:.0f} µs/event "
            "(Python + PostgreSQL)"
        )
    (wall_with, cpu_with), (wall_without, cpu_without) = figures.values()
    print(
        f"apply cost of recording the runs ({len(events):,} events, {args.repeat} each): "
        f"wall {100 * (wall_with / wall_without - 1):+.1f} %, "
        f"CPU {100 * (cpu_with / cpu_without - 1):+.1f} %"
    )


def main() -> None:
    parser = log_arguments(__doc__.splitlines()[0])
    parser.add_argument("--evicted-share", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--verify", action="store_true", help="also time replay --verify")
    parser.add_argument("--apply-cost", type=int, default=0, metavar="PODGROUPS")
    args = parser.parse_args()
    settings = Settings()
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    if args.apply_cost:
        apply_cost(args, settings)
    with built_log(args, settings, KEPT, lambda: build(args, settings)) as url:
        measure(url, args)
        if args.verify:
            verified = replay_verify(url)
            print(
                f"replay --verify of the whole log: {verified.seconds:.1f} s; "
                f"{'every table equal' if verified.equal else 'DIFFERS'}"
            )


if __name__ == "__main__":
    main()
