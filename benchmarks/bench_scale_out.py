"""Benchmark scale-out: the aggregate rate of 1 and 2 processor instances on the ingest trace.

The trace is the ingest benchmark's (``bench_ingest.generate``, seed 20261121), by default at
the issue's size: 1,000 queues, 500 nodes, 20,000 podgroups, which that generator makes into
83,501 events (two allocation steps, an annotation on every tenth podgroup). For each run
(``--instances 1,2``, repeated ``--rounds`` times, alternating, so that drift in the machine's
load hits both alike), on a fresh private pipeline (scratch database, private topics):

1. start N ``minruntime processor`` instances in one consumer group (each a static member with
   its own metrics port) and wait until every one answers ``/readyz`` 200 twice, 2 s apart
   (in the group, consuming: the joins' rebalances are over);
2. produce the whole trace with a plain aiokafka producer (much faster than the processors, so
   they always have a backlog);
3. poll the group's stored offsets every 20 ms until they sum to the trace's size.

The rate is events / (server clock at that poll - min(event_log.applied_at)), as in
``bench_ingest.py``. Each run also reports the machine's CPU use over that window (from
``/proc/stat``: busy share of all cores), the CPU seconds of the processors, of the stack's
PostgreSQL (postmaster and backends) and of its Kafka broker (``/proc/<pid>``), and the load
average: on a machine shared with other work, what the processors got is the figure to read.
The ratio printed at the end is median(2) / median(1).

    .venv/bin/python benchmarks/bench_scale_out.py [--instances 1,2] [--rounds 1]
        [--podgroups 20000] [--queues 1000] [--nodes 500]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bench_ingest import generate
from minruntime.settings import Settings
from pipeline import ROOT, BenchPipeline, produce
from proc_cpu import process_cpu, tree_cpu

sys.path.insert(0, str(ROOT))  # the e2e tests' harness (pipeline.py does the same)

from tests.conftest import free_ports
from tests.e2e.harness import Subprocess, Worker, probe, wait_for

POLL_SECONDS = 0.02


def stack_cpu() -> dict[str, float]:
    """CPU seconds so far of the local stack's PostgreSQL and Kafka (this stack's, by pid file)."""
    stack = Settings().stack_dir
    pids = {
        "postgres": stack / "postgres" / "data" / "postmaster.pid",
        "kafka": stack / "kafka" / "kafka.pid",
    }
    return {
        name: tree_cpu(int(path.read_text().split()[0])) if path.is_file() else 0.0
        for name, path in pids.items()
    }


def cpu_times() -> tuple[float, float]:
    """(busy, total) jiffies of all cores so far (Linux /proc/stat)."""
    fields = [int(v) for v in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    total = sum(fields[:8])
    return float(total - idle), float(total)


class Run:
    """One pipeline with N processor instances in its consumer group."""

    def __init__(self, instances: int) -> None:
        port = free_ports()
        self.pipe = BenchPipeline(f"scale{instances}", processor_metrics_port=str(port))
        self.ports = [port]
        self.processes: list[Subprocess] = [self.pipe]
        self.count = instances

    def start(self) -> None:
        self.pipe.create()
        self.pipe.spawn()
        for n in range(1, self.count):
            port = free_ports()
            env = {**self.pipe.env, "MINRUNTIME_PROCESSOR_METRICS_PORT": str(port)}
            worker = Worker(self.pipe, f"i{n}", env, command="processor")
            self.pipe.workers.append(worker)
            self.processes.append(worker.start())
            self.ports.append(port)
        for _ in range(2):  # ready, and still ready once the last join's rebalance is over
            wait_for(self._all_ready, 180, f"{self.count} ready processor instances")
            time.sleep(2)

    def _all_ready(self) -> bool:
        self.check_alive()
        return all(probe(port, "/readyz")[0] == 200 for port in self.ports)

    def check_alive(self) -> None:
        for process in self.processes:
            if process.process is not None and process.process.poll() is not None:
                raise RuntimeError(f"{process.log_path.name} exited:\n{process.log_tail()}")

    def cpu(self) -> float:
        return sum(process_cpu(p.process.pid) for p in self.processes if p.process is not None)


def measure(instances: int, trace: Any) -> dict[str, float]:
    """Start ``instances`` processors, produce the trace, time until every event is stored."""
    run = Run(instances)
    total = len(trace.events)
    try:
        run.start()
        pipe = run.pipe
        busy0, all0 = cpu_times()
        cpu0, load0, stack0 = run.cpu(), os.getloadavg()[0], stack_cpu()
        asyncio.run(
            produce(
                pipe.kafka, ((pipe.topics[role], key, value) for role, key, value in trace.events)
            )
        )
        with pipe.connect() as conn:
            while True:
                run.check_alive()
                stored, now = conn.execute(
                    "SELECT coalesce(sum(next_offset), 0), clock_timestamp()"
                    " FROM minruntime_state.consumer_offsets WHERE consumer_group = %s",
                    (pipe.group,),
                ).fetchone()
                if stored >= total:
                    break
                time.sleep(POLL_SECONDS)
            busy1, all1 = cpu_times()
            cpu1, load1, stack1 = run.cpu(), os.getloadavg()[0], stack_cpu()
            first, logged = conn.execute(
                "SELECT min(applied_at), count(*) FROM minruntime_state.event_log"
            ).fetchone()
            dead = conn.execute("SELECT count(*) FROM minruntime_state.dead_letter_log").fetchone()
        if logged != total or dead[0]:
            raise RuntimeError(f"event_log has {logged} of {total} events, {dead[0]} dead letters")
        seconds = (now - first).total_seconds()
        return {
            "rate": total / seconds,
            "seconds": seconds,
            "busy": (busy1 - busy0) / (all1 - all0),
            "processor_cpu": cpu1 - cpu0,
            "postgres_cpu": stack1["postgres"] - stack0["postgres"],
            "kafka_cpu": stack1["kafka"] - stack0["kafka"],
            "load": (load0 + load1) / 2,
        }
    finally:
        run.pipe.drop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", default="1,2", help="instance counts, comma-separated")
    parser.add_argument("--rounds", type=int, default=1, help="times each count is run")
    parser.add_argument("--podgroups", type=int, default=20_000)
    parser.add_argument("--queues", type=int, default=1000)
    parser.add_argument("--nodes", type=int, default=500)
    args = parser.parse_args()
    counts = [int(n) for n in args.instances.split(",")]
    trace = generate(args.queues, args.nodes, args.podgroups)
    print(
        f"trace: {len(trace.events):,} events; cores: {os.cpu_count()}; "
        f"load average at start: {os.getloadavg()[0]:.1f}"
    )
    rates: dict[int, list[float]] = {n: [] for n in counts}
    for round_ in range(args.rounds):
        for n in counts:
            figures = measure(n, trace)
            rates[n].append(figures["rate"])
            print(
                f"round {round_ + 1}, {n} instance(s): {len(trace.events):,} events in "
                f"{figures['seconds']:.2f} s = {figures['rate']:,.0f} events/s; machine busy "
                f"{figures['busy']:.0%} of {os.cpu_count()} cores; CPU s: processors "
                f"{figures['processor_cpu']:.1f}, PostgreSQL {figures['postgres_cpu']:.1f}, "
                f"Kafka {figures['kafka_cpu']:.1f}; load average {figures['load']:.1f}",
                flush=True,
            )
    medians = {n: statistics.median(values) for n, values in rates.items()}
    for n in counts:
        print(f"{n} instance(s): median {medians[n]:,.0f} events/s over {len(rates[n])} run(s)")
    if 1 in medians and 2 in medians:
        print(f"ratio 2/1 = {medians[2] / medians[1]:.2f}")


if __name__ == "__main__":
    main()
