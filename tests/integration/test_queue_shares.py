"""Queue shares through the real projections and requeue worker (issue 27, part 5).

KAI's proportion rules (docs/rule-engine.md, "Queue shares"): a requeue whose beneficiary's
queue has GPU quota 0 while the victim's queue is within its deserved share is one KAI undoes,
so the worker rolls it back as ``beneficiary_over_quota``; with the beneficiary's queue within
quota it commits. The stored queue columns, the decision row and event, ``requeue plan
--json``, ``explain`` and replay are checked on the way.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.explain import explain
from minruntime.commands.requeue_plan import describe, dry_run
from minruntime.events import RequeueRolledBackData, decode_event
from minruntime.store.shadows import LIVE
from minruntime.store.unit import ReadUnit, Units
from tests.cloudevents import Event, allocated, event, node, submitted
from tests.integration.helpers import NOW, OVERRUN, Feed, assert_replay_equal, cycle, rows, scalar

FULL = {"quota": -1, "limit": -1, "overQuotaWeight": 1}


def queue(name: str, gpu_quota: float, *, priority: int | None = None) -> Event:
    """queue.upserted with KAI's spec.resources: only the GPU quota differs."""
    data: dict[str, Any] = {
        "name": name,
        "resources": {
            "gpu": {"quota": gpu_quota, "limit": -1, "overQuotaWeight": 1},
            "cpu": FULL,
            "memory": FULL,
        },
    }
    if priority is not None:
        data["priority"] = priority
    return event("queue.upserted", name, data)


def story(feed: Feed, burst_quota: float) -> None:
    """One 4-GPU node: ``hog`` (queue train, quota 4) over-runs on it; ``lift`` (queue burst,
    higher priority) needs all four GPUs."""
    feed.send(
        queue("train", 4),
        queue("burst", burst_quota, priority=100),
        node("node-1", gpu=4),
        submitted("hog", "train", 4, priority=50, annotations=OVERRUN),
        allocated("hog", 4),
        submitted(
            "lift", "burst", 4, priority=100, sub_groups=[{"name": "default", "minAvailable": 4}]
        ),
    )


def test_the_queue_shares_are_stored_and_shown(engine: sa.Engine, feed: Feed) -> None:
    story(feed, 0)
    stored = rows(
        engine,
        "SELECT name, priority, resources FROM minruntime.queues ORDER BY name",
    )
    assert [(row[0], row[1], row[2]["gpu"]["quota"]) for row in stored] == [
        ("burst", 100, 0),
        ("train", None, 4),
    ]


def test_a_quota_zero_beneficiary_rolls_back_as_beneficiary_over_quota(
    engine: sa.Engine, runtime: sa.Engine, feed: Feed
) -> None:
    story(feed, 0)
    report = cycle(runtime)
    (decision,) = report.plan.decisions
    assert (decision.uid, decision.outcome.value) == ("hog", "rolled_back")
    assert decision.reason is not None
    assert decision.reason.value == "beneficiary_over_quota"
    # Nothing was evicted, nothing promised.
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.requeue_promises") == 0
    (shares,) = rows(
        engine,
        "SELECT quota_shares FROM minruntime.requeue_decisions WHERE uid = 'hog'",
    )
    assert shares[0]["rule"] == "fair_share"
    assert shares[0]["beneficiary"] == {
        "queue": "burst",
        "deserved": 0.0,
        "fairShare": 0.0,
        "limit": -1.0,
        "allocatedBefore": 0.0,
        "allocatedAfter": 4.0,
    }
    assert shares[0]["victim"]["fairShare"] == 4.0
    assert shares[0]["victim"]["allocatedAfter"] == 0.0
    (payload,) = rows(engine, "SELECT payload FROM minruntime_state.outbox")
    sent = decode_event(bytes(payload[0]))
    assert isinstance(sent.data, RequeueRolledBackData)
    assert sent.data.quota_shares is not None
    assert sent.data.quota_shares.victim.queue == "train"

    with engine.connect() as conn:
        why = explain(ReadUnit(conn, LIVE), "hog", NOW)
    assert why.requeue_shares is not None
    assert why.requeue_shares["beneficiary"]["queue"] == "burst"
    assert_replay_equal(engine, "replayed_shares")


def test_the_same_requeue_commits_with_the_beneficiary_within_quota(
    runtime: sa.Engine, feed: Feed
) -> None:
    story(feed, 4)
    (decision,) = cycle(runtime).plan.decisions
    assert (decision.outcome.value, decision.beneficiaries) == ("committed", ("lift",))


@pytest.mark.parametrize("burst_quota", [0, 4])
def test_requeue_plan_json_shows_the_shares(
    engine: sa.Engine, feed: Feed, burst_quota: float
) -> None:
    story(feed, burst_quota)
    plan = dry_run(Units(engine), at=None, now=NOW)
    document = json.loads(json.dumps(describe(plan, at=None), default=str))
    (decision,) = document["decisions"]
    if burst_quota:
        assert (decision["outcome"], decision["quota"]) == ("committed", None)
        return
    assert decision["reason"] == "beneficiary_over_quota"
    quota = decision["quota"]
    assert (quota["rule"], quota["queue"]) == ("fair_share", "burst")
    assert quota["beneficiary"] == {
        "queue": "burst",
        "deserved": 0.0,
        "fair_share": 0.0,
        "limit": -1.0,
        "allocated_before": 0.0,
        "allocated_after": 4.0,
    }
    assert quota["victim"] == {
        "queue": "train",
        "deserved": 4.0,
        "fair_share": 4.0,
        "limit": -1.0,
        "allocated_before": 4.0,
        "allocated_after": 0.0,
    }
    assert datetime.fromisoformat(document["now"]).astimezone(UTC) == NOW
    assert "beneficiary_over_quota" in describe_text(plan)


def describe_text(plan: Any) -> str:
    from minruntime.commands.requeue_plan import render

    text = render(plan, at=None)
    assert "beneficiary queue burst: deserved 0, fair share 0, limit unlimited" in text
    return text


def test_an_unusable_stored_resources_value_leaves_the_tree_out_and_nothing_crashes(
    engine: sa.Engine, runtime: sa.Engine, feed: Feed
) -> None:
    story(feed, 0)
    with engine.begin() as conn:
        conn.execute(
            sa.text(
                "UPDATE minruntime_state.queue_nodes SET resources = '{\"gpu\": 5}'::jsonb"
                " WHERE name = 'burst';"
                " UPDATE minruntime_state.queue_tree_version SET version = gen_random_uuid()"
            )
        )
    report = cycle(runtime)
    # As for a bad minimum runtime: the tree, and so every podgroup judged by it, is left out.
    assert [(e.what, e.name, e.reason.value) for e in report.excluded] == [
        ("queue_tree", "queues", "invalid_queue_tree"),
        ("podgroup", "hog", "invalid_queue_tree"),
        ("podgroup", "lift", "invalid_queue_tree"),
        ("node", "node-1", "hosts_excluded_podgroup"),
    ]
    assert report.plan.decisions == ()
