"""Disruption budgets and pacing through the real projections: the node pool's budget as
config.updated stores it, a bad one dead-lettered, and the worker's cycle counting the
requeues committed before (and the scheduler's evictions it observed) from the database."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from minruntime.core.disruption import TOP_OWNER_ANNOTATION
from minruntime.requeue.cycle_inputs import load_cycle_inputs
from minruntime.store.node_pools import read_node_pool_configs
from minruntime.store.schema import LIVE as LIVE_TABLES
from tests.cloudevents import (
    T0,
    allocated,
    annotated,
    config_with,
    node,
    queue,
    released,
    submitted,
)
from tests.integration.helpers import NOW, OVERRUN, Feed, cycle, gang, rows, running_job

MINUTE = timedelta(minutes=1)
OWNER = '{"kind": "JobSet", "name": "train", "uid": "js-1"}'


def test_the_budget_is_stored_and_a_bad_one_is_dead_lettered(engine: sa.Engine, feed: Feed) -> None:
    feed.send(config_with(maxEvictionsPerWindow=0, evictionWindow="1h"))
    feed.send(config_with(maxEvictionsPerWindow=2))  # a number without a window
    feed.send(config_with(minEvictionGap="-5m"))
    letters = rows(engine, "SELECT kind, message FROM minruntime.dead_letters ORDER BY 1, 2")
    assert len(letters) == 3
    assert all("\n" not in letter.message for letter in letters)
    feed.send(config_with(maxEvictionsPerWindow=2, evictionWindow="1h", minEvictionGap="5m"))
    with engine.connect() as conn:
        configs, bad = read_node_pool_configs(conn, LIVE_TABLES)
    policy = configs.for_pool("default").disruption
    assert (policy.max_evictions_per_window, policy.eviction_window, policy.min_eviction_gap) == (
        2,
        timedelta(hours=1),
        timedelta(minutes=5),
    )
    assert bad == set()


@pytest.mark.parametrize("observed", [False, True])
def test_past_evictions_of_the_queue_use_up_its_budget(
    engine: sa.Engine, feed: Feed, observed: bool
) -> None:
    feed.send(
        config_with(maxEvictionsPerWindow=1, evictionWindow="1h"),
        queue("team"),
        node("node-1", gpu=8),
    )
    if observed:  # the scheduler evicted another podgroup of the queue 10 minutes ago
        feed.send(
            submitted("w", "team", 8, priority=50),
            allocated("w", 8, time=T0),
            released(
                "w",
                time=NOW - 10 * MINUTE,
                reason="evicted",
                eviction={"source": "event", "action": "preempt"},
            ),
            *running_job("v1", 8, time=T0 + MINUTE),
        )
    else:  # the service requeued another one 10 minutes ago
        feed.send(
            node("node-2", gpu=8),
            *running_job("v0", 8),
            gang("hi0", 8, priority=100, time=T0),
            submitted("v1", "team", 8, priority=50),  # not over-running yet
            allocated("v1", 8, time=T0, node="node-2"),
        )
        (first,) = cycle(engine, NOW - 10 * MINUTE).plan.decisions
        assert first.outcome.value == "committed"
        feed.send(annotated("v1", OVERRUN, time=NOW - 5 * MINUTE))
    feed.send(gang("hi", 8, priority=100, time=T0))
    with engine.connect() as conn:
        history = load_cycle_inputs(conn, NOW).cluster.disruption_history
    assert history.by_queue == {"team": (NOW - 10 * MINUTE,)}

    decisions = {d.uid: d for d in cycle(engine, NOW).plan.decisions}
    decision = decisions["v1"]
    assert (decision.outcome.value, decision.reason) == ("skipped", "disruption_budget")
    assert decision.frees_at == NOW + 50 * MINUTE
    # Freed up: the budget no longer decides (the planner's other rules do).
    later = {d.uid: d for d in cycle(engine, NOW + 50 * MINUTE).plan.decisions}["v1"]
    assert later.reason != "disruption_budget"


def test_the_owner_gap_reads_the_top_owner_of_past_evictions(engine: sa.Engine, feed: Feed) -> None:
    owned = {**OVERRUN, TOP_OWNER_ANNOTATION: OWNER}
    feed.send(
        config_with(minEvictionGap="5m"),
        queue("team"),
        node("node-1", gpu=8),
        node("node-2", gpu=8),
        *running_job("a", 8, annotations=owned),
        *running_job("b", 8, annotations=owned, node="node-2"),
        gang("hi", 8, priority=100, time=T0),
        gang("hi2", 8, priority=100, time=T0),
    )
    decisions = sorted((d.outcome.value, str(d.reason)) for d in cycle(engine, NOW).plan.decisions)
    assert decisions == [("committed", "None"), ("skipped", "eviction_gap")]
    with engine.connect() as conn:
        history = load_cycle_inputs(conn, NOW + MINUTE).cluster.disruption_history
    assert history.by_owner == {"js-1": (NOW,)}


def test_runs_know_their_top_owner_and_sql_answers_gpu_hours_lost_per_jobset(
    engine: sa.Engine, feed: Feed
) -> None:
    owned = {TOP_OWNER_ANNOTATION: OWNER}
    feed.send(
        queue("team"),
        node("node-1", gpu=8),
        *running_job("a", 2, annotations=owned),
        released("a", time=T0 + timedelta(hours=1), reason="evicted"),
        submitted("b", "team", 1, priority=50),
        allocated("b", 1, time=T0),
        released("b", time=T0 + timedelta(hours=1), reason="evicted"),
    )
    lost = rows(
        engine,
        "SELECT owner_kind, owner_name, owner_uid, sum(gpu_seconds) / 3600 AS gpu_hours"
        " FROM minruntime.runs WHERE eviction AND run_end > :since"
        " GROUP BY 1, 2, 3 ORDER BY 2 NULLS LAST",
        since=T0,
    )
    assert [tuple(row) for row in lost] == [
        ("JobSet", "train", "js-1", 2),
        (None, None, None, 1),
    ]
