"""Benchmark `minruntime simulate` on a generated log (targets: 1M events <= 60 s, 10M <= 10 min).

Builds, once, the ingest benchmark's deterministic trace (seed 20261121) at ``--podgroups``
(24,000: about 100,000 events; 240,000: about 1,000,000) with ``--evicted-share`` of the
releases evictions, in a scratch database, with the projection code (``apply_batch`` in the
processor's batches, as ``bench_violations`` builds it): the event log is the processor's.
``--keep`` keeps that database (its URL in ``benchmarks/out/simulate-database.txt``);
``--reuse`` measures it again.

Then it times the simulation of a change of the default pool's defaults (preempt 1h, reclaim
30m: every run's windows differ) over the whole log: in this process
(``audit.simulate.simulate``: one read of the log, the fold, the difference) in one part and
in ``--jobs`` parts, alternately, and as a user runs it (the installed CLI in a subprocess,
``--json`` to a file, interpreter start included, its default parts), ``--repeat`` times each
(median and worst).

    .venv/bin/python benchmarks/bench_simulate.py [--podgroups 24000] [--repeat 3]
        [--keep | --reuse] [--jobs 2] [--profile]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from bench_ingest import T0
from bench_violations import build
from benchkit import built_log, log_arguments, print_profile
from minruntime.audit.simulate import simulate
from minruntime.audit.whatif import ChangeEvent
from minruntime.core import MinRuntimeConfig, format_rfc3339
from minruntime.events import ConfigUpdatedData, new_event
from minruntime.settings import Settings
from minruntime.store import engine_from

KEPT = Path(__file__).parent / "out" / "simulate-database.txt"
MINRUNTIME = Path(__file__).resolve().parents[1] / ".venv" / "bin" / "minruntime"
SINCE = T0
UNTIL = T0 + timedelta(days=365)
CHANGE_YAML = """apiVersion: v1
kind: ConfigMap
metadata:
  name: scheduler-config
data:
  config.yaml: |
    actions: "allocate, reclaim, preempt"
    tiers:
      - plugins:
          - name: minruntime
            arguments:
              defaultPreemptMinRuntime: 1h
              defaultReclaimMinRuntime: 30m
              reclaimResolveMethod: lca
"""


def change() -> list[ChangeEvent]:
    config = MinRuntimeConfig(
        default_preempt_min_runtime=timedelta(hours=1),
        default_reclaim_min_runtime=timedelta(minutes=30),
    )
    data = ConfigUpdatedData.from_config("default", config)
    event = new_event("config.updated", data, time=datetime.now(UTC), source="bench")
    return [ChangeEvent("bench", event)]


def cli(url: str, change_file: Path, out: Path) -> float:
    """Seconds of ``minruntime simulate ... --json`` as a user runs it, stdout to ``out``."""
    env = {**os.environ, "MINRUNTIME_DATABASE_URL": url, "MINRUNTIME_OWNER_DATABASE_URL": url}
    args = ["--since", format_rfc3339(SINCE), "--until", format_rfc3339(UNTIL)]
    with out.open("w") as sink:
        started = time.perf_counter()
        done = subprocess.run(
            [str(MINRUNTIME), "simulate", *args, "-f", str(change_file), "--json"],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
        )
        seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"minruntime simulate failed: {done.stderr.decode()}")
    return seconds


def measure(url: str, args: argparse.Namespace) -> None:
    engine = engine_from(url)
    try:
        with engine.connect() as conn:
            events = conn.execute(sa.text("SELECT count(*) FROM minruntime.event_log")).scalar_one()
        by_jobs: dict[int, list[float]] = {1: [], args.jobs: []}
        cpu: list[float] = []
        for _ in range(args.repeat):
            for jobs, times in by_jobs.items():
                started, used = time.perf_counter(), time.process_time()
                report = simulate(engine, change(), since=SINCE, until=UNTIL, jobs=jobs)
                times.append(time.perf_counter() - started)
                if jobs == 1:
                    # This process's CPU seconds: what one quiet core would take (the server's
                    # side, reading the log, is apart), whatever the machine's load.
                    cpu.append(time.process_time() - used)
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(simulate, engine, change(), since=SINCE, until=UNTIL)
            print_profile(profile, 25, 20)
    finally:
        engine.dispose()
    total = report.result.total
    print(
        f"log: {events:,} entries; {total.runs:,} runs judged, {total.evicted_runs:,} evicted, "
        f"{total.avoided_definite + total.avoided_possible:,} violations avoided, "
        f"{total.new_definite + total.new_possible:,} new, {total.decisions:,} decisions"
    )
    print(
        f"CPU of one part (this process): median {statistics.median(cpu):.2f} s "
        f"({statistics.median(cpu) * 1e6 / events:.0f} µs/entry)"
    )
    for jobs, times in by_jobs.items():
        median = statistics.median(times)
        print(
            f"simulate in this process, {jobs} part(s): median {median:.2f} s, worst "
            f"{max(times):.2f} s over {args.repeat} ({events / median:,.0f} entries/s)"
        )
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    change_file = out / "simulate-change.yaml"
    change_file.write_text(CHANGE_YAML)
    seconds = [cli(url, change_file, out / "simulate.json") for _ in range(args.repeat)]
    print(
        f"minruntime simulate --json: median {statistics.median(seconds):.2f} s, worst "
        f"{max(seconds):.2f} s over {args.repeat}"
    )
    per_million = statistics.median(seconds) * 1e6 / events
    print(
        f"scaled: {per_million:.1f} s per 1M entries (target 60 s), "
        f"{per_million * 10 / 60:.1f} min per 10M (target 10 min)"
    )


def main() -> None:
    parser = log_arguments(__doc__.splitlines()[0])
    parser.set_defaults(podgroups=24_000)
    parser.add_argument("--evicted-share", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile one in-process run")
    parser.add_argument("--jobs", type=int, default=2, help="parts, against 1 (default 2)")
    args = parser.parse_args()
    settings = Settings()
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    with built_log(args, settings, KEPT, lambda: build(args, settings)) as url:
        measure(url, args)


if __name__ == "__main__":
    main()
