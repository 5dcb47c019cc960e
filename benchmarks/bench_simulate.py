"""Benchmark `minruntime simulate` on a generated log (targets: 1M events <= 60 s, 10M <= 10 min).

Builds, once, the ingest benchmark's deterministic trace (seed 20261121) at ``--podgroups``
(24,000: about 100,000 events; 240,000: about 1,000,000) with ``--evicted-share`` of the
releases evictions, in a scratch database, with the projection code (``apply_batch`` in the
processor's batches, as ``bench_violations`` builds it): the event log is the processor's.
``--keep`` keeps that database (its URL in ``--kept``, by default
``benchmarks/out/simulate-database.txt``); ``--reuse`` measures it again; ``--build-only``
stops after building.

``--direct`` builds it instead by writing the trace's entries straight into the event log, as
the processor logs them (``direct_log``: the processor's decoder, row and COPY; no
projection, which a simulation does not read), at tens of thousands of entries a second:
``--podgroups 2400000`` (about 10M entries) builds in minutes, where ``apply_batch`` takes
hours. tests/integration/test_simulate_direct_log.py proves that log the processor's.

Then it times the simulation of a change of the default pool's defaults (preempt 1h, reclaim
30m: every run's windows differ) over the whole log: in this process
(``audit.simulate.simulate``: one read of the log, the fold, the difference) in one part and
in ``--jobs`` parts, alternately, and as a user runs it (the installed CLI in a subprocess,
``--json`` to a file, interpreter start included, its default parts), ``--repeat`` times each
(median and worst); ``--only one|parts|cli`` (repeatable) times only those. Each run's CPU
seconds (this process and its parts, or the CLI and its parts), its PostgreSQL backends' CPU
seconds and its peak memory (the Pss of the process tree: ``run_sampler``) are printed too.

``--prioritise`` (root) runs ``prioritise.sh`` beside, which gives this process, its
descendants and the database's backends the CPU before the other work of a shared machine
(nice -15 and their autogroups' nice -15; start the benchmark with ``setsid nice -n -15`` so
that its session's autogroup is its own).

    .venv/bin/python benchmarks/bench_simulate.py [--podgroups 24000] [--repeat 3]
        [--keep | --reuse] [--kept FILE] [--direct] [--build-only] [--jobs 2]
        [--only one|parts|cli ...] [--prioritise] [--profile]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import platform
import resource
import statistics
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from bench_ingest import T0, trace_events
from bench_violations import build
from benchkit import (
    add_prioritise,
    built_log,
    database_name,
    log_arguments,
    migrated_scratch_database,
    print_profile,
    prioritised,
)
from direct_log import write_direct
from minruntime.audit.simulate import simulate
from minruntime.audit.whatif import ChangeEvent
from minruntime.core import MinRuntimeConfig, format_rfc3339
from minruntime.events import ConfigUpdatedData, new_event
from minruntime.settings import Settings
from minruntime.store import engine_from
from run_sampler import RunSampler

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


def cli(url: str, change_file: Path, out: Path) -> tuple[float, float, RunSampler]:
    """(wall seconds, CPU seconds, what was sampled) of ``minruntime simulate ... --json`` as a
    user runs it (its default parts), stdout to ``out``; the CPU is the CLI's and its parts'."""
    env = {**os.environ, "MINRUNTIME_DATABASE_URL": url, "MINRUNTIME_OWNER_DATABASE_URL": url}
    args = ["--since", format_rfc3339(SINCE), "--until", format_rfc3339(UNTIL)]
    with out.open("w") as sink, RunSampler(database_name(url)) as peak:
        used = _children_cpu()
        started = time.perf_counter()
        done = subprocess.run(
            [str(MINRUNTIME), "simulate", *args, "-f", str(change_file), "--json"],
            env=env,
            stdout=sink,
            stderr=subprocess.PIPE,
        )
        seconds = time.perf_counter() - started
        cpu = _children_cpu() - used
    if done.returncode != 0:
        raise SystemExit(f"minruntime simulate failed: {done.stderr.decode()}")
    return seconds, cpu, peak


def _children_cpu() -> float:
    """User + system seconds of this process's reaped children (and theirs)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _now() -> str:
    return f"{time.strftime('%H:%M:%S', time.gmtime())} UTC, load {os.getloadavg()[0]:.1f}"


def build_direct(args: argparse.Namespace, settings: Settings) -> str:
    """A scratch database whose event log holds the trace (``direct_log``); its owner URL."""
    url = migrated_scratch_database(settings, "minruntime_test_bench_simulate")
    events = trace_events(args.queues, args.nodes, args.podgroups, evicted_share=args.evicted_share)
    with prioritised(url, args.prioritise):
        started = time.perf_counter()
        written = write_direct(url, events, progress=True)
        seconds = time.perf_counter() - started
    print(
        f"built: {written:,} entries written to the event log in {seconds:.0f} s "
        f"({written / seconds:,.0f} entries/s, direct)",
        flush=True,
    )
    return url


