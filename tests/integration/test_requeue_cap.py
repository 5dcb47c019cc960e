"""The requeue cap (SEMANTICS.md §10) through the real projections: the config as stored and
shown, a bad one dead-lettered, the worker's cycle skipping a capped podgroup with
``requeue_limit``, ``explain`` saying why and until when, and a replay rebuilding it all."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from minruntime.audit.explain import explain
from minruntime.audit.whatif import Change, ConfigEdit, whatif
from minruntime.core import MAX_REQUEUES_ANNOTATION, MinRuntimeConfig
from minruntime.requeue import RequeueMetrics
from minruntime.requeue.cycle_inputs import load_cycle_inputs
from minruntime.store.node_pools import read_node_pool_configs
from minruntime.store.schema import LIVE as LIVE_TABLES
from minruntime.store.shadows import LIVE
from minruntime.store.unit import ReadUnit
from tests.cloudevents import (
    T0,
    allocated,
    config_with,
    node,
    nominated,
    queue,
    released,
    submitted,
)
from tests.integration.helpers import (
    NOW,
    OVERRUN,
    Feed,
    assert_replay_equal,
    cycle,
    execute,
    gang,
    rows,
    running_job,
)

MINUTE = timedelta(minutes=1)
WINDOW = timedelta(hours=3)


def requeued_once(feed: Feed, engine: sa.Engine, annotations: dict[str, str]) -> None:
    """``v`` is requeued at NOW for ``hi``, runs again from NOW+4m; ``hi2`` then waits."""
    feed.send(
        config_with(maxRequeues=1, maxRequeuesWindow="3h"),
        queue("team"),
        node("node-1", gpu=8),
        *running_job("v", 8, annotations={**OVERRUN, **annotations}),
        gang("hi", 4, priority=100, time=T0),
    )
    (first,) = cycle(engine, NOW).plan.decisions
    assert (first.outcome.value, first.beneficiaries) == ("committed", ("hi",))
    feed.send(
        released("v", time=NOW + MINUTE, reason="requeued"),
        allocated("hi", 4, time=NOW + 2 * MINUTE),
        released("hi", time=NOW + 3 * MINUTE, reason="completed"),
        allocated("v", 8, time=NOW + 4 * MINUTE),
        gang("hi2", 4, priority=100, time=NOW + 4 * MINUTE),
        nominated("v", "proportion", time=NOW + 5 * MINUTE),
    )


def test_the_config_is_stored_and_shown_and_old_rows_mean_unlimited(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(
        config_with(maxRequeues=3, maxRequeuesWindow="1h"),
        config_with("b", defaultRequeueDelay="1m"),
    )
    shown = rows(
        engine,
        "SELECT node_pool, max_requeues, max_requeues_window FROM minruntime.node_pool_configs"
        " ORDER BY node_pool",
    )
    assert [tuple(row) for row in shown] == [
        ("b", None, None),
        ("default", 3, timedelta(hours=1)),
    ]
    with engine.connect() as conn:
        configs = read_node_pool_configs(conn, LIVE_TABLES)[0]
    assert configs.for_pool("default") == MinRuntimeConfig(
        max_requeues=3, max_requeues_window=timedelta(hours=1)
    )
    assert configs.for_pool("b").max_requeues is None
    # An update without the cap removes it: a config.updated replaces the pool's arguments.
    feed.send(config_with(defaultRequeueDelay="2m"))
    assert rows(
        engine,
        "SELECT max_requeues, max_requeues_window FROM minruntime.node_pool_configs"
        " WHERE node_pool = 'default'",
    ) == [(None, None)]


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"maxRequeues": 0}, "data.maxRequeues: value must be from 1 to 1000, got 0"),
        ({"maxRequeues": 1001}, "data.maxRequeues: value must be from 1 to 1000, got 1001"),
        ({"maxRequeues": "2"}, "data.maxRequeues: value must be a whole number, got '2'"),
        ({"maxRequeues": 2.5}, "data.maxRequeues: value must be a whole number, got 2.5"),
        ({"maxRequeuesWindow": "0s"}, "data.maxRequeuesWindow: value must be positive"),
        ({"maxRequeuesWindow": "1000d"}, "at most 8784h, got 24000h"),
        ({"maxRequeuesWindow": "-5m"}, "negative durations are not allowed"),
    ],
)
def test_a_bad_cap_is_dead_lettered_with_its_reason(
    engine: sa.Engine, feed: Feed, data: dict[str, Any], words: str
) -> None:
    outcome = feed.send(config_with(**data))
    assert outcome is not None
    (letter,) = rows(engine, "SELECT kind, message FROM minruntime.dead_letters")
    assert letter.kind in ("invalid_config", "negative_duration")
    assert words in letter.message
    assert rows(engine, "SELECT * FROM minruntime.node_pool_configs") == []


def test_a_capped_podgroup_is_skipped_until_its_requeue_leaves_the_window(
    engine: sa.Engine, feed: Feed
) -> None:
    requeued_once(feed, engine, {})
    with engine.connect() as conn:
        inputs = load_cycle_inputs(conn, NOW + 10 * MINUTE)
    assert inputs.cluster.requeue_history == {"v": (NOW,)}

    report = cycle(engine, NOW + 10 * MINUTE)
    (decision,) = report.plan.decisions
    assert (decision.uid, decision.outcome.value, decision.reason) == (
        "v",
        "skipped",
        "requeue_limit",
    )
    logged = rows(
        engine,
        "SELECT outcome, reason FROM minruntime.requeue_decisions WHERE uid = 'v' ORDER BY seq",
    )
    assert [tuple(row) for row in logged] == [("committed", None), ("skipped", "requeue_limit")]
    registry = CollectorRegistry()
    RequeueMetrics(registry, ("proportion",)).observe(report)
    assert (
        registry.get_sample_value(
            "kai_requeue_skipped_total", {"nominated_by": "proportion", "reason": "requeue_limit"}
        )
        == 1
    )

    # The commit counts while decidedAt > now - 3h: until NOW + 3h, when v may go again.
    second = timedelta(seconds=1)
    feed.send(nominated("v", "proportion", time=NOW + WINDOW - second))
    assert cycle(engine, NOW + WINDOW - second).plan.decisions[0].reason == "requeue_limit"
    later = cycle(engine, NOW + WINDOW).plan.decisions[0]
    assert (later.outcome.value, later.beneficiaries) == ("committed", ("hi2",))

    assert_replay_equal(engine, "replayed")


def test_explain_shows_the_cap_its_origin_the_requeues_and_when_it_frees(
    engine: sa.Engine, feed: Feed
) -> None:
    requeued_once(feed, engine, {})
    with engine.connect() as conn:
        cap = explain(ReadUnit(conn, LIVE), "v", NOW + 10 * MINUTE).requeue_cap
    assert cap is not None
    assert (cap.limit, cap.window, cap.source, cap.config_node_pool) == (
        1,
        WINDOW,
        "node_pool",
        "default",
    )
    assert cap.requeues == (NOW,)
    assert cap.reached
    assert cap.oldest_leaves_at == cap.frees_at == NOW + WINDOW
    with engine.connect() as conn:
        # Before the commit nothing was counted; the hi gang is not capped by anything.
        before = explain(ReadUnit(conn, LIVE), "v", NOW - MINUTE).requeue_cap
    assert before is not None
    assert (before.requeues, before.reached) == ((), False)


def test_the_annotation_lowers_the_cap_and_a_bad_one_is_ignored_and_said(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(
        submitted("low", "team", 1, annotations={MAX_REQUEUES_ANNOTATION: "2"}),
        submitted("bad", "team", 1, annotations={MAX_REQUEUES_ANNOTATION: "0"}),
    )
    with engine.connect() as conn:
        low = explain(ReadUnit(conn, LIVE), "low", T0).requeue_cap
        bad = explain(ReadUnit(conn, LIVE), "bad", T0).requeue_cap
    assert low is not None
    assert (low.limit, low.window, low.source) == (2, None, "annotation")
    assert bad is not None
    assert bad.limit is None
    assert bad.annotation_problem is not None
    assert "ignored" in bad.annotation_problem


@pytest.mark.parametrize(
    "assignment",
    [
        "max_requeues = 0",
        "max_requeues = -4",
        "max_requeues_window = interval '-1 hour'",
        "max_requeues_window = interval '9000 years'",
    ],
)
def test_an_unusable_stored_cap_leaves_its_pool_out_and_nothing_crashes(
    engine: sa.Engine, feed: Feed, assignment: str
) -> None:
    requeued_once(feed, engine, {})
    execute(engine, f"UPDATE minruntime_state.node_pool_configs SET {assignment}")
    report = cycle(engine, NOW + 10 * MINUTE)
    assert report.plan.decisions == ()
    assert ("node_pool", "default", "invalid_config") in {
        (e.what, e.name, e.reason.value) for e in report.excluded
    }


def test_a_what_if_on_other_arguments_keeps_the_pools_cap(engine: sa.Engine, feed: Feed) -> None:
    feed.send(
        config_with(maxRequeues=2, maxRequeuesWindow="1h"),
        queue("team"),
        node("node-1", gpu=8),
        submitted("v", "team", 1),
        allocated("v", 1, time=T0),
    )
    edit = ConfigEdit("default", default_preempt_min_runtime=timedelta(hours=1))
    report = whatif(engine, Change(config_edits=[edit]), at=T0 + MINUTE)
    (item,) = report.events
    data = item.event.data.model_dump(mode="json", by_alias=True)
    assert (data["maxRequeues"], data["maxRequeuesWindow"]) == (2, "1h")
