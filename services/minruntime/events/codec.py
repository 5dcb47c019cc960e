"""Decoding and encoding events: the stream processor's and every producer's entry point.

``decode_event`` is on the hot path of ingestion. Valid records take one pass through
pydantic-core: a union of the per-type envelope classes discriminated by ``type`` parses the
JSON and validates envelope and data at once. Only a record that fails is looked at again,
slowly, to say precisely what is wrong (the rejection ``kind`` and a one-line message).

Both content modes of the CloudEvents Kafka binding (``minruntime.events.binding``): a
binary-mode record (attributes in ``ce_`` headers, the value is ``data``) is turned into the
equivalent structured event first (``structured_value``) and then decoded exactly as a
structured record, with the same bounds and rejection kinds. A record without headers never
looks at them: the hot path is one truth test of ``headers``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from datetime import datetime
from itertools import accumulate
from typing import Annotated, Any, Final, Union
from uuid import uuid4

from pydantic import BaseModel, Field, TypeAdapter, ValidationError
from pydantic_core import from_json, to_json

from minruntime.events.base import EventData
from minruntime.events.binding import Headers, binary_attributes
from minruntime.events.envelope import DATA_MODELS, EVENT_CLASSES, Event, RawCloudEvent
from minruntime.events.rejection import (
    NOT_CLOUDEVENT,
    NOT_FINITE,
    NOT_JSON,
    SCHEMA_VIOLATION,
    TOO_DEEP,
    EventRejected,
    not_a_cloudevent,
    rejection,
    unknown_type,
    wrong_topic,
)
from minruntime.events.topics import TOPIC_TYPES

# EventRejected is re-exported: callers may import it from here or from minruntime.events.
__all__ = ["EventRejected", "decode_event", "encode_event", "new_event", "structured_value"]

# A JSON escape of NUL (an odd number of backslashes before u0000): PostgreSQL text and jsonb
# cannot hold NUL, so such an event could never be stored; refuse it here, not in the store.
_ESCAPED_NUL: Final = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")

# The deepest JSON nesting accepted (arrays and objects; the event object itself is level 1).
# An event needs 4 (data.pods[0]); the rest is room for extension attributes. Checked before
# anything recursive (Python's json module, the storability walk) sees the record.
MAX_JSON_DEPTH: Final = 64
# What is left of JSON text once escapes and everything but quotes and brackets are removed:
# a string becomes two quotes with only its brackets between them.
_NOT_STRUCTURAL: Final = bytes(sorted(set(range(256)) - set(b'"[]{}')))
_NOT_OPENING: Final = bytes(sorted(set(range(256)) - set(b"[{")))
_STRING_MARKS: Final = re.compile(rb'"[^"]*"')
# What a JSON value that is not an object is, by the type the parsers return (null: None).
_JSON_KINDS: Final = {
    list: "an array",
    str: "a string",
    bool: "a boolean",
    int: "a number",
    float: "a number",
}
_DEPTH_STEP: Final = [1 if byte in b"[{" else -1 if byte in b"]}" else 0 for byte in range(256)]

# Every envelope class, told apart by the literal ``type`` inside pydantic-core.
_EVENT_UNION: Any = Annotated[Union[tuple(EVENT_CLASSES.values())], Field(discriminator="type")]  # noqa: UP007
_ANY_EVENT: Final[TypeAdapter[Event]] = TypeAdapter(_EVENT_UNION)
# Its pydantic-core validator, called directly: TypeAdapter.validate_json re-checks its
# arguments in Python on every call (docs/benchmarks.md, "Figures behind the code's choices").
_VALIDATE_JSON: Final = _ANY_EVENT.validator.validate_json


def decode_event(
    value: bytes | None,
    topic: str | None = None,
    *,
    topic_types: Mapping[str, frozenset[str]] = TOPIC_TYPES,
    headers: Headers | None = None,
) -> Event:
    """Decode one Kafka record value into a typed event, or raise EventRejected.

    With ``topic``, the event's type must be one that topic carries (``topic_types`` maps
    topic names to types; pass ``topic_types(...)`` when the names are configured). A topic
    missing from the mapping is a configuration error: LookupError, not a rejection.
    ``headers``: the record's headers; with ``ce_`` headers (and no structured
    ``content-type``) the record is in binary content mode (``structured_value``).
    """
    allowed = None if topic is None else topic_types.get(topic)
    if allowed is None and topic is not None:
        raise _unknown_topic(topic, topic_types)
    value = structured_value(value, headers)
    try:
        if value is None:
            raise ValueError("tombstone")
        event: Event = _VALIDATE_JSON(value, by_alias=True, by_name=False)
    except (ValidationError, ValueError):
        raise _diagnose(value, topic, allowed) from None
    # Hot path: the number of opening brackets (one pass: all other bytes deleted) bounds the
    # depth of almost every event; only an event with more than MAX_JSON_DEPTH of them (a big
    # podgroup) is measured exactly.
    if len(value.translate(None, _NOT_OPENING)) > MAX_JSON_DEPTH:
        _check_depth(value)
    # NaN and Infinity are JSON to pydantic-core, not to PostgreSQL's jsonb: a typed field
    # refuses them itself, an extension attribute only here. Cheap searches first: one byte
    # (memchr) rules out most events, then the words, then a parse that says for sure.
    if (
        (b"N" in value or b"I" in value)
        and (b"NaN" in value or b"Infinity" in value)
        and not _finite(value)
    ):
        raise EventRejected(
            NOT_FINITE,
            "a number is NaN, Infinity or -Infinity (an extension attribute included); "
            "JSON and PostgreSQL's jsonb have only finite numbers",
        )
    if allowed is not None and event.type not in allowed:
        raise wrong_topic(event.type, topic, allowed)
    # An escape needs a backslash (one byte to look for) before the escaped NUL is sought.
    if b"\\" in value and b"u0000" in value and _ESCAPED_NUL.search(value):
        raise EventRejected(
            SCHEMA_VIOLATION,
            "a string contains NUL (\\u0000), which PostgreSQL text and jsonb cannot store",
        )
    return event


def structured_value(value: bytes | None, headers: Headers | None) -> bytes | None:
    """The record as a structured-mode value: the value itself, or a binary record's event.

    A binary-mode record's attributes (its ``ce_`` headers, ``content-type`` as
    ``datacontenttype``) and ``data`` (its value, which must be one JSON object) as one
    compact JSON object, ``data`` last. Raises EventRejected when they cannot make one:
    ``bad_binary_headers``, ``not_json``, ``too_deep`` or ``not_cloudevent`` (the value is not
    a JSON object). The event itself is not validated: ``decode_event`` does that.
    """
    if headers and (attributes := binary_attributes(headers)) is not None:
        return _binary_to_structured(value, attributes)
    return value


def _binary_to_structured(value: bytes | None, attributes: dict[str, str]) -> bytes:
    try:
        if value is None:
            raise ValueError("tombstone")
        # Exactly one JSON value: trailing text would add members to the event below.
        data = from_json(value)
    except ValueError as error:
        raise _diagnose_data(value, error) from None
    if not isinstance(data, dict):
        _check_depth(value, below=1)  # the bound first, as for a structured event
        raise EventRejected(
            NOT_CLOUDEVENT,
            "not a CloudEvent: data: must be a JSON object, got "
            f"{_JSON_KINDS.get(type(data), 'null')} (binary mode: the record value is the data)",
        )
    return b"".join((to_json(attributes)[:-1], b',"data":', value, b"}"))


def _diagnose_data(value: bytes | None, error: ValueError) -> EventRejected:
    """Why a binary record's value is not one JSON value (the data)."""
    if value is None:
        return EventRejected(
            NOT_JSON,
            "record has no value (a tombstone); expected the event's data, a JSON object "
            "(binary mode)",
        )
    try:
        _json_document(value, below=1)
    except EventRejected as rejected:
        return rejected
    # Python's parser took what pydantic-core refused: a lone surrogate escape, say.
    return EventRejected(NOT_JSON, f"value is not valid JSON: {error}")


