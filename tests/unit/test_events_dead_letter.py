"""The dead-letter record: the original key and value byte for byte, where from, and why."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest

from minruntime.events import EventRejected, dead_letter_record, decode_dead_letter, decode_event

T0 = datetime(2026, 11, 21, 10, 0, 1, 500000, tzinfo=UTC)


def test_a_utf8_record_is_kept_as_text() -> None:
    value = b'{"specversion":"1.0","type":"queue.renamed"}'
    with pytest.raises(EventRejected) as caught:
        decode_event(value, "kai.queues")
    record = dead_letter_record(
        key=b"leaf9",
        value=value,
        topic="kai.queues",
        partition=2,
        offset=42,
        kind=caught.value.kind,
        message=caught.value.message,
        time=T0,
    )
    assert json.loads(record) == {
        "key": "leaf9",
        "keyEncoding": "utf-8",
        "value": value.decode(),
        "valueEncoding": "utf-8",
        "topic": "kai.queues",
        "partition": 2,
        "offset": 42,
        "errorKind": "not_cloudevent",
        "message": caught.value.message,
        "time": "2026-11-21T10:00:01.5Z",
        "eventId": None,
        "eventType": None,
    }
    read = decode_dead_letter(record)
    assert read.original_value() == value
    assert read.original_key() == b"leaf9"


def test_a_value_that_is_not_utf8_is_base64() -> None:
    value = b"\xff\xfe\x00binary"
    record = dead_letter_record(
        key=None,
        value=value,
        topic="kai.podgroups",
        partition=0,
        offset=7,
        kind="not_json",
        message="value is not UTF-8 text",
        time=T0,
    )
    document = json.loads(record)
    assert document["valueEncoding"] == "base64"
    assert document["value"] == base64.b64encode(value).decode()
    assert document["key"] is None
    assert decode_dead_letter(record).original_value() == value


def test_a_key_that_is_not_utf8_is_base64_too() -> None:
    record = dead_letter_record(
        key=b"\x80",
        value=None,
        topic="kai.nodes",
        partition=0,
        offset=0,
        kind="not_json",
        message="tombstone",
        time=T0,
        event_id="e-1",
        event_type="node.deleted",
    )
    read = decode_dead_letter(record)
    assert (read.key_encoding, read.original_key()) == ("base64", b"\x80")
    assert (read.value, read.original_value()) == (None, None)
    assert (read.event_id, read.event_type) == ("e-1", "node.deleted")


def test_the_message_is_one_line() -> None:
    record = dead_letter_record(
        key="k",
        value=b"{}",
        topic="kai.queues",
        partition=0,
        offset=1,
        kind="queue_cycle",
        message="queue change would create a cycle:\n a -> b -> a",
        time=T0,
    )
    assert json.loads(record)["message"] == "queue change would create a cycle: a -> b -> a"
