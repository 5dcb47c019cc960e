"""Two writers of one podgroup at once: neither writes back a row older than the other's commit.

A podgroup's row is written by the processor's batches of two topics (``kai.podgroups``; a
nomination on ``kai.nominations`` names it) and by the requeue worker (a committed requeue sets
the cooldown and ``awaiting_release``). Each test holds one writer's transaction open at the
moment that matters and lets the other one run into it, on the real database.
"""

from __future__ import annotations

from datetime import timedelta

import sqlalchemy as sa

from minruntime.core.annotations import REQUEUE_NOT_BEFORE_ANNOTATION
from minruntime.ingest import apply_batch
from minruntime.store.decisions import commit_cooldowns
from minruntime.store.requeue import lock_podgroups
from minruntime.store.schema import LIVE
from tests.cloudevents import T0, allocated, annotated, nominated, submitted
from tests.e2e.harness import wait_for
from tests.integration.helpers import GROUP, Feed, Other, rows, waiting_for_a_lock


def test_a_batch_does_not_write_back_what_the_worker_committed_meanwhile(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    feed.send(submitted("x", "q", pods=2), allocated("x", 2, time=T0))
    not_before = T0 + timedelta(hours=1)
    cooldown = "2026-11-21T11:00:00Z"  # not_before, as the annotation says it
    with engine.connect() as worker, worker.begin():
        # The worker commits a requeue of x: it locks the row, then sets the cooldown.
        lock_podgroups(worker, LIVE, ["x"])
        commit_cooldowns(
            worker,
            LIVE,
            [
                {
                    "uid": "x",
                    "key": REQUEUE_NOT_BEFORE_ANNOTATION,
                    "value": cooldown,
                    "not_before": not_before,
                    "run_start": T0,
                }
            ],
        )
        # Meanwhile a batch changes x's annotations: it must wait, then fold the new row.
        other = Other(engine, feed.records(annotated("x", {"team": "a"})))
        wait_for(lambda: waiting_for_a_lock(engine), timeout=10)
    assert other.result(30).applied == 1
    ((annotations, requeue_not_before, awaiting),) = rows(
        engine,
        "SELECT annotations, requeue_not_before, awaiting_release"
        " FROM minruntime_state.podgroup_state WHERE uid = 'x'",
    )
    assert annotations == {REQUEUE_NOT_BEFORE_ANNOTATION: cooldown, "team": "a"}
    assert (requeue_not_before, awaiting) == (not_before, True)


def test_a_nomination_does_not_overwrite_a_submission_of_another_topics_batch(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    # The podgroups topic's batch submits y and has not committed when the nominations
    # topic's batch loads y (absent): the nomination's placeholder must not replace it.
    with engine.connect() as podgroups, podgroups.begin():
        apply_batch(podgroups, feed.records(submitted("y", "q", pods=2)), consumer_group=GROUP)
        other = Other(engine, feed.records(nominated("y")))
        wait_for(lambda: waiting_for_a_lock(engine), timeout=10)
    assert other.result(30).applied == 1
    ((status, submitted_flag, name),) = rows(
        engine,
        "SELECT status, submitted, name FROM minruntime_state.podgroup_state WHERE uid = 'y'",
    )
    assert (status, submitted_flag, name) == ("pending", True, "job-y")
    assert rows(engine, "SELECT uid FROM minruntime_state.nominations") == [("y",)]


def test_a_nomination_alone_writes_no_podgroup_row_back(engine: sa.Engine, feed: Feed) -> None:
    feed.send(submitted("z", "q", pods=1), allocated("z", 1, time=T0))
    (before,) = rows(engine, "SELECT xmin::text FROM minruntime_state.podgroup_state")
    assert feed.send(nominated("z")).applied == 1
    # The row is as it was (the same row version): the nomination is stored beside it.
    assert rows(engine, "SELECT xmin::text FROM minruntime_state.podgroup_state") == [before]
    assert rows(engine, "SELECT uid FROM minruntime_state.nominations") == [("z",)]
    # A nomination of a podgroup not known yet makes its placeholder row.
    assert feed.send(nominated("w")).applied == 1
    assert rows(
        engine, "SELECT uid, submitted FROM minruntime_state.podgroup_state ORDER BY uid"
    ) == [("w", False), ("z", True)]
