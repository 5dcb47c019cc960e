"""A queue's own disruption budget and gap (queue.upserted's annotations) and a podgroup's top
owner on the wire (podgroup.submitted's topOwner), through the real projections: stored,
read back by the worker's cycle, and preferred to the node pool's values and to re-reading
the annotation (issue 28, parts 3 and 4)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import sqlalchemy as sa

from minruntime.core.disruption import (
    EVICTION_WINDOW_ANNOTATION,
    MAX_EVICTIONS_ANNOTATION,
    MIN_EVICTION_GAP_ANNOTATION,
    TOP_OWNER_ANNOTATION,
)
from minruntime.requeue.cycle_inputs import load_cycle_inputs
from minruntime.store.unit import ReadUnit
from tests.cloudevents import (
    T0,
    Event,
    allocated,
    config_with,
    node,
    queue,
    released,
    submitted,
    with_data,
)
from tests.integration.helpers import NOW, OVERRUN, Feed, cycle, gang, rows, running_job

MINUTE = timedelta(minutes=1)
ANNOTATED_OWNER = '{"kind": "JobSet", "name": "train", "uid": "js-1"}'
WIRE_OWNER = {"kind": "RayJob", "name": "tune", "uid": "rj-9"}


def evicted_ten_minutes_ago(queue_name: str) -> list[Event]:
    """A podgroup of ``queue_name`` that the scheduler evicted 10 minutes before NOW."""
    return [
        submitted("w", queue_name, 8, priority=50),
        allocated("w", 8, time=T0),
        released("w", time=NOW - 10 * MINUTE, reason="evicted"),
    ]


def test_a_queue_annotation_overrides_the_pool_budget(engine: sa.Engine, feed: Feed) -> None:
    roomy = {MAX_EVICTIONS_ANNOTATION: "3", EVICTION_WINDOW_ANNOTATION: "1h"}
    feed.send(
        config_with(maxEvictionsPerWindow=1, evictionWindow="1h"),
        with_data(queue("team"), annotations=roomy),
        node("node-1", gpu=8),
        *evicted_ten_minutes_ago("team"),
        *running_job("v1", 8, time=T0 + MINUTE),
        gang("hi", 8, priority=100, time=T0),
    )
    with engine.connect() as conn:
        cluster = load_cycle_inputs(conn, NOW).cluster
    assert cluster.queue_annotations == {"team": roomy}
    (decision,) = [d for d in cycle(engine, NOW).plan.decisions if d.uid == "v1"]
    # The pool's budget (1 per hour) is used up; the queue's own (3 per hour) is not.
    assert (decision.outcome.value, decision.reason) == ("committed", None)


def test_without_the_annotation_the_pool_budget_refuses(engine: sa.Engine, feed: Feed) -> None:
    feed.send(
        config_with(maxEvictionsPerWindow=1, evictionWindow="1h"),
        queue("team"),
        node("node-1", gpu=8),
        *evicted_ten_minutes_ago("team"),
        *running_job("v1", 8, time=T0 + MINUTE),
        gang("hi", 8, priority=100, time=T0),
    )
    (decision,) = [d for d in cycle(engine, NOW).plan.decisions if d.uid == "v1"]
    assert (decision.reason, decision.frees_at) == ("disruption_budget", NOW + 50 * MINUTE)


def test_a_queue_gap_longer_than_any_pool_window_reads_enough_history(
    engine: sa.Engine, feed: Feed
) -> None:
    # The pool sets a 5-minute gap; the queue's 1-hour gap must see the eviction 10 min ago.
    feed.send(
        config_with(minEvictionGap="5m"),
        with_data(queue("team"), annotations={MIN_EVICTION_GAP_ANNOTATION: "1h"}),
        node("node-1", gpu=8),
        with_data(submitted("w", "team", 8, priority=50), topOwner=WIRE_OWNER),
        allocated("w", 8, time=T0),
        released("w", time=NOW - 10 * MINUTE, reason="evicted"),
        with_data(
            submitted("v1", "team", 8, priority=50, annotations=OVERRUN), topOwner=WIRE_OWNER
        ),
        allocated("v1", 8, time=T0 + MINUTE),
        gang("hi", 8, priority=100, time=T0),
    )
    (decision,) = [d for d in cycle(engine, NOW).plan.decisions if d.uid == "v1"]
    assert (decision.reason, decision.frees_at) == ("eviction_gap", NOW + 50 * MINUTE)


def test_the_wire_top_owner_is_stored_and_preferred_to_the_annotation(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(
        config_with(minEvictionGap="30m"),
        queue("team"),
        node("node-1", gpu=8),
        node("node-2", gpu=8),
        with_data(
            submitted("a", "team", 8, priority=50, annotations={TOP_OWNER_ANNOTATION: "junk"}),
            topOwner=WIRE_OWNER,
        ),
        allocated("a", 8, time=T0),
        released("a", time=NOW - 10 * MINUTE, reason="evicted"),
        # The annotation names another owner: the wire's topOwner wins.
        with_data(
            submitted(
                "b",
                "team",
                8,
                priority=50,
                annotations={**OVERRUN, TOP_OWNER_ANNOTATION: ANNOTATED_OWNER},
            ),
            topOwner=WIRE_OWNER,
        ),
        allocated("b", 8, time=T0, node="node-2"),
        gang("hi", 8, priority=100, time=T0),
    )
    stored = rows(
        engine,
        "SELECT uid, owner_kind, owner_name, owner_uid FROM minruntime_state.podgroup_state"
        " WHERE uid IN ('a', 'b') ORDER BY uid",
    )
    assert [tuple(row) for row in stored] == [
        ("a", "RayJob", "tune", "rj-9"),
        ("b", "RayJob", "tune", "rj-9"),
    ]
    runs = rows(engine, "SELECT owner_kind, owner_name, owner_uid FROM minruntime.runs")
    assert [tuple(row) for row in runs] == [("RayJob", "tune", "rj-9")]
    with engine.connect() as conn:
        history = load_cycle_inputs(conn, NOW).cluster.disruption_history
    assert history.by_owner == {"rj-9": (NOW - 10 * MINUTE,)}
    (decision,) = [d for d in cycle(engine, NOW).plan.decisions if d.uid == "b"]
    assert (decision.reason, decision.frees_at) == ("eviction_gap", NOW + 20 * MINUTE)


def test_explain_shows_the_queues_budget_and_when_it_frees_up(
    engine: sa.Engine, feed: Feed, capsys: pytest.CaptureFixture[str]
) -> None:
    import io
    import json

    from rich.console import Console

    from minruntime.audit.explain import explain
    from minruntime.audit.explain_model import describe
    from minruntime.commands.explain import render_explanation
    from minruntime.commands.render import print_json
    from minruntime.store.shadows import LIVE as LIVE_SHADOW

    tight = {MAX_EVICTIONS_ANNOTATION: "1", EVICTION_WINDOW_ANNOTATION: "30m"}
    feed.send(
        config_with(maxEvictionsPerWindow=5, evictionWindow="1h", minEvictionGap="5m"),
        with_data(queue("team"), annotations=tight),
        node("node-1", gpu=8),
        *evicted_ten_minutes_ago("team"),
        with_data(submitted("v1", "team", 8, priority=50), topOwner=WIRE_OWNER),
        allocated("v1", 8, time=T0 + MINUTE),
    )
    with engine.connect() as conn:
        explanation = explain(ReadUnit(conn, LIVE_SHADOW), "v1", NOW, None)
    facts = explanation.disruption
    assert facts is not None
    assert (facts.max_evictions_per_window, facts.eviction_window, facts.counted) == (
        1,
        30 * MINUTE,
        1,
    )
    assert facts.min_eviction_gap == 5 * MINUTE  # the pool's: the queue does not set one
    assert facts.overridden_by == (MAX_EVICTIONS_ANNOTATION, EVICTION_WINDOW_ANNOTATION)
    assert (facts.refused_by, facts.frees_at) == ("disruption_budget", NOW + 20 * MINUTE)
    assert facts.owner is not None
    assert facts.owner.uid == "rj-9"
    console = Console(file=io.StringIO(), width=200)
    console.print(render_explanation(explanation, as_of=False))
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert "budget 1 per 30m (1 eviction of the queue in it)" in text
    assert "from the queue's max-evictions-per-window, eviction-window" in text
    assert "skipped (disruption_budget) until 2026-11-21T12:20:00Z" in text
    print_json(describe(explanation))
    document = json.loads(capsys.readouterr().out)
    assert document["disruption"]["frees_at"] == "2026-11-21T12:20:00Z"
    assert document["disruption"]["refused_by"] == "disruption_budget"
