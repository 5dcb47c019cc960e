"""Every kind of bad input becomes a dead letter (table + outbox); the batch goes on."""

from __future__ import annotations

import base64
import json

import pytest
import sqlalchemy as sa

from minruntime.events import decode_dead_letter
from minruntime.ingest import InboundRecord
from tests.cloudevents import binary, config, event, queue, raw, submitted, wire
from tests.integration.helpers import Feed, rows, scalar

BAD = {
    "not_json": raw("kai.queues", b"{nope"),
    "not_cloudevent": raw("kai.queues", json.dumps({"hello": "world"}).encode()),
    "unknown_type": raw("kai.queues", wire(event("queue.exploded", "a", {"name": "a"}))),
    "wrong_topic": raw("kai.nodes", wire(event("queue.upserted", "a", {"name": "a"}))),
    "schema_violation": raw(
        "kai.queues", wire(event("queue.upserted", "a", {"name": "a", "colour": "red"}))
    ),
    "bad_duration": raw(
        "kai.queues", wire(event("queue.upserted", "a", {"name": "a", "reclaimMinRuntime": "5"}))
    ),
    "negative_duration": raw(
        "kai.queues",
        wire(event("queue.upserted", "a", {"name": "a", "reclaimMinRuntime": "-5s"})),
    ),
    # PostgreSQL cannot store NUL in text or jsonb: refused, never a poisoned batch.
    "schema_violation/nul": raw(
        "kai.queues",
        wire(event("queue.upserted", "a", {"name": "a"}, source="kai\u0000scheduler")),
    ),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_input_is_dead_lettered_and_the_rest_applied(
    engine: sa.Engine, feed: Feed, case: str
) -> None:
    kind = case.split("/")[0]
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


def test_a_cycle_keeps_the_previous_tree(engine: sa.Engine, feed: Feed) -> None:
    feed.send(queue("a"), queue("b", "a"), queue("c", "b"))
    outcome = feed.send(queue("a", "c"), queue("d", "c"))
    assert outcome.dead_letter_kinds == {"queue_cycle": 1}
    assert outcome.applied == 1
    got = {r.name: r.path for r in rows(engine, "SELECT name, path FROM minruntime.queues")}
    assert got == {"a": ["a"], "b": ["a", "b"], "c": ["a", "b", "c"], "d": ["a", "b", "c", "d"]}
    message = scalar(engine, "SELECT message FROM minruntime.dead_letters")
    assert "cycle" in message
    assert scalar(engine, "SELECT count(*) FROM minruntime_state.outbox") == 1


def test_an_invalid_config_keeps_the_previous_config(engine: sa.Engine, feed: Feed) -> None:
    feed.send(config("default", defaultPreemptMinRuntime="30s"))
    outcome = feed.send(
        config("default", defaultPreemptMinRuntime="-1s"),
        config("default", reclaimResolveMethod="nearest"),
        config("default", defaultRequeueDelay="0s"),
    )
    assert outcome.dead_lettered == 3
    (row,) = rows(engine, "SELECT * FROM minruntime.node_pool_configs")
    assert row.default_preempt_min_runtime.total_seconds() == 30


def test_an_inconsistent_podgroup_is_dead_lettered(engine: sa.Engine, feed: Feed) -> None:
    bad = submitted("u", "a", [{"name": "p", "subGroup": "nope", "gpu": 1}])
    outcome = feed.send(bad, submitted("v", "a"))
    assert outcome.dead_lettered == 1
    assert [r.uid for r in rows(engine, "SELECT uid FROM minruntime.podgroups")] == ["v"]


# --- binary content mode (the CloudEvents Kafka binding) ----------------------------------------


def _binary(feed: Feed, document: dict[str, object], key: bytes | None = None) -> InboundRecord:
    """``document`` as the CloudEvents SDK's binary-mode Kafka message, at the next offset."""
    message = binary(document)
    return _record(feed, "kai.queues", key, message.value, list(message.headers.items()))


def _record(
    feed: Feed,
    topic: str,
    key: bytes | None,
    value: bytes | None,
    headers: list[tuple[str, bytes | None]],
) -> InboundRecord:
    offset = feed.offsets[topic]
    feed.offsets[topic] += 1
    return InboundRecord(topic, 0, offset, key, value, None, headers)


def _upserted(name: str, **attributes: object) -> dict[str, object]:
    data = {"name": name, "preemptMinRuntime": "5m"}
    return event("queue.upserted", name, data, id=f"bin-{name}", source="sdk", **attributes)


def test_a_binary_record_is_applied_and_logged_as_its_structured_event(
    engine: sa.Engine, feed: Feed
) -> None:
    document = _upserted("bin-a", datacontenttype="application/json", traceparent="00-ab")
    outcome = feed.apply([_binary(feed, document, b"bin-a")])
    assert (outcome.applied, outcome.dead_lettered) == (1, 0)
    (row,) = rows(engine, "SELECT name, preempt_min_runtime FROM minruntime.queues")
    assert (row.name, row.preempt_min_runtime.total_seconds()) == ("bin-a", 300)
    (payload,) = [r.payload for r in rows(engine, "SELECT payload FROM minruntime.event_log")]
    assert payload == document  # the structured event, every attribute a string
    # The same event again in structured mode, same attributes: a duplicate, not a conflict.
    again = feed.send(raw("kai.queues", json.dumps(document).encode()))
    assert (again.duplicate_ids, again.dead_lettered) == (1, 0)
    # ... with other content (no datacontenttype): a conflicting duplicate.
    changed = {k: v for k, v in document.items() if k != "datacontenttype"}
    conflict = feed.send(raw("kai.queues", json.dumps(changed).encode()))
    assert conflict.dead_letter_kinds == {"conflicting_duplicate": 1}


def test_malformed_binary_headers_are_dead_lettered_with_the_headers(
    engine: sa.Engine, feed: Feed
) -> None:
    headers: list[tuple[str, bytes | None]] = [
        ("ce_specversion", b"1.0"),
        ("ce_id", b"bin-b"),
        ("ce_source", b"sdk"),
        ("ce_type", b"queue.upserted"),
        ("ce_time", b"2026-11-21T10:00:00Z"),
        ("ce_subject", b"bin-b"),
        ("ce_partitionkey", b"pk-b"),
        ("traceparent", b"\xff\x00"),
        ("ce_id", b"bin-b-again"),
    ]
    value = b'{"name":"bin-b"}'
    outcome = feed.apply(
        [
            _record(feed, "kai.queues", None, value, headers),
            *feed.records(queue("after")),
        ]
    )
    assert (outcome.applied, outcome.dead_letter_kinds) == (1, {"bad_binary_headers": 1})
    (letter,) = rows(engine, "SELECT * FROM minruntime.dead_letters")
    assert letter.message == "binary-mode CloudEvent: header 'ce_id' appears more than once"
    assert [h["name"] for h in letter.headers] == [name for name, _ in headers]
    assert letter.headers[7] == {
        "name": "traceparent",
        "value": base64.b64encode(b"\xff\x00").decode(),
        "valueEncoding": "base64",
    }
    (message,) = rows(engine, "SELECT * FROM minruntime_state.outbox")
    record = decode_dead_letter(bytes(message.payload))
    assert record.original_headers() == headers
    assert (record.key, record.original_value()) == (None, value)
    assert bytes(message.key) == b"pk-b"  # no record key: the partitionkey extension


def test_a_record_without_headers_keeps_null_headers(engine: sa.Engine) -> None:
    Feed(engine).send(raw("kai.queues", b"{nope"))
    assert scalar(engine, "SELECT headers FROM minruntime.dead_letters") is None
