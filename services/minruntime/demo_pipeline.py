"""Part 2 of `minruntime demo`: the design tree and a few jobs through the real pipeline.

Events go to Kafka as a producer would send them, the real `minruntime processor` applies
them to PostgreSQL, and the answers come from the SQL a user would type (shown with it).
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from rich.console import Console
from rich.syntax import Syntax
from rich.table import Table

from minruntime.core import format_duration
from minruntime.errors import UserError
from minruntime.events import encode_event, new_event
from minruntime.produce import Outgoing, send
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime.stream.topics import TopicRole, topic_names

QUERIES: tuple[tuple[str, str], ...] = (
    (
        "Who is protected from preemption right now (preemptor in the victim's own queue)?",
        "SELECT uid, queue, min_runtime, resolved_from, protected_until, is_protected,\n"
        "       evictable_pods\n"
        "FROM minruntime.preempt_protection\nORDER BY uid;",
    ),
    (
        "Who is protected from a reclaim by a job in queue leaf1?",
        "SELECT uid, queue, min_runtime, resolved_from, protected_until, is_protected\n"
        "FROM minruntime.reclaim_protection('leaf1')\nORDER BY uid;",
    ),
    (
        "May a job in leaf1 reclaim resources from each job now?",
        "SELECT uid, minruntime.is_protected(uid, 'leaf1') AS protected_from_leaf1\n"
        "FROM minruntime.podgroups WHERE status = 'running'\nORDER BY uid;",
    ),
    (
        "What could not be applied, and why?",
        "SELECT topic, kind, message\nFROM minruntime.dead_letters\nORDER BY at DESC LIMIT 3;",
    ),
)


def _events(run: str, now: datetime) -> list[tuple[TopicRole, Any]]:
    def ago(seconds: float) -> datetime:
        return now - timedelta(seconds=seconds)

    queue = TopicRole.QUEUES
    tree: list[tuple[TopicRole, Any]] = [
        (queue, new_event("queue.upserted", {"name": "A"}, time=ago(900))),
        *[
            (queue, new_event("queue.upserted", data, time=ago(900)))
            for data in (
                {
                    "name": "B",
                    "parentQueue": "A",
                    "preemptMinRuntime": "600s",
                    "reclaimMinRuntime": "600s",
                },
                {"name": "C", "parentQueue": "B"},
                {"name": "D", "parentQueue": "B", "reclaimMinRuntime": "60s"},
                {
                    "name": "leaf1",
                    "parentQueue": "C",
                    "preemptMinRuntime": "300s",
                    "reclaimMinRuntime": "0s",
                },
                {"name": "leaf2", "parentQueue": "C", "reclaimMinRuntime": "180s"},
                {"name": "leaf3", "parentQueue": "D"},
            )
        ],
        (queue, new_event("config.updated", {"nodePool": "default"}, time=ago(900))),
    ]
    jobs = (
        # (name, queue, pods, minAvailable, started seconds ago)
        ("train-a", "leaf3", 1, None, 30),
        ("train-b", "leaf1", 2, None, 600),
        ("elastic", "leaf2", 4, 2, 60),
        ("notebook", "leaf2", 1, None, 900),
    )
    podgroups: list[tuple[TopicRole, Any]] = []
    for name, queue_name, pods, min_available, started in jobs:
        uid = f"demo-{run}-{name}"
        data: dict[str, Any] = {
            "uid": uid,
            "name": name,
            "namespace": "demo",
            "queue": queue_name,
            "priority": 50,
            "pods": [{"name": f"{name}-{i}", "gpu": 1} for i in range(pods)],
        }
        if min_available is not None:
            data["subGroups"] = [{"name": "default", "minAvailable": min_available}]
        allocated = {
            "uid": uid,
            "pods": [{"name": f"{name}-{i}", "node": "gpu-node-1"} for i in range(pods)],
        }
        podgroups += [
            (TopicRole.PODGROUPS, new_event("podgroup.submitted", data, time=ago(started + 5))),
            (TopicRole.PODGROUPS, new_event("podgroup.allocated", allocated, time=ago(started))),
        ]
    return tree + podgroups


def _bad_event(now: datetime) -> bytes:
    # A producer's typo: a sign inside a duration. It must become a dead letter, not a crash.
    return (
        b'{"specversion":"1.0","id":"demo-bad-' + uuid.uuid4().hex.encode() + b'",'
        b'"source":"demo","type":"queue.upserted","time":"'
        + now.strftime("%Y-%m-%dT%H:%M:%SZ").encode()
        + b'","subject":"leaf9","data":{"name":"leaf9","reclaimMinRuntime":"1h-30m"}}'
    )


def run_pipeline_demo(console: Console, settings: Settings, timeout: float = 60.0) -> None:
    """Migrate, run the processor, produce the story, and show the SQL answers."""
    console.rule("[bold]Part 2 — the pipeline: Kafka → processor → PostgreSQL, queried with SQL")
    upgrade(settings)
    engine = engine_from(settings)
    with engine.connect() as conn:
        # Earlier demo runs' jobs are deleted so the tables below show this run only.
        previous = [
            row.uid
            for row in conn.execute(
                sa.text(
                    "SELECT uid FROM minruntime.podgroups"
                    " WHERE namespace = 'demo' AND status <> 'deleted'"
                )
            )
        ]
        applied_before = conn.execute(
            sa.text("SELECT count(*) FROM minruntime.event_log")
        ).scalar_one()
    now = datetime.now(UTC)
    run = uuid.uuid4().hex[:4]
    names = topic_names(settings)
    story = _events(run, now)
    podgroup_events = sum(1 for role, _ in story if role is TopicRole.PODGROUPS)
    events = [
        *[
            (TopicRole.PODGROUPS, new_event("podgroup.deleted", {"uid": uid}, time=now))
            for uid in previous
        ],
        *story,
    ]
    outgoing = [
        Outgoing(names[role], event.subject.encode(), encode_event(event)) for role, event in events
    ]
    outgoing.append(Outgoing(names[TopicRole.QUEUES], b"leaf9", _bad_event(now)))

    processor = subprocess.Popen(
        [sys.executable, "-m", "minruntime.cli", "processor"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        console.print(f"Started `minruntime processor` (pid {processor.pid}).")
        asyncio.run(send(settings, outgoing))
        console.print(
            f"Produced {len(outgoing)} events: the design tree, a node-pool config, "
            f"{podgroup_events} podgroup events, and one bad event."
        )
        _wait_applied(engine, applied_before + len(outgoing) - 1, processor, timeout)
    finally:
        processor.terminate()
        try:
            processor.wait(30)
        except subprocess.TimeoutExpired:
            processor.kill()
    with engine.connect() as conn:
        for title, query in QUERIES:
            _show(console, conn, title, query)
    engine.dispose()


def _wait_applied(
    engine: sa.Engine, count: int, processor: subprocess.Popen[bytes], timeout: float
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if processor.poll() is not None:
            raise UserError(f"the processor exited with status {processor.returncode}")
        with engine.connect() as conn:
            applied = conn.execute(
                sa.text("SELECT count(*) FROM minruntime.event_log")
            ).scalar_one()
            dead = conn.execute(
                sa.text("SELECT count(*) FROM minruntime.dead_letters")
            ).scalar_one()
        if applied >= count and dead:
            return
        time.sleep(0.2)
    raise UserError(f"the processor did not apply the demo's events within {timeout:.0f}s")


def _show(console: Console, conn: sa.Connection, title: str, query: str) -> None:
    console.print(f"\n[bold]{title}[/]")
    console.print(Syntax(query, "sql", theme="ansi_dark", background_color="default"))
    result = conn.execute(sa.text(query))
    table = Table(*result.keys())
    for row in result:
        table.add_row(*(_cell(value) for value in row))
    console.print(table)


def _cell(value: Any) -> str:
    if value is None:
        return "[dim]NULL[/]"
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%H:%M:%S")
    if isinstance(value, timedelta):
        return format_duration(value)
    if isinstance(value, bool):
        return "[green]true[/]" if value else "[red]false[/]"
    return str(value)
