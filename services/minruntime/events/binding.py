"""The CloudEvents Kafka protocol binding: which content mode a record uses, binary headers.

Two content modes (CONTRACT.md §1, docs/events.md "Content modes"):

- **structured**: the whole event is the record value (UTF-8 JSON). A record is structured
  when its ``content-type`` header is ``application/cloudevents+json`` (any
  ``application/cloudevents`` media type), or when it has no ``ce_`` header at all, whatever
  its other headers: a record with no headers is structured, as it always was.
- **binary**: the attributes are ``ce_``-prefixed headers (``ce_id``, ``ce_source``, ...,
  extensions too), ``content-type`` is ``datacontenttype``, and the value is the ``data``.

``binary_attributes`` reads the headers of a binary record into the attributes of the
equivalent structured event (every value a string, as the binding writes them); the codec
adds ``data`` and validates that event exactly as a structured one. Headers that cannot be
attributes are refused here with ``bad_binary_headers`` and a one-line reason. Pure: no
Kafka client, headers are the ``(name, value)`` pairs every client has (``Mapping`` too,
as the CloudEvents SDK's ``KafkaMessage`` holds them).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any, Final, TypeAlias

from pydantic_core import from_json

from minruntime.events.rejection import BAD_BINARY_HEADERS, NOT_JSON, EventRejected

Header: TypeAlias = tuple[str, bytes | None]
"""One Kafka record header: its name and value (a header may have a null value)."""
Headers: TypeAlias = Sequence[Header] | Mapping[str, bytes]
"""A record's headers: (name, value) pairs as Kafka clients give them, or a mapping."""

CE_PREFIX: Final = "ce_"
CONTENT_TYPE_HEADER: Final = "content-type"
STRUCTURED_CONTENT_TYPE: Final = "application/cloudevents+json"
BINARY_DATA_CONTENT_TYPE: Final = "application/json"
# The extension the binding maps the record key to (docs/events.md, "The record key").
PARTITIONKEY: Final = "partitionkey"

# Bounds of a binary record's headers (docs/events.md "Bounds"): an attribute header's value
# holds at most the 253 characters of an id, a source or a subject in any UTF-8 (4 bytes
# each); the count leaves room for tracing and other headers beside the attributes.
BINARY_MAX_HEADERS: Final = 64
BINARY_HEADER_MAX_BYTES: Final = 1024
# CloudEvents attribute names: lower-case letters and digits (the spec asks for at most 20).
ATTRIBUTE_NAME_MAX_CHARS: Final = 64
_ATTRIBUTE_NAME: Final = re.compile(rf"[a-z0-9]{{1,{ATTRIBUTE_NAME_MAX_CHARS}}}")
# Attributes a binary record cannot carry in a ce_ header.
_NOT_HEADERS: Final = {
    "data": "the data is the record value",
    "datacontenttype": "datacontenttype travels in the content-type header",
}
# The attributes of the contract: valid names, no pattern to match on the hot path.
_KNOWN: Final = frozenset({"specversion", "id", "source", "type", "time", "subject"})
_NAME_SHOWN: Final = 64


def header_pairs(headers: Headers | None) -> Sequence[Header]:
    """The headers as (name, value) pairs, in record order."""
    if not headers:
        return ()
    if isinstance(headers, tuple | list):
        return headers
    if isinstance(headers, Mapping):
        return list(headers.items())
    return list(headers)


def is_binary(headers: Headers | None) -> bool:
    """True when a record with these headers is in binary content mode (see the module doc)."""
    if not headers:
        return False
    attributes = False
    structured = False
    for name, value in header_pairs(headers):
        lower = name.lower()
        if lower.startswith(CE_PREFIX):
            attributes = True
        elif lower == CONTENT_TYPE_HEADER and value is not None:
            structured = structured or _media_type(value).startswith(b"application/cloudevents")
    return attributes and not structured


