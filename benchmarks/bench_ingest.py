"""Benchmark ingestion: the real processor against a bare decode-only consumer, same topics.

Generates a deterministic cluster trace (seed 20261121): a queue tree (5 roots, ~6 levels,
some queues with preempt/reclaim values), one config, nodes, and podgroups that go
submitted -> allocated (two steps) -> released, with an annotation on every tenth; events are
interleaved in simulated time, so most allocations and releases touch podgroups stored by an
earlier batch. The trace is produced to a private topic set with a plain aiokafka producer
(JSON CloudEvents keyed by subject), then, in the same run:

(a) bare: an aiokafka consumer (no group, default fetch sizes) drains every topic from
    the beginning and decodes each value with ``json.loads`` only;
(b) sink: the hand-written sink of issue 10 (``handwritten_sink.py``: aiokafka + psycopg, one
    transaction per batch that COPYs the raw events into a jsonb log, upserts one last-state
    row per subject and stores the next offsets), consumer group and schema of its own;
(c) processor: ``minruntime processor`` (subprocess, private env) from an empty migrated
    database until every event is applied;
(e) replay: ``replay --verify`` of the database the processor filled (``replay_after.py``):
    the whole event log replayed into a shadow and compared with the live tables;
(f) with ``--parts-alone N``: (e) in N parts, each part run alone, one after another: the
    slowest is the critical path of ``--jobs N`` on a machine with a core for each part and
    for its PostgreSQL backend (this machine has 2).

It prints events/s of each and the ratios processor/sink (issue 30's target: >= 0.8),
processor/bare and replay --verify/processor (issue 30's target: >= 5x).

    .venv/bin/python benchmarks/bench_ingest.py [--trace issue|default] [--podgroups 50000]
        [--queues 5000] [--nodes 2000] [--keep] [--profile] [--no-sink] [--no-processor]
        [--private-broker PLAINTEXT|SASL_SSL] [--parts-alone N ...] [--prioritise]

``--prioritise`` (root; benchkit.prioritised, prioritise.sh): this process (the bare consumer,
the sink, the in-process replay), its descendants (the processor, the replay's parts) and the
scratch database's backends given the CPU before the other work of a shared machine; start
the benchmark with ``setsid nice -n -15``. The broker is not covered (prioritise it by hand).

``--trace issue`` is issue 10's trace: 1,000 queues, 500 nodes, 20,000 podgroups (~61k
events); explicit --queues/--nodes/--podgroups override the preset.

``--private-broker`` starts a broker of its own with that listener (the stack code, private
port and directory) and runs everything against it: SASL_SSL against PLAINTEXT is the cost of
authentication and encryption (docs/benchmarks.md).

Needs the local stack (``minruntime stack up``).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import heapq
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from benchkit import add_prioritise, prioritised
from cluster import build_tree, queue_upserts
from handwritten_sink import create_tables, drop_tables, run_sink
from minruntime.audit.parallel import default_parts
from minruntime.bootstrap import tune_gc
from minruntime.kafka_access import KafkaAccess
from minruntime.settings import Settings
from minruntime_dev.scratch import scratch_owner_url
from pipeline import INPUT_ROLES, BenchPipeline, overrides, private_broker, produce, rfc3339
from proc_cpu import postgres_pid, process_cpu, tree_cpu
from replay_after import parts_alone, replay_verify

SEED = 20261121
T0 = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
RATIO_TARGET = 0.8  # processor / hand-written sink (issue 30 part 2; issue 10's was 0.5)
REPLAY_TARGET = 5.0  # replay --verify / the processor's live rate (issues 10 and 30)
# --trace presets: (queues, nodes, podgroups)
TRACES = {"default": (5000, 2000, 50_000), "issue": (1000, 500, 20_000)}
# The trace allocates each podgroup in one step and annotates none (~61.5k events); the
# default one allocates in two steps and annotates every tenth podgroup.
SHAPES = {"default": (2, 10), "issue": (1, 0)}
POLL_SECONDS = 0.02
SOURCE = "bench/ingest"


class Trace:
    """The generated events as (role, key, value), in production order."""

    def __init__(self) -> None:
        self.events: list[tuple[str, bytes, bytes]] = []
        self.types: dict[str, int] = {}
        self._n = 0

    def add(self, role: str, type_: str, subject: str, data: dict[str, Any], at: datetime) -> None:
        self.events.append(self.encode(role, type_, subject, data, at))

    def encode(
        self, role: str, type_: str, subject: str, data: dict[str, Any], at: datetime
    ) -> tuple[str, bytes, bytes]:
        """The next event (ids ``ev-1``, ``ev-2``, ...) as (role, key, value), counted."""
        self._n += 1
        value = json.dumps(
            {
                "specversion": "1.0",
                "id": f"ev-{self._n}",
                "source": SOURCE,
                "type": type_,
                "time": rfc3339(at),
                "subject": subject,
                "data": data,
            }
        ).encode()
        self.types[type_] = self.types.get(type_, 0) + 1
        return (role, subject.encode(), value)


# One event of the trace before it is encoded: (role, type, subject, data, time).
TraceEvent = tuple[str, str, str, dict[str, Any], datetime]


def generate(*args: Any, **shape: Any) -> Trace:
    """``trace_events(...)``'s events, encoded, in one list."""
    trace = Trace()
    for event in trace_events(*args, **shape):
        trace.add(*event)
    return trace