def encode_event(event: Event) -> bytes:
    """Compact UTF-8 JSON of an event: camelCase, durations as strings, times in UTC (``Z``)."""
    return event.__pydantic_serializer__.to_json(event, by_alias=True, exclude_none=True)


def new_event(
    type: str,
    data: Mapping[str, Any] | BaseModel,
    *,
    time: datetime,
    source: str = "minruntime",
    subject: str | None = None,
    id: str | None = None,
) -> Event:
    """Build a validated event; ``subject`` defaults to the data's identity, ``id`` to a uuid4.

    ``data`` is the type's data model or a mapping (camelCase or snake_case keys). Invalid
    input raises EventRejected with the same kinds and messages as decode_event.
    """
    event_class = EVENT_CLASSES.get(type)
    if event_class is None:
        raise unknown_type(type, tuple(EVENT_CLASSES))
    payload = _data_of(type, data)
    attributes = {
        "specversion": "1.0",
        "id": str(uuid4()) if id is None else id,
        "source": source,
        "type": type,
        "time": time,
        "subject": payload.subject if subject is None else subject,
        "data": payload,
    }
    try:
        return event_class.model_validate(attributes)
    except ValidationError as error:
        raise rejection(error, event_type=type) from None


def _data_of(event_type: str, data: Mapping[str, Any] | BaseModel) -> EventData:
    model = DATA_MODELS[event_type]
    if isinstance(data, model):
        return data
    if isinstance(data, BaseModel):
        raise EventRejected(
            SCHEMA_VIOLATION,
            f"data: a {type(data).__name__} is not the data of {event_type!r} "
            f"(expected {model.__name__})",
        )
    try:
        return model.model_validate(data)
    except ValidationError as error:
        raise rejection(error, prefix=("data",), event_type=event_type) from None


