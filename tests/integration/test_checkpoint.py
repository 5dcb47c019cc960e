"""Checkpoints through the real projections and requeue worker (issue 28): a bad
``checkpointed-at`` or ``checkpoint-grace`` is ignored and counted, never dead-lettered; the
worker evicts the nominee that loses the least work and records its work at risk; the run's
row keeps the work really lost; a replay rebuilds it all."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import sqlalchemy as sa

from minruntime.core import format_rfc3339
from minruntime.core.checkpoint import CHECKPOINT_GRACE_ANNOTATION, CHECKPOINTED_AT_ANNOTATION
from tests.cloudevents import T0, Event, annotated, node, queue, released
from tests.integration.helpers import (
    NOW,
    Feed,
    assert_replay_equal,
    cycle,
    gang,
    running_job,
    scalar,
)


def stored_checkpoint(engine: sa.Engine, uid: str) -> str | None:
    found = scalar(
        engine,
        "SELECT annotations ->> :key FROM minruntime_state.podgroup_state WHERE uid = :uid",
        key=CHECKPOINTED_AT_ANNOTATION,
        uid=uid,
    )
    return None if found is None else str(found)


def saved(uid: str, moment: datetime, at: datetime) -> Event:
    return annotated(uid, {CHECKPOINTED_AT_ANNOTATION: format_rfc3339(moment)}, time=at)


def test_bad_checkpoints_are_ignored_and_counted_and_the_held_one_stays(
    engine: sa.Engine,
) -> None:
    feed = Feed(engine)
    feed.send(
        queue("team"),
        node("node-1", gpu=8),
        *running_job("v", 4),
    )
    good = T0 + timedelta(minutes=30)
    outcome = feed.send(saved("v", good, good))
    assert (outcome.ignored_values, stored_checkpoint(engine, "v")) == ({}, format_rfc3339(good))
    bad = [
        annotated("v", {CHECKPOINTED_AT_ANNOTATION: "after lunch"}, time=NOW),
        saved("v", NOW + timedelta(minutes=5), NOW),  # in the future of its event
        saved("v", T0 - timedelta(seconds=1), NOW),  # before the run started
    ]
    for change in bad:
        outcome = feed.send(change)
        assert outcome.dead_lettered == 0
        assert outcome.ignored_values == {"checkpointed_at": 1}
        assert stored_checkpoint(engine, "v") == format_rfc3339(good)
    outcome = feed.send(annotated("v", {CHECKPOINT_GRACE_ANNOTATION: "2h"}, time=NOW))
    assert (outcome.ignored_values, outcome.dead_lettered) == ({"checkpoint_grace": 1}, 0)


def test_the_worker_evicts_the_nominee_that_loses_the_least_work(engine: sa.Engine) -> None:
    feed = Feed(engine)
    # Two 4-GPU over-running jobs of one priority on one full node, both started at T0 (2h
    # before NOW); "b-fresh" saved 5 minutes ago, "a-stale" an hour ago.
    feed.send(
        queue("team"),
        node("node-1", gpu=8),
        *running_job("a-stale", 4),
        *running_job("b-fresh", 4),
        saved("a-stale", NOW - timedelta(hours=1), NOW - timedelta(hours=1)),
        saved("b-fresh", NOW - timedelta(minutes=5), NOW - timedelta(minutes=5)),
        gang("hi", 4, priority=100),
    )
    report = cycle(engine, NOW)
    assert [
        (d.uid, d.outcome.value, d.beneficiaries, d.work_at_risk, d.last_checkpoint)
        for d in report.plan.decisions
    ] == [
        ("b-fresh", "committed", ("hi",), 300 * 4.0, NOW - timedelta(minutes=5)),
        ("a-stale", "rolled_back", (), 3600 * 4.0, NOW - timedelta(hours=1)),
    ]

    # The cluster carries the requeue out: the run lost 5 minutes of 4 GPUs, not 2 hours.
    feed.send(released("b-fresh", time=NOW, reason="requeued"))
    row = run_row(engine, "b-fresh")
    assert row == (
        "requeued",
        NOW - timedelta(minutes=5),
        Decimal("28800.000"),
        Decimal("1200.000"),
    )
    assert_replay_equal(engine, "replayed_checkpoint")


def run_row(engine: sa.Engine, uid: str) -> tuple[object, ...]:
    with engine.connect() as conn:
        found = conn.execute(
            sa.text(
                "SELECT ended_by, last_checkpoint, gpu_seconds, gpu_seconds_since_checkpoint"
                " FROM minruntime.runs WHERE uid = :uid"
            ),
            {"uid": uid},
        ).one()
    return tuple(found)