def trace_events(
    queues: int,
    nodes: int,
    podgroups: int,
    seed: int = SEED,
    *,
    allocation_steps: int = 2,
    annotate_every: int = 10,
    evicted_share: float = 0.0,
) -> Iterator[TraceEvent]:
    """The deterministic cluster trace, event by event (``annotate_every`` 0: no annotations;
    ``evicted_share``: that share of the releases is an eviction — evicted, preempted or
    requeued — instead of a completion, drawn apart so the trace is otherwise the same). Only
    the podgroups still going are held (about 63,000 at a time): a 10M-event trace is not
    held at once."""
    rng = random.Random(seed)
    evictions = random.Random(seed + 1)
    tree = build_tree(rng, queues)
    for name, data in queue_upserts(rng, tree):
        yield ("queues", "queue.upserted", name, data, T0)
    yield (
        "queues",
        "config.updated",
        "config/default",
        {"nodePool": "default", "defaultReclaimMinRuntime": "5m", "reclaimResolveMethod": "lca"},
        T0,
    )
    for i in range(nodes):
        pool = "pool-b" if i % 4 == 0 else "default"
        data = {"name": f"node-{i}", "nodePool": pool, "gpu": 8}
        yield ("nodes", "node.upserted", f"node-{i}", data, T0)
    deep = [name for name, _, depth in tree if depth >= 3] or [name for name, _, _ in tree]
    # Podgroup events in simulated time: 100 submissions/s, allocation 0.5-20 s later (two
    # steps), release 1-10 minutes into the run. In (time, order made) order: every event of a
    # podgroup is at or after its submission, and the submissions come in time order, so what
    # is before the next submission can go out.
    timeline: list[tuple[float, int, str, str, dict[str, Any]]] = []
    made = 0

    def later(t: float, type_: str, uid: str, data: dict[str, Any]) -> None:
        nonlocal made
        heapq.heappush(timeline, (t, made, type_, uid, data))
        made += 1

    def until(t: float) -> Iterator[TraceEvent]:
        while timeline and timeline[0][:2] < (t, made):
            at, _, type_, uid, data = heapq.heappop(timeline)
            yield ("podgroups", type_, uid, data, T0 + timedelta(seconds=at))

    for i in range(podgroups):
        uid = str(uuid.UUID(int=rng.getrandbits(128), version=4))
        npods = rng.randint(2, 4)
        pods = [f"{uid[:8]}-w{p}" for p in range(npods)]
        elastic = rng.random() < 0.2
        submitted: dict[str, Any] = {
            "uid": uid,
            "name": f"job-{i}",
            "namespace": f"team-{i % 40}",
            "queue": rng.choice(deep),
            "priority": rng.randint(0, 200),
            "subGroups": [{"name": "default", "minAvailable": 1 if elastic else npods}],
            "pods": [{"name": pod, "gpu": 1} for pod in pods],
        }
        if i % 5 == 0:
            submitted["nodePool"] = "pool-b"
        t = i * 0.01
        yield from until(t)
        later(t, "podgroup.submitted", uid, submitted)
        node = f"node-{rng.randrange(max(nodes, 1))}"
        first = t + rng.uniform(0.5, 20)
        half = npods // 2 if allocation_steps == 2 else npods
        later(
            first,
            "podgroup.allocated",
            uid,
            {"uid": uid, "pods": [{"name": pod, "node": node} for pod in pods[:half]]},
        )
        second = first + rng.uniform(0, 5)
        if pods[half:]:
            later(
                second,
                "podgroup.allocated",
                uid,
                {"uid": uid, "pods": [{"name": pod, "node": node} for pod in pods[half:]]},
            )
        if annotate_every and i % annotate_every == 0:
            annotations = {"kai.scheduler/expected-runtime": f"{rng.randint(10, 240)}m"}
            later(second + 1, "podgroup.annotated", uid, {"uid": uid, "annotations": annotations})
        released = second + rng.uniform(60, 600)
        reason = "completed"
        if evicted_share and evictions.random() < evicted_share:
            reason = evictions.choice(("evicted", "preempted", "requeued"))
        later(released, "podgroup.released", uid, {"uid": uid, "reason": reason})
    yield from until(float("inf"))


