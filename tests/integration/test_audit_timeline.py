"""`minruntime audit`'s story of a podgroup, told from a real event log on a real PostgreSQL.

The events go in through ``apply_batch`` and the requeue decisions through ``run_cycle``, as
the processor and the worker write them; the story is then read back from the log alone.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.timeline import UnknownPodGroupError, podgroup_story
from minruntime.audit.timeline_model import Change, Decision, Nomination, Story, WindowSpan
from minruntime.audit.timeline_plot import write_plot
from minruntime.store.unit import Units
from tests.cloudevents import (
    T0,
    allocated,
    config,
    deleted,
    node,
    nominated,
    queue,
    released,
    submitted,
)
from tests.integration.helpers import OVERRUN, Feed, cycle, gang, rows

UID = "pg-audit-1"
ROLLBACK_AT = T0 + timedelta(hours=3)
COMMIT_AT = ROLLBACK_AT + timedelta(seconds=10)


def minutes(count: float) -> datetime:
    return T0 + timedelta(minutes=count)


@pytest.fixture
def story(engine: sa.Engine, feed: Feed) -> Story:
    """Two runs; the queue's window changes during the first; a nomination; two decisions."""
    feed.send(queue("team", preempt="30m", time=minutes(-60)), node("node-1", gpu=8))
    feed.send(submitted(UID, "team", 8, priority=50, annotations=OVERRUN, time=minutes(-5)))
    feed.send(allocated(UID, 8, time=T0))
    feed.send(queue("team", preempt="45m", time=minutes(10)))
    # Reclaim only: the preempt window stays; no row.
    feed.send(queue("team", preempt="45m", reclaim="2h", time=minutes(20)))
    feed.send(released(UID, time=minutes(50), reason="completed"))
    # Between runs: nothing to protect, no row; the next run starts under 1h.
    feed.send(queue("team", preempt="1h", reclaim="2h", time=minutes(55)))
    feed.send(allocated(UID, 8, time=minutes(60)))
    feed.send(nominated(UID, "proportion", "over its quota", time=minutes(70)))
    cycle(engine, ROLLBACK_AT)  # nothing of higher priority pending
    feed.send(gang("hi", 4, priority=100))
    cycle(engine, COMMIT_AT)  # "hi" fits once it is gone
    feed.send(released(UID, time=COMMIT_AT + timedelta(minutes=1), reason="evicted"))
    return podgroup_story(Units(engine), UID)


def changes(story: Story, seq_index: int) -> dict[str, tuple[Any, Any]]:
    return {c.field: (c.before, c.after) for c in story.rows[seq_index].changes}


def test_the_story_has_one_row_per_event_in_log_order(story: Story) -> None:
    assert [(row.type, row.kind, row.run) for row in story.rows] == [
        ("podgroup.submitted", "podgroup", None),
        ("podgroup.allocated", "podgroup", 1),
        ("queue.upserted", "window", 1),
        ("podgroup.released", "podgroup", 1),
        ("podgroup.allocated", "podgroup", 2),
        ("requeue.nominated", "nomination", 2),
        ("requeue.rolled-back", "decision", 2),
        ("requeue.committed", "decision", 2),
        ("podgroup.released", "podgroup", 2),
    ]
    seqs = [row.seq for row in story.rows]
    assert seqs == sorted(seqs)
    # Its second run was evicted: pending again, waiting to be scheduled (migration 0017).
    assert (story.uid, story.queue, story.node_pool, story.priority, story.status) == (
        UID,
        "team",
        "default",
        50,
        "pending",
    )
    # Only its own 8 events and the 4 queue events were replayed (not "hi", not the node).
    assert story.replayed == 8 + 4


def test_each_row_has_the_state_and_window_right_after_its_event(story: Story) -> None:
    submitted_row, start, moved, end, restart = story.rows[:5]
    assert (submitted_row.status, submitted_row.window) == ("pending", None)
    assert submitted_row.summary == "submitted to queue team (pool default, priority 50, 8 pods)"
    assert (start.status, start.running_pods, start.run_start) == ("running", 8, T0)
    assert changes(story, 1)["status"] == ("pending", "running")
    assert changes(story, 1)["run_start"] == (None, T0)
    assert start.window is not None
    assert (start.window.min_runtime, start.window.resolved_from) == (
        timedelta(minutes=30),
        "team",
    )
    assert (start.window.protected_until, start.window.protected) == (minutes(30), True)
    # The queue change moved the window of the run in progress.
    assert moved.summary == "window changed: queue team preemptMinRuntime 30m→45m"
    assert moved.time == minutes(10)
    assert moved.window is not None
    assert (moved.window.min_runtime, moved.window.protected_until) == (
        timedelta(minutes=45),
        minutes(45),
    )
    assert changes(story, 2) == {
        "min_runtime": (timedelta(minutes=30), timedelta(minutes=45)),
        "protected_until": (minutes(30), minutes(45)),
    }
    assert end.summary == "released all pods (completed)"
    assert (end.status, end.running_pods, end.window) == ("finished", 0, None)
    assert restart.window is not None
    assert (restart.window.min_runtime, restart.window.protected_until) == (
        timedelta(hours=1),
        minutes(120),
    )


