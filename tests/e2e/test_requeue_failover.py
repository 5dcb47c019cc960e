"""Requeue-worker replicas and crashes: one replica acts, nothing is lost or decided twice.

Each test has its own pipeline (database, topics, processor) and its own worker replicas;
the scenes, topic reader and metric helpers are `test_requeue_worker`'s.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conftest import free_port_pair
from tests.e2e.harness import Pipeline, Worker, running_pipeline, wait_for
from tests.e2e.test_requeue_worker import (
    ACTIVE,
    CYCLES_OK,
    OVERRUN,
    Scene,
    committed_for,
    decision_ids,
    decisions,
    no_cooldown,
    published,
    recorded,
    rolled_back_for,
    try_scrape,
    unpublished,
    wait_decisions,
    wait_published,
)

pytestmark = pytest.mark.stack

PORT = "MINRUNTIME_WORKER_METRICS_PORT"


@pytest.fixture
def pipeline(stack: StackStatus, settings: Settings, tmp_path: Path) -> Iterator[Pipeline]:
    """A private pipeline whose replicas run a cycle a second."""
    with running_pipeline(settings, tmp_path, "fo", requeue_interval_seconds="1") as private:
        yield private


def active_value(worker: Worker, port: int) -> float | None:
    """The replica's minruntime_requeue_worker_active, None while it cannot be scraped."""
    assert worker.alive(), f"replica {worker.name} exited:\n{worker.log_tail()}"
    samples = try_scrape(port)
    return None if samples is None else samples.get(ACTIVE)


def wait_cycles(worker: Worker, port: int, count: int) -> None:
    """Wait until the replica has finished `count` more cycles."""

    def cycles() -> float:
        samples = try_scrape(port)
        assert samples is not None, worker.log_tail()
        return samples.get(CYCLES_OK)

    target = cycles() + count
    wait_for(lambda: cycles() >= target, 60, f"{count} cycles of {worker.name}")


def over_running_victim(scene: Scene, contender: bool) -> tuple[str, str | None]:
    """An 8-GPU node filled by an over-running job; with a contender that needs half of it."""
    scene.prepare({"n1": 8})
    hi = scene.pend(scene.job("hi", 4, priority=100, min_available=4)) if contender else None
    victim = scene.start(scene.job("v", 8, priority=50, annotations=OVERRUN), "n1")
    return victim, hi


def test_one_replica_acts_and_a_standby_takes_over_after_kill_9(pipeline: Pipeline) -> None:
    port = free_port_pair()
    replicas = {
        pipeline.start_worker(name, env={PORT: str(p)}): p
        for name, p in (("a", port), ("b", port + 1))
    }

    def the_active() -> Worker | None:
        values = {worker: active_value(worker, p) for worker, p in replicas.items()}
        known = sorted(value for value in values.values() if value is not None)
        if len(known) < len(values):
            return None
        assert known in ([0.0, 0.0], [0.0, 1.0]), values  # never two at once
        on = [worker for worker, value in values.items() if value == 1]
        return on[0] if on else None

    first: Worker = wait_for(the_active, 60, "one active replica")
    [standby] = [worker for worker in replicas if worker is not first]

    one = Scene(pipeline, "one")
    committed_first, contender = over_running_victim(one, contender=True)
    idle = Scene(pipeline, "idle")
    rolled_back, _ = over_running_victim(idle, contender=False)
    assert wait_decisions(pipeline, committed_first) == [committed_for(contender)]
    assert wait_decisions(pipeline, rolled_back) == [rolled_back_for("no_higher_priority_pending")]
    wait_cycles(first, replicas[first], 3)
    assert the_active() is first
    acting, waiting = try_scrape(replicas[first]), try_scrape(replicas[standby])
    assert acting is not None
    assert waiting is not None
    assert (acting.get(recorded("committed")), acting.get(recorded("rolled_back"))) == (1, 1)
    # The standby never ran a cycle, so it decided nothing.
    assert waiting.get(CYCLES_OK) == 0
    assert sum(waiting.get(recorded(o)) for o in ("committed", "rolled_back", "skipped")) == 0
    wait_for(lambda: unpublished(pipeline) == 0, 60, "the outbox to drain")

    assert first.kill() == -9
    wait_for(
        lambda: active_value(standby, replicas[standby]) == 1,
        60,
        f"the standby to take over\n{standby.log_tail()}",
    )

    two = Scene(pipeline, "two")
    committed_second, contender_two = over_running_victim(two, contender=True)
    assert wait_decisions(pipeline, committed_second) == [committed_for(contender_two)]
    wait_cycles(standby, replicas[standby], 3)
    took_over = try_scrape(replicas[standby])
    assert took_over is not None
    # It made the new decision; the earlier ones it only saw as already decided.
    assert took_over.get(recorded("committed")) == 1
    assert took_over.get(recorded("rolled_back")) == 0
    assert decisions(pipeline, committed_first)[0][0] == "committed"
    assert len(decisions(pipeline, committed_first)) == 1
    assert len(decisions(pipeline, rolled_back)) == 1

    wait_for(lambda: unpublished(pipeline) == 0, 60, "the outbox to drain")
    events = published(pipeline)
    ids = [event.event["id"] for event in events]
    assert len(ids) == len(set(ids)), ids
    assert [event.header_id for event in events] == ids
    rows = pipeline.query("SELECT decision_id, outcome, uid FROM minruntime.requeue_decisions")
    assert sorted(ids) == sorted(decision_id for decision_id, _, _ in rows)
    on_topic = {e.event["id"] for e in events if e.event["type"] == "requeue.committed"}
    in_sql = {decision_id for decision_id, outcome, _ in rows if outcome == "committed"}
    assert on_topic == in_sql
    assert {uid for _, outcome, uid in rows if outcome == "committed"} == {
        committed_first,
        committed_second,
    }