async def bare_consume(
    access: KafkaAccess, topics: list[str], expected: int, keep: bool
) -> tuple[float, list[Any]]:
    """Drain ``topics`` from the start, ``json.loads`` each value; seconds first->last record."""
    from aiokafka import AIOKafkaConsumer

    # No group: every partition of the topics is consumed, from the earliest offset.
    consumer = AIOKafkaConsumer(
        *topics,
        **access.client_kwargs(),
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    await consumer.start()
    kept: list[Any] = []
    try:
        seen, first, cpu = 0, None, 0.0
        deadline = time.monotonic() + 600
        while seen < expected:
            if time.monotonic() > deadline:
                raise RuntimeError(f"bare consumer: only {seen} of {expected} records")
            batches = await consumer.getmany(timeout_ms=1000)
            if first is None and batches:
                first = time.perf_counter()
                cpu = time.process_time()
            for messages in batches.values():
                for message in messages:
                    json.loads(message.value)
                seen += len(messages)
                if keep:
                    kept.extend(messages)
        assert first is not None
        print(f"    bare consumer CPU: {(time.process_time() - cpu) * 1e6 / expected:.0f} µs/event")
        return time.perf_counter() - first, kept
    finally:
        await consumer.stop()


def run_processor(
    pipe: BenchPipeline, expected: int, py_spy: str | None = None, spy_mode: str = "idle"
) -> dict[str, Any]:
    """Start the processor on the filled topics; poll its stored offsets until all applied.

    ``py_spy``: sample the processor with py-spy (100 Hz, every thread) into this file,
    collapsed stacks (``--format raw``; summarise with ``spy_summary.py``); ``spy_mode``: idle
    (waiting threads too), active (running threads only) or gil (the GIL holder only).

    The poll (every 20 ms, one autocommit connection) reads the consumer group's stored next
    offsets, which ``apply_batch`` writes in the same transaction as the event log, so
    sum(next_offset) == records produced means every event is committed.
    """
    topic_role = {topic: role for role, topic in pipe.topics.items()}
    server = postgres_pid(pipe.base.database_parts.port)
    server_before = tree_cpu(server)
    pipe.start()
    assert pipe.process is not None
    sampler = None
    if py_spy is not None:
        assert pipe.process is not None
        sampler = subprocess.Popen(
            [
                *("py-spy", "record", "-p", str(pipe.process.pid), "-r", "100", "--idle"),
                # FILE.svg: a flame graph (docs/profiles/); else collapsed stacks.
                *("--format", "flamegraph" if py_spy.endswith(".svg") else "raw", "-o", py_spy),
            ],
            stdout=subprocess.DEVNULL,
        )
    spawned = pipe.spawned_at
    first_seen: float | None = None
    startup_cpu = 0.0
    finished: dict[str, float] = {}
    with pipe.connect() as conn:
        while True:
            pipe.check_alive()
            rows = conn.execute(
                "SELECT topic, sum(next_offset), clock_timestamp()"
                " FROM minruntime_state.consumer_offsets WHERE consumer_group = %s GROUP BY topic",
                (pipe.group,),
            ).fetchall()
            now = time.monotonic()
            per_topic = {topic_role[topic]: int(total) for topic, total, _ in rows}
            total = sum(per_topic.values())
            if total and first_seen is None:
                first_seen = now
                startup_cpu = process_cpu(pipe.process.pid)
            for role, count in per_topic.items():
                if count == pipe.expected_per_role.get(role) and role not in finished:
                    finished[role] = now
            if total >= expected:
                done_server = rows[0][2]
                break
            if now - spawned > 900:
                raise RuntimeError(f"processor: {total} of {expected} after 900 s")
            time.sleep(POLL_SECONDS)
        done = time.monotonic()
        # CPU of the whole run, start-up included (~1-2 s of imports and joining the group).
        python, postgres = process_cpu(pipe.process.pid), tree_cpu(server) - server_before
        if sampler is not None:
            sampler.send_signal(signal.SIGINT)
            sampler.wait(60)
        first_applied, last_applied, logged = conn.execute(
            "SELECT min(applied_at), max(applied_at), count(*) FROM minruntime_state.event_log"
        ).fetchone()
        dead = conn.execute("SELECT count(*) FROM minruntime_state.dead_letter_log").fetchone()
        batches = conn.execute(
            "SELECT count(DISTINCT applied_at) FROM minruntime_state.event_log"
        ).fetchone()
    if logged != expected or dead[0]:
        raise RuntimeError(f"event_log has {logged} of {expected} events, {dead[0]} dead letters")
    assert first_seen is not None
    return {
        "seconds": (done_server - first_applied).total_seconds(),
        "poll_seconds": done - first_seen,
        "startup": first_seen - spawned,
        "finished": {role: t - spawned for role, t in finished.items()},
        "batches": batches[0],
        "last_batch_start": (last_applied - first_applied).total_seconds(),
        "python_cpu": python,
        "startup_cpu": startup_cpu,
        "postgres_cpu": postgres,
    }


PHASES = {
    "offsets (lock, store)": ("minruntime.ingest.batch", "_Batch", "fresh_records"),
    "decode": ("minruntime.ingest.batch", "_Batch", "decode"),
    "seen ids, conflicts": ("minruntime.ingest.batch", "_Batch", "unseen"),
    "podgroup load": ("minruntime.ingest.podgroups", "PodGroupProjection", "include"),
    "fold in memory (Projections.apply)": ("minruntime.ingest.projection", "Projections", "apply"),
    "podgroup write (flush)": ("minruntime.ingest.podgroups", "PodGroupProjection", "flush"),
    "event log, dead letters": ("minruntime.ingest.batch", "_Batch", "write_logs"),
}


def timed_phases() -> dict[str, list[float]]:
    """Wrap apply_batch's phases (``PHASES``) with timers: name -> [thread CPU s, wall s]."""
    import functools
    import importlib

    totals: dict[str, list[float]] = {name: [0.0, 0.0] for name in PHASES}

    def timed(name: str, function: Any) -> Any:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            cpu, wall = time.thread_time(), time.perf_counter()
            try:
                return function(*args, **kwargs)
            finally:
                totals[name][0] += time.thread_time() - cpu
                totals[name][1] += time.perf_counter() - wall

        return wrapper

    for name, (module_name, class_name, attribute) in PHASES.items():
        owner: Any = importlib.import_module(module_name)
        if class_name is not None:
            owner = getattr(owner, class_name)
        setattr(owner, attribute, timed(name, getattr(owner, attribute)))
    return totals


def profile_apply(
    pipe: BenchPipeline, messages: list[Any], batch: int, profile: bool = True
) -> None:
    """apply_batch alone (under cProfile unless ``profile`` is false) on the records the bare
    consumer read, per topic; prints its CPU per event, Python and PostgreSQL."""
    from benchkit import print_profile, scratch_database
    from minruntime.ingest import InboundRecord, apply_batch
    from minruntime.store import engine_from

    roles = {topic: role for role, topic in pipe.topics.items() if role in INPUT_ROLES}
    by_topic: dict[str, list[InboundRecord]] = {}
    for m in messages:
        by_topic.setdefault(m.topic, []).append(
            InboundRecord(m.topic, m.partition, m.offset, m.key, m.value, m.timestamp)
        )
    # The owner: the benchmark migrates and applies in one database of its own.
    with scratch_database(pipe.base, "minruntime_test_bench") as url:
        engine = engine_from(url)
        profiler = cProfile.Profile()
        phases = None if profile else timed_phases()
        if not profile:
            tune_gc()  # as the processor does
        server = postgres_pid(pipe.base.database_parts.port)
        server_before, python_before = tree_cpu(server), time.process_time()
        started = time.perf_counter()
        applied = 0
        # Topic by topic, queues first, in offset order per partition (as faust would).
        order = sorted(by_topic, key=lambda t: INPUT_ROLES.index(roles[t]))
        for topic in order:
            records = sorted(by_topic[topic], key=lambda r: (r.offset, r.partition))
            for i in range(0, len(records), batch):
                with engine.begin() as conn:
                    if profile:
                        profiler.enable()
                    outcome = apply_batch(
                        conn, records[i : i + batch], consumer_group="p", topic_roles=roles
                    )
                    if profile:
                        profiler.disable()
                applied += outcome.applied
        elapsed = time.perf_counter() - started
        python, postgres = time.process_time() - python_before, tree_cpu(server) - server_before
        engine.dispose()
        print(
            f"apply_batch alone (in-process, batches of {batch}): {applied:,} events in "
            f"{elapsed:.1f} s = {applied / elapsed:,.0f} events/s (incl. commits"
            f"{', with profiler' if profile else ''})"
        )
        print(f"    CPU: {cpu_line(python, postgres, applied)}")
        if phases is not None:
            print("    per phase, µs/event: Python CPU (this thread) / wall (the rest: PostgreSQL)")
            for name, (cpu, wall) in phases.items():
                print(f"      {name:28s} {cpu * 1e6 / applied:6.1f} / {wall * 1e6 / applied:6.1f}")
            return
        print_profile(profiler, 35, 25)


def consumer_only(pipe: BenchPipeline, total: int) -> None:
    """(d): the processor's consumer with a sink that stores nothing (``consumer_only.py``)."""
    result = pipe.workdir / "consumer-only.json"
    env = {
        **os.environ,
        **pipe.env,
        "MINRUNTIME_PROCESSOR_GROUP": f"{pipe.group}-consumer-only",
        "MINRUNTIME_STATE_DIR": str(pipe.workdir / "consumer-only-state"),
        "BENCH_EXPECTED": str(total),
        "BENCH_RESULT": str(result),
    }
    script = Path(__file__).with_name("consumer_only.py")
    subprocess.run([sys.executable, str(script)], env=env, check=True, timeout=900)
    summary = json.loads(result.read_text())
    print(
        f"(d) the processor's batched consumer, sink storing nothing: {total:,} events in"
        f" {summary['seconds']:.2f} s = {total / summary['seconds']:,.0f} events/s"
        f" ({summary['batches']} batches); Python CPU {summary['cpu']:.1f} s"
        f" ({summary['cpu'] * 1e6 / total:.0f} µs/event)"
    )


def cpu_line(python: float, postgres: float, events: int) -> str:
    """CPU seconds of the reader's Python process and of PostgreSQL, per event."""
    per = 1e6 / events
    return (
        f"Python {python:.1f} s ({python * per:.0f} µs/event) + PostgreSQL {postgres:.1f} s"
        f" ({postgres * per:.0f} µs/event) = {(python + postgres) * per:.0f} µs/event"
    )


def measure_sink(
    pipe: BenchPipeline, topics: list[str], total: int, keep: bool
) -> tuple[float, float]:
    """(b): the hand-written sink on the same topics, in a schema of the scratch database."""
    owner_url = scratch_owner_url(pipe.base, pipe.database_url)
    create_tables(owner_url)
    server = postgres_pid(pipe.base.database_parts.port)
    try:
        python_before, server_before = time.process_time(), tree_cpu(server)
        result = asyncio.run(
            run_sink(pipe.kafka, owner_url, topics, total, f"bench-sink-{pipe.suffix}")
        )
        python = time.process_time() - python_before
        postgres = tree_cpu(server) - server_before
    finally:
        if not keep:
            drop_tables(owner_url)
    rate = float(total / result["seconds"])
    print(
        f"(b) hand-written sink (aiokafka + psycopg, COPY jsonb log + last-state upsert +"
        f" offsets, one transaction per batch): {total:,} events in {result['seconds']:.2f} s"
        f" = {rate:,.0f} events/s ({result['batches']} batches)"
    )
    print(f"    CPU: {cpu_line(python, postgres, total)}")
    return rate, (python + postgres) / total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--trace", choices=sorted(TRACES), default="default", help="queues/nodes/podgroups preset"
    )
    parser.add_argument("--podgroups", type=int)
    parser.add_argument("--queues", type=int)
    parser.add_argument("--nodes", type=int)
    parser.add_argument("--keep", action="store_true", help="keep the database and topics")
    parser.add_argument("--batch-max-events", help="MINRUNTIME_BATCH_MAX_EVENTS for the processor")
    parser.add_argument(
        "--batch-within-seconds", help="MINRUNTIME_BATCH_WITHIN_SECONDS for the processor"
    )
    parser.add_argument(
        "--profile", action="store_true", help="also profile apply_batch alone (cProfile)"
    )
    parser.add_argument("--py-spy", metavar="FILE", help="sample (c) with py-spy into FILE")
    parser.add_argument(
        "--py-spy-mode",
        choices=["idle", "active", "gil"],
        default="idle",
        help="--py-spy samples: every thread, running ones, the GIL holder",
    )
    parser.add_argument(
        "--apply-alone", action="store_true", help="also run apply_batch alone, no profiler"
    )
    parser.add_argument(
        "--consumer-only",
        "--faust-only",  # its name while the processor read through faust's agents
        dest="consumer_only",
        action="store_true",
        help="also run (d): the processor's consumer with a no-op sink",
    )
    parser.add_argument("--no-sink", action="store_true", help="skip (b)")
    parser.add_argument("--no-processor", action="store_true", help="skip (c)")
    parser.add_argument(
        "--no-replay", action="store_true", help="skip (e), replay --verify of (c)'s database"
    )
    parser.add_argument(
        "--parts-alone",
        type=int,
        nargs="*",
        default=[],
        metavar="N",
        help="(f) replay --verify in N parts, each part run alone, one after another",
    )
    parser.add_argument(
        "--replay-jobs",
        type=int,
        help="(e) in this many processes besides one (default: as `replay --verify` would)",
    )
    parser.add_argument(
        "--private-broker",
        choices=["PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL"],
        help="run against a broker of its own with this listener (SCRAM-SHA-512 for SASL)",
    )
    add_prioritise(parser)
    args = parser.parse_args()
    preset = dict(zip(("queues", "nodes", "podgroups"), TRACES[args.trace], strict=True))
    for name, value in preset.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.private_broker:
        with private_broker(args.private_broker):
            print(f"private broker: {Settings().kafka_bootstrap}, {args.private_broker}")
            run(args)
    else:
        run(args)