def test_nominations_and_decisions_carry_who_why_and_the_cooldown(story: Story) -> None:
    nomination, rollback, commit, eviction = story.rows[5:]
    assert nomination.nomination == Nomination("proportion", "over its quota")
    assert changes(story, 5)["nominations"] == ([], ["proportion"])
    assert rollback.decision is not None
    assert rollback.decision.outcome == "rolled_back"
    assert rollback.decision.reason == "no_higher_priority_pending"
    assert rollback.decision.nominated_by == ("expectedruntime", "proportion")
    assert rollback.time == ROLLBACK_AT
    assert rollback.window is not None
    assert rollback.window.protected is False
    not_before = COMMIT_AT + timedelta(minutes=5)
    assert commit.decision is not None
    assert commit.decision == Decision(
        decision_id=commit.decision.decision_id,
        outcome="committed",
        reason=None,
        nominated_by=("expectedruntime", "proportion"),
        beneficiaries=("hi",),
        requeue_not_before=not_before,
        delay_problem=None,
        run_start=minutes(60),
    )
    assert "hi fit once it is gone" in commit.summary
    assert {
        name: value
        for name, value in changes(story, 7).items()
        if name in ("requeue_not_before", "awaiting_release", "nominations")
    } == {
        "requeue_not_before": (None, not_before),
        "awaiting_release": (False, True),
        "nominations": (["proportion"], []),
    }
    assert Change("awaiting_release", True, False) in eviction.changes


def test_runs_have_their_ends_and_the_windows_in_force(story: Story) -> None:
    first, second = story.runs
    assert (first.number, first.start, first.end, first.ended_by) == (
        1,
        T0,
        minutes(50),
        "released (completed)",
    )
    assert first.windows == (
        WindowSpan(T0, timedelta(minutes=30), "team", minutes(30)),
        WindowSpan(minutes(10), timedelta(minutes=45), "team", minutes(45)),
    )
    assert first.protected_until == minutes(45)
    assert (second.start, second.end, second.ended_by) == (
        minutes(60),
        COMMIT_AT + timedelta(minutes=1),
        "requeued",
    )
    assert second.windows == (WindowSpan(minutes(60), timedelta(hours=1), "team", minutes(120)),)


def test_the_decision_ids_are_the_logged_ones(engine: sa.Engine, story: Story) -> None:
    logged = [
        r.id
        for r in rows(
            engine,
            "SELECT id FROM minruntime.event_log WHERE subject = :uid AND partition IS NULL"
            " ORDER BY seq",
            uid=UID,
        )
    ]
    assert [row.decision.decision_id for row in story.rows if row.decision] == logged


def test_an_unknown_uid_is_one_clear_error(engine: sa.Engine, story: Story) -> None:
    # "team" is a queue's subject in the log, not a podgroup.
    for uid in ("no-such-podgroup", "team"):
        with pytest.raises(UnknownPodGroupError, match=f"no podgroup with uid '{uid}'"):
            podgroup_story(Units(engine), uid)


def test_the_audit_leaves_nothing_behind(engine: sa.Engine, story: Story) -> None:
    schemas = rows(
        engine, "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'minruntime_audit%'"
    )
    assert schemas == []


def test_the_png_timeline_is_a_real_picture(story: Story, tmp_path: Path) -> None:
    path = tmp_path / "story.png"
    write_plot(story, path)
    data = path.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    assert len(data) > 20_000


def test_the_svg_timeline_keeps_its_labels_as_text(story: Story, tmp_path: Path) -> None:
    path = tmp_path / "story.svg"
    write_plot(story, path)
    root = ET.parse(path).getroot()
    assert root.tag.endswith("svg")
    text = " ".join(
        "".join(element.itertext()) for element in root.iter() if element.tag.endswith("text")
    )
    assert UID in text
    for label in ("committed", "rolled back", "no_higher_priority_pending", "proportion"):
        assert label in text, label
    assert "requeue-not-before" in text
    assert "preemptMinRuntime 30m→45m" in text


def test_a_config_change_moves_a_default_window_and_a_deletion_ends_the_run(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    feed.send(queue("plain"), config(defaultPreemptMinRuntime="10m"))
    feed.send(submitted("u2", "plain", 1), allocated("u2", 1, time=T0))
    feed.send(config(defaultPreemptMinRuntime="20m"))
    feed.send(deleted("u2", time=minutes(30)))

    story = podgroup_story(Units(engine), "u2")

    assert [row.kind for row in story.rows] == ["podgroup", "podgroup", "window", "podgroup"]
    start, moved = story.rows[1], story.rows[2]
    assert start.window is not None
    assert (start.window.min_runtime, start.window.resolved_from) == (timedelta(minutes=10), None)
    assert moved.summary == "window changed: config default defaultPreemptMinRuntime 10m→20m"
    assert moved.window is not None
    assert moved.window.protected_until == minutes(20)
    [run] = story.runs
    assert (run.end, run.ended_by) == (minutes(30), "deleted")
    assert story.status == "deleted"
