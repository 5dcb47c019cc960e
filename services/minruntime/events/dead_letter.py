"""The dead-letter record: an input record that could not be applied, and why.

Nothing is dropped silently (CONTRACT.md §1): the record keeps the original key and value
byte for byte (as UTF-8 text when they are UTF-8, else base64 with an encoding flag), where
it came from, a machine-readable ``errorKind`` and a one-line ``message``.
"""

from __future__ import annotations

import base64
import binascii
from datetime import datetime
from typing import Literal

from pydantic import ConfigDict, Field

from minruntime.events.base import WIRE_CONFIG, WireModel
from minruntime.events.types import Count, Name, Offset, Timestamp

Encoding = Literal["utf-8", "base64"]


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

    def original_key(self) -> bytes | None:
        """The original key bytes."""
        return _decode(self.key, self.key_encoding)

    def original_value(self) -> bytes | None:
        """The original value bytes."""
        return _decode(self.value, self.value_encoding)


def _encode(raw: bytes | str | None) -> tuple[str | None, Encoding]:
    if raw is None or isinstance(raw, str):
        return raw, "utf-8"
    try:
        return bytes(raw).decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode("ascii"), "base64"


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
) -> bytes:
    """The dead-letter JSON (compact UTF-8) for one record that could not be applied."""
    key_text, key_encoding = _encode(key)
    value_text, value_encoding = _encode(value)
    record = DeadLetterRecord(
        key=key_text,
        key_encoding=key_encoding,
        value=value_text,
        value_encoding=value_encoding,
        topic=topic,
        partition=partition,
        offset=offset,
        error_kind=kind,
        message=" ".join(message.split()),
        time=time,
        event_id=event_id or None,
        event_type=event_type or None,
    )
    return record.__pydantic_serializer__.to_json(record, by_alias=True)


def decode_dead_letter(value: bytes) -> DeadLetterRecord:
    """Read a dead-letter record back (raises pydantic's ValidationError if it is not one)."""
    return DeadLetterRecord.model_validate_json(value, by_alias=True, by_name=False)
