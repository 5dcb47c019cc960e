"""The pipeline's commands as a user runs them: produce, migrate, processor."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conftest import ROOT, run_cli
from tests.e2e.harness import Pipeline, one_error_line

pytestmark = pytest.mark.stack

HAND_WRITTEN_TREE = """\
# The design document's tree, written by hand: no id, time or subject.
type: queue.upserted
data: {name: A}
---
- type: queue.upserted
  data: {name: B, parentQueue: A, preemptMinRuntime: 600s, reclaimMinRuntime: 600s}
- type: queue.upserted
  data: {name: C, parentQueue: B}
---
type: config.updated
data: {nodePool: default, reclaimResolveMethod: queue}
"""


@pytest.fixture
def topics_only(stack: StackStatus, settings: Settings, tmp_path: Path) -> Iterator[Pipeline]:
    """Private topic names (no processor, no database)."""
    pipeline = Pipeline(settings, tmp_path, "cli")
    try:
        yield pipeline
    finally:
        pipeline.drop()


def test_produce_yaml_fills_the_envelope_and_routes_by_type(
    topics_only: Pipeline, tmp_path: Path
) -> None:
    events = tmp_path / "tree.yaml"
    events.write_text(HAND_WRITTEN_TREE)
    result = run_cli("produce", str(events), env=topics_only.env)
    assert result.returncode == 0, result.stderr
    assert f"sent 4 events ({topics_only.topics['queues']}: 4)" in result.stdout
    records = topics_only.consume("queues", 4)
    assert [r.key for r in records] == [b"A", b"B", b"C", b"config/default"]
    bodies = [json.loads(r.value) for r in records]
    assert all(b["specversion"] == "1.0" and b["source"] == "minruntime-cli" for b in bodies)
    assert len({b["id"] for b in bodies}) == 4
    assert bodies[1]["data"]["preemptMinRuntime"] == "600s"


def test_produce_sends_the_schema_examples(topics_only: Pipeline) -> None:
    examples = sorted(
        str(p)
        for p in (ROOT / "schemas" / "examples").glob("*.json*")
        if not p.name.startswith(
            ("requeue.committed", "requeue.rolled", "requeue.skipped", "protection.expired")
        )
        and p.name != "dead-letter.json"
    )
    result = run_cli("produce", *examples, env=topics_only.env)
    assert result.returncode == 0, result.stderr
    assert "sent " in result.stdout
    assert topics_only.topics["podgroups"] in result.stdout


def test_one_invalid_event_sends_nothing(topics_only: Pipeline, tmp_path: Path) -> None:
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"type": "queue.upserted", "data": {"name": "ok"}}) + "\n")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        json.dumps({"type": "queue.upserted", "data": {"name": "x"}})
        + "\n"
        + json.dumps({"type": "queue.upserted", "data": {"name": "y", "reclaimMinRuntime": "5"}})
        + "\n"
    )
    result = run_cli("produce", str(good), str(bad), env=topics_only.env)
    assert f"{bad}:2: bad_duration: data.reclaimMinRuntime" in one_error_line(result)
    # Validation happens before anything touches Kafka: not even the topic was created.
    assert topics_only.topics["queues"] not in topics_only.existing_topics()


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{not json", "not valid JSON"),
        ('{"type": "queue.renamed", "data": {}}', "unknown input event type 'queue.renamed'"),
        ('["just", "strings"]', "an event must be an object"),
    ],
)
def test_produce_errors_are_one_line(
    topics_only: Pipeline, tmp_path: Path, content: str, fragment: str
) -> None:
    path = tmp_path / "events.json"
    path.write_text(content)
    result = run_cli("produce", str(path), env=topics_only.env)
    assert fragment in one_error_line(result)


def test_missing_file_is_one_line(topics_only: Pipeline, tmp_path: Path) -> None:
    result = run_cli("produce", str(tmp_path / "nope.yaml"), env=topics_only.env)
    assert "cannot read" in one_error_line(result)


def test_processor_refuses_an_unmigrated_database_then_migrate_fixes_it(
    unmigrated: str,
) -> None:
    env = {"MINRUNTIME_DATABASE_URL": unmigrated}
    refused = run_cli("processor", env=env, timeout=60)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines() == [
        "minruntime: error: the database schema is not up to date: run `minruntime migrate`"
    ]
    migrated = run_cli("migrate", env=env)
    assert migrated.returncode == 0, migrated.stderr
    assert "database migrated to head" in migrated.stdout
    again = run_cli("migrate", env=env)
    assert again.returncode == 0, again.stderr
