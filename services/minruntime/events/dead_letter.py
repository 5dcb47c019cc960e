"""The dead-letter record: an input record that could not be applied, and why.

Nothing is dropped silently (CONTRACT.md §1): the record keeps the original key and value
byte for byte (as UTF-8 text when they are UTF-8, else base64 with an encoding flag), where
it came from, a machine-readable ``errorKind`` and a one-line ``message``.

Bounded (docs/events.md, "Bounded dead letters"): a dead letter must never be larger than the
broker accepts, or it blocks every message behind it in the outbox. A key or value larger than
its preview size is published as a preview of its first bytes with ``keyTruncated`` /
``valueTruncated`` set; the size and SHA-256 of the original are always given, and the
original itself stays in the database (``dead_letter_log``, unique by topic, partition and
offset, which the record names). The whole record is at most ``DEAD_LETTER_MAX_BYTES``.

Headers (a binary-mode CloudEvent's attributes, tracing, ...) are kept in record order, each
as ``name``, ``value`` (UTF-8 text or base64, as ``valueEncoding`` says), so the record can be
sent again as it came: at most ``HEADERS_KEPT`` of them, a value previewed beyond
``HEADER_PREVIEW_BYTES`` and a name cut beyond ``HEADER_NAME_MAX_CHARS`` (``truncated`` says
so, ``valueSize`` and ``valueSha256`` describe the original value; the database keeps all).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Sequence
from datetime import datetime
from typing import Final, Literal

from pydantic import ConfigDict, Field

from minruntime.events.base import WIRE_CONFIG, WireModel
from minruntime.events.types import Count, Name, Offset, Timestamp

Encoding = Literal["utf-8", "base64"]

# Previews: large enough that every sane event is published whole (events are a few KiB),
# small enough that a record stays far below Kafka's default 1 MiB (broker message.max.bytes,
# producer max_request_size) even base64-encoded and JSON-escaped.
VALUE_PREVIEW_BYTES: Final = 64 * 1024
KEY_PREVIEW_BYTES: Final = 4 * 1024
# The human message, the event id and the event type are cut to these many characters.
MESSAGE_MAX_CHARS: Final = 1024
ATTRIBUTE_MAX_CHARS: Final = 256
# The largest encoded dead letter: a test proves no input exceeds it.
DEAD_LETTER_MAX_BYTES: Final = 256 * 1024
# The Kafka key of a dead letter: the original key, or its digest when that is longer.
DEAD_LETTER_KEY_MAX_BYTES: Final = 1024
# The record's headers: how many are kept, how much of each (a binary-mode attribute header
# is at most 1 KiB, so a valid one is always whole).
HEADERS_KEPT: Final = 64
HEADER_PREVIEW_BYTES: Final = 1024
HEADER_NAME_MAX_CHARS: Final = 128


class DeadLetterHeader(WireModel):
    """One header of the original record."""

    model_config = ConfigDict(**{**WIRE_CONFIG, "extra": "ignore"})

    name: str
    """The header name (cut to HEADER_NAME_MAX_CHARS characters: then ``truncated``)."""
    value: str | None = None
    """The header value (null when the header had none), encoded as valueEncoding says."""
    value_encoding: Encoding = "utf-8"
    """utf-8: value is the text itself; base64: the value was not UTF-8."""
    value_size: Count | None = None
    """Size in bytes of the original value (null when it had none)."""
    value_sha256: str | None = None
    """SHA-256 (hex) of the original value bytes (null when it had none)."""
    truncated: bool = False
    """True: ``value`` is only a preview of the value's first bytes, or the name was cut."""

    def original_value(self) -> bytes | None:
        """The original value bytes (of the preview, when truncated)."""
        return _decode(self.value, self.value_encoding)


