"""Stored offsets belong to one life of a topic (issue 12, finding 6), with real processes.

Before: when Kafka's data was replaced under a kept database (a topic deleted and recreated,
a new cluster), the processor skipped every new record below the stored offset as "already
applied", silently. Now it refuses the topic loudly (ERROR line naming it, a gauge, `offsets
show`), keeps consuming the other topics, and after `offsets rebaseline --from-start` applies
the new records exactly once; `replay --verify` (in `Pipeline.drop`) stays equal.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.topic_admin import ensure_topics, topic_specs
from minruntime_dev.stack import StackStatus
from minruntime_dev.stack.kafka import KafkaNode
from tests import cloudevents as ce
from tests.conftest import free_port_pair, free_ports, run_cli
from tests.e2e.harness import Pipeline, wait_for

pytestmark = pytest.mark.stack


def _node(name: str, gpu: int = 8) -> dict[str, Any]:
    return ce.event(
        "node.upserted", name, {"name": name, "nodePool": "default", "gpu": gpu}, ce.at(0)
    )


def _queues(prefix: str) -> list[dict[str, Any]]:
    return [ce.queue(f"{prefix}-{i}", reclaim="60s") for i in range(8)]


def _applied_ids(pipeline: Pipeline, ids: list[str]) -> int:
    return int(
        pipeline.scalar("SELECT count(*) FROM minruntime.event_log WHERE id = ANY(%s)", (ids,))
    )


def _refused_gauge(port: int, role: str) -> float | None:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for line in text.splitlines():
        if line.startswith(f'minruntime_topic_refused{{role="{role}"}}'):
            return float(line.split()[-1])
    return None


def _cli(pipeline: Pipeline, *args: str) -> Any:
    return run_cli(*args, env=pipeline.env)


async def _recreate(bootstrap: str, settings: Settings, topic: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.delete_topics([topic])
    finally:
        await admin.close()

    async def gone() -> None:
        while True:
            admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
            await admin.start()
            try:
                if topic not in await admin.list_topics():
                    return
            finally:
                await admin.close()
            await asyncio.sleep(0.2)

    await asyncio.wait_for(gone(), 60)
    await ensure_topics(kafka_access(settings), topic_specs(settings))


def _refusal_and_rebaseline(
    pipeline: Pipeline,
    port: int,
    role: str,
    new_ids: list[str],
    others: Mapping[str, list[str]],
    *,
    restart: bool = False,
) -> None:
    """The after-picture: refused loudly, other topics consumed, re-baseline applies once.

    With ``restart``, the refused processor is stopped (SIGTERM, which must not hang on the
    held batch) and re-baselined while stopped; else it resumes in place.
    """
    topic = pipeline.topics[role]
    wait_for(
        lambda: _applied_ids(pipeline, new_ids) > 0 or f"topic {topic!r}" in pipeline.log_tail(200),
        90,
        f"either the new {role} events applied or the topic refused\n{pipeline.log_tail()}",
    )
    # Nothing of the new life was skipped as "already applied": it was refused.
    assert _applied_ids(pipeline, new_ids) == 0, pipeline.log_tail()
    refusal = [line for line in pipeline.log_tail(400).splitlines() if f"topic {topic!r}" in line]
    assert any("ERROR" in line and "rebaseline" in line for line in refusal), refusal
    for other_role, ids in others.items():
        wait_for(
            lambda ids=ids: _applied_ids(pipeline, ids) == len(ids),  # type: ignore[misc]
            60,
            f"the {other_role} events applied while {role} is refused\n{pipeline.log_tail()}",
        )
    assert _refused_gauge(port, role) == 1.0
    shown = _cli(pipeline, "offsets", "show")
    assert shown.returncode == 0, shown.stderr
    assert f"{topic}: REFUSED" in shown.stdout, shown.stdout

    if restart:
        assert pipeline.kill(signal.SIGTERM) == 0, pipeline.log_tail()
        assert "its batch stays unread" in pipeline.log_tail(20)
    done = _cli(pipeline, "offsets", "rebaseline", topic, "--from-start")
    assert done.returncode == 0, done.stderr
    if restart:
        pipeline.start()
    wait_for(
        lambda: _applied_ids(pipeline, new_ids) == len(new_ids),
        60,
        f"the new {role} events applied after the re-baseline\n{pipeline.log_tail()}",
    )
    wait_for(lambda: _refused_gauge(port, role) == 0.0, 30, "the refusal gauge back to 0")
    pipeline.check_alive()
    # Exactly once: each event once in the log, and the first life's events not again.
    assert (
        pipeline.scalar("SELECT count(*) - count(DISTINCT (source, id)) FROM minruntime.event_log")
        == 0
    )
    again = _cli(pipeline, "offsets", "rebaseline", topic, "--from-start")
    assert again.returncode == 2
    assert "nothing to re-baseline" in again.stderr
    assert "\n" not in again.stderr.strip()


@pytest.fixture
def pipeline(
    stack: StackStatus, settings: Settings, tmp_path: Path
) -> Iterator[tuple[Pipeline, int]]:
    port = free_ports()
    running = Pipeline(
        settings, tmp_path, "life", overrides={"processor_metrics_port": str(port)}
    ).create()
    running.env["MINRUNTIME_TOPIC_RECHECK_SECONDS"] = "1"
    try:
        yield running, port
    finally:
        running.drop()


def test_a_recreated_topic_is_refused_not_skipped_and_rebaselined(
    pipeline: tuple[Pipeline, int], settings: Settings
) -> None:
    running, port = pipeline
    running.start()
    first = _queues("first")
    running.produce_events("queues", first)
    running.produce_events("nodes", [_node("n-first")])
    wait_for(
        lambda: _applied_ids(running, [e["id"] for e in first]) == len(first),
        60,
        f"the first life's events applied\n{running.log_tail()}",
    )
    running.stop()

    asyncio.run(_recreate(settings.kafka_bootstrap, running.settings(), running.topics["queues"]))
    second = _queues("second")  # offsets 0..7 again, below the stored next offset 8
    running.produce_events("queues", second)
    nodes = [_node("n-second")]
    running.produce_events("nodes", nodes)
    running.start()
    _refusal_and_rebaseline(
        running,
        port,
        "queues",
        [e["id"] for e in second],
        {"nodes": [e["id"] for e in nodes]},
        restart=True,
    )


def test_kafka_data_replaced_under_a_kept_database(
    stack: StackStatus, settings: Settings, tmp_path: Path
) -> None:
    """The issue's way: a private broker whose whole data directory is replaced."""
    kafka_port = free_port_pair()
    private = settings.model_copy(update={"kafka_bootstrap": f"127.0.0.1:{kafka_port}"})
    # Its own directory (and ports): the shared stack's broker and tests are not disturbed.
    broker = KafkaNode(
        private.model_copy(update={"stack_dir": tmp_path / "stack", "kafka_heap": "384m"})
    )
    metrics_port = free_ports()
    running = Pipeline(
        private, tmp_path, "wipe", overrides={"processor_metrics_port": str(metrics_port)}
    )
    running.env["MINRUNTIME_TOPIC_RECHECK_SECONDS"] = "1"
    try:
        broker.start()
        broker.wait_ready(180)
        running.create().start()
        first = _queues("before")
        running.produce_events("queues", first)
        wait_for(
            lambda: _applied_ids(running, [e["id"] for e in first]) == len(first),
            60,
            f"the first cluster's events applied\n{running.log_tail()}",
        )
        running.stop()
        broker.stop()
        shutil.rmtree(broker.data_dir)  # Kafka's data replaced; PostgreSQL keeps its offsets
        broker.start()
        broker.wait_ready(180)
        running.start()
        second = _queues("after")
        running.produce_events("queues", second)
        nodes = [_node("n-after")]
        running.produce_events("nodes", nodes)
        _refusal_and_rebaseline(
            running,
            metrics_port,
            "queues",
            [e["id"] for e in second],
            {"nodes": [e["id"] for e in nodes]},
        )
    except BaseException:
        # The first failure is the one to see: a broker that did not come back also makes
        # dropping the topics fail, which would replace it.
        with contextlib.suppress(Exception):
            running.drop(verify=False)
        raise
    else:
        running.drop()
    finally:
        broker.stop()
