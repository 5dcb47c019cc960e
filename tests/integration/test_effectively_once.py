"""Offsets stored with the state: redelivered records and repeated event ids are skipped."""

from __future__ import annotations

import sqlalchemy as sa

from minruntime.ingest import InboundRecord, apply_batch
from tests.cloudevents import allocated, event, queue, submitted, wire
from tests.integration.helpers import GROUP, Feed, rows, scalar

SNAPSHOT = (
    "SELECT (SELECT json_agg(p ORDER BY uid) FROM minruntime.podgroups p)::text,"
    " (SELECT json_agg(q ORDER BY name) FROM minruntime.queues q)::text,"
    " (SELECT count(*) FROM minruntime.event_log)"
)


def test_a_redelivered_batch_is_skipped_by_offset(engine: sa.Engine, feed: Feed) -> None:
    records = feed.records(queue("a"), submitted("u", "a", 2), allocated("u", 2))
    first = feed.apply(records)
    assert (first.applied, first.skipped_offsets) == (3, 0)
    before = rows(engine, SNAPSHOT)
    second = feed.apply(records)
    assert (second.applied, second.skipped_offsets, second.duplicate_ids) == (0, 3, 0)
    assert rows(engine, SNAPSHOT) == before
    assert (
        scalar(
            engine,
            "SELECT next_offset FROM minruntime_state.consumer_offsets"
            " WHERE consumer_group = :g AND topic = 'kai.podgroups' AND partition = 0",
            g=GROUP,
        )
        == 2
    )


def test_a_partly_redelivered_batch_applies_only_the_new_records(
    engine: sa.Engine, feed: Feed
) -> None:
    records = feed.records(submitted("u", "a"), allocated("u", 1))
    feed.apply(records[:1])
    outcome = feed.apply(records)
    assert (outcome.applied, outcome.skipped_offsets) == (1, 1)
    assert scalar(engine, "SELECT status FROM minruntime.podgroups") == "running"


def test_a_rolled_back_batch_leaves_offsets_and_state_untouched(
    engine: sa.Engine, feed: Feed
) -> None:
    records = feed.records(submitted("u", "a"))
    with engine.connect() as conn, conn.begin() as transaction:
        apply_batch(conn, records, consumer_group=GROUP)
        transaction.rollback()
    assert scalar(engine, "SELECT count(*) FROM minruntime.podgroups") == 0
    assert feed.apply(records).applied == 1


def test_offsets_are_per_consumer_group(engine: sa.Engine, feed: Feed) -> None:
    records = feed.records(queue("a"))
    feed.apply(records)
    other = Feed(engine, group="replay").apply(records)
    # Another group re-reads the record, but its event id is already applied.
    assert (other.skipped_offsets, other.duplicate_ids) == (0, 1)


def test_a_duplicate_event_id_at_a_new_offset_is_skipped_or_dead_lettered(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    value = wire(event("queue.upserted", "a", {"name": "a"}, id="same-id"))
    changed = wire(
        event("queue.upserted", "a", {"name": "a", "reclaimMinRuntime": "5s"}, id="same-id")
    )
    other_source = wire(
        event(
            "queue.upserted",
            "a",
            {"name": "a", "preemptMinRuntime": "1s"},
            id="same-id",
            source="someone-else",
        )
    )
    records = [
        InboundRecord("kai.queues", 0, offset, b"a", value, None)
        for offset, value in enumerate((value, changed, other_source))
    ]
    outcome = feed.apply(records[:2])
    # Same (source, id), other content: not applied, and not dropped silently (issue 12).
    assert (outcome.applied, outcome.duplicate_ids, outcome.dead_lettered) == (1, 0, 1)
    outcome = feed.apply(records)
    assert (outcome.applied, outcome.skipped_offsets) == (1, 2)
    (row,) = rows(engine, "SELECT * FROM minruntime.queues")
    assert row.reclaim_min_runtime is None  # the duplicate's change was not applied
    assert row.preempt_min_runtime is not None  # same id, other source: a different event
    kinds = rows(engine, "SELECT kind FROM minruntime.dead_letters")
    assert [kind for (kind,) in kinds] == ["conflicting_duplicate"]


def test_the_event_log_keeps_every_applied_event_in_order(engine: sa.Engine, feed: Feed) -> None:
    feed.send(queue("a"), submitted("u", "a"), allocated("u", 1))
    got = rows(
        engine,
        "SELECT topic, partition, \"offset\", type, subject, payload->>'type' AS payload_type"
        " FROM minruntime.event_log ORDER BY seq",
    )
    assert [(r.topic, r.offset, r.type, r.subject) for r in got] == [
        ("kai.queues", 0, "queue.upserted", "a"),
        ("kai.podgroups", 0, "podgroup.submitted", "u"),
        ("kai.podgroups", 1, "podgroup.allocated", "u"),
    ]
    assert all(r.payload_type == r.type for r in got)
