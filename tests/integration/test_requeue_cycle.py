"""One requeue cycle against the real projections: what it reads, decides and writes (§7–§9).

Events go in through ``apply_batch`` (as the processor applies them), the cycle runs with
``run_cycle`` in a REPEATABLE READ transaction, and the assertions read the public views,
the event log and the outbox.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import sqlalchemy as sa
from prometheus_client import CollectorRegistry

from minruntime.audit.parallel import ReplayInParts
from minruntime.audit.replay import read_log, replay
from minruntime.audit.verify import compare
from minruntime.core import format_rfc3339
from minruntime.events import decode_event
from minruntime.requeue import RequeueMetrics, RequeueWorker, WorkerOptions
from minruntime.store.read_transactions import repeatable_read
from minruntime.store.shadows import create_shadow
from tests.cloudevents import (
    T0,
    allocated,
    annotated,
    config,
    node,
    nominated,
    queue,
    released,
    submitted,
)
from tests.integration.helpers import NOW, OVERRUN, TOPIC, Feed, cycle, gang, rows, scalar


def decisions(engine: sa.Engine) -> list[tuple[str, str, str | None, list[str], list[str]]]:
    return [
        (r.uid, r.outcome, r.reason, r.nominated_by, r.beneficiaries)
        for r in rows(
            engine,
            "SELECT uid, outcome, reason, nominated_by, beneficiaries"
            " FROM minruntime.requeue_decisions ORDER BY seq",
        )
    ]


def cluster(feed: Feed, *, victim_priority: int = 50, preempt: str | None = None) -> None:
    """One 8-GPU node, fully used by an over-running job ``v`` of queue ``team``."""
    feed.send(
        queue("team", preempt=preempt),
        node("node-1", gpu=8),
        submitted("v", "team", 8, priority=victim_priority, annotations=OVERRUN),
        allocated("v", 8, time=T0),
    )


def requeued(engine: sa.Engine, feed: Feed, gpus: int) -> None:
    """The cluster, a ``gpus``-GPU contender ``hi`` of priority 100, and one cycle."""
    cluster(feed)
    feed.send(gang("hi", gpus, priority=100))
    cycle(engine)


def test_contention_commits_with_cooldown_promise_log_and_outbox(
    engine: sa.Engine, feed: Feed
) -> None:
    cluster(feed)
    feed.send(gang("hi", 4, priority=100))

    report = cycle(engine)

    assert [(d.uid, d.outcome.value) for d in report.plan.decisions] == [("v", "committed")]
    assert decisions(engine) == [("v", "committed", None, ["expectedruntime"], ["hi"])]
    not_before = NOW + timedelta(minutes=5)  # the default requeue-delay
    podgroup = rows(
        engine,
        "SELECT requeue_not_before, awaiting_release, annotations"
        " FROM minruntime.podgroups WHERE uid = 'v'",
    )[0]
    assert podgroup.requeue_not_before == not_before
    assert podgroup.awaiting_release is True
    assert podgroup.annotations["kai.scheduler/requeue-not-before"] == format_rfc3339(not_before)
    promises = rows(
        engine,
        "SELECT victim, beneficiary, node, gpu, expires_at FROM minruntime_state.requeue_promises",
    )
    assert [(p.victim, p.beneficiary, p.node, float(p.gpu), p.expires_at) for p in promises] == [
        ("v", "hi", "node-1", 4.0, not_before)
    ]
    # The event log and the outbox carry the same event, under the decision's id.
    decision_id = scalar(engine, "SELECT decision_id FROM minruntime.requeue_decisions")
    logged = rows(
        engine,
        'SELECT topic, partition, "offset", type, source FROM minruntime.event_log WHERE id = :id',
        id=decision_id,
    )
    assert [(r.topic, r.partition, r.offset, r.type) for r in logged] == [
        (TOPIC, None, None, "requeue.committed")
    ]
    out = rows(engine, "SELECT id, topic, key, payload, published_at FROM minruntime_state.outbox")
    assert len(out) == 1
    assert str(out[0].id) == decision_id
    assert (out[0].topic, bytes(out[0].key), out[0].published_at) == (TOPIC, b"v", None)
    event = decode_event(bytes(out[0].payload))
    assert event.id == decision_id
    assert event.data.model_dump(mode="json", by_alias=True) == {
        "uid": "v",
        "nominatedBy": ["expectedruntime"],
        "beneficiaries": ["hi"],
        "requeueNotBefore": format_rfc3339(not_before),
        "decidedAt": format_rfc3339(NOW),
        "runStart": format_rfc3339(T0),
        "placements": [
            {"podgroup": "hi", "pod": f"hi-{i}", "node": "node-1", "gpu": 1.0} for i in range(4)
        ],
        "delayProblem": None,
    }


def test_no_contention_rolls_back_writes_no_cooldown_and_records_it_once(
    engine: sa.Engine, feed: Feed
) -> None:
    cluster(feed)

    first = cycle(engine)
    second = cycle(engine, NOW + timedelta(seconds=10))

    assert [d.reason for d in first.plan.decisions] == ["no_higher_priority_pending"]
    assert [d.reason for d in second.plan.decisions] == ["no_higher_priority_pending"]
    assert (len(first.recorded), len(second.recorded), second.repeats) == (1, 0, 1)
    assert decisions(engine) == [
        ("v", "rolled_back", "no_higher_priority_pending", ["expectedruntime"], [])
    ]
    podgroup = rows(engine, "SELECT * FROM minruntime.podgroups WHERE uid = 'v'")[0]
    assert (podgroup.requeue_not_before, podgroup.awaiting_release) == (None, False)
    assert "kai.scheduler/requeue-not-before" not in podgroup.annotations
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.requeue_promises") == 0


def test_a_changed_outcome_is_recorded_again(engine: sa.Engine, feed: Feed) -> None:
    cluster(feed)
    cycle(engine)
    feed.send(gang("hi", 4, priority=100))

    cycle(engine, NOW + timedelta(seconds=10))

    assert [d[1:3] for d in decisions(engine)] == [
        ("rolled_back", "no_higher_priority_pending"),
        ("committed", None),
    ]


def test_a_committed_requeue_is_not_attempted_again_while_awaiting_release(
    engine: sa.Engine, feed: Feed
) -> None:
    requeued(engine, feed, 8)
    # A second contender arrives; the cluster has not evicted the victim yet.
    feed.send(gang("hi2", 8, priority=100), nominated("v", "proportion"))

    during_cooldown = cycle(engine, NOW + timedelta(seconds=10))
    after_cooldown = cycle(engine, NOW + timedelta(minutes=10))

    assert [(d.outcome.value, d.reason) for d in during_cooldown.plan.decisions] == [
        ("skipped", "cooldown")
    ]
    assert [(d.outcome.value, d.reason) for d in after_cooldown.plan.decisions] == [
        ("skipped", "already_committed")
    ]
    assert [d[:3] for d in decisions(engine)] == [
        ("v", "committed", None),
        ("v", "skipped", "cooldown"),
        ("v", "skipped", "already_committed"),
    ]


def test_cooldown_after_a_requeue_stops_the_next_run_from_being_nominated(
    engine: sa.Engine, feed: Feed
) -> None:
    requeued(engine, feed, 4)
    # The cluster evicts v; it is scheduled again at once, with "1s" expected runtime.
    feed.send(
        released("v", time=NOW + timedelta(seconds=1)),
        annotated("v", {"kai.scheduler/expected-runtime": "1s"}),
        allocated("v", 8, time=NOW + timedelta(seconds=2)),
        nominated("v", "proportion", time=NOW + timedelta(seconds=3)),
    )
    assert scalar(engine, "SELECT awaiting_release FROM minruntime.podgroups") is False

    report = cycle(engine, NOW + timedelta(minutes=1))

    assert report.nominations.skipped == {"v": "cooldown"}
    assert [(d.uid, d.outcome.value, d.reason) for d in report.plan.decisions] == [
        ("v", "skipped", "cooldown")
    ]
    assert report.plan.decisions[0].nominated_by == ("proportion",)


def test_inside_min_runtime_the_job_is_nominated_but_not_evicted(
    engine: sa.Engine, feed: Feed
) -> None:
    cluster(feed, preempt="4h")
    feed.send(gang("hi", 4, priority=100))

    report = cycle(engine)

    assert report.nominations.nominated == ("v",)
    assert decisions(engine) == [("v", "rolled_back", "protected", ["expectedruntime"], [])]
    assert scalar(engine, "SELECT requeue_not_before FROM minruntime.podgroups") is None


def test_two_nominators_make_one_attempt_listing_both(engine: sa.Engine, feed: Feed) -> None:
    cluster(feed)
    feed.send(gang("hi", 4, priority=100), nominated("v", "proportion"))

    report = cycle(engine)

    assert decisions(engine) == [
        ("v", "committed", None, ["expectedruntime", "proportion"], ["hi"])
    ]
    # The commit acted on proportion's nomination: consumed.
    assert scalar(engine, "SELECT count(*) FROM minruntime.nominations") == 0
    registry = CollectorRegistry()
    metrics = RequeueMetrics(registry, ["proportion"])
    metrics.observe(report)
    sample = registry.get_sample_value
    assert sample("kai_requeue_nominations_total", {"plugin": "expectedruntime"}) == 1
    assert sample("kai_requeue_nominations_total", {"plugin": "proportion"}) == 1
    assert sample("kai_requeue_commits_total", {"nominated_by": "expectedruntime"}) == 1
    assert sample("kai_requeue_commits_total", {"nominated_by": "proportion"}) == 1


def test_unknown_nominator_names_are_one_finite_label(engine: sa.Engine, feed: Feed) -> None:
    cluster(feed, victim_priority=50)
    feed.send(nominated("v", "someone-elses-plugin-7"))
    report = cycle(engine)
    registry = CollectorRegistry()
    RequeueMetrics(registry, []).observe(report)
    assert registry.get_sample_value("kai_requeue_rollbacks_total", {"nominated_by": "other"}) == 1
    names = {
        sample.labels.get("nominated_by")
        for metric in registry.collect()
        for sample in metric.samples
    }
    assert "someone-elses-plugin-7" not in names


def test_external_nomination_of_a_pending_podgroup_is_skipped_not_running(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(queue("team"), node("node-1"), submitted("p", "team", 1), nominated("p"))

    cycle(engine)
    again = cycle(engine, NOW + timedelta(seconds=10))

    assert decisions(engine) == [("p", "skipped", "not_running", ["proportion"], [])]
    # The skip answered the nomination: it is consumed, not re-attempted every cycle.
    assert scalar(engine, "SELECT count(*) FROM minruntime.nominations") == 0
    assert dict(again.candidates) == {}


def test_a_nomination_made_before_the_current_run_does_not_count(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(
        queue("team"),
        node("node-1"),
        submitted("j", "team", 1),
        nominated("j", time=T0),
        allocated("j", 1, time=T0 + timedelta(minutes=1)),
    )

    report = cycle(engine)

    assert dict(report.candidates) == {}


def test_allocating_the_beneficiary_ends_its_promise(engine: sa.Engine, feed: Feed) -> None:
    requeued(engine, feed, 4)
    # The table, not the view: the view hides promises lapsed by the wall clock, and this
    # story's cooldown ends at a fixed instant (NOW + 5m) that the wall clock passes.
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.requeue_promises") == 1

    feed.send(released("v", time=NOW), allocated("hi", 4, time=NOW + timedelta(seconds=5)))

    assert scalar(engine, "SELECT count(*) FROM minruntime_state.requeue_promises") == 0


def test_a_bad_requeue_delay_annotation_uses_the_configured_default_and_says_so(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(
        config(defaultRequeueDelay="7m"),
        queue("team"),
        node("node-1", gpu=8),
        submitted(
            "v", "team", 8, priority=50, annotations={**OVERRUN, "kai.scheduler/requeue-delay": "0"}
        ),
        allocated("v", 8, time=T0),
        gang("hi", 4, priority=100),
    )

    cycle(engine)

    row = rows(
        engine, "SELECT requeue_not_before, delay_problem FROM minruntime.requeue_decisions"
    )[0]
    assert row.requeue_not_before == NOW + timedelta(minutes=7)
    assert "must be positive" in row.delay_problem


def test_a_concurrent_change_to_the_victim_retries_the_cycle_on_fresh_state(
    engine: sa.Engine, feed: Feed
) -> None:
    cluster(feed)
    feed.send(gang("hi", 4, priority=100))
    calls: list[datetime] = []

    def clock() -> datetime:
        # Read 1: the cycle's now. Read 2: the commit time, after planning and before the
        # locks: the processor applies the victim's release just then.
        calls.append(NOW)
        if len(calls) == 2:
            feed.send(released("v", time=NOW))
        return NOW

    registry = CollectorRegistry()
    worker = RequeueWorker(
        engine, WorkerOptions(topic=TOPIC), RequeueMetrics(registry, []), clock=clock
    )
    with engine.connect() as conn:
        report = worker.cycle(conn.execution_options(isolation_level="REPEATABLE READ"))

    assert report is not None
    assert registry.get_sample_value("minruntime_requeue_cycles_total", {"result": "conflict"}) == 1
    # The retry saw v released: no commit, no cooldown on a podgroup that is already gone.
    assert decisions(engine) == []
    assert (
        scalar(engine, "SELECT requeue_not_before FROM minruntime.podgroups WHERE uid = 'v'")
        is None
    )


def test_replaying_the_event_log_reproduces_decisions_cooldowns_and_promises(
    engine: sa.Engine, feed: Feed
) -> None:
    cluster(feed)
    feed.send(gang("hi", 4, priority=100), submitted("lo", "team", 1, priority=1))
    cycle(engine)
    feed.send(
        node("node-2", gpu=1),
        submitted("top", "team", 1, priority=500),
        allocated("top", 1, time=T0, node="node-2"),
        nominated("top", "proportion"),  # rolled back: the nomination stands
        nominated("lo", "proportion"),  # pending: skipped not_running, consumed
        nominated("v", "proportion"),
        released("v", time=NOW),  # ... and v is no longer running either
    )
    cycle(engine, NOW + timedelta(seconds=30))

    with repeatable_read(engine) as conn:
        shadow = create_shadow(conn, "replayed")
        report = replay(conn, read_log(conn), into=shadow.tables)
        assert report.decisions == len(decisions(engine)) == 4
        assert [check.table for check in compare(conn, shadow) if not check.equal] == []
        for query in (
            "SELECT uid, status, start_time, requeue_not_before, awaiting_release, annotations"
            " FROM {s}.podgroups ORDER BY uid",
            "SELECT uid, decided_at, outcome, reason, nominated_by, beneficiaries,"
            " requeue_not_before, decision_id, run_start, placements"
            " FROM {s}.requeue_decisions ORDER BY seq",
            # (the table: the view hides promises lapsed by the wall clock, see above)
            "SELECT * FROM {s}_state.requeue_promises ORDER BY decision_id, beneficiary, node",
            "SELECT uid, nominated_by, reason FROM {s}.nominations ORDER BY uid",
        ):
            live = conn.execute(sa.text(query.format(s="minruntime"))).all()
            assert live, query
            assert conn.execute(sa.text(query.format(s=shadow.read_schema))).all() == live

    # In parts: the committed requeue is replayed in its victim's part and in its
    # beneficiary's (the promise is the beneficiary's), however the two are split.
    for parts in (2, 3, 4):
        with ReplayInParts(
            engine.url.render_as_string(hide_password=False), parts, verify=True
        ) as split:
            result = split.run()
        assert result.report.decisions == 4
        assert [(c.table, c.equal) for c in result.checks if not c.equal] == []
        promises = {c.table: c for c in result.checks}["requeue_promises"]
        assert promises.live_rows == promises.replay_rows > 0
