"""Part 2 of `minruntime demo`: the design tree and a few jobs through the real pipeline.

Events go to Kafka as a producer would send them, the real `minruntime processor` applies
them to PostgreSQL, and the answers come from the SQL a user would type (shown with it).
Then the real `minruntime requeue-worker` decides about three over-running jobs: its
decisions are shown in SQL, as the event on the decisions topic, and in its metrics.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Final

import sqlalchemy as sa
from rich.console import Console
from rich.json import JSON
from rich.syntax import Syntax
from rich.table import Column, Table

from minruntime.core import EXPECTED_RUNTIME_ANNOTATION, format_duration
from minruntime.errors import UserError
from minruntime.events import encode_event, new_event
from minruntime.kafka_access import KafkaAccess, kafka_access, start_client
from minruntime.produce import Outgoing, send
from minruntime.settings import Settings, project_root
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime.topic_admin import TopicRole, topic_names
from minruntime_dev.demo import DESIGN_QUEUES
from minruntime_dev.demo_process import (
    DemoChild,
    free_port,
    run_cli_as_user,
    show_commands,
    wait_for,
)
from minruntime_dev.demo_queries import (
    APPLIED_EVENTS,
    DEAD_LETTERS,
    DECIDED_JOBS,
    EARLIER_DEMO_PODGROUPS,
    PIPELINE_QUERIES,
    requeue_queries,
    run_query,
    scalar,
)

# The requeue story: three 4-GPU gangs, each alone on a 4-GPU node of its own node pool (so
# they do not compete), started two hours ago with an expected runtime of one hour.
# (job, node pool, queue, name of the higher-priority 2-GPU gang waiting in that pool or None)
REQUEUE_JOBS: Final = (
    ("contended", "rq-contention", "leaf3", "urgent"),
    ("idle", "rq-idle", "leaf3", None),
    ("protected", "rq-protected", "longrun", "urgent-blocked"),
)
REQUEUE_STARTED_AGO: Final = timedelta(hours=2)
EXPECTED_RUNTIME: Final = "1h"
# Queue of the protected job: still inside its minimum runtime after two hours.
LONGRUN_QUEUE: Final = {"name": "longrun", "preemptMinRuntime": "4h"}
VICTIM_PRIORITY, CONTENDER_PRIORITY = 50, 100
# The change the demo simulates over its own log: longrun's preempt minimum at 1h.
LONGRUN_1H_YAML: Final = """apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: longrun
spec:
  preemptMinRuntime: "1h"
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
"""
# The worker runs a cycle on start, then every second; the demo scrapes its metrics once a
# cycle after the commit has run (the committed job is then skipped for its cooldown).
WORKER_ENV: Final = {"MINRUNTIME_REQUEUE_INTERVAL_SECONDS": "1"}
SCRAPE_WAIT_SECONDS: Final = 15.0
# The design document's examples (seeds/000), kept in schemas/examples: the config verbatim, the
# Queue with unlimited spec.resources added (without them KAI schedules nothing in the queue).
SEED_QUEUE_YAML: Final = "queue.production.yaml"
SEED_SCHEDULER_CONFIG: Final = "scheduler-config.yaml"
# The demo's processor serves no metrics: a processor already running on this machine may
# hold the default port, and the demo shows the worker's metrics only.
PROCESSOR_ENV: Final = {"MINRUNTIME_PROCESSOR_METRICS_PORT": "0"}


def _events(run: str, now: datetime) -> list[tuple[TopicRole, Any]]:
    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    tree: list[tuple[TopicRole, Any]] = [
        (TopicRole.QUEUES, new_event("queue.upserted", dict(data), time=ago(900)))
        for data in DESIGN_QUEUES
    ]
    jobs = (
        # (name, queue, pods, minAvailable, started seconds ago)
        ("train-a", "leaf3", 1, None, 30),
        ("train-b", "leaf1", 2, None, 600),
        ("elastic", "leaf2", 4, 2, 60),
        ("notebook", "leaf2", 1, None, 900),
        # In the seed's Queue YAML queue: its 20s are long over.
        ("serve", "production", 1, None, 300),
    )
    story = Story("demo", "demo", run, now)
    podgroups: list[tuple[TopicRole, Any]] = []
    for name, queue_name, pods, min_available, started in jobs:
        data: dict[str, Any] = {
            "uid": story.uid(name),
            "name": name,
            "namespace": "demo",
            "queue": queue_name,
            "priority": 50,
            "pods": [{"name": f"{name}-{i}", "gpu": 1} for i in range(pods)],
        }
        if min_available is not None:
            data["subGroups"] = [{"name": "default", "minAvailable": min_available}]
        podgroups += story.running(data, "gpu-node-1", ago(started), ago(started + 5))
    return tree + podgroups


class Story:
    """The events of one demo run about gangs of one-GPU pods (uids ``<prefix>-<run>-<job>``),
    the over-running ones started ``REQUEUE_STARTED_AGO`` ago."""

    def __init__(self, prefix: str, namespace: str, run: str, now: datetime) -> None:
        self.prefix, self.namespace, self.run, self.now = prefix, namespace, run, now
        self.started = now - REQUEUE_STARTED_AGO

    def uid(self, job: str) -> str:
        return f"{self.prefix}-{self.run}-{job}"

    def gang(self, job: str, pool: str, pods: int, priority: int, **extra: Any) -> dict[str, Any]:
        """`podgroup.submitted` data of a gang of one-GPU pods that needs ``pods`` at once."""
        return {
            "uid": self.uid(job),
            "name": job,
            "namespace": self.namespace,
            "queue": extra.pop("queue", "batch"),
            "nodePool": pool,
            "priority": priority,
            "subGroups": [{"name": "default", "minAvailable": extra.pop("min_available", pods)}],
            "pods": [{"name": f"{job}-{i}", "gpu": 1} for i in range(pods)],
            **extra,
        }

    def podgroup(self, change: str, data: dict[str, Any], at: datetime) -> tuple[TopicRole, Any]:
        """A `podgroup.<change>` event."""
        return TopicRole.PODGROUPS, new_event(f"podgroup.{change}", data, time=at)

    def submitted(self, data: dict[str, Any], at: datetime) -> tuple[TopicRole, Any]:
        return self.podgroup("submitted", data, at)

    def running(
        self, data: dict[str, Any], node: str, at: datetime, submitted: datetime | None = None
    ) -> list[tuple[TopicRole, Any]]:
        """Submitted (at ``submitted``, else ``at``), its pods placed on ``node`` at ``at``."""
        pods = [{"name": pod["name"], "node": node} for pod in data["pods"]]
        allocated = {"uid": data["uid"], "pods": pods}
        return [self.submitted(data, submitted or at), self.podgroup("allocated", allocated, at)]

    def node(self, pool: str, gpus: int = 4) -> tuple[TopicRole, Any]:
        data = {"name": f"{pool}-node", "nodePool": pool, "gpu": gpus}
        return TopicRole.NODES, new_event("node.upserted", data, time=self.started)


def _requeue_events(run: str, now: datetime) -> list[tuple[TopicRole, Any]]:
    """The requeue story: a queue, three nodes, three over-running jobs, two contenders."""
    story = Story("demo", "demo", run, now)
    started = story.started
    events: list[tuple[TopicRole, Any]] = [
        (TopicRole.QUEUES, new_event("queue.upserted", LONGRUN_QUEUE, time=started))
    ]
    over = {EXPECTED_RUNTIME_ANNOTATION: EXPECTED_RUNTIME}
    for job, pool, queue, contender in REQUEUE_JOBS:
        victim = story.gang(job, pool, 4, VICTIM_PRIORITY, queue=queue, annotations=over)
        events.append(story.node(pool))
        events += story.running(victim, f"{pool}-node", started, started - timedelta(seconds=5))
        if contender is not None:
            waiting = story.gang(contender, pool, 2, CONTENDER_PRIORITY, queue=queue)
            events.append(story.submitted(waiting, now - timedelta(minutes=1)))
    return events


def _bad_event(now: datetime) -> bytes:
    # A producer's typo: a sign inside a duration. It must become a dead letter, not a crash.
    return (
        b'{"specversion":"1.0","id":"demo-bad-' + uuid.uuid4().hex.encode() + b'",'
        b'"source":"demo","type":"queue.upserted","time":"'
        + now.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
        + b'","subject":"leaf9","data":{"name":"leaf9","reclaimMinRuntime":"1h-30m"}}'
    )


@dataclass(frozen=True)
class _WorkerView:
    """What the demo collected from the requeue worker before stopping it."""

    port: int
    events: tuple[dict[str, Any], ...]
    metrics: str


def run_pipeline_demo(
    console: Console,
    settings: Settings,
    timeout: float = 60.0,
    output_dir: Path = Path("demo-output"),
) -> None:
    """Migrate, run the processor and the requeue worker, produce the story, show the answers."""
    console.rule("[bold]Part 2 — the pipeline: Kafka → processor → PostgreSQL, queried with SQL")
    upgrade(settings)
    engine = engine_from(settings)
    with engine.connect() as conn:
        # Earlier demo runs' jobs are deleted so the tables below show this run only.
        previous = [row.uid for row in run_query(conn, EARLIER_DEMO_PODGROUPS)]
        applied_before = run_query(conn, APPLIED_EVENTS).scalar_one()
    now = datetime.now(UTC)
    run = uuid.uuid4().hex[:4]
    names = topic_names(settings)
    story = _events(run, now)
    requeue_story = _requeue_events(run, now)
    podgroup_events = sum(1 for role, _ in story if role is TopicRole.PODGROUPS)
    events = [
        *[
            (TopicRole.PODGROUPS, new_event("podgroup.deleted", {"uid": uid}, time=now))
            for uid in previous
        ],
        *story,
        *requeue_story,
    ]
    outgoing = [
        Outgoing(names[role], event.subject.encode(), encode_event(event)) for role, event in events
    ]
    outgoing.append(Outgoing(names[TopicRole.QUEUES], b"leaf9", _bad_event(now)))

    with DemoChild.start("processor", PROCESSOR_ENV) as processor:
        console.print(f"Started `minruntime processor` (pid {processor.pid}).")
        applied_before += _apply_seed_manifests(console)
        asyncio.run(send(settings, outgoing))
        console.print(
            f"Produced {len(outgoing)} events: the design tree, "
            f"{podgroup_events} podgroup events, the requeue story ({len(requeue_story)} events: "
            "a queue, three nodes, three over-running jobs, two waiting ones), and one bad event."
        )
        everything = applied_before + len(outgoing) - 1  # all but the dead letter
        wait_for(
            lambda: scalar(engine, APPLIED_EVENTS) >= everything and scalar(engine, DEAD_LETTERS),
            [processor],
            timeout,
            "the processor to apply the demo's events",
        )
        view = _run_worker(console, settings, engine, run, timeout)
    with engine.connect() as conn:
        for title, query in PIPELINE_QUERIES:
            show_query(console, conn, title, query)
        console.rule("[bold]Part 3 — the requeue worker: three over-running jobs, three decisions")
        _describe_requeue_story(console)
        for title, query in requeue_queries(run):
            show_query(console, conn, title, query)
    engine.dispose()
    _show_events(console, settings.topic_requeue_decisions, view.events)
    _show_metrics(console, settings.metrics_host, view)
    console.print("\nThe processor and the requeue worker are stopped.")
    _audit_part(console, run, output_dir)


def _audit_part(console: Console, run: str, output_dir: Path) -> None:
    """Part 4: the operator's questions, answered by the commands an operator types."""
    console.rule("[bold]Part 4 — audit: why, what if, the whole story, and proof")
    output_dir.mkdir(parents=True, exist_ok=True)
    picture = output_dir / f"demo-{run}-contended.svg"
    change = output_dir / f"demo-{run}-longrun-1h.yaml"
    change.write_text(LONGRUN_1H_YAML, encoding="utf-8")
    report = output_dir / f"demo-{run}-simulation.html"
    steps = (
        (
            "Why may nobody in its own queue preempt the protected job yet?",
            ("explain", f"demo-{run}-protected"),
        ),
        (
            "Why may a job in leaf1 not reclaim the elastic job, and how much may it shrink?",
            ("explain", f"demo-{run}-elastic", "--preemptor-queue", "leaf1"),
        ),
        (
            "What if queue longrun protected for 1h instead of 4h? (nothing live is changed)",
            ("whatif", "--queue", "longrun", "--preempt-min-runtime", "1h"),
        ),
        (
            "And over the last two hours of the log? (replayed as recorded and with longrun "
            "at 1h; nothing is written)",
            ("simulate", "--since", "now-2h", "-f", str(change), "--html", str(report)),
        ),
        (
            "The whole story of the requeued job, as a table and as a picture:",
            ("audit", f"demo-{run}-contended", "--plot", str(picture)),
        ),
        (
            "Is the live state exactly what the event log implies? (every projection rebuilt)",
            ("replay", "--verify"),
        ),
    )
    show_commands(console, steps)
    console.print(f"\nThe timeline picture is in {picture}.")
    console.print(
        f"The simulation report is in {report} "
        f"(a screenshot: bash scripts/simulate-screenshot.sh {report})."
    )


