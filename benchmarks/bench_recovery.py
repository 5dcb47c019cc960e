"""Benchmark recovery: kill -9 the processor mid-stream, restart it, time until ingest resumes.

On a private pipeline (scratch database, private topics, ``minruntime processor``
subprocess) a plain aiokafka producer sends ``queue.upserted`` events at a steady rate
(``--rate`` per second, unique names, keyed by name) for the whole run. ``--kills`` times:
wait until the processor applies events, SIGKILL it, note how many events the database
holds (nothing changes while it is dead), restart it at once, and measure from the restart
(the moment the new process is spawned) to

- **ready**: its ``/readyz`` answers 200 (connected and consuming), and
- **resumed**: the first event applied after the restart (``event_log`` grows), and the CPU
  time the new process had used by then (user + system, from ``/proc``): on a shared machine
  the wall time is mostly waiting for a core, the CPU time is what the restart costs.

Each case runs with static membership on (the default) and, with ``--compare``, again with
``MINRUNTIME_PROCESSOR_STATIC_MEMBERSHIP=false`` (the old behaviour: a new member waits out
the dead one's session).

    .venv/bin/python benchmarks/bench_recovery.py [--kills 10] [--rate 50] [--compare]

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import threading
import time
import urllib.error
import urllib.request
import uuid
from datetime import UTC, datetime
from typing import Any

from pipeline import BenchPipeline, percentile, rfc3339
from proc_cpu import process_cpu


def free_port() -> int:
    """A TCP port nobody listens on right now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class SteadyProducer(threading.Thread):
    """Sends queue.upserted events at `rate` per second until stopped."""

    def __init__(self, bootstrap: str, topic: str, rate: float) -> None:
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.stopping = threading.Event()
        self.sent = 0

    def run(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=self.bootstrap, linger_ms=5)
        await producer.start()
        try:
            started = time.monotonic()
            while not self.stopping.is_set():
                name = f"recovery-{self.sent:07d}"
                event = {
                    "specversion": "1.0",
                    "id": str(uuid.uuid4()),
                    "source": "benchmarks/bench_recovery",
                    "type": "queue.upserted",
                    "time": rfc3339(datetime.now(UTC)),
                    "subject": name,
                    "data": {"name": name},
                }
                await producer.send(self.topic, json.dumps(event).encode(), key=name.encode())
                self.sent += 1
                due = started + self.sent / self.rate
                await asyncio.sleep(max(0.0, due - time.monotonic()))
        finally:
            await producer.stop()


def ready(port: int) -> bool:
    """True when the processor's /readyz answers 200."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def applied(pipeline: BenchPipeline) -> int:
    """Events in the log."""
    return int(pipeline.scalar("SELECT count(*) FROM minruntime.event_log"))


def run_case(name: str, kills: int, rate: float, **overrides: str) -> dict[str, list[float]]:
    """Kill and restart `kills` times; the seconds to ready and to resumed, per restart."""
    port = free_port()
    pipeline = BenchPipeline(name, processor_metrics_port=str(port), **overrides)
    pipeline.create()
    producer = SteadyProducer(pipeline.base.kafka_bootstrap, pipeline.topics["queues"], rate)
    figures: dict[str, list[float]] = {"ready": [], "resumed": [], "resumed, CPU s": []}
    try:
        pipeline.start()
        producer.start()
        for round_ in range(kills):
            before = applied(pipeline)
            deadline = time.monotonic() + 300
            while applied(pipeline) <= before + rate and time.monotonic() < deadline:
                time.sleep(0.2)
            pipeline.kill()
            at_kill = applied(pipeline)
            restarted = now = time.monotonic()
            pipeline.start()  # the topics exist: returns at once
            got_ready: float | None = None
            got_resumed: float | None = None
            # A process without /readyz (older code) is timed on `resumed` alone.
            while got_resumed is None or (got_ready is None and now - restarted < 60):
                now = time.monotonic()
                if now - restarted > 600:
                    raise RuntimeError(f"no recovery after 600 s:\n{pipeline.log_tail()}")
                if got_ready is None and ready(port):
                    got_ready = now - restarted
                if got_resumed is None and applied(pipeline) > at_kill:
                    got_resumed = now - restarted
                    assert pipeline.process is not None
                    figures["resumed, CPU s"].append(process_cpu(pipeline.process.pid))
                time.sleep(0.1)
            got_ready = float("nan") if got_ready is None else got_ready
            figures["ready"].append(got_ready)
            figures["resumed"].append(got_resumed)
            print(
                f"  {name} kill {round_ + 1}: ready {got_ready:.1f} s, resumed {got_resumed:.1f} s"
                f" (CPU {figures['resumed, CPU s'][-1]:.1f} s), load {os.getloadavg()[0]:.1f}"
            )
    finally:
        producer.stopping.set()
        producer.join(30)
        pipeline.drop()
    return figures


def summary(name: str, figures: dict[str, list[float]]) -> None:
    """One table row per measure."""
    for measure, values in figures.items():
        ordered = sorted(values)
        print(
            f"| {name} | {measure} | {len(values)} | {statistics.median(ordered):.1f} | "
            f"{percentile(ordered, 0.9):.1f} | {ordered[-1]:.1f} |"
        )


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run the case(s), print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=10)
    parser.add_argument("--rate", type=float, default=50.0, help="events per second")
    parser.add_argument("--compare", action="store_true", help="also without static membership")
    args = parser.parse_args(argv)
    cases: list[tuple[str, dict[str, Any]]] = [("static", {})]
    if args.compare:
        cases.append(("dynamic", {"processor_static_membership": "false"}))
    results = {name: run_case(name, args.kills, args.rate, **extra) for name, extra in cases}
    print("| membership | from restart to | restarts | median s | p90 s | max s |")
    print("|---|---|---:|---:|---:|---:|")
    for name, figures in results.items():
        summary(name, figures)


if __name__ == "__main__":
    main()