def test_a_crash_between_the_commit_and_the_publish_loses_nothing(pipeline: Pipeline) -> None:
    crash = Scene(pipeline, "crash")
    victim, contender = over_running_victim(crash, contender=True)
    idle = Scene(pipeline, "idle")
    rolled_back, _ = over_running_victim(idle, contender=False)
    # Every input is applied; without the processor, its outbox relay publishes nothing.
    pipeline.stop()

    crashing = pipeline.start_worker("crash", env={"MINRUNTIME_REQUEUE_EXIT_AFTER_COMMIT": "true"})
    code = crashing.wait(120)
    assert code == 70, crashing.log_tail()

    assert decisions(pipeline, victim) == [committed_for(contender)]
    assert decisions(pipeline, rolled_back) == [rolled_back_for("no_higher_priority_pending")]
    [decision_id] = decision_ids(pipeline, victim)
    [rollback_id] = decision_ids(pipeline, rolled_back)
    not_before = pipeline.scalar(
        "SELECT requeue_not_before FROM minruntime.requeue_decisions WHERE decision_id = %s",
        (decision_id,),
    )
    row = crash.row(victim)
    assert row.requeue_not_before == not_before
    assert row.requeue_not_before is not None
    assert row.awaiting_release
    assert no_cooldown(idle.row(rolled_back))
    outbox = pipeline.query("SELECT id::text, published_at FROM minruntime_state.outbox")
    assert sorted(outbox) == sorted([(decision_id, None), (rollback_id, None)])
    assert published(pipeline) == []

    port = free_port_pair()
    restarted = pipeline.start_worker("after", env={PORT: str(port)})
    event = wait_published(pipeline, decision_id)
    wait_published(pipeline, rollback_id)
    wait_for(lambda: try_scrape(port) is not None, 60, "the restarted worker's metrics")
    wait_cycles(restarted, port, 3)

    assert event.header_id == decision_id
    assert (event.event["type"], event.data["uid"]) == ("requeue.committed", victim)
    assert (
        event.data["requeueNotBefore"]
        == crash.row(victim).annotations["kai.scheduler/requeue-not-before"]
    )
    assert sorted(p.event["id"] for p in published(pipeline)) == sorted([decision_id, rollback_id])
    assert unpublished(pipeline) == 0
    # No second commit for the victim: its cooldown and awaiting release hold.
    assert decisions(pipeline, victim) == [committed_for(contender)]

    # The rolled-back candidate got no cooldown: once a contender comes, it is requeued.
    pipeline.start()
    late = idle.pend(idle.job("hi", 4, priority=100, min_available=4))
    assert wait_decisions(pipeline, rolled_back, 2) == [
        rolled_back_for("no_higher_priority_pending"),
        committed_for(late),
    ]