class DeadLetterRecord(WireModel):
    """One kai.dead-letter record (a plain JSON object, not a CloudEvent)."""

    model_config = ConfigDict(**{**WIRE_CONFIG, "extra": "ignore"})

    key: str | None = None
    """The original record key (null when it had none), encoded as keyEncoding says."""
    key_encoding: Encoding = "utf-8"
    """utf-8: key is the text itself; base64: the key was not UTF-8."""
    value: str | None = None
    """The original record value (null for a tombstone), encoded as valueEncoding says."""
    value_encoding: Encoding = "utf-8"
    """utf-8: value is the text itself; base64: the value was not UTF-8."""
    topic: Name
    """The topic the record was consumed from."""
    partition: Count
    """Its partition."""
    offset: Offset
    """Its offset in that partition."""
    error_kind: Name
    """Machine-readable reason: a rejection kind of decode_event or of the rule engine."""
    message: str
    """One line a person can act on."""
    time: Timestamp
    """When the record was dead-lettered (processing time, UTC)."""
    event_id: str | None = Field(default=None, min_length=1)
    """The CloudEvent id, when the envelope could be read."""
    event_type: str | None = Field(default=None, min_length=1)
    """The CloudEvent type, when the envelope could be read."""
    key_size: Count | None = None
    """Size in bytes of the original key (null when it had none)."""
    key_sha256: str | None = None
    """SHA-256 (hex) of the original key bytes (null when it had none)."""
    key_truncated: bool = False
    """True: ``key`` is only a preview of the first bytes of the key (the original is stored)."""
    value_size: Count | None = None
    """Size in bytes of the original value (null for a tombstone)."""
    value_sha256: str | None = None
    """SHA-256 (hex) of the original value bytes (null for a tombstone)."""
    value_truncated: bool = False
    """True: ``value`` is only a preview of the value's first bytes (the original is in the
    database, dead_letter_log by topic, partition and offset)."""
    headers: tuple[DeadLetterHeader, ...] = ()
    """The original record's headers, in order (empty when it had none)."""
    header_count: Count = 0
    """How many headers the original record had (more than ``headers`` holds when cut)."""
    headers_truncated: bool = False
    """True: only the first HEADERS_KEPT headers are listed, or one of them is truncated."""

    def original_key(self) -> bytes | None:
        """The original key bytes."""
        return _decode(self.key, self.key_encoding)

    def original_value(self) -> bytes | None:
        """The original value bytes."""
        return _decode(self.value, self.value_encoding)

    def original_headers(self) -> list[tuple[str, bytes | None]]:
        """The original headers as (name, value) pairs, as a Kafka client sends them."""
        return [(header.name, header.original_value()) for header in self.headers]


def _encode(raw: bytes | None, *, force_base64: bool = False) -> tuple[str | None, Encoding]:
    if raw is None:
        return None, "utf-8"
    if not force_base64:
        try:
            return raw.decode("utf-8"), "utf-8"
        except UnicodeDecodeError:
            pass
    return base64.b64encode(raw).decode("ascii"), "base64"


def _preview(raw: bytes, limit: int) -> tuple[bytes, bool]:
    """The first ``limit`` bytes of ``raw`` (not splitting a UTF-8 character), and whether cut."""
    if len(raw) <= limit:
        return raw, False
    head = raw[:limit]
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return head, True
    # UTF-8 text stays text: drop a character the cut split in two (at most 3 bytes; the
    # head of valid UTF-8 has nothing else to ignore).
    return head.decode("utf-8", "ignore").encode("utf-8"), True


def _cut(text: str | None, limit: int) -> str | None:
    if text is None or len(text) <= limit:
        return text
    return text[: limit - 1] + "\u2026"


def _bytes(raw: bytes | str | None) -> bytes | None:
    if raw is None:
        return None
    return raw.encode("utf-8", "surrogatepass") if isinstance(raw, str) else bytes(raw)


def dead_letter_key(key: bytes | str | None) -> bytes | None:
    """The Kafka key of a dead letter: the original key, or ``sha256:<hex>`` if it is too long."""
    raw = _bytes(key)
    if raw is None or len(raw) <= DEAD_LETTER_KEY_MAX_BYTES:
        return raw
    return b"sha256:" + hashlib.sha256(raw).hexdigest().encode("ascii")


