"""Every kind of bad input becomes a dead letter (table + outbox); the batch goes on."""

from __future__ import annotations

import json

import pytest
import sqlalchemy as sa

from minruntime.events import decode_dead_letter
from tests.integration.helpers import (
    Feed,
    cloud_event,
    config,
    queue,
    raw,
    rows,
    scalar,
    submitted,
)

BAD = {
    "not_json": raw("kai.queues", b"{nope"),
    "not_cloudevent": raw("kai.queues", json.dumps({"hello": "world"}).encode()),
    "unknown_type": raw("kai.queues", cloud_event("queue.exploded", "a", {"name": "a"})),
    "wrong_topic": raw("kai.nodes", cloud_event("queue.upserted", "a", {"name": "a"})),
    "schema_violation": raw(
        "kai.queues", cloud_event("queue.upserted", "a", {"name": "a", "colour": "red"})
    ),
    "bad_duration": raw(
        "kai.queues", cloud_event("queue.upserted", "a", {"name": "a", "reclaimMinRuntime": "5"})
    ),
    "negative_duration": raw(
        "kai.queues",
        cloud_event("queue.upserted", "a", {"name": "a", "reclaimMinRuntime": "-5s"}),
    ),
    # PostgreSQL cannot store NUL in text or jsonb: refused, never a poisoned batch.
    "schema_violation/nul": raw(
        "kai.queues",
        cloud_event("queue.upserted", "a", {"name": "a"}, source="kai\u0000scheduler"),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_dead_lettered_and_the_rest_applied(engine: sa.Engine, case: str) -> None:
    kind = case.split("/")[0]
    feed = Feed(engine)
    outcome = feed.send(queue("before"), BAD[case], queue("after"))
    assert (outcome.applied, outcome.dead_lettered) == (2, 1)
    assert outcome.dead_letter_kinds == {kind: 1}
    assert {r.name for r in rows(engine, "SELECT name FROM minruntime.queues")} == {
        "before",
        "after",
    }
    (letter,) = rows(engine, "SELECT * FROM minruntime.dead_letters")
    assert letter.kind == kind
    assert letter.message
    assert bytes(letter.value) == BAD[case].value
    (message,) = rows(engine, "SELECT * FROM minruntime_state.outbox")
    assert message.topic == "kai.dead-letter"
    record = decode_dead_letter(bytes(message.payload))
    assert (record.error_kind, record.offset, record.topic) == (kind, letter.offset, letter.topic)
    assert letter.topic == BAD[case].topic
    assert record.original_value() == BAD[case].value


def test_a_tombstone_is_dead_lettered(engine: sa.Engine) -> None:
    outcome = Feed(engine).send(raw("kai.podgroups", None))
    assert outcome.dead_letter_kinds == {"not_json": 1}


def test_a_cycle_keeps_the_previous_tree(engine: sa.Engine) -> None:
    feed = Feed(engine)
    feed.send(queue("a"), queue("b", "a"), queue("c", "b"))
    outcome = feed.send(queue("a", "c"), queue("d", "c"))
    assert outcome.dead_letter_kinds == {"queue_cycle": 1}
    assert outcome.applied == 1
    got = {r.name: r.path for r in rows(engine, "SELECT name, path FROM minruntime.queues")}
    assert got == {"a": ["a"], "b": ["a", "b"], "c": ["a", "b", "c"], "d": ["a", "b", "c", "d"]}
    message = scalar(engine, "SELECT message FROM minruntime.dead_letters")
    assert "cycle" in message
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.outbox") == 1


def test_an_invalid_config_keeps_the_previous_config(engine: sa.Engine) -> None:
    feed = Feed(engine)
    feed.send(config("default", defaultPreemptMinRuntime="30s"))
    outcome = feed.send(
        config("default", defaultPreemptMinRuntime="-1s"),
        config("default", reclaimResolveMethod="nearest"),
        config("default", defaultRequeueDelay="0s"),
    )
    assert outcome.dead_lettered == 3
    (row,) = rows(engine, "SELECT * FROM minruntime.node_pool_configs")
    assert row.default_preempt_min_runtime.total_seconds() == 30


def test_an_inconsistent_podgroup_is_dead_lettered(engine: sa.Engine) -> None:
    feed = Feed(engine)
    bad = submitted("u", "a", [{"name": "p", "subGroup": "nope", "gpu": 1}])
    outcome = feed.send(bad, submitted("v", "a"))
    assert outcome.dead_lettered == 1
    assert [r.uid for r in rows(engine, "SELECT uid FROM minruntime.podgroups")] == ["v"]
