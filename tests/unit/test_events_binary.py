"""Both content modes of the CloudEvents Kafka binding, produced by the official SDK.

The records are made by the CloudEvents Python SDK (``cloudevents.core.bindings.kafka``,
its ``KafkaMessage``: headers, key, value) and decoded by ours: a binary-mode record must
decode to the same event as its structured twin, be refused with the same kinds, and its
headers that cannot be attributes get ``bad_binary_headers`` with a one-line reason.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from cloudevents.core.bindings import kafka
from hypothesis import given, settings

from minruntime.events import (
    BAD_BINARY_HEADERS,
    BINARY_HEADER_MAX_BYTES,
    BINARY_MAX_HEADERS,
    EVENT_CLASSES,
    TOPIC_TYPES,
    Event,
    binary_headers,
    decode_dead_letter,
    decode_event,
    encode_event,
    is_binary,
    record_key,
    structured_value,
)
from minruntime.events.dead_letter import DEAD_LETTER_MAX_BYTES, HEADERS_KEPT
from tests import cloudevents as ce
from tests.unit.test_events_dead_letter import letter
from tests.unit.test_events_decode import EXAMPLES, rejected, submitted
from tests.unit.test_events_roundtrip import events

PODGROUPS = "kai.podgroups"


def decode(message: kafka.KafkaMessage, topic: str | None = PODGROUPS) -> Event:
    return decode_event(message.value, topic, headers=message.headers)


def headers_of(**attributes: str) -> list[tuple[str, bytes | None]]:
    return [(f"ce_{name}", value.encode()) for name, value in attributes.items()]


DELETED = ce.deleted("pg-1", id="e-1", source="tests")
DELETED_HEADERS = [
    *headers_of(specversion="1.0", id="e-1", source="tests", type="podgroup.deleted"),
    ("ce_time", b"2026-11-21T10:00:00Z"),
    ("ce_subject", b"pg-1"),
]


# --- the SDK's records decode in both modes --------------------------------------------------


@pytest.mark.parametrize("event_type", sorted(EVENT_CLASSES))
def test_every_example_decodes_in_both_modes_from_the_sdk(event_type: str) -> None:
    document = json.loads((EXAMPLES / f"{event_type}.json").read_bytes())
    topic = next(topic for topic, types in TOPIC_TYPES.items() if event_type in types)
    expected = decode_event(json.dumps(document).encode(), topic)
    as_binary, as_structured = ce.binary(document), ce.structured(document)
    assert any(name.startswith("ce_") for name in as_binary.headers)
    assert as_structured.headers == {"content-type": b"application/cloudevents+json"}
    assert decode(as_binary, topic) == expected
    assert decode(as_structured, topic) == expected


@settings(max_examples=200, deadline=None)
@given(events())
def test_a_binary_record_decodes_to_its_structured_twin(event: Event) -> None:
    document = json.loads(encode_event(event))
    assert decode(ce.binary(document), None) == event
    assert decode(ce.structured(document), None) == event


def test_the_binary_payload_is_the_equivalent_structured_event() -> None:
    document = {**submitted(), "datacontenttype": "application/json", "traceparent": "00-ab"}
    message = ce.binary(document)
    payload = structured_value(message.value, message.headers)
    assert payload is not None
    # What the event log stores: the SDK's structured event, the same JSON value.
    assert json.loads(payload) == json.loads(ce.structured(document).value)
    assert list(json.loads(payload))[:6] == [
        "specversion",
        "id",
        "source",
        "type",
        "time",
        "subject",
    ]
    assert list(json.loads(payload))[-1] == "data"
    assert decode_event(payload, PODGROUPS) == decode(message)


def test_headers_as_kafka_clients_give_them_decode_too() -> None:
    message = ce.binary(DELETED)
    pairs = list(message.headers.items())  # aiokafka: a tuple of (str, bytes)
    assert decode_event(message.value, PODGROUPS, headers=tuple(pairs)) == decode(message)
    # Attribute header names are read case-insensitively, as the SDK does.
    shouted = [(name.upper(), value) for name, value in pairs]
    assert decode_event(message.value, PODGROUPS, headers=shouted) == decode(message)


def test_a_record_without_ce_headers_is_structured_as_before() -> None:
    value = json.dumps(DELETED).encode()
    expected = decode_event(value, PODGROUPS)
    others = (
        None,
        (),
        [("traceparent", b"00-ab")],
        [("content-type", b"application/json")],
        [("content-type", b"text/plain"), ("content-type", b"\xff")],
        [(f"x-{n}", None) for n in range(2 * BINARY_MAX_HEADERS)],
    )
    for headers in others:
        assert not is_binary(headers)
        assert structured_value(value, headers) is value
        assert decode_event(value, PODGROUPS, headers=headers) == expected


def test_a_structured_content_type_wins_over_ce_headers() -> None:
    # The binding: content-type application/cloudevents+json is structured; ce_ headers are
    # then not attributes (here they would make another event).
    value = json.dumps(DELETED).encode()
    headers = [
        ("content-type", b"application/cloudevents+json; charset=utf-8"),
        ("ce_id", b"other"),
        ("ce_id", b"\xff"),  # would be malformed headers in binary mode
    ]
    assert not is_binary(headers)
    assert decode_event(value, PODGROUPS, headers=headers).id == "e-1"


def test_produce_in_binary_mode_sends_what_the_sdk_reads() -> None:
    headers, data = binary_headers({**DELETED, "datacontenttype": "application/json"})
    value = json.dumps(data).encode()
    message = kafka.KafkaMessage(headers=dict(headers), key=b"pg-1", value=value)
    read = kafka.from_kafka_event(message)
    assert read.get_id() == "e-1"
    assert read.get_data() == {"uid": "pg-1"}
    assert read.get_extension("partitionkey") == "pg-1"
    assert decode(message) == decode_event(json.dumps(DELETED).encode(), PODGROUPS)


# --- the record key --------------------------------------------------------------------------


def test_the_record_key_is_the_key_else_the_partitionkey_else_the_subject() -> None:
    keyed = {**DELETED, "partitionkey": "pk-1"}
    message = ce.binary(keyed)
    assert message.key == "pk-1"  # the SDK's default key mapper: partitionkey
    assert record_key(b"k", message.value, message.headers) == b"k"
    assert record_key(None, message.value, message.headers) == b"pk-1"
    assert record_key(None, ce.binary(DELETED).value, ce.binary(DELETED).headers) == b"pg-1"
    # Structured records follow the same rule (their attributes are in the value).
    assert record_key(None, json.dumps(keyed).encode(), None) == b"pk-1"
    assert record_key(None, json.dumps(DELETED).encode(), None) == b"pg-1"
    assert record_key(None, b"not json", None) is None
    assert record_key(None, None, [("ce_id", b"\xff")]) is None


# --- the same rejections in both modes -------------------------------------------------------


SAME_KINDS = {
    "bad duration": (
        "queue.upserted",
        "q",
        {"name": "q", "reclaimMinRuntime": "1h-30m"},
        "bad_duration",
    ),
    "unknown field": ("podgroup.deleted", "pg-1", {"uid": "pg-1", "uuid": "x"}, None),
    "subject mismatch": ("podgroup.deleted", "pg-2", {"uid": "pg-1"}, "schema_violation"),
    "unknown type": ("podgroup.renamed", "pg-1", {"uid": "pg-1"}, "unknown_type"),
    "wrong topic": ("node.deleted", "n", {"name": "n"}, "wrong_topic"),
    "too long": ("podgroup.deleted", "p" * 254, {"uid": "p" * 254}, "too_long"),
    "not finite": ("podgroup.submitted", "pg-1", None, "not_finite"),
    "NUL": ("podgroup.deleted", "pg-\u0000", {"uid": "pg-\u0000"}, "schema_violation"),
    "gpu out of range": ("node.upserted", "n", {"name": "n", "gpu": 1e9}, "out_of_range"),
}


@pytest.mark.parametrize("case", sorted(SAME_KINDS))
def test_a_bad_event_is_refused_alike_in_both_modes(case: str) -> None:
    event_type, subject, data, kind = SAME_KINDS[case]
    topic = "kai.nodes" if event_type.startswith("node.") and case != "wrong topic" else None
    topic = topic or ("kai.queues" if event_type.startswith("queue.") else PODGROUPS)
    if data is None:  # NaN in data: JSON text the SDK would not write
        value = json.dumps(submitted(pods=[{"name": "p", "gpu": float("nan")}])).encode()
        document = json.loads(value)
        data_value = json.dumps(document.pop("data")).encode()
        headers = binary_headers(document)[0]
    else:
        document = ce.event(event_type, subject, data)
        value = json.dumps(document).encode()
        message = ce.binary(document)
        data_value, headers = message.value, list(message.headers.items())
    as_structured = rejected(value, topic)
    as_binary = rejected(data_value, topic, headers)
    assert (as_binary.kind, as_binary.message) == (as_structured.kind, as_structured.message)
    if kind is not None:
        assert as_binary.kind == kind


def test_a_missing_attribute_or_a_bad_time_is_refused_alike() -> None:
    for attribute, bad in (("source", None), ("time", "yesterday"), ("specversion", "0.3")):
        document = {**DELETED}
        if bad is None:
            del document[attribute]
        else:
            document[attribute] = bad
        headers, data = binary_headers(document)
        as_structured = rejected(json.dumps(document).encode(), PODGROUPS)
        as_binary = rejected(json.dumps(data).encode(), PODGROUPS, headers)
        assert (as_binary.kind, as_binary.message) == (as_structured.kind, as_structured.message)
        assert as_binary.kind == "not_cloudevent"


def test_the_data_of_a_binary_record_must_be_one_json_object() -> None:
    cases = {
        None: ("not_json", "tombstone"),
        b"\xff{}": ("not_json", "not UTF-8"),
        b"{": ("not_json", "not valid JSON"),
        b"[1]": ("not_cloudevent", "must be a JSON object, got an array"),
        b'"x"': ("not_cloudevent", "got a string"),
        # Trailing text would add members to the structured event: refused.
        b'{"uid":"pg-1"},"subject":"pg-2"': ("not_json", "not valid JSON"),
        b"[" * 64 + b"]" * 64: ("too_deep", "65 levels"),
        b'{"a":' * 300 + b"1" + b"}" * 300: ("too_deep", "301 levels"),
    }
    for value, (kind, words) in cases.items():
        error = rejected(value, PODGROUPS, DELETED_HEADERS)
        assert error.kind == kind, value
        assert words in error.message, (value, error.message)


def test_a_content_type_that_is_not_json_is_refused() -> None:
    headers = [*DELETED_HEADERS, ("content-type", b"application/avro")]
    error = rejected(b'{"uid":"pg-1"}', PODGROUPS, headers)
    assert error.kind == "not_json"
    assert "content-type 'application/avro' is not JSON" in error.message
    for json_type in (b"application/json; charset=utf-8", b"text/json", b"application/x+json"):
        decode_event(
            b'{"uid":"pg-1"}', PODGROUPS, headers=[*DELETED_HEADERS, ("content-type", json_type)]
        )


# --- malformed headers: bad_binary_headers ---------------------------------------------------


MALFORMED = {
    "not UTF-8": ([("ce_trace", b"\xfftests")], "header 'ce_trace' is not UTF-8 text"),
    "duplicated": ([("ce_id", b"e-2")], "header 'ce_id' appears more than once"),
    "duplicated in another case": ([("CE_ID", b"e-1")], "header 'CE_ID' appears more than once"),
    "two content types": (
        [("content-type", b"application/json"), ("Content-Type", b"application/json")],
        "header 'Content-Type' appears more than once",
    ),
    "oversized": (
        [("ce_trace", b"x" * (BINARY_HEADER_MAX_BYTES + 1))],
        f"header 'ce_trace' is {BINARY_HEADER_MAX_BYTES + 1} bytes long; at most 1024",
    ),
    "null value": ([("ce_trace", None)], "header 'ce_trace' has no value"),
    "not an attribute name": (
        [("ce_trace-id", b"x")],
        "header 'ce_trace-id' does not name a CloudEvents attribute",
    ),
    "data in a header": ([("ce_data", b"{}")], "header 'ce_data' is not allowed"),
    "datacontenttype in a header": (
        [("ce_datacontenttype", b"application/json")],
        "datacontenttype travels in the content-type header",
    ),
    "too many": (
        [(f"x-{n}", b"") for n in range(BINARY_MAX_HEADERS)],
        f"the record has {len(DELETED_HEADERS) + BINARY_MAX_HEADERS} headers; at most 64",
    ),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_headers_are_refused_with_their_own_kind(case: str) -> None:
    extra, reason = MALFORMED[case]
    error = rejected(b'{"uid":"pg-1"}', PODGROUPS, [*DELETED_HEADERS, *extra])
    assert error.kind == BAD_BINARY_HEADERS
    assert error.message.startswith("binary-mode CloudEvent: ")
    assert reason in error.message


def test_a_binary_record_without_ce_id_is_refused() -> None:
    headers = [(name, value) for name, value in DELETED_HEADERS if name != "ce_id"]
    error = rejected(b'{"uid":"pg-1"}', PODGROUPS, headers)
    assert (error.kind, error.message) == (
        BAD_BINARY_HEADERS,
        "binary-mode CloudEvent: header 'ce_id' (the event id) is missing",
    )


def test_the_limits_themselves_are_accepted() -> None:
    headers = [*DELETED_HEADERS, ("ce_trace", b"x" * BINARY_HEADER_MAX_BYTES)]
    headers += [(f"x-{n}", b"") for n in range(BINARY_MAX_HEADERS - len(headers))]
    assert decode_event(b'{"uid":"pg-1"}', PODGROUPS, headers=headers).id == "e-1"


def test_a_long_header_name_is_cut_in_the_message() -> None:
    error = rejected(b"{}", PODGROUPS, [*DELETED_HEADERS, ("ce_" + "a" * 5000, b"x")])
    assert error.kind == BAD_BINARY_HEADERS
    assert len(error.message) < 300


# --- dead letters keep the headers -----------------------------------------------------------


def test_a_dead_letter_keeps_the_original_headers() -> None:
    headers = [*DELETED_HEADERS, ("ce_trace", b"\xff\xfe"), ("x-null", None)]
    error = rejected(b'{"uid":"pg-1"}', PODGROUPS, headers)
    where = {"partition": 0, "offset": 3, "headers": headers}
    record = letter(None, b'{"uid":"pg-1"}', kind=error.kind, message=error.message, **where)
    document = json.loads(record)
    assert document["headerCount"] == len(headers)
    assert document["headersTruncated"] is False
    assert document["headers"][0] == {
        "name": "ce_specversion",
        "value": "1.0",
        "valueEncoding": "utf-8",
        "valueSize": 3,
        "valueSha256": document["headers"][0]["valueSha256"],
        "truncated": False,
    }
    assert document["headers"][-2]["valueEncoding"] == "base64"
    assert document["headers"][-2]["value"] == base64.b64encode(b"\xff\xfe").decode()
    read = decode_dead_letter(record)
    # Everything needed to send the record again as it came.
    assert read.original_headers() == headers
    assert read.original_value() == b'{"uid":"pg-1"}'


def test_a_dead_letter_with_huge_headers_stays_bounded() -> None:
    worst = b"\x01" * 1_000_000
    headers = [("\x01" * 10_000 + str(n), worst) for n in range(200)]
    where = {"partition": 0, "offset": 0, "event_id": "i" * 100_000, "headers": headers}
    record = letter(worst, worst, kind=BAD_BINARY_HEADERS, message="\x01 " * 500_000, **where)
    assert len(record) <= DEAD_LETTER_MAX_BYTES
    read = decode_dead_letter(record)
    assert (read.header_count, len(read.headers), read.headers_truncated) == (
        200,
        HEADERS_KEPT,
        True,
    )
    assert all(header.truncated for header in read.headers)
    assert read.headers[0].value_size == len(worst)


# --- minruntime produce --mode binary --------------------------------------------------------


def test_produce_prepares_both_modes_keyed_by_the_subject(tmp_path: Path) -> None:
    from minruntime.produce import InvalidEventFileError, prepare_files
    from minruntime.settings import Settings

    events_file = tmp_path / "events.jsonl"
    events_file.write_text(
        json.dumps({"type": "podgroup.deleted", "data": {"uid": "pg-1"}, "id": "e-1"})
        + "\n"
        + json.dumps({"type": "node.upserted", "data": {"name": "n1", "gpu": 8}})
        + "\n"
    )
    settings = Settings()
    [plain, _] = prepare_files([str(events_file)], settings)
    [as_binary, node_binary] = prepare_files([str(events_file)], settings, "binary")
    assert (plain.headers, plain.key) == ((), b"pg-1")
    assert (as_binary.topic, as_binary.key) == (plain.topic, b"pg-1")
    assert json.loads(as_binary.value) == {"uid": "pg-1"}
    headers = dict(as_binary.headers)
    assert headers["ce_id"] == b"e-1"
    assert headers["ce_type"] == b"podgroup.deleted"
    assert headers["ce_source"] == b"minruntime-cli"
    assert "content-type" not in headers  # as the SDK: only with a datacontenttype
    # The SDK reads it, and our decoder gives the structured twin's event.
    message = kafka.KafkaMessage(headers=headers, key=as_binary.key, value=as_binary.value)
    assert kafka.from_kafka_event(message).get_subject() == "pg-1"
    sent = decode_event(as_binary.value, plain.topic, headers=as_binary.headers)
    twin = decode_event(plain.value, plain.topic)
    assert sent.model_dump(exclude={"time"}) == twin.model_dump(exclude={"time"})
    assert dict(node_binary.headers)["ce_subject"] == b"n1"
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"type": "node.upserted", "data": {"name": "n1", "gpu": -1}}))
    with pytest.raises(InvalidEventFileError, match="schema_violation"):
        prepare_files([str(bad)], settings, "binary")
