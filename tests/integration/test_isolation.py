"""No record can stop a partition: on real PostgreSQL, a record that fails for good is isolated.

The refusals are real PostgreSQL ones, provoked with test-only objects on the scratch database
(a CHECK constraint, an index whose row outgrows the btree limit), since the decoder's bounds
now keep such values out of the contract's own tables.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import sqlalchemy as sa

import minruntime.ingest.isolation as isolation
from minruntime.ingest import BatchOutcome, InboundRecord, apply_batch
from minruntime.ingest.isolation import apply_isolated
from tests.cloudevents import allocated, event, node, submitted, wire
from tests.integration.helpers import (
    DROP_HUGE_INDEX,
    GROUP,
    HUGE_INDEX,
    ROLES,
    Feed,
    execute,
    rows,
    scalar,
    sink,
)


@pytest.fixture
def poison_check(engine: sa.Engine) -> Iterator[None]:
    """A CHECK constraint that refuses the node named "poison" (SQLSTATE 23514)."""
    execute(
        engine,
        "ALTER TABLE minruntime_state.node_state"
        " ADD CONSTRAINT test_poison CHECK (name <> 'poison')",
    )
    yield
    execute(engine, "ALTER TABLE minruntime_state.node_state DROP CONSTRAINT test_poison")


@pytest.fixture
def huge_index(engine: sa.Engine) -> Iterator[None]:
    """An index whose row for a node named "huge-..." exceeds the btree limit (SQLSTATE 54000)."""
    execute(engine, *HUGE_INDEX)
    yield
    execute(engine, *DROP_HUGE_INDEX)


@pytest.fixture
def poison_podgroup(engine: sa.Engine) -> Iterator[None]:
    """CHECK constraints that refuse the podgroup named "poison" and a pod on node "poison"
    (SQLSTATE 23514): the podgroup writes run in pipeline mode, where a statement's error
    surfaces only when the pipeline is synced."""
    execute(
        engine,
        "ALTER TABLE minruntime_state.podgroup_state"
        " ADD CONSTRAINT test_poison_podgroup CHECK (name <> 'poison')",
        "ALTER TABLE minruntime_state.pod_state"
        " ADD CONSTRAINT test_poison_pod CHECK (node IS DISTINCT FROM 'poison')",
    )
    yield
    execute(
        engine,
        "ALTER TABLE minruntime_state.podgroup_state DROP CONSTRAINT test_poison_podgroup",
        "ALTER TABLE minruntime_state.pod_state DROP CONSTRAINT test_poison_pod",
    )


def nodes_batch(feed: Feed, names: list[str]) -> list[InboundRecord]:
    return feed.records(*(node(name) for name in names))


def dead_letters(engine: sa.Engine) -> list[Any]:
    return rows(
        engine,
        'SELECT topic, "offset", kind, message FROM minruntime.dead_letters ORDER BY "offset"',
    )


def stored_offset(engine: sa.Engine, topic: str = "kai.nodes") -> int:
    return int(
        scalar(
            engine,
            "SELECT next_offset FROM minruntime_state.consumer_offsets"
            " WHERE consumer_group = :group AND topic = :topic",
            group=GROUP,
            topic=topic,
        )
    )


def node_names(engine: sa.Engine) -> list[str]:
    return [name for (name,) in rows(engine, "SELECT name FROM minruntime.nodes ORDER BY name")]


@pytest.mark.usefixtures("poison_check")
def test_a_constraint_violation_dead_letters_that_record_and_applies_the_rest(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    names = [f"n{i:02d}" for i in range(7)] + ["poison"] + [f"n{i:02d}" for i in range(7, 12)]
    records = nodes_batch(feed, names)
    outcome = sink(engine)(records)  # before: retried as transient, then StorageUnavailableError
    assert (outcome.applied, outcome.dead_lettered) == (12, 1)
    assert outcome.dead_letter_kinds == {"unstorable": 1}
    assert outcome.next_offsets == {("kai.nodes", 0): 13}
    ((topic, offset, kind, message),) = dead_letters(engine)
    assert (topic, offset, kind) == ("kai.nodes", 7, "unstorable")
    assert "SQLSTATE 23514" in message
    assert "test_poison" in message
    assert node_names(engine) == sorted(n for n in names if n != "poison")
    assert scalar(engine, "SELECT count(*) FROM minruntime.event_log") == 12
    assert stored_offset(engine) == 13
    # The dead letter went to the outbox, once.
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.outbox") == 1

    again = sink(engine)(records)  # a redelivery after a crash: nothing applied twice
    assert (again.applied, again.dead_lettered, again.skipped_offsets) == (0, 0, 13)
    assert len(dead_letters(engine)) == 1
    assert scalar(engine, "SELECT count(*) FROM minruntime.event_log") == 12


@pytest.mark.usefixtures("poison_podgroup")
def test_a_podgroup_write_refused_inside_the_pipeline_dead_letters_that_record(
    engine: sa.Engine, feed: Feed
) -> None:
    # The state upsert (the pipeline's first statement) refuses the podgroup named "poison".
    records = feed.records(
        submitted("a", "q", pods=2),
        submitted("p", "q", pods=2, name="poison"),
        submitted("b", "q", pods=2),
    )
    outcome = sink(engine)(records)
    assert (outcome.applied, outcome.dead_lettered) == (2, 1)
    ((topic, offset, kind, message),) = dead_letters(engine)
    assert (topic, offset, kind) == ("kai.podgroups", 1, "unstorable")
    assert "SQLSTATE 23514" in message
    assert "test_poison_podgroup" in message
    assert rows(engine, "SELECT uid FROM minruntime_state.podgroup_state ORDER BY uid") == [
        ("a",),
        ("b",),
    ]
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.pod_state") == 4
    # The pods' update, after the state upsert that succeeded in the same pipeline, refuses
    # the allocation to node "poison": the whole batch's transaction is rolled back (b's
    # state stays pending), then the record alone is dead-lettered and a's applied.
    records = feed.records(allocated("a", 2, node="n1"), allocated("b", 2, node="poison"))
    outcome = sink(engine)(records)
    assert (outcome.applied, outcome.dead_lettered) == (1, 1)
    letter = dead_letters(engine)[-1]
    assert (letter.offset, letter.kind) == (4, "unstorable")
    assert "test_poison_pod" in letter.message
    assert rows(engine, "SELECT uid, status FROM minruntime_state.podgroup_state ORDER BY uid") == [
        ("a", "running"),
        ("b", "pending"),
    ]
    assert rows(
        engine, "SELECT uid, count(node) FROM minruntime_state.pod_state GROUP BY uid ORDER BY uid"
    ) == [("a", 2), ("b", 0)]
    assert scalar(engine, "SELECT count(*) FROM minruntime.event_log") == 3


@pytest.mark.usefixtures("huge_index")
def test_an_index_row_too_large_is_not_retried_as_transient(engine: sa.Engine, feed: Feed) -> None:
    records = nodes_batch(feed, ["a", "huge-1", "b", "c", "huge-2"])
    outcome = sink(engine)(records)  # before: 8 attempts (~22 s live), then exit 75
    assert (outcome.applied, outcome.dead_lettered) == (3, 2)
    letters = dead_letters(engine)
    assert [(offset, kind) for _, offset, kind, _ in letters] == [
        (1, "unstorable"),
        (4, "unstorable"),
    ]
    assert all("SQLSTATE 54000" in message for *_, message in letters)
    assert "index row" in letters[0].message
    assert node_names(engine) == ["a", "b", "c"]
    assert stored_offset(engine) == 5


def test_a_python_error_while_applying_is_isolated_too(
    engine: sa.Engine, feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fragile(conn: sa.Connection, records: Any, **options: Any) -> BatchOutcome:
        if any(record.key == b"overflow" for record in records):
            raise OverflowError("int too large to convert to float")
        return apply_batch(conn, records, **options)

    monkeypatch.setattr(isolation, "apply_batch", fragile)
    records = nodes_batch(feed, ["a", "b", "overflow", "c"])
    outcome = apply_isolated(engine, records, consumer_group=GROUP, topic_roles=ROLES)
    assert (outcome.applied, outcome.dead_lettered) == (3, 1)
    ((_, offset, kind, message),) = dead_letters(engine)
    assert (offset, kind) == (2, "unstorable")
    assert message == "OverflowError while applying it: int too large to convert to float"
    assert node_names(engine) == ["a", "b", "c"]


def test_a_transient_error_is_raised_not_dead_lettered(
    engine: sa.Engine, feed: Feed, monkeypatch: pytest.MonkeyPatch
) -> None:
    def lock_timeout(conn: sa.Connection, records: Any, **options: Any) -> BatchOutcome:
        conn.execute(sa.text("SET LOCAL lock_timeout = '1ms'"))
        conn.execute(sa.text("SELECT pg_advisory_xact_lock(4242)"))
        return apply_batch(conn, records, **options)

    monkeypatch.setattr(isolation, "apply_batch", lock_timeout)
    with engine.connect() as holder:
        holder.execute(sa.text("SELECT pg_advisory_lock(4242)"))
        try:
            with pytest.raises(sa.exc.OperationalError):
                apply_isolated(engine, nodes_batch(feed, ["a"]), consumer_group=GROUP)
        finally:
            holder.execute(sa.text("SELECT pg_advisory_unlock(4242)"))
    assert dead_letters(engine) == []
    assert node_names(engine) == []


def queue_event(id_: str, data: dict[str, Any], **kw: Any) -> bytes:
    return wire(event("queue.upserted", data["name"], data, id=id_, **kw))


def test_a_conflicting_duplicate_is_dead_lettered_across_batches(
    engine: sa.Engine, feed: Feed
) -> None:
    # Finding 5: the first to arrive won and the other was dropped silently (a counter only).
    first = queue_event("id-1", {"name": "a"})
    feed.apply([InboundRecord("kai.queues", 0, 0, b"a", first, None)])
    changed = queue_event("id-1", {"name": "a", "reclaimMinRuntime": "5m"})
    outcome = feed.apply([InboundRecord("kai.queues", 0, 1, b"a", changed, None)])
    assert (outcome.applied, outcome.duplicate_ids, outcome.dead_lettered) == (0, 0, 1)
    ((_, offset, kind, message),) = dead_letters(engine)
    assert (offset, kind) == (1, "conflicting_duplicate")
    assert "'id-1'" in message
    assert "kai.queues/0@0" in message
    assert scalar(engine, "SELECT reclaim_min_runtime FROM minruntime.queues") is None


def test_a_conflicting_duplicate_is_dead_lettered_within_a_batch(
    engine: sa.Engine, feed: Feed
) -> None:
    values = [
        queue_event("id-1", {"name": "a"}),
        queue_event("id-1", {"name": "a", "preemptMinRuntime": "1m"}),
        queue_event("id-1", {"name": "a"}),
    ]
    records = [InboundRecord("kai.queues", 0, i, b"a", v, None) for i, v in enumerate(values)]
    outcome = feed.apply(records)
    assert (outcome.applied, outcome.duplicate_ids, outcome.dead_lettered) == (1, 1, 1)
    assert [(o, k) for _, o, k, _ in dead_letters(engine)] == [(1, "conflicting_duplicate")]


def test_the_same_event_resent_with_other_whitespace_and_key_order_is_a_true_duplicate(
    engine: sa.Engine,
    feed: Feed,
) -> None:
    document = json.loads(queue_event("id-1", {"name": "a", "preemptMinRuntime": "1m"}))
    compact = json.dumps(document, separators=(",", ":")).encode()
    shuffled = json.dumps(dict(reversed(list(document.items()))), indent=2).encode()
    feed.apply([InboundRecord("kai.queues", 0, 0, b"a", compact, None)])
    across = feed.apply([InboundRecord("kai.queues", 0, 1, b"a", shuffled, None)])
    within = feed.apply(
        [
            InboundRecord("kai.queues", 0, 2, b"a", shuffled, None),
            InboundRecord("kai.queues", 0, 3, b"a", compact, None),
        ]
    )
    assert (across.duplicate_ids, across.dead_lettered) == (1, 0)
    assert (within.duplicate_ids, within.dead_lettered) == (2, 0)
    assert dead_letters(engine) == []