def binary_attributes(headers: Headers | None) -> dict[str, str] | None:
    """The attributes of a binary record's event (``datacontenttype`` included), without data;
    None when the record is in structured mode (``is_binary`` is false).

    One pass over the headers (the values of a valid record are only decoded). Raises
    EventRejected: ``bad_binary_headers`` for headers that cannot be attributes, ``not_json``
    for a ``content-type`` that is not JSON (the data must be a JSON object).
    """
    pairs = header_pairs(headers)
    if len(pairs) > BINARY_MAX_HEADERS:
        _refuse_if_binary(
            headers,
            f"the record has {len(pairs)} headers; at most {BINARY_MAX_HEADERS} are accepted",
        )
        return None
    found: dict[str, str] = {}
    ce_headers = False
    for name, value in pairs:
        lower = name.lower()
        if lower[:3] == CE_PREFIX:
            attribute = lower[3:]
            ce_headers = True
            if attribute not in _KNOWN and (problem := _not_an_attribute(name, attribute)):
                _refuse_if_binary(headers, problem)
                return None
        elif lower == CONTENT_TYPE_HEADER:
            attribute = "datacontenttype"
        else:
            continue  # not an attribute (tracing, ...): kept with the record, not in the event
        if attribute in found:
            _refuse_if_binary(headers, f"header {_shown(name)} appears more than once")
            return None
        if value is None or len(value) > BINARY_HEADER_MAX_BYTES:
            _refuse_if_binary(headers, _unreadable(name, value))
            return None
        try:
            found[attribute] = value.decode("utf-8")
        except UnicodeDecodeError as error:
            reason = (
                f"header {_shown(name)} is not UTF-8 text ({error.reason} at byte {error.start})"
            )
            _refuse_if_binary(headers, reason)
            return None
    if not ce_headers:
        return None  # structured mode, as a record without headers
    content_type = found.get("datacontenttype")
    if content_type is not None and content_type != BINARY_DATA_CONTENT_TYPE:
        if content_type.lower().startswith("application/cloudevents"):
            return None  # structured mode: the ce_ headers are not attributes
        if not _is_json(content_type):
            raise EventRejected(
                NOT_JSON,
                f"content-type {content_type[:_NAME_SHOWN]!r} is not JSON: in binary mode the "
                f"record value is the event's data, a JSON object ({BINARY_DATA_CONTENT_TYPE})",
            )
    if "id" not in found:
        raise _bad("header 'ce_id' (the event id) is missing")
    return found


def _not_an_attribute(name: str, attribute: str) -> str | None:
    if not _ATTRIBUTE_NAME.fullmatch(attribute):
        return (
            f"header {_shown(name)} does not name a CloudEvents attribute (after ce_: "
            f"1-{ATTRIBUTE_NAME_MAX_CHARS} lower-case letters or digits)"
        )
    if attribute in _NOT_HEADERS:
        return f"header {_shown(name)} is not allowed: {_NOT_HEADERS[attribute]}"
    return None


def _refuse_if_binary(headers: Headers | None, reason: str) -> None:
    """Refuse a binary record's headers; a structured record's are not attributes at all."""
    if is_binary(headers):
        raise _bad(reason)


def _unreadable(name: str, value: bytes | None) -> str:
    if value is None:
        return f"header {_shown(name)} has no value (null)"
    return (
        f"header {_shown(name)} is {len(value)} bytes long; at most "
        f"{BINARY_HEADER_MAX_BYTES} are accepted"
    )


def binary_headers(event: Mapping[str, Any]) -> tuple[list[tuple[str, bytes]], Any]:
    """A structured event (a JSON object) in binary mode: (headers, data).

    Every attribute but ``data`` becomes a ``ce_`` header (a string as is, other JSON values
    as JSON text); ``datacontenttype``, when the event has one, the ``content-type`` header
    (as the SDK's ``to_binary`` does: the two modes then carry the same attributes).
    """
    headers: list[tuple[str, bytes]] = []
    for name, value in event.items():
        if name == "data" or value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, separators=(",", ":"))
        header = CONTENT_TYPE_HEADER if name == "datacontenttype" else CE_PREFIX + name
        headers.append((header, text.encode()))
    return headers, event.get("data")


def header_text(headers: Headers | None, attribute: str) -> str | None:
    """The value of the ``ce_<attribute>`` header as text, when there is exactly one and it is
    UTF-8 (best effort, for the record key of a record that may be malformed)."""
    wanted = CE_PREFIX + attribute
    values = [value for name, value in header_pairs(headers) if name.lower() == wanted]
    if len(values) != 1 or values[0] is None:
        return None
    try:
        return values[0].decode("utf-8")
    except UnicodeDecodeError:
        return None


def record_key(key: bytes | None, value: bytes | None, headers: Headers | None) -> bytes | None:
    """The key rule (docs/events.md, "The record key"): the record's own key; a record without
    one is keyed by its ``partitionkey`` extension, else by its subject (None when it has
    neither, or they cannot be read: best effort, for records that may be malformed)."""
    if key is not None:
        return key
    if is_binary(headers):
        found = header_text(headers, PARTITIONKEY) or header_text(headers, "subject")
        return None if not found else found.encode("utf-8")
    if value is None:
        return None
    try:
        document = from_json(value)  # bounded recursion, no exception but ValueError
    except ValueError:
        return None
    if not isinstance(document, dict):
        return None
    for attribute in (PARTITIONKEY, "subject"):
        found = document.get(attribute)
        if isinstance(found, str) and found:
            return found.encode("utf-8", "surrogatepass")
    return None


def _media_type(value: bytes) -> bytes:
    return value.split(b";", 1)[0].strip().lower()


def _is_json(content_type: str) -> bool:
    media = _media_type(content_type.encode())
    return media in (b"application/json", b"text/json") or media.endswith(b"+json")


def _shown(name: str) -> str:
    return repr(name if len(name) <= _NAME_SHOWN else name[: _NAME_SHOWN - 1] + "\u2026")


def _bad(reason: str) -> EventRejected:
    return EventRejected(BAD_BINARY_HEADERS, f"binary-mode CloudEvent: {reason}")
