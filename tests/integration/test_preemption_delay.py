"""The preemption delay of beneficiaries through the real projections and requeue worker
(SEMANTICS.md §10): stored window, the worker's rollback and its event, replay, explain."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.explain import explain
from minruntime.core import format_rfc3339
from minruntime.events import decode_event
from minruntime.store.shadows import LIVE
from minruntime.store.unit import ReadUnit
from tests.cloudevents import (
    T0,
    Event,
    allocated,
    annotated,
    event,
    node,
    queue,
    released,
)
from tests.integration.helpers import (
    NOW,
    Feed,
    assert_replay_equal,
    cycle,
    rows,
    running_job,
    scalar,
)

DELAY = "kai.scheduler/preemption-delay"
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"


def waiting(
    uid: str,
    *,
    at: datetime,
    delay: str | None = None,
    annotations: dict[str, str] | None = None,
    pod_delays: tuple[str | None, ...] = (None, None, None, None),
) -> Event:
    """A pending gang of four one-GPU pods, priority 100, submitted at ``at``."""
    pods: list[dict[str, Any]] = []
    for i, text in enumerate(pod_delays):
        pod: dict[str, Any] = {"name": f"{uid}-{i}", "gpu": 1}
        if text is not None:
            pod["annotations"] = {DELAY: text}
        pods.append(pod)
    data: dict[str, Any] = {
        "uid": uid,
        "name": f"job-{uid}",
        "namespace": "team",
        "queue": "team",
        "priority": 100,
        "subGroups": [{"name": "default", "minAvailable": 4}],
        "pods": pods,
        "annotations": annotations or {},
    }
    if delay is not None:
        data["preemptionDelay"] = delay
    return event("podgroup.submitted", uid, data, time=at)


@pytest.fixture
def feed(engine: sa.Engine) -> Feed:
    feed = Feed(engine)
    # One 8-GPU node, used whole by the over-running job ``v`` (priority 50).
    feed.send(
        queue("team"),
        node("node-1", gpu=8),
        *running_job("v", 8),
    )
    return feed


def stored_window(engine: sa.Engine, uid: str) -> Any:
    return rows(
        engine,
        "SELECT submitted_preemption_delay, submitted_preemption_delay_pod, evicted_at,"
        " eviction_annotated_at, preemption_delay_ends_at"
        " FROM minruntime_state.podgroup_state WHERE uid = :uid",
        uid=uid,
    )[0]


def test_a_delayed_beneficiary_rolls_the_requeue_back_until_its_window_ends(
    engine: sa.Engine, feed: Feed
) -> None:
    submitted_at = NOW - timedelta(minutes=1)
    feed.send(waiting("hi", at=submitted_at, delay="10m"))
    ends = submitted_at + timedelta(minutes=10)
    assert stored_window(engine, "hi").preemption_delay_ends_at == ends

    report = cycle(engine, NOW)
    (decision,) = report.plan.decisions
    assert (decision.outcome.value, decision.reason, decision.delay_ends_at) == (
        "rolled_back",
        "preemption_delay",
        ends,
    )
    logged = rows(
        engine,
        "SELECT outcome, reason, delay_ends_at, decision_id FROM minruntime.requeue_decisions",
    )
    assert [(r.outcome, r.reason, r.delay_ends_at) for r in logged] == [
        ("rolled_back", "preemption_delay", ends)
    ]
    payload = scalar(
        engine, "SELECT payload FROM minruntime_state.outbox WHERE id = :id",
        id=logged[0].decision_id,
    )  # fmt: skip
    event = decode_event(bytes(payload))
    assert event.type == "requeue.rolled-back"
    assert event.data.model_dump(mode="json", by_alias=True)["delayEndsAt"] == format_rfc3339(ends)
    # Nothing changed: no cooldown, no promise; the job keeps running.
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.requeue_promises") == 0

    # At exactly the window's end the beneficiary may be served (strict, as protection).
    later = cycle(engine, ends)
    assert [(d.outcome.value, d.beneficiaries) for d in later.plan.decisions] == [
        ("committed", ("hi",))
    ]

    # A replay of the log rebuilds every projection, the new columns included.
    assert_replay_equal(engine, "replayed_delay")


def test_the_delay_resolves_spec_then_annotation_then_pods_and_ignores_bad_values(
    engine: sa.Engine, feed: Feed
) -> None:
    outcome = feed.send(
        waiting("a", at=NOW, delay="-5m", annotations={DELAY: "3m"}),
        waiting("b", at=NOW, delay="bogus", pod_delays=("x", "2m", "7m", None)),
        waiting("c", at=NOW, delay="1m", annotations={DELAY: "nope"}),
        waiting("d", at=NOW),
    )
    # Ignored with a counted warning, never a dead letter (KAI ignores them too).
    assert outcome.dead_lettered == 0
    assert outcome.ignored_values == {"preemption_delay": 3}
    assert stored_window(engine, "a").preemption_delay_ends_at == NOW + timedelta(minutes=3)
    b = stored_window(engine, "b")
    assert (b.submitted_preemption_delay, b.submitted_preemption_delay_pod) == (
        timedelta(minutes=2),
        "b-1",
    )
    assert b.preemption_delay_ends_at == NOW + timedelta(minutes=2)
    assert stored_window(engine, "c").preemption_delay_ends_at == NOW + timedelta(minutes=1)
    assert stored_window(engine, "d").preemption_delay_ends_at is None


def test_an_eviction_re_arms_the_window_and_kai_annotation_is_validated(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(waiting("w", at=T0, delay="10m"))
    assert stored_window(engine, "w").preemption_delay_ends_at == T0 + timedelta(minutes=10)
    evicted = T0 + timedelta(minutes=30)
    feed.send(
        allocated("w", 4, time=T0 + timedelta(minutes=20)),
        released("w", time=evicted, reason="evicted"),
    )
    window = stored_window(engine, "w")
    assert window.evicted_at == evicted
    assert window.preemption_delay_ends_at == evicted + timedelta(minutes=10)

    # KAI's timestamp: later than the service's release, so the window starts there.
    kai = evicted + timedelta(minutes=1)
    feed.send(annotated("w", {LAST_EVICTION: format_rfc3339(kai)}, time=kai))
    window = stored_window(engine, "w")
    assert window.eviction_annotated_at == kai
    assert window.preemption_delay_ends_at == kai + timedelta(minutes=10)

    # In the future of its event, or before the podgroup existed: ignored, counted.
    for bad in (kai + timedelta(hours=1), T0 - timedelta(days=1)):
        outcome = feed.send(annotated("w", {LAST_EVICTION: format_rfc3339(bad)}, time=kai))
        assert outcome.ignored_values == {"last_eviction_timestamp": 1}
        assert outcome.dead_lettered == 0
        window = stored_window(engine, "w")
        assert window.eviction_annotated_at is None
        assert window.preemption_delay_ends_at == evicted + timedelta(minutes=10)


def test_explain_says_the_delay_where_it_came_from_and_until_when(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(waiting("hi", at=NOW, pod_delays=(None, "15m", None, None)))
    with engine.connect() as conn:
        inside = explain(ReadUnit(conn, LIVE), "hi", NOW + timedelta(minutes=5))
        over = explain(ReadUnit(conn, LIVE), "hi", NOW + timedelta(minutes=15))
    delay = inside.preemption_delay
    assert delay is not None
    assert delay.source == f"annotation {DELAY} of pod hi-1"
    assert (delay.window_start, delay.started_by) == (NOW, "submission")
    assert delay.ends_at == NOW + timedelta(minutes=15)
    assert delay.inside
    assert delay.remaining == timedelta(minutes=10)
    assert over.preemption_delay is not None
    assert not over.preemption_delay.inside


def test_an_evicted_gang_is_pending_again_and_its_re_armed_window_holds_it_back(
    engine: sa.Engine, feed: Feed
) -> None:
    # w (10m delay) was submitted an hour ago, ran, and was evicted a minute ago.
    feed.send(waiting("w", at=NOW - timedelta(hours=1), delay="10m"))
    evicted = NOW - timedelta(minutes=1)
    feed.send(
        allocated("w", 4, time=NOW - timedelta(minutes=30)),
        released("w", time=evicted, reason="evicted"),
    )
    assert scalar(engine, "SELECT status FROM minruntime.podgroups WHERE uid = 'w'") == "pending"

    # A contender again, but not before its re-armed window ends (its submission's is long over).
    (decision,) = cycle(engine, NOW).plan.decisions
    assert (decision.uid, decision.reason, decision.delay_ends_at) == (
        "v",
        "preemption_delay",
        evicted + timedelta(minutes=10),
    )
    (decision,) = cycle(engine, evicted + timedelta(minutes=10)).plan.decisions
    assert (decision.outcome.value, decision.beneficiaries) == ("committed", ("w",))