def _run_worker(
    console: Console, settings: Settings, engine: sa.Engine, run: str, timeout: float
) -> _WorkerView:
    """Start the worker on the applied story; collect its decisions, events and metrics."""
    topic = settings.topic_requeue_decisions
    offsets = asyncio.run(_end_offsets(kafka_access(settings), topic))
    port = free_port(settings.metrics_host)
    env = {**WORKER_ENV, "MINRUNTIME_WORKER_METRICS_PORT": str(port)}
    with DemoChild.start("requeue-worker", env) as worker:
        console.print(
            f"Started `minruntime requeue-worker` (pid {worker.pid}; a cycle at once, then "
            f"every {WORKER_ENV['MINRUNTIME_REQUEUE_INTERVAL_SECONDS']}s; metrics on port "
            f"{port}) once the processor had applied every event."
        )
        wait_for(
            lambda: scalar(engine, DECIDED_JOBS, pattern=f"demo-{run}-%") >= len(REQUEUE_JOBS),
            [worker],
            timeout,
            "the requeue worker to decide about the demo's jobs",
        )
        events = asyncio.run(
            _read_decisions(kafka_access(settings), topic, offsets, f"demo-{run}-", timeout)
        )
        url = f"http://{settings.metrics_host}:{port}/metrics"
        metrics = _scrape_after_cooldown(url, worker, min(timeout, SCRAPE_WAIT_SECONDS))
    return _WorkerView(port, events, metrics)


