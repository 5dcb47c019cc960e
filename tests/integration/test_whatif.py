"""whatif agrees with applying the change for real and reading the views; live state untouched.

Each test seeds a scratch database, asks ``whatif`` about a change, checks that nothing in
``minruntime_state`` changed, then sends the very events the report says the change amounts
to through ``apply_batch`` (as the processor would) and reads ``preempt_protection(at)`` /
``reclaim_protection(q, at)``: the report's before and after must be exactly those answers.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import sqlalchemy as sa

from minruntime.audit.protection import ProtectionRow
from minruntime.audit.whatif import (
    Change,
    ChangeEvent,
    ConfigEdit,
    QueueEdit,
    WhatIfError,
    WhatIfReport,
    whatif,
)
from minruntime.events import decode_event, encode_event
from tests.cloudevents import T0, Message, allocated, config, queue, queue_deleted, submitted, wire
from tests.integration.helpers import STATE_TABLES, Feed, rows

M = timedelta(minutes=1)
AT = T0 + 7 * M


def seed(feed: Feed) -> None:
    """The design tree (preempt B=10m, leaf1=5m; reclaim B=10m, leaf1=0s, leaf2=3m, D=1m).

    Running: one podgroup per leaf, one in C, one in an unknown queue, one on pool gpu-a
    (own config), one on pool gpu-b (no config: the default pool's); all start at T0.
    """
    feed.send(
        queue("A"),
        queue("B", "A", preempt=10 * M, reclaim=10 * M),
        queue("C", "B"),
        queue("leaf1", "C", preempt=5 * M, reclaim="0s"),
        queue("leaf2", "C", reclaim=3 * M),
        queue("D", "B", reclaim=1 * M),
        queue("leaf3", "D"),
        config("default", defaultReclaimMinRuntime=2 * M),
        config("gpu-a", defaultPreemptMinRuntime=30 * M, reclaimResolveMethod="queue"),
    )
    for uid, where, pool in (
        ("pg-leaf1", "leaf1", None),
        ("pg-leaf2", "leaf2", None),
        ("pg-leaf3", "leaf3", None),
        ("pg-c", "C", None),
        ("pg-ghost", "ghost", None),
        ("pg-a", "nowhere", "gpu-a"),
        ("pg-b", "nowhere", "gpu-b"),
    ):
        feed.send(submitted(uid, where, 2, node_pool=pool), allocated(uid, 2, time=T0))


def live_protection(engine: sa.Engine, reclaimer: str | None) -> dict[str, ProtectionRow]:
    """What the live read surface answers at AT, read as a user would."""
    source = (
        "minruntime.preempt_protection(:at)"
        if reclaimer is None
        else "minruntime.reclaim_protection(:q, :at)"
    )
    query = f"SELECT r.*, p.node_pool FROM {source} r JOIN minruntime.podgroups p USING (uid)"
    return {
        row.uid: ProtectionRow(**row._asdict()) for row in rows(engine, query, at=AT, q=reclaimer)
    }


def state_contents(engine: sa.Engine) -> dict[str, list[Any]]:
    """Every row of every state table (and every schema name), to compare before/after."""
    with engine.connect() as conn:
        contents = {
            table: sorted(
                (
                    tuple(row)
                    for row in conn.execute(sa.text(f"SELECT * FROM minruntime_state.{table}"))
                ),
                key=repr,
            )
            for table in STATE_TABLES
        }
        contents["schemas"] = sorted(
            conn.execute(sa.text("SELECT nspname FROM pg_namespace")).scalars()
        )
    return contents


def agreed(engine: sa.Engine, change: Change, reclaimer: str | None = None) -> WhatIfReport:
    """Ask whatif, check it wrote nothing, apply its events for real, compare before/after."""
    before = live_protection(engine, reclaimer)
    untouched = state_contents(engine)
    report = whatif(engine, change, at=AT, reclaimer_queue=reclaimer)
    assert state_contents(engine) == untouched
    assert report.before == before
    outcome = Feed(engine, group="applied-for-real").send(
        *(
            Message("kai.queues", item.event.subject.encode(), encode_event(item.event))
            for item in report.events
        )
    )
    assert outcome.applied == len(report.events)
    assert report.after == live_protection(engine, reclaimer)
    assert report.changes, "the change should change something"
    return report


def event_data(report: WhatIfReport) -> list[tuple[str, dict[str, Any]]]:
    return [
        (item.event.type, item.event.data.model_dump(mode="json", by_alias=True))
        for item in report.events
    ]


def upserted_queue(
    name: str, parent: str | None, preempt: str | None, reclaim: str | None
) -> list[tuple[str, dict[str, Any]]]:
    """The event data of one ``queue.upserted`` with these fields."""
    fields = {"parentQueue": parent, "preemptMinRuntime": preempt, "reclaimMinRuntime": reclaim}
    return [("queue.upserted", {"name": name, **fields})]


def effects(report: WhatIfReport) -> dict[str, tuple[str, timedelta, str | None]]:
    return {
        change.before.uid: (change.effect, change.after.min_runtime, change.after.resolved_from)
        for change in report.changes
    }


@pytest.fixture
def feed(engine: sa.Engine) -> Feed:
    seeded = Feed(engine)
    seed(seeded)
    return seeded


def test_deepening_a_queue_value_keeps_its_other_fields(engine: sa.Engine, feed: Feed) -> None:
    report = agreed(
        engine, Change(queue_edits=[QueueEdit("leaf2", preempt_min_runtime=2 * 60 * M)])
    )
    assert event_data(report) == upserted_queue("leaf2", "C", "2h", "3m")
    assert effects(report) == {"pg-leaf2": ("longer", 120 * M, "leaf2")}
    assert (len(report.before), report.count("longer"), report.count("protected_now")) == (7, 1, 0)


def test_unsetting_a_value_inherits_from_the_parent(engine: sa.Engine, feed: Feed) -> None:
    report = agreed(engine, Change(queue_edits=[QueueEdit("leaf1", preempt_min_runtime=None)]))
    assert event_data(report) == upserted_queue("leaf1", "C", None, "0s")
    assert effects(report) == {"pg-leaf1": ("protected_now", 10 * M, "B")}


def test_reparenting_changes_the_lca_for_a_reclaimer(engine: sa.Engine, feed: Feed) -> None:
    # leaf1 reclaims from leaf3: LCA B, one step down is D (1m). Under C, siblings: leaf3 has
    # no value, so the walk goes up to C (unset) and B (10m).
    report = agreed(engine, Change(queue_edits=[QueueEdit("leaf3", parent="C")]), "leaf1")
    assert effects(report) == {"pg-leaf3": ("protected_now", 10 * M, "B")}


def test_a_new_queue_without_a_parent_is_a_root(engine: sa.Engine, feed: Feed) -> None:
    report = agreed(engine, Change(queue_edits=[QueueEdit("ghost", preempt_min_runtime=8 * M)]))
    assert event_data(report) == upserted_queue("ghost", None, "8m", None)
    assert effects(report) == {"pg-ghost": ("protected_now", 8 * M, "ghost")}


def test_deleting_a_queue_makes_its_children_roots(engine: sa.Engine, feed: Feed) -> None:
    report = agreed(engine, Change(deleted_queues=["B"]))
    assert event_data(report) == [("queue.deleted", {"name": "B"})]
    assert effects(report) == {
        "pg-leaf2": ("unprotected_now", timedelta(0), None),
        "pg-leaf3": ("unprotected_now", timedelta(0), None),
        "pg-c": ("unprotected_now", timedelta(0), None),
    }


def test_a_pool_default_change_keeps_the_other_arguments(engine: sa.Engine, feed: Feed) -> None:
    report = agreed(
        engine, Change(config_edits=[ConfigEdit("default", default_preempt_min_runtime=1 * 60 * M)])
    )
    assert event_data(report) == [
        (
            "config.updated",
            {
                "nodePool": "default",
                "defaultPreemptMinRuntime": "1h",
                "defaultReclaimMinRuntime": "2m",
                "reclaimResolveMethod": "lca",
                "defaultRequeueDelay": "5m",
            },
        )
    ]
    # gpu-a has its own config; gpu-b has none and follows the default pool.
    assert effects(report) == {
        "pg-ghost": ("protected_now", 60 * M, None),
        "pg-b": ("protected_now", 60 * M, None),
    }


def test_a_pool_without_its_own_config_starts_from_the_one_in_force(
    engine: sa.Engine, feed: Feed
) -> None:
    report = agreed(
        engine,
        Change(config_edits=[ConfigEdit("gpu-b", default_reclaim_min_runtime=20 * M)]),
        "leaf1",
    )
    assert event_data(report)[0][1]["defaultPreemptMinRuntime"] == "0s"
    assert event_data(report)[0][1]["reclaimResolveMethod"] == "lca"
    assert effects(report) == {"pg-b": ("protected_now", 20 * M, None)}


def test_lca_to_queue_method(engine: sa.Engine, feed: Feed) -> None:
    # leaf3 reclaims from leaf1 and leaf2: lca → C's side of B, C unset → B (10m); queue →
    # the victims' own values (0s, 3m), both over by AT.
    report = agreed(
        engine, Change(config_edits=[ConfigEdit(reclaim_resolve_method="queue")]), "leaf3"
    )
    assert effects(report) == {
        "pg-leaf1": ("unprotected_now", timedelta(0), "leaf1"),
        "pg-leaf2": ("unprotected_now", 3 * M, "leaf2"),
    }
    assert report.count("unprotected_now") == 2


def test_file_events_first_then_flags_merge_with_what_they_left(
    engine: sa.Engine, feed: Feed
) -> None:
    from_file = decode_event(wire(queue("leaf2", "D", reclaim=4 * M)))
    change = Change(
        events=[ChangeEvent("leaf2.json", from_file)],
        queue_edits=[QueueEdit("leaf2", preempt_min_runtime=9 * M)],
    )
    report = agreed(engine, change)
    assert [item.origin for item in report.events] == ["leaf2.json", "--queue leaf2"]
    assert event_data(report)[1][1] == {
        "name": "leaf2",
        "parentQueue": "D",
        "preemptMinRuntime": "9m",
        "reclaimMinRuntime": "4m",
    }
    assert effects(report) == {"pg-leaf2": ("shorter", 9 * M, "leaf2")}


def test_a_change_the_service_would_reject_is_one_line(engine: sa.Engine, feed: Feed) -> None:
    untouched = state_contents(engine)
    with pytest.raises(WhatIfError) as refused:
        whatif(engine, Change(queue_edits=[QueueEdit("A", parent="leaf3")]), at=AT)
    assert str(refused.value).startswith(
        "--queue A: the service would reject this change (queue_cycle): "
    )
    with pytest.raises(WhatIfError, match="--delete-queue nope: there is no queue 'nope'"):
        whatif(engine, Change(deleted_queues=["nope"]), at=AT)
    with pytest.raises(WhatIfError, match="--queue B: nothing to change"):
        whatif(engine, Change(queue_edits=[QueueEdit("B")]), at=AT)
    assert state_contents(engine) == untouched


def test_an_event_already_applied_is_skipped_as_the_service_would(
    engine: sa.Engine, feed: Feed
) -> None:
    old = queue("B", "A", preempt=10 * M, reclaim=10 * M, id="b-v1")
    feed.send(old)
    again = decode_event(wire(old))
    report = whatif(engine, Change(events=[ChangeEvent("b.json", again)]), at=AT)
    assert report.events == []
    assert report.notes == [
        "b.json: event 'b-v1' (source 'kai-scheduler') was applied already; "
        "the service would skip it as a duplicate"
    ]
    assert report.changes == []


def test_nothing_changes_when_the_value_is_the_same(engine: sa.Engine, feed: Feed) -> None:
    report = whatif(engine, Change(queue_edits=[QueueEdit("B", preempt_min_runtime=10 * M)]), at=AT)
    assert len(report.events) == 1
    assert report.changes == []
    assert report.before == report.after == live_protection(engine, None)


def test_queue_deleted_from_a_file_agrees(engine: sa.Engine, feed: Feed) -> None:
    change = Change(events=[ChangeEvent("d.json", decode_event(wire(queue_deleted("D"))))])
    report = agreed(engine, change, "leaf1")
    assert set(effects(report)) == {"pg-leaf3"}


def test_notes_say_what_a_reader_must_know(engine: sa.Engine, feed: Feed) -> None:
    moved = Change(queue_edits=[QueueEdit("leaf2", parent="nowhere")])
    report = whatif(engine, moved, at=AT, reclaimer_queue="nobody")
    assert report.notes == [
        "reclaimer queue 'nobody' is not in the queue tree: as in KAI, every podgroup then "
        "gets its node pool's defaultReclaimMinRuntime",
        "--queue leaf2: parent 'nowhere' is not a queue: leaf2 is a root until it appears",
    ]
    created = Change(queue_edits=[QueueEdit("interns", parent="C")])
    report = agreed(engine, created, reclaimer="interns")
    assert report.notes == [
        "reclaimer queue 'interns' is not in the queue tree before it: as in KAI, every "
        "podgroup then gets its node pool's defaultReclaimMinRuntime"
    ]
