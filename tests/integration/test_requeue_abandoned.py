"""``requeue.abandoned`` through the processor on the real database: the run no longer waits
for its release, the cooldown the abandoned decision wrote is cleared (not a later one), the
decision log says why, and the event is applied once."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from minruntime.audit.explain import explain
from minruntime.audit.explain_model import AbandonedRequeue
from minruntime.audit.timeline import podgroup_story
from minruntime.core.annotations import REQUEUE_NOT_BEFORE_ANNOTATION
from minruntime.core.timestamps import format_rfc3339
from minruntime.store.decisions import commit_cooldowns
from minruntime.store.schema import LIVE
from minruntime.store.shadows import LIVE as LIVE_SHADOW
from minruntime.store.unit import ReadUnit, Units
from tests.cloudevents import T0, Message, allocated, event, submitted, wire
from tests.integration.helpers import Feed, rows


def commit(engine: sa.Engine, uid: str, not_before: datetime) -> None:
    """What the requeue worker's commit writes on the podgroup."""
    with engine.begin() as conn:
        commit_cooldowns(
            conn,
            LIVE,
            [
                {
                    "uid": uid,
                    "key": REQUEUE_NOT_BEFORE_ANNOTATION,
                    "value": format_rfc3339(not_before),
                    "not_before": not_before,
                    "run_start": T0,
                }
            ],
        )


def abandoned(uid: str, not_before: datetime, **attributes: Any) -> Message:
    """The evictor's event, on the podgroups topic (keyed by the podgroup's uid)."""
    data = {
        "uid": uid,
        "decision": "d-1",
        "reason": "pdb",
        "nominatedBy": ["expectedruntime"],
        "requeueNotBefore": format_rfc3339(not_before),
        "decidedAt": format_rfc3339(T0 + timedelta(minutes=1)),
        "deadline": format_rfc3339(T0 + timedelta(minutes=16)),
        "message": "refused by a disruption budget (429)",
    }
    document = event(
        "requeue.abandoned",
        uid,
        data,
        T0 + timedelta(minutes=16),
        id="d-1.abandoned",
        source="minruntime/kube-evictor",
        **attributes,
    )
    return Message("kai.podgroups", uid.encode(), wire(document))


def state(engine: sa.Engine, uid: str) -> tuple[Any, ...]:
    ((annotations, not_before, awaiting, status),) = rows(
        engine,
        "SELECT annotations, requeue_not_before, awaiting_release, status"
        " FROM minruntime_state.podgroup_state WHERE uid = :u",
        u=uid,
    )
    return annotations, not_before, awaiting, status


def test_an_abandoned_requeue_clears_its_cooldown_and_the_wait_for_the_release(
    engine: sa.Engine, feed: Feed
) -> None:
    feed.send(submitted("x", "q", pods=2), allocated("x", 2, time=T0))
    not_before = T0 + timedelta(minutes=6)
    commit(engine, "x", not_before)
    assert state(engine, "x")[1:] == (not_before, True, "running")

    assert feed.send(abandoned("x", not_before)).applied == 1
    annotations, cooldown, awaiting, status = state(engine, "x")
    assert REQUEUE_NOT_BEFORE_ANNOTATION not in annotations
    assert (cooldown, awaiting, status) == (None, False, "running")  # the run goes on
    assert rows(
        engine,
        "SELECT outcome, reason, nominated_by, requeue_not_before"
        " FROM minruntime.requeue_decisions WHERE uid = 'x'",
    ) == [("abandoned", "pdb", ["expectedruntime"], not_before)]

    feed.send(abandoned("x", not_before))  # sent again (an evictor restarted): applied once
    assert len(rows(engine, "SELECT 1 FROM minruntime.requeue_decisions WHERE uid = 'x'")) == 1

    # explain and audit say so.
    with engine.connect() as conn:
        explanation = explain(ReadUnit(conn, LIVE_SHADOW), "x", T0 + timedelta(minutes=20), None)
    assert explanation.requeue_abandoned == AbandonedRequeue(
        T0 + timedelta(minutes=16), "pdb", not_before
    )
    [row] = [
        row for row in podgroup_story(Units(engine), "x").rows if row.type == "requeue.abandoned"
    ]
    assert row.kind == "decision"
    assert row.decision is not None
    assert (row.decision.outcome, row.decision.reason) == ("abandoned", "pdb")
    assert row.summary.startswith("requeue abandoned: pdb (decision d-1, not carried out by")


def test_a_later_decisions_cooldown_stands(engine: sa.Engine, feed: Feed) -> None:
    feed.send(submitted("y", "q", pods=1), allocated("y", 1, time=T0))
    later = T0 + timedelta(minutes=30)
    commit(engine, "y", later)
    feed.send(abandoned("y", T0 + timedelta(minutes=6)))
    assert state(engine, "y")[1:] == (later, True, "running")


def test_violations_and_the_runs_view_show_the_abandoned_requeue(
    engine: sa.Engine, feed: Feed
) -> None:
    from minruntime.audit.violations import find_violations
    from minruntime.commands.violations import render, summary
    from tests.cloudevents import queue, released

    feed.send(queue("q"), submitted("z", "q", pods=1), allocated("z", 1, time=T0))
    commit(engine, "z", T0 + timedelta(minutes=6))
    feed.send(abandoned("z", T0 + timedelta(minutes=6)))
    feed.send(released("z", time=T0 + timedelta(hours=1), reason="evicted"))
    with engine.connect() as conn:
        report = find_violations(ReadUnit(conn), since=T0, queue="q")
    (row,) = report.abandoned
    assert (row.at, row.uid, row.queue, row.reason) == (T0 + timedelta(minutes=16), "z", "q", "pdb")
    assert summary(report)["abandoned_requeues"] == [
        {"at": "2026-11-21T10:16:00Z", "uid": "z", "queue": "q", "reason": "pdb"}
    ]
    text = render(report)
    assert "1 requeue abandoned by the evictor" in text
    assert text.splitlines()[-1].split()[1:] == ["z", "q", "pdb"]
    with engine.connect() as conn:
        later = find_violations(ReadUnit(conn), since=T0 + timedelta(minutes=17))
    assert later.abandoned == ()
    (run,) = rows(
        engine,
        "SELECT requeues_abandoned, last_abandoned_at, last_abandoned_reason FROM minruntime.runs"
        " WHERE uid = 'z'",
    )
    assert tuple(run) == (1, T0 + timedelta(minutes=16), "pdb")