def _unknown_topic(topic: str, topic_types: Mapping[str, frozenset[str]]) -> LookupError:
    return LookupError(
        f"topic {topic!r} carries no known event types (known topics: "
        f"{', '.join(sorted(topic_types))}); configure its role with topic_types()"
    )


def _diagnose(value: bytes | None, topic: str | None, allowed: frozenset[str] | None) -> Exception:
    """Say precisely why ``value`` was refused: envelope first, then type, topic and data."""
    document = _parse_object(value)
    try:
        raw = RawCloudEvent.model_validate(document)
    except ValidationError as error:
        return not_a_cloudevent(error)
    event_class = EVENT_CLASSES.get(raw.type)
    if event_class is None:
        return unknown_type(raw.type, tuple(EVENT_CLASSES))
    if allowed is not None and raw.type not in allowed:
        return wrong_topic(raw.type, topic, allowed)
    try:
        event_class.model_validate_json(value or b"", by_alias=True, by_name=False)
    except ValidationError as error:
        return rejection(error, event_type=raw.type)
    # Unreachable unless the fast path and this one disagree; never accept silently.
    return EventRejected(SCHEMA_VIOLATION, f"{raw.type} event rejected by the decoder")


def _parse_object(value: bytes | None) -> dict[str, Any]:
    if value is None:
        raise EventRejected(
            NOT_JSON, "record has no value (a tombstone); expected a CloudEvent JSON object"
        )
    document = _json_document(value)
    if not isinstance(document, dict):
        raise EventRejected(
            NOT_JSON,
            f"JSON value is {_JSON_KINDS.get(type(document), 'null')}, expected an object "
            "(a CloudEvent)",
        )
    return document


def _json_document(value: bytes, below: int = 0) -> Any:
    """The JSON value of ``value`` (``below`` levels under the event), or EventRejected: not
    UTF-8, nested too deep, not JSON."""
    try:
        text = bytes(value).decode("utf-8")
    except UnicodeDecodeError as error:
        raise EventRejected(NOT_JSON, f"value is not UTF-8 text: {error}") from None
    _check_depth(value, below)  # before json.loads, which recurses once per level
    try:
        return json.loads(text)
    except ValueError as error:
        raise EventRejected(NOT_JSON, f"value is not valid JSON: {error}") from None


def json_depth(value: bytes) -> int:
    """The deepest nesting of arrays and objects in ``value`` (JSON text), without parsing it.

    Brackets inside strings do not count (an unterminated string's do: an over-estimate, for
    text that is not JSON anyway). Byte operations only, no regex in the common case (no
    string holds a bracket): it runs on the hot path for events with many brackets.
    """
    if b"\\" in value:
        # An escaped backslash first, then an escaped quote: neither ends a string.
        value = value.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = value.translate(None, _NOT_STRUCTURAL)
    # Strings without brackets are now '""': removing those pairs leaves no quote unless a
    # string holds a bracket (or the text is not JSON); only then are strings matched.
    brackets = marks.replace(b'""', b"")
    if b'"' in brackets:
        brackets = _STRING_MARKS.sub(b"", marks)
    return max(accumulate(map(_DEPTH_STEP.__getitem__, brackets), initial=0))


def _check_depth(value: bytes, below: int = 0) -> None:
    # A binary record's data is one level below the event: as deep as the event would be.
    depth = json_depth(value) + below
    if depth > MAX_JSON_DEPTH:
        counted = " (the event object counts as one)" if below else ""
        raise EventRejected(
            TOO_DEEP,
            f"JSON nested {depth} levels deep{counted}; at most {MAX_JSON_DEPTH} are accepted",
        )


def _finite(value: bytes) -> bool:
    # pydantic-core parses NaN and Infinity unless told not to; anything else in ``value`` has
    # already parsed, so a failure here can only be one of them.
    try:
        from_json(value, allow_inf_nan=False)
    except ValueError:
        return False
    return True
