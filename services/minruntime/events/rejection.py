"""Why a record was refused: EventRejected, its kinds, and pydantic errors said plainly."""

from __future__ import annotations

import json
from typing import Final

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from minruntime.core.errors import UserError

# The kinds of EventRejected, in the order the decoder checks them.
NOT_JSON: Final = "not_json"
NOT_CLOUDEVENT: Final = "not_cloudevent"
UNKNOWN_TYPE: Final = "unknown_type"
WRONG_TOPIC: Final = "wrong_topic"
SCHEMA_VIOLATION: Final = "schema_violation"
BAD_DURATION: Final = "bad_duration"
NEGATIVE_DURATION: Final = "negative_duration"
# A config.updated whose data breaks the rules (e.g. an unknown reclaimResolveMethod): the
# core's InvalidConfigError kind, so operators see one kind for every bad configuration.
INVALID_CONFIG: Final = "invalid_config"
# The documented bounds (docs/events.md "Bounds"): what PostgreSQL, Python's arithmetic or the
# decoder itself could not handle, refused before anything stores or walks the record.
TOO_DEEP: Final = "too_deep"
NOT_FINITE: Final = "not_finite"
TOO_LONG: Final = "too_long"
OUT_OF_RANGE: Final = "out_of_range"
# A binary-mode record (CloudEvents Kafka binding: attributes in ``ce_`` headers) whose headers
# cannot be read as attributes: not UTF-8, duplicated, over the bounds, ``ce_id`` missing.
BAD_BINARY_HEADERS: Final = "bad_binary_headers"
REJECTION_KINDS: Final = (
    NOT_JSON,
    NOT_CLOUDEVENT,
    UNKNOWN_TYPE,
    WRONG_TOPIC,
    SCHEMA_VIOLATION,
    BAD_DURATION,
    NEGATIVE_DURATION,
    INVALID_CONFIG,
    TOO_DEEP,
    NOT_FINITE,
    TOO_LONG,
    OUT_OF_RANGE,
    BAD_BINARY_HEADERS,
)

# pydantic error types raised by our validators that carry their own rejection kind.
_DURATION_KINDS: Final = frozenset({BAD_DURATION, NEGATIVE_DURATION})
# pydantic error types of a bound, anywhere (envelope or data): the bound's own kind.
_BOUND_KINDS: Final = {
    "string_too_long": TOO_LONG,
    "too_long": TOO_LONG,
    "less_than_equal": OUT_OF_RANGE,
    OUT_OF_RANGE: OUT_OF_RANGE,  # core.TimestampOutOfRangeError.kind
    "finite_number": NOT_FINITE,
}
# pydantic messages that speak Python ("Tuple should ...") said in JSON's words.
_PLAIN_MESSAGES: Final = {
    "missing": "required field is missing",
    "extra_forbidden": "unknown field (field names are camelCase, see schemas/)",
    "too_short": "must have at least {min_length} item(s), got {actual_length}",
    "string_too_short": "must not be empty",
    "tuple_type": "must be a JSON array",
    "list_type": "must be a JSON array",
    "dict_type": "must be a JSON object",
    "model_type": "must be a JSON object",
}

# Error types whose message already says what the input was.
_OWN_ERRORS: Final = frozenset(
    {
        BAD_DURATION,
        NEGATIVE_DURATION,
        "non_positive_duration",
        "invalid_timestamp",
        "subject_mismatch",
        "duplicate_names",
        "undeclared_subgroup",
        "conflicting_preemptibility",
        OUT_OF_RANGE,
        # The core's InvalidConfigError (e.g. maxRequeues) says what it got itself.
        INVALID_CONFIG,
    }
)
_MAX_MESSAGE: Final = 500


class EventRejected(UserError, ValueError):  # noqa: N818 - the name is part of the contract
    """A record that cannot be applied: ``kind`` for machines, ``message`` (one line) for people.

    A user's error (a command given a bad event says so in one line), and a ValueError still
    for the callers that catch it as one.
    """

    def __init__(self, kind: str, message: str) -> None:
        one_line = " ".join(message.split())
        if len(one_line) > _MAX_MESSAGE:
            one_line = one_line[: _MAX_MESSAGE - 3] + "..."
        super().__init__(one_line)
        self.kind = kind
        self.message = one_line