def _apply_seed_manifests(console: Console) -> int:
    """Apply the design document's Queue YAML and scheduler config as KAI users write them."""
    examples = project_root() / "schemas" / "examples"
    commands = (
        ("queues", "apply", "-f", str(examples / SEED_QUEUE_YAML)),
        ("config", "apply", "-f", str(examples / SEED_SCHEDULER_CONFIG)),
    )
    console.print(
        "The design document's Kubernetes objects: a Queue with "
        "preemptMinRuntime 20s / reclaimMinRuntime 30s (and unlimited resources, which KAI "
        "needs to schedule in it), and the scheduler config's "
        "minruntime plugin arguments (defaults 10m/10m, lca) for node pool default."
    )
    for command in commands:
        shown = " ".join(("minruntime", *command[:3], f"schemas/examples/{Path(command[3]).name}"))
        console.print(f"[bold]$ {shown}[/]")
        result = run_cli_as_user(*command)
        console.print(result.strip(), markup=False, highlight=False)
    return len(commands)


async def _end_offsets(access: KafkaAccess, topic: str) -> dict[int, int]:
    """Partition → offset of the next record: where this run's decision events will start."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, **access.client_kwargs(), enable_auto_commit=False)
    await start_client(consumer, access)
    try:
        ends = await consumer.end_offsets(list(consumer.assignment()))
    finally:
        await consumer.stop()
    return {partition.partition: offset for partition, offset in ends.items()}


async def _read_decisions(
    access: KafkaAccess, topic: str, offsets: Mapping[int, int], prefix: str, timeout: float
) -> tuple[dict[str, Any], ...]:
    """The decision events about ``prefix``* jobs published since ``offsets``, by subject."""
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(topic, **access.client_kwargs(), enable_auto_commit=False)
    await start_client(consumer, access)
    found: dict[str, dict[str, Any]] = {}
    try:
        for partition in consumer.assignment():
            consumer.seek(partition, offsets.get(partition.partition, 0))
        deadline = time.monotonic() + timeout
        while len(found) < len(REQUEUE_JOBS) and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                for record in records:
                    event = json.loads(record.value)
                    if str(event.get("subject", "")).startswith(prefix):
                        found[event["subject"]] = event
    finally:
        await consumer.stop()
    if len(found) < len(REQUEUE_JOBS):
        raise UserError(f"the decision events did not reach {topic} within {timeout:.0f}s")
    return tuple(found[subject] for subject in sorted(found))


_CYCLES_OK: Final = re.compile(r'^minruntime_requeue_cycles_total\{result="ok"\} (\S+)$', re.M)
_COOLDOWN_SKIPS: Final = re.compile(
    r'^kai_requeue_nomination_skipped_total\{.*reason="cooldown"', re.M
)


def _scrape_after_cooldown(url: str, worker: DemoChild, timeout: float) -> str:
    """The worker's metrics page once a cycle has skipped the committed job for its cooldown.

    A replica that stood by (another one holds the leader lock) runs none: after ``timeout``
    its page is returned as it is.
    """
    deadline = time.monotonic() + timeout
    while True:
        worker.check()
        try:
            with urllib.request.urlopen(url, timeout=10) as response:
                text = str(response.read().decode())
        except OSError as error:
            raise UserError(f"cannot read the requeue worker's metrics at {url}: {error}") from None
        if _COOLDOWN_SKIPS.search(text) or time.monotonic() > deadline:
            return text
        time.sleep(0.25)


def _describe_requeue_story(console: Console) -> None:
    console.print(
        f"Three 4-GPU gangs started {format_duration(REQUEUE_STARTED_AGO)} ago with "
        f"{EXPECTED_RUNTIME_ANNOTATION}={EXPECTED_RUNTIME}, each alone on a full 4-GPU node of "
        "its own node pool, so the expected-runtime nominator nominates all three:\n"
        "  • contended (rq-contention): a higher-priority 2-GPU gang, urgent, waits and "
        "fits only once it is gone → committed\n"
        "  • idle (rq-idle): nothing of higher priority waits → rolled back, it keeps "
        "running\n"
        f"  • protected (rq-protected): its queue longrun has preemptMinRuntime="
        f"{LONGRUN_QUEUE['preemptMinRuntime']}, so urgent-blocked (same queue, higher priority) "
        "may not evict it yet → rolled back, protected"
    )


def show_query(console: Console, conn: sa.Connection, title: str, query: str) -> None:
    console.print(f"\n[bold]{title}[/]")
    console.print(Syntax(query, "sql", theme="ansi_dark", background_color="default"))
    result = run_query(conn, query)
    table = _table(result.keys())
    for row in result:
        table.add_row(*(_cell(value) for value in row))
    console.print(table)


def _table(columns: Iterable[str]) -> Table:
    """A result table whose long values fold onto a second line rather than being cut off."""
    return Table(*(Column(name, overflow="fold") for name in columns))


def _show_events(console: Console, topic: str, events: tuple[dict[str, Any], ...]) -> None:
    """The decision events as the cluster side reads them; the commit in full."""
    console.print(
        f"\n[bold]What the worker published on {topic} (the cluster side evicts on "
        "requeue.committed)[/]"
    )
    table = _table(("type", "id", "subject", "reason"))
    for event in events:
        reason = event["data"].get("reason")
        table.add_row(event["type"], event["id"], event["subject"], _cell(reason))
    console.print(table)
    for event in events:
        if event["type"] == "requeue.committed":
            console.print(f"type: {event['type']}\nid:   {event['id']}\ndata:")
            console.print(JSON.from_data(event["data"]))


def _show_metrics(console: Console, host: str, view: _WorkerView) -> None:
    """The worker's kai_requeue_* series, as a Prometheus scrape shows them."""
    url = f"http://{host}:{view.port}/metrics"
    cycles_ok = _CYCLES_OK.search(view.metrics)
    cycles = int(float(cycles_ok.group(1))) if cycles_ok else 0
    console.print(f"\n[bold]The worker's metrics ({cycles} cycles so far)[/]")
    if not cycles:
        console.print("This replica stood by: another requeue worker holds the leader lock.")
    command = f"curl -s {url} | grep '^kai_requeue_' | grep -v '_created'"
    console.print(Syntax(command, "bash", theme="ansi_dark", background_color="default"))
    for line in view.metrics.splitlines():
        if line.startswith("kai_requeue_") and "_created" not in line:
            console.print(f"  {line}", markup=False)
    console.print(
        "Counters count every evaluation, cycle by cycle; the decision log records only "
        "changes. The committed job is in cooldown now, so the nominator skips it (reason "
        "cooldown); the rolled-back ones are attempted again every cycle; running jobs "
        f"without a valid {EXPECTED_RUNTIME_ANNOTATION} are skipped as invalid_duration."
    )


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]NULL[/]"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%H:%M:%S")
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, bool):
        return "[green]true[/]" if value else "[red]false[/]"
    if isinstance(value, list | tuple):
        # PostgreSQL's text[] as psql shows it.
        return "{" + ",".join(str(item) for item in value) + "}"
    return str(value)
