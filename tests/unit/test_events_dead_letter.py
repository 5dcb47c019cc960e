"""The dead-letter record: the original key and value byte for byte, where from, and why."""

from __future__ import annotations

import base64
import hashlib
import json
import os
from datetime import UTC, datetime
from typing import Any

from minruntime.events import (
    dead_letter_key,
    dead_letter_record,
    decode_dead_letter,
)
from minruntime.events.dead_letter import (
    DEAD_LETTER_KEY_MAX_BYTES,
    DEAD_LETTER_MAX_BYTES,
    KEY_PREVIEW_BYTES,
    VALUE_PREVIEW_BYTES,
)
from tests.unit.test_events_decode import rejected

T0 = datetime(2026, 11, 21, 10, 0, 1, 500000, tzinfo=UTC)


def letter(key: bytes | str | None, value: bytes | None, **fields: Any) -> bytes:
    """The dead-letter record of `key` and `value`; `fields` replace the defaults below."""
    defaults: dict[str, Any] = {
        "topic": "kai.podgroups",
        "partition": 3,
        "offset": 99,
        "kind": "not_json",
        "message": "value is not UTF-8 text",
        "time": T0,
    }
    return dead_letter_record(key=key, value=value, **{**defaults, **fields})


def test_a_utf8_record_is_kept_as_text() -> None:
    value = b'{"specversion":"1.0","type":"queue.renamed"}'
    error = rejected(value, "kai.queues")
    where = {"topic": "kai.queues", "partition": 2, "offset": 42}
    record = letter(b"leaf9", value, kind=error.kind, message=error.message, **where)
    assert json.loads(record) == {
        "key": "leaf9",
        "keyEncoding": "utf-8",
        "value": value.decode(),
        "valueEncoding": "utf-8",
        "topic": "kai.queues",
        "partition": 2,
        "offset": 42,
        "errorKind": "not_cloudevent",
        "message": error.message,
        "time": "2026-11-21T10:00:01.5Z",
        "eventId": None,
        "eventType": None,
        "keySize": 5,
        "keySha256": hashlib.sha256(b"leaf9").hexdigest(),
        "keyTruncated": False,
        "valueSize": len(value),
        "valueSha256": hashlib.sha256(value).hexdigest(),
        "valueTruncated": False,
        "headers": [],
        "headerCount": 0,
        "headersTruncated": False,
    }
    read = decode_dead_letter(record)
    assert read.original_value() == value
    assert read.original_key() == b"leaf9"


def test_a_value_that_is_not_utf8_is_base64() -> None:
    value = b"\xff\xfe\x00binary"
    record = letter(None, value, partition=0, offset=7)
    document = json.loads(record)
    assert document["valueEncoding"] == "base64"
    assert document["value"] == base64.b64encode(value).decode()
    assert document["key"] is None
    assert decode_dead_letter(record).original_value() == value


def test_a_key_that_is_not_utf8_is_base64_too() -> None:
    fields = {"partition": 0, "offset": 0, "event_id": "e-1", "event_type": "node.deleted"}
    record = letter(b"\x80", None, topic="kai.nodes", message="tombstone", **fields)
    read = decode_dead_letter(record)
    assert (read.key_encoding, read.original_key()) == ("base64", b"\x80")
    assert (read.value, read.original_value()) == (None, None)
    assert (read.event_id, read.event_type) == ("e-1", "node.deleted")


def test_the_message_is_one_line() -> None:
    message = "queue change would create a cycle:\n a -> b -> a"
    record = letter(
        "k", b"{}", topic="kai.queues", partition=0, offset=1, kind="queue_cycle", message=message
    )
    assert json.loads(record)["message"] == "queue change would create a cycle: a -> b -> a"


def test_an_800kb_binary_record_becomes_a_bounded_reference() -> None:
    # Issue 12 finding 3: it used to be a ~1 MB base64 record the broker refused.
    value = os.urandom(800_000)
    record = letter(b"pg-1", value)
    read = decode_dead_letter(record)
    assert len(record) <= DEAD_LETTER_MAX_BYTES
    assert (read.topic, read.partition, read.offset) == ("kai.podgroups", 3, 99)
    assert (read.value_size, read.value_sha256) == (len(value), hashlib.sha256(value).hexdigest())
    assert read.value_truncated is True
    assert read.value_encoding == "base64"
    assert read.original_value() == value[:VALUE_PREVIEW_BYTES]
    assert (read.key_truncated, read.original_key()) == (False, b"pg-1")


def test_a_long_utf8_value_is_cut_on_a_character_boundary() -> None:
    value = ("é" * VALUE_PREVIEW_BYTES).encode()
    read = decode_dead_letter(letter(None, value))
    assert (read.value_encoding, read.value_truncated) == ("utf-8", True)
    preview = read.original_value()
    assert preview is not None
    assert value.startswith(preview)
    assert VALUE_PREVIEW_BYTES - 1 <= len(preview) <= VALUE_PREVIEW_BYTES


def test_no_input_makes_a_dead_letter_larger_than_the_bound() -> None:
    # Control characters are escaped six-fold in JSON: the preview falls back to base64.
    worst = b"\x01" * 2_000_000
    record = letter(worst, worst, message="\x01 " * 500_000, event_id="i" * 100_000)
    read = decode_dead_letter(record)
    assert len(record) <= DEAD_LETTER_MAX_BYTES
    assert (read.key_truncated, read.value_truncated) == (True, True)
    assert read.original_key() == worst[:KEY_PREVIEW_BYTES]
    assert read.event_id is not None
    assert len(read.event_id) == 256


def test_a_small_record_is_whole_and_not_truncated() -> None:
    read = decode_dead_letter(letter(b"\x80k", b"\xff" * 100))
    assert (read.key_truncated, read.value_truncated) == (False, False)
    assert read.original_value() == b"\xff" * 100
    assert read.key_size == 2


def test_the_dead_letter_kafka_key_is_bounded() -> None:
    assert dead_letter_key(b"short") == b"short"
    assert dead_letter_key(None) is None
    long_key = b"k" * (DEAD_LETTER_KEY_MAX_BYTES + 1)
    assert dead_letter_key(long_key) == b"sha256:" + hashlib.sha256(long_key).hexdigest().encode()