def unknown_type(event_type: str, known: tuple[str, ...]) -> EventRejected:
    """The rejection of a type that is not in the contract."""
    return EventRejected(
        UNKNOWN_TYPE, f"unknown event type {event_type!r} (known: {', '.join(known)})"
    )


def wrong_topic(event_type: str, topic: str | None, allowed: frozenset[str]) -> EventRejected:
    """The rejection of a known type on a topic that does not carry it."""
    return EventRejected(
        WRONG_TOPIC,
        f"event type {event_type!r} does not belong on topic {topic!r} "
        f"(it carries: {', '.join(sorted(allowed))})",
    )


def not_a_cloudevent(error: ValidationError) -> EventRejected:
    """The rejection of an envelope that is not a CloudEvent 1.0."""
    return _envelope_rejection(error.errors()[0], (), error.error_count())


def _envelope_rejection(
    first: ErrorDetails, prefix: tuple[str | int, ...], count: int
) -> EventRejected:
    """An envelope attribute's error: over a bound, the bound's kind; else not_cloudevent."""
    bound = _BOUND_KINDS.get(first["type"])
    if bound is not None:
        return EventRejected(bound, _message(first, prefix, count))
    return EventRejected(NOT_CLOUDEVENT, envelope_message(first, count))


def rejection(
    error: ValidationError, prefix: tuple[str | int, ...] = (), event_type: str | None = None
) -> EventRejected:
    """Map a ValidationError to a rejection: the first error decides kind and message."""
    details = error.errors(include_url=False, include_input=True)
    if details[0]["type"] == "json_invalid":
        # e.g. a lone UTF-16 surrogate escape, which Python's json module lets through.
        return EventRejected(NOT_JSON, f"value is not valid JSON: {details[0]['msg']}")
    envelope = [item for item in details if (prefix + item["loc"])[:1] != ("data",)]
    if envelope and envelope[0]["type"] != "subject_mismatch":
        return _envelope_rejection(envelope[0], prefix, len(details))
    first = details[0]
    bound = _BOUND_KINDS.get(first["type"])
    if bound is not None:
        return EventRejected(bound, _message(first, prefix, len(details)))
    kind = first["type"] if first["type"] in _DURATION_KINDS else SCHEMA_VIOLATION
    in_data = (prefix + first["loc"])[:1] == ("data",) and first["type"] != "subject_mismatch"
    if kind == SCHEMA_VIOLATION and event_type == "config.updated" and in_data:
        kind = INVALID_CONFIG
    return EventRejected(kind, _message(first, prefix, len(details)))


def envelope_message(first: ErrorDetails, count: int) -> str:
    where = _location(first["loc"]) or "event"
    if first["type"] == "missing":
        text = f"required attribute {where!r} is missing"
    elif first["type"] == "string_too_short":
        text = f"{where}: must not be empty"
    elif first["loc"] == ("specversion",):
        text = f"specversion must be '1.0', got {first['input']!r}"
    else:
        text = f"{where}: {first['msg']}"
    return f"not a CloudEvent: {text}{_more(count)}"


def _message(first: ErrorDetails, prefix: tuple[str | int, ...], count: int) -> str:
    where = _location(prefix + first["loc"]) or "subject"
    message = first["msg"]
    if first["type"] in _PLAIN_MESSAGES:
        message = _PLAIN_MESSAGES[first["type"]].format(**first.get("ctx", {}))
    elif first["type"] not in _OWN_ERRORS and _is_short_scalar(first.get("input")):
        message += f", got {json.dumps(first.get('input'))}"
    return f"{where}: {message}{_more(count)}"


def _is_short_scalar(value: object) -> bool:
    if isinstance(value, str):
        return len(value) <= 64
    return value is None or isinstance(value, bool | int | float)


def _location(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        elif part.isidentifier():
            text += f".{part}" if text else part
        else:
            text += f"[{json.dumps(part)}]"
    return text


def _more(count: int) -> str:
    return f" (and {count - 1} more error{'s' if count > 2 else ''})" if count > 1 else ""
