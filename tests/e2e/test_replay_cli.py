"""`minruntime replay` as an operator runs it, against a pipeline with a processor and a worker.

The story goes through Kafka, the real processor and the real requeue worker; the replay
must rebuild exactly the live state from the event log (and from Kafka), and must point at
rows an operator altered by hand.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from minruntime.core import format_rfc3339
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.cloudevents import allocated, config, event, queue, released, submitted
from tests.e2e.harness import Pipeline, one_error_line, running_pipeline, wait_for

pytestmark = pytest.mark.stack

OVERRUN = {"kai.scheduler/expected-runtime": "1h"}


def _ago(minutes: float) -> str:
    return format_rfc3339(datetime.now(UTC) - timedelta(minutes=minutes))


@pytest.fixture(scope="module")
def story(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pipeline]:
    """Queues, two one-GPU nodes, two over-running jobs and one higher-priority job waiting
    (one requeue committed, one rolled back), a finished run, and one invalid record."""
    workdir = tmp_path_factory.mktemp("replay")
    with running_pipeline(settings, workdir, "replay", requeue_interval_seconds="1") as pipeline:
        start = _ago(120)
        pipeline.produce_events(
            "queues",
            [
                queue("root", preempt="30m", time=start),
                queue("team", parent="root", preempt="10m", time=start),
                config(time=start, defaultRequeueDelay="1m"),
            ],
        )
        # The processor consumes each topic on its own, so the tree could otherwise be applied
        # after the runs end: live and a Kafka rebuild (merged by produce time) would then judge
        # "done" under different trees (docs/audit.md, --from-kafka).
        wait_for(
            lambda: (
                pipeline.scalar(
                    "SELECT (SELECT count(*) FROM minruntime.queues)"
                    " + (SELECT count(*) FROM minruntime.node_pool_configs)"
                )
                == 3
            ),
            60,
            "the processor to apply the queue tree",
        )
        pipeline.produce_events(
            "nodes",
            [
                event("node.upserted", name, {"name": name, "gpu": 1}, start)
                for name in ("node-1", "node-2")
            ],
        )
        pipeline.produce_events(
            "podgroups",
            [
                submitted("busy", "team", ["p0"], priority=50, annotations=OVERRUN, time=start),
                allocated("busy", ["p0"], start, node="node-1"),
                submitted("idle", "team", ["p0"], priority=50, annotations=OVERRUN, time=start),
                allocated("idle", ["p0"], start, node="node-2"),
                submitted("urgent", "team", ["p0"], priority=500, time=_ago(1)),
                submitted("done", "team", ["p0"], priority=50, time=start),
                allocated("done", ["p0"], start, node="node-2"),
                released("done", time=_ago(60), reason="completed"),
            ],
        )
        pipeline.produce("podgroups", [(b"bad", b"{not an event")])
        wait_for(
            lambda: pipeline.scalar("SELECT count(*) FROM minruntime.dead_letters") == 1,
            60,
            "the processor to apply the story",
        )
        pipeline.start_worker("w")
        wait_for(
            lambda: (
                pipeline.scalar(
                    "SELECT count(DISTINCT uid) FROM minruntime.requeue_decisions"
                    " WHERE uid IN ('busy', 'idle')"
                )
                == 2
            ),
            60,
            "the worker to decide about busy and idle",
        )
        for worker in pipeline.workers:
            worker.stop()
        yield pipeline


@pytest.mark.parametrize("jobs", [(), ("--jobs", "1"), ("--jobs", "3")])
def test_replay_verify_passes_on_the_live_state(story: Pipeline, jobs: tuple[str, ...]) -> None:
    outcomes = sorted(
        row[0] for row in story.query("SELECT outcome FROM minruntime.requeue_decisions")
    )
    assert outcomes == ["committed", "rolled_back"]  # one of busy/idle makes room for urgent
    result = story.replay("--verify", *jobs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verify: the live state is exactly what the event log implies" in result.stdout
    assert "2 requeue decisions" in result.stdout
    # A short log is replayed by one process unless --jobs says otherwise.
    assert ("3 processes" in result.stdout) == ("3" in jobs)
    # The progress bar goes to stderr, the report to stdout.
    assert "events/s" in result.stderr


def test_replay_verify_json_reports_every_table_equal(story: Pipeline) -> None:
    result = story.replay("--verify", "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["source"] == "event_log"
    assert report["rejected"] == []
    assert report["decisions"] >= 2
    tables = {check["table"]: check for check in report["verify"]}
    assert all(check["equal"] for check in tables.values())
    assert tables["podgroup_state"]["live_rows"] == 4


def test_replay_from_kafka_rebuilds_the_same_state(story: Pipeline) -> None:
    result = story.replay("--from-kafka", "--verify", "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    report = json.loads(result.stdout)
    assert report["source"] == "kafka"
    assert report["dead_lettered"] == 1  # the invalid record, rejected again
    assert all(check["equal"] for check in report["verify"])


def test_into_keeps_an_as_of_schema_to_query_and_drop(story: Pipeline) -> None:
    result = story.replay("--into", "replay_e2e")
    assert result.returncode == 0, result.stderr
    assert "kept as schema replay_e2e" in result.stdout
    try:
        live = story.query("SELECT uid, protected_until FROM minruntime.preempt_protection")
        kept = story.query("SELECT uid, protected_until FROM replay_e2e.preempt_protection(now())")
        assert sorted(kept) == sorted(live)
        again = story.replay("--into", "replay_e2e")
        assert again.returncode == 2
        assert again.stderr.strip().splitlines() == [
            "minruntime: error: schema replay_e2e already exists; choose another name or drop "
            "it (minruntime replay --drop replay_e2e)"
        ]
    finally:
        dropped = story.replay("--drop", "replay_e2e")
    assert dropped.stdout.strip() == "dropped shadow replay_e2e"
    assert story.scalar("SELECT count(*) FROM pg_namespace WHERE nspname LIKE 'replay_e2e%'") == 0


def test_until_before_the_story_replays_nothing(story: Pipeline) -> None:
    first = story.scalar("SELECT min(applied_at) FROM minruntime.event_log")
    until = format_rfc3339(first - timedelta(seconds=1))
    result = story.replay("--until", until, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["events"], report["decisions"]) == (0, 0)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--until", "yesterday"), "--until 'yesterday'"),
        (("--verify", "--until", "now-1h"), "--verify compares with the live state now"),
        (("--into", "Bad-Name"), "schema name 'Bad-Name' must be lower-case"),
        (("--into", "kept", "--jobs", "2"), "it cannot take --into or --from-kafka"),
        (("--jobs", "0"), "--jobs"),
    ],
)
def test_mistakes_are_one_line(story: Pipeline, args: tuple[str, ...], message: str) -> None:
    assert message in one_error_line(story.replay(*args))


def test_a_row_altered_by_hand_fails_verify_and_is_listed(story: Pipeline, tmp_path: Path) -> None:
    with story.connect() as conn:
        conn.execute("UPDATE minruntime_state.podgroup_state SET priority = 7 WHERE uid = 'idle'")
        conn.commit()
    try:
        result = story.replay("--verify")
        assert result.returncode == 1
        assert result.stderr.strip().splitlines()[-1] == (
            "minruntime: error: replayed state differs from the live state in: podgroup_state"
        )
        assert "podgroup_state idle" in result.stdout
        assert "1 rows differ" in result.stdout
    finally:
        with story.connect() as conn:
            conn.execute(
                "UPDATE minruntime_state.podgroup_state SET priority = 50 WHERE uid = 'idle'"
            )
            conn.commit()
    assert story.replay("--verify").returncode == 0