def _decode(text: str | None, encoding: Encoding) -> bytes | None:
    if text is None:
        return None
    if encoding == "base64":
        try:
            return base64.b64decode(text, validate=True)
        except binascii.Error as error:
            raise ValueError(f"dead-letter field is not valid base64: {error}") from None
    return text.encode("utf-8")


def dead_letter_record(
    *,
    key: bytes | str | None,
    value: bytes | None,
    topic: str,
    partition: int,
    offset: int,
    kind: str,
    message: str,
    time: datetime,
    event_id: str | None = None,
    event_type: str | None = None,
    headers: Sequence[tuple[str, bytes | None]] = (),
) -> bytes:
    """The dead-letter JSON (compact UTF-8) for one record that could not be applied.

    Never larger than ``DEAD_LETTER_MAX_BYTES``: see the module's docstring.
    """
    raw_key, raw_value = _bytes(key), _bytes(value)
    key_head, key_cut = (None, False) if raw_key is None else _preview(raw_key, KEY_PREVIEW_BYTES)
    value_head, value_cut = (
        (None, False) if raw_value is None else _preview(raw_value, VALUE_PREVIEW_BYTES)
    )
    fields = {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "error_kind": _cut(kind, ATTRIBUTE_MAX_CHARS),
        "message": _cut(" ".join(message.split()), MESSAGE_MAX_CHARS),
        "time": time,
        "event_id": _cut(event_id or None, ATTRIBUTE_MAX_CHARS),
        "event_type": _cut(event_type or None, ATTRIBUTE_MAX_CHARS),
        **_digest("key", raw_key),
        "key_truncated": key_cut,
        **_digest("value", raw_value),
        "value_truncated": value_cut,
        "header_count": len(headers),
    }
    kept = [_header(name, raw) for name, raw in headers[:HEADERS_KEPT]]
    fields["headers_truncated"] = len(headers) > HEADERS_KEPT or any(cut for *_, cut in kept)
    encoded = _encoded(fields, key_head, value_head, kept, force_base64=False)
    if len(encoded) > DEAD_LETTER_MAX_BYTES:
        # Text of control characters is escaped six-fold in JSON; base64 is 4/3 at most.
        encoded = _encoded(fields, key_head, value_head, kept, force_base64=True)
    return encoded


_KeptHeader = tuple[str, bytes | None, dict[str, object], bool]


def _header(name: str, raw: bytes | None) -> _KeptHeader:
    """(name, value preview, digest fields, truncated) of one header."""
    shown = _cut(name, HEADER_NAME_MAX_CHARS) or ""
    raw = _bytes(raw)
    head, cut = (None, False) if raw is None else _preview(raw, HEADER_PREVIEW_BYTES)
    return shown, head, _digest("value", raw), cut or shown != name


def _digest(name: str, raw: bytes | None) -> dict[str, object]:
    return {
        f"{name}_size": None if raw is None else len(raw),
        f"{name}_sha256": None if raw is None else hashlib.sha256(raw).hexdigest(),
    }


def _encoded(
    fields: dict[str, object],
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[_KeptHeader],
    *,
    force_base64: bool,
) -> bytes:
    key_text, key_encoding = _encode(key, force_base64=force_base64)
    value_text, value_encoding = _encode(value, force_base64=force_base64)
    kept = []
    for name, head, digest, cut in headers:
        text, encoding = _encode(head, force_base64=force_base64)
        kept.append(
            {"name": name, "value": text, "value_encoding": encoding, **digest, "truncated": cut}
        )
    record = DeadLetterRecord.model_validate(
        {
            **fields,
            "key": key_text,
            "key_encoding": key_encoding,
            "value": value_text,
            "value_encoding": value_encoding,
            "headers": kept,
        }
    )
    return record.__pydantic_serializer__.to_json(record, by_alias=True)


def decode_dead_letter(value: bytes) -> DeadLetterRecord:
    """Read a dead-letter record back (raises pydantic's ValidationError if it is not one)."""
    return DeadLetterRecord.model_validate_json(value, by_alias=True, by_name=False)
