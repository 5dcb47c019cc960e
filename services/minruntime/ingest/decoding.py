"""Decoding one consumed record, apart from its batch's transaction.

``decode_record`` is all ``apply_batch`` asks of a record before the database: the typed event,
or why it is refused (a dead letter's kind and message). It reads nothing but the record, so
the processor runs it as records arrive, in faust's event loop, while the previous batch is in
PostgreSQL (``stream.app``), and hands the result over with the record (``InboundRecord.decoded``);
``apply_batch`` decodes a record that comes without one itself, with the same function.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from minruntime.events import Event, EventRejected, decode_event

UNSTORABLE_TEXT: Final = "unstorable_text"
_UNSTORABLE_CHARS: Final = re.compile("[\x00\ud800-\udfff]")


@dataclass(frozen=True, slots=True)
class Decoded:
    """The event of a record (``kind`` None), or why it is refused (``kind``, ``message``).

    ``event`` is set for a refused record that did decode (its id and type go to the dead
    letter).
    """

    event: Event | None
    kind: str | None = None
    message: str = ""


def decode_record(
    value: bytes | None, topic: str, topic_types: Mapping[str, frozenset[str]]
) -> Decoded:
    """Decode a record's value read from ``topic``; LookupError when the topic is not mapped."""
    try:
        event = decode_event(value, topic, topic_types=topic_types)
    except EventRejected as rejected:
        return Decoded(None, rejected.kind, rejected.message)
    assert value is not None  # decode_event refuses tombstones
    if b"\\u" in value and _unstorable(value):
        return Decoded(
            event,
            UNSTORABLE_TEXT,
            "a string contains NUL (\\u0000) or an unpaired surrogate (\\ud800-\\udfff), "
            "which PostgreSQL cannot store; remove it",
        )
    return Decoded(event)


def _unstorable(value: bytes) -> bool:
    def walk(item: Any) -> Iterator[str]:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict):
            for key, inner in item.items():
                yield key
                yield from walk(inner)
        elif isinstance(item, list):
            for inner in item:
                yield from walk(inner)

    return any(_UNSTORABLE_CHARS.search(text) for text in walk(json.loads(value)))