def measure(url: str, args: argparse.Namespace) -> None:
    engine = engine_from(url)
    out = Path(__file__).parent / "out"
    out.mkdir(exist_ok=True)
    modes = args.only or ["one", "parts", "cli"]
    runs: dict[str, list[tuple[float, float, RunSampler]]] = {mode: [] for mode in modes}
    try:
        with engine.connect() as conn:
            events = conn.execute(sa.text("SELECT count(*) FROM minruntime.event_log")).scalar_one()
        print(f"log: {events:,} entries ({_now()})", flush=True)
        change_file = out / "simulate-change.yaml"
        change_file.write_text(CHANGE_YAML)
        report = None
        for _ in range(args.repeat):
            for mode in modes:
                if mode == "cli":
                    seconds, cpu, peak = cli(url, change_file, out / "simulate.json")
                else:
                    jobs = 1 if mode == "one" else args.jobs
                    with RunSampler(database_name(url)) as peak:
                        started, used = time.perf_counter(), time.process_time()
                        parts = _children_cpu()
                        report = simulate(engine, change(), since=SINCE, until=UNTIL, jobs=jobs)
                        seconds = time.perf_counter() - started
                        # This process's CPU seconds and its parts': what quiet cores would
                        # take (the server's side, reading the log, is apart).
                        cpu = time.process_time() - used + _children_cpu() - parts
                runs[mode].append((seconds, cpu, peak))
                print(
                    f"  {_LABELS[mode].format(jobs=args.jobs)}: {seconds:.2f} s, CPU {cpu:.2f} s "
                    f"({cpu * 1e6 / events:.0f} µs/entry) + PostgreSQL {peak.server_cpu:.2f} s "
                    f"({peak.server_cpu * 1e6 / events:.0f} µs/entry), {peak.text()} "
                    f"(done {_now()})",
                    flush=True,
                )
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(simulate, engine, change(), since=SINCE, until=UNTIL)
            print_profile(profile, 25, 20)
    finally:
        engine.dispose()
    if report is not None:
        total = report.result.total
        print(
            f"{total.runs:,} runs judged, {total.evicted_runs:,} evicted, "
            f"{total.avoided_definite + total.avoided_possible:,} violations avoided, "
            f"{total.new_definite + total.new_possible:,} new, {total.decisions:,} decisions"
        )
    for mode, measured in runs.items():
        seconds = statistics.median(run[0] for run in measured)
        cpu = statistics.median(run[1] for run in measured)
        print(
            f"{_LABELS[mode].format(jobs=args.jobs)}: median {seconds:.2f} s, worst "
            f"{max(run[0] for run in measured):.2f} s over {args.repeat} "
            f"({events / seconds:,.0f} entries/s); CPU {cpu:.2f} s "
            f"({cpu * 1e6 / events:.0f} µs/entry); peak "
            f"{max(run[2].total for run in measured) / 2**30:.2f} GiB"
        )
    if "cli" in runs:
        per_million = statistics.median(run[0] for run in runs["cli"]) * 1e6 / events
        print(
            f"scaled: {per_million:.1f} s per 1M entries (target 60 s), "
            f"{per_million * 10 / 60:.1f} min per 10M (target 10 min)"
        )


_LABELS = {
    "one": "simulate in this process, 1 part",
    "parts": "simulate in this process, {jobs} parts",
    "cli": "minruntime simulate --json (CLI, default parts)",
}


def main() -> None:
    parser = log_arguments(__doc__.splitlines()[0])
    parser.set_defaults(podgroups=24_000)
    parser.add_argument("--evicted-share", type=float, default=0.2)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="profile one in-process run")
    parser.add_argument("--jobs", type=int, default=2, help="parts, against 1 (default 2)")
    parser.add_argument(
        "--direct", action="store_true", help="build the log straight into the event log"
    )
    parser.add_argument("--kept", type=Path, default=KEPT, help=f"(default {KEPT})")
    parser.add_argument("--build-only", action="store_true", help="build (and --keep), no more")
    parser.add_argument(
        "--only",
        action="append",
        choices=("one", "parts", "cli"),
        help="measure only this (1 part, --jobs parts, the CLI); repeatable",
    )
    add_prioritise(parser)
    args = parser.parse_args()
    settings = Settings()
    print(
        f"{platform.node()}: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}, "
        f"{time.strftime('%Y-%m-%d %H:%M')}"
    )
    builder = build_direct if args.direct else build
    with built_log(args, settings, args.kept, lambda: builder(args, settings)) as url:
        if not args.build_only:
            with prioritised(url, args.prioritise):
                measure(url, args)


if __name__ == "__main__":
    main()