def run(args: argparse.Namespace) -> None:
    """Generate the trace, produce it, and measure (a) and (b)."""

    started = time.perf_counter()
    steps, every = SHAPES[args.trace]
    trace = generate(
        args.queues, args.nodes, args.podgroups, allocation_steps=steps, annotate_every=every
    )
    total = len(trace.events)
    size = sum(len(value) for _, _, value in trace.events)
    print(
        f"trace: {total:,} events ({size / 1e6:.1f} MB) generated in "
        f"{time.perf_counter() - started:.1f} s: "
        + ", ".join(f"{t} {n:,}" for t, n in sorted(trace.types.items()))
    )
    pipe = BenchPipeline("ingest", **overrides(args)).create()
    try:
        with prioritised(pipe.database_url, args.prioritise):
            pipe.expected_per_role = {}
            for role, _, _ in trace.events:
                pipe.expected_per_role[role] = pipe.expected_per_role.get(role, 0) + 1
            started = time.perf_counter()
            asyncio.run(
                produce(
                    pipe.kafka,
                    ((pipe.topics[role], key, value) for role, key, value in trace.events),
                )
            )
            produced = time.perf_counter() - started
            print(f"produced {total:,} events in {produced:.1f} s ({total / produced:,.0f}/s)")
            del trace

            topics = [pipe.topics[role] for role in INPUT_ROLES]
            bare_seconds, kept = asyncio.run(
                bare_consume(pipe.kafka, topics, total, args.profile or args.apply_alone)
            )
            bare = total / bare_seconds
            print(
                f"(a) bare aiokafka consumer + json.loads: {total:,} events in {bare_seconds:.2f} s"
                f" = {bare:,.0f} events/s"
            )
            if args.profile or args.apply_alone:
                settings = pipe.settings()
                profile_apply(pipe, kept, settings.batch_max_events, not args.apply_alone)
                del kept
            sink = sink_cpu = None
            if not args.no_sink:
                sink, sink_cpu = measure_sink(pipe, topics, total, keep=args.keep)
            if args.consumer_only:
                consumer_only(pipe, total)
            if args.no_processor:
                return
            settings = pipe.settings()
            result = run_processor(pipe, total, args.py_spy, args.py_spy_mode)
            rate = total / result["seconds"]
            print(
                f"(c) minruntime processor (batch_max_events={settings.batch_max_events}, "
                f"within={settings.batch_within_seconds}s): {total:,} events in "
                f"{result['seconds']:.2f} s = {rate:,.0f} events/s"
            )
            print(
                "    measured from the first batch's transaction start (min(event_log.applied_at))"
                " to the first 20 ms poll of stored offsets that saw every event committed"
                f" (server clock); poll-to-poll {result['poll_seconds']:.2f} s; startup (spawn ->"
                f" first commit seen) {result['startup']:.1f} s; {result['batches']} batches"
            )
            print(
                "    all events of a role applied at (s after spawn): "
                + ", ".join(f"{r} {t:.1f}" for r, t in sorted(result["finished"].items()))
            )
            python, postgres = result["python_cpu"], result["postgres_cpu"]
            print(f"    CPU (start-up included): {cpu_line(python, postgres, total)}")
            startup = result["startup_cpu"]
            print(
                f"    Python CPU until the first commit was seen (start-up): {startup:.1f} s;"
                f" after it: {(python - startup) * 1e6 / total:.0f} µs/event"
            )
            if sink_cpu is not None:
                print(
                    f"CPU per event sink/processor = {sink_cpu / ((python + postgres) / total):.3f}"
                    " (the load-robust form of processor/sink)"
                )
            if sink is not None:
                ratio = rate / sink
                verdict = "meets" if ratio >= RATIO_TARGET else "misses"
                print(
                    f"ratio processor/sink = {ratio:.3f} ({verdict} the target {RATIO_TARGET};"
                    " goal 1.0)"
                )
            print(f"ratio processor/bare = {rate / bare:.3f}")
            if not args.no_replay:
                owner = scratch_owner_url(pipe.base, pipe.database_url)
                # As `minruntime replay --verify` runs by default: in parts on a long log.
                for parts in sorted({1, args.replay_jobs or default_parts(total)}):
                    verified = replay_verify(owner, parts)
                    how = (
                        f"{parts} processes, replay and compare at once"
                        if parts > 1
                        else f"replay {verified.replay_seconds:.2f} s,"
                        f" compare {verified.verify_seconds:.2f} s"
                    )
                    print(
                        f"(e) replay --verify of what the processor stored: {verified.events:,}"
                        f" events in {verified.seconds:.2f} s = {verified.rate:,.0f} events/s"
                        f" ({how}); {'equal' if verified.equal else 'DIFFERS'}"
                    )
                    speedup = verified.rate / rate
                    verdict = "meets" if speedup >= REPLAY_TARGET else "misses"
                    print(
                        f"ratio replay --verify ({parts} process{'es' if parts > 1 else ''})"
                        f"/processor = {speedup:.2f} ({verdict} the target {REPLAY_TARGET:.0f}x)"
                    )
                for parts in args.parts_alone:
                    alone = parts_alone(owner, parts)
                    print(
                        f"(f) replay --verify --jobs {parts}, each part alone (one after another):"
                        f" {', '.join(f'{s:.2f}' for s in alone)} s; the slowest part"
                        f" {max(alone):.2f} s = {total / max(alone):,.0f} events/s ="
                        f" {total / max(alone) / rate:.2f}x the processor: the critical path"
                        f" with a core for each part and its PostgreSQL backend, not measured"
                        " on such a machine"
                    )
    finally:
        pipe.drop(keep=args.keep)


if __name__ == "__main__":
    main()
