"""Reusable field types of the wire contract: durations, timestamps, names, quantities.

Durations and timestamps are validated by the rule engine's own parsers, so a value the
stream accepts is exactly a value the core understands, and their errors keep the core's
machine-readable ``kind`` (``bad_duration``, ``negative_duration``) as the pydantic error
type, which the decoder turns into the rejection kind.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Annotated, Any, Final, TypeVar

from pydantic import Field, PlainSerializer, PlainValidator, Strict, WithJsonSchema
from pydantic_core import PydanticCustomError

from minruntime.core import (
    MAX_REQUEUES,
    MAX_REQUEUES_WINDOW,
    MinRuntimeError,
    check_max_requeues,
    check_requeues_window,
    format_duration,
    format_rfc3339,
    parse_duration,
    parse_rfc3339,
)
from minruntime.core.errors import InvalidTimestampError, NegativeDurationError
from minruntime.core.gpus import MAX_GPUS_PER_EVENT
from minruntime.core.timestamps import require_in_range

# ECMA-262 pattern of SEMANTICS.md §1 (Go's duration syntax plus d and w, no sign but an
# optional leading "+", "0" alone). The decoder checks more than this (range, length).
DURATION_PATTERN: Final = (
    r"^\+?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|\u00b5s|\u03bcs|ms|s|m|h|d|w))+)$"
)
DURATION_DESCRIPTION: Final = (
    "A non-negative duration in Go syntax plus days and weeks: one or more "
    "<number><unit> components, units ns, us, ms, s, m, h, d (24h), w (168h); "
    'e.g. "300ms", "1.5s", "10m", "1h30m", "2d", or "0".'
)
_ZERO_DURATION_PATTERN: Final = r"^\+?(0|([0.]+(ns|us|\u00b5s|\u03bcs|ms|s|m|h|d|w))+)$"
TIMESTAMP_DESCRIPTION: Final = (
    'An RFC3339 timestamp with a UTC offset, e.g. "2026-11-21T10:00:00Z" or '
    '"2026-11-21T11:00:00+01:00".'
)
TIMESTAMP_PATTERN: Final = (
    r"^[0-9]{4}-[0-9]{2}-[0-9]{2}[Tt ][0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]+)?"
    r"([Zz]|[+-][0-9]{2}:[0-9]{2})$"
)


def _rejected(error: MinRuntimeError) -> PydanticCustomError:
    # The message goes through the context so that braces in it are never interpreted.
    return PydanticCustomError(error.kind, "{message}", {"message": str(error)})


_T = TypeVar("_T")


def _checked(check: Callable[..., _T], *args: Any) -> _T:
    """``check(*args)``, a rule-engine error raised as the pydantic error of its kind."""
    try:
        return check(*args)
    except MinRuntimeError as error:
        raise _rejected(error) from None


def _validate_duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        if value < timedelta(0):
            raise _rejected(
                NegativeDurationError(
                    f"invalid duration {value!r}: negative durations are not allowed"
                )
            )
        return value
    return _checked(parse_duration, value)


def _validate_positive_duration(value: Any) -> timedelta:
    duration = _validate_duration(value)
    if duration == timedelta(0):
        raise PydanticCustomError("non_positive_duration", "must be a positive duration, got 0s")
    return duration


def _validate_timestamp(value: Any) -> datetime:
    if isinstance(value, datetime):
        if value.utcoffset() is None:
            raise _rejected(
                InvalidTimestampError(f"timestamp {value.isoformat()} has no UTC offset")
            )
        _checked(require_in_range, value)
        return value
    return _checked(parse_rfc3339, value)


Duration = Annotated[
    timedelta,
    PlainValidator(_validate_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": DURATION_PATTERN,
            "maxLength": 256,
            "description": DURATION_DESCRIPTION,
            "examples": ["0", "30s", "10m", "1h30m", "2d"],
        }
    ),
]
"""A non-negative duration: SEMANTICS.md §1 string on the wire, ``timedelta`` in Python."""

_POSITIVE_DURATION_SCHEMA: Final[dict[str, Any]] = {
    "type": "string",
    "pattern": DURATION_PATTERN,
    "maxLength": 256,
    "not": {"pattern": _ZERO_DURATION_PATTERN},
    "description": DURATION_DESCRIPTION + " Must be greater than zero.",
    "examples": ["30s", "5m"],
}

PositiveDuration = Annotated[
    timedelta,
    PlainValidator(_validate_positive_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(_POSITIVE_DURATION_SCHEMA),
]
"""A duration that must be greater than zero."""


def _validate_max_requeues(value: Any) -> int:
    return _checked(check_max_requeues, value, "value")


def _validate_requeues_window(value: Any) -> timedelta:
    return _checked(check_requeues_window, _validate_duration(value), "value")


MaxRequeues = Annotated[
    int,
    PlainValidator(_validate_max_requeues),
    WithJsonSchema(
        {
            "type": "integer",
            "minimum": 1,
            "maximum": MAX_REQUEUES,
            "description": f"A whole number from 1 to {MAX_REQUEUES} (a JSON integer).",
        }
    ),
]
"""A requeue cap: a JSON integer from 1 to MAX_REQUEUES (no 1.0, no "1", no booleans)."""

RequeuesWindow = Annotated[
    timedelta,
    PlainValidator(_validate_requeues_window),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {
            **_POSITIVE_DURATION_SCHEMA,
            "description": DURATION_DESCRIPTION
            + f" Greater than zero and at most {format_duration(MAX_REQUEUES_WINDOW)}.",
            "examples": ["1h", "1d"],
        }
    ),
]
"""The requeue cap's rolling window: a positive duration of at most MAX_REQUEUES_WINDOW."""

Timestamp = Annotated[
    datetime,
    PlainValidator(_validate_timestamp),
    PlainSerializer(format_rfc3339, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "format": "date-time",
            "pattern": TIMESTAMP_PATTERN,
            "description": TIMESTAMP_DESCRIPTION,
        }
    ),
]
"""A timezone-aware instant: RFC3339 with an offset on the wire, written back in UTC (``Z``)."""

Name = Annotated[str, Strict(), Field(min_length=1)]
"""A non-empty string: a name, uid, node or component (outputs; inputs use the bounded types)."""

# Bounds of the input contract (docs/events.md "Bounds"). Kubernetes' own limits are the guide
# (253 for object names, 63 for namespaces and label values); they also keep every indexed
# value far below PostgreSQL's btree row limit (~2700 bytes): UTF-8 takes up to 4 bytes a
# character, so the widest key, (source, id) of the event log, is at most 2 x 253 x 4 = 2024.
MAX_NAME: Final = 253
MAX_LABEL: Final = 63
MAX_TEXT: Final = 1024
MAX_ANNOTATION_KEY: Final = 317  # Kubernetes: a 253-character prefix, "/", a 63-character name
MAX_ANNOTATION_VALUE: Final = 65536
MAX_ANNOTATIONS: Final = 256
MAX_PODS: Final = 10000
MAX_SUBGROUPS: Final = 1000

BoundedName = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_NAME)]
"""A non-empty name, uid, node, event id or source of at most 253 characters."""

Label = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_LABEL)]
"""A non-empty namespace or node pool of at most 63 characters (a Kubernetes label value)."""

Text = Annotated[str, Strict(), Field(min_length=1, max_length=MAX_TEXT)]
"""Non-empty free text for the audit (a reason) of at most 1024 characters."""

IgnorableText = Annotated[str, Strict(), Field(max_length=MAX_TEXT)]
"""A setting the service parses itself and ignores, counted, when invalid (KAI's rule for
e.g. a preemption delay): any string of at most 1024 characters, "" included."""

AnnotationKey = Annotated[str, Strict(), Field(max_length=MAX_ANNOTATION_KEY)]
"""A podgroup annotation key (at most 317 characters)."""

AnnotationValue = Annotated[str, Strict(), Field(max_length=MAX_ANNOTATION_VALUE)]
"""A podgroup annotation value (at most 65,536 characters)."""

INT32_MAX: Final = 2**31 - 1
INT64_MAX: Final = 2**63 - 1

Count = Annotated[int, Strict(), Field(ge=0, le=INT32_MAX)]
"""A whole number >= 0 (JSON integers only: no ``1.0``, no ``"1"``, no booleans)."""

Offset = Annotated[int, Strict(), Field(ge=0, le=INT64_MAX)]
"""A Kafka offset."""

# Kubernetes priorities are int32; a wider value could only fail later, in the database.
Priority = Annotated[int, Strict(), Field(ge=-INT32_MAX - 1, le=INT32_MAX)]
"""A podgroup priority (a 32-bit JSON integer; higher is more important)."""

Gpus = Annotated[float, Strict(), Field(ge=0, allow_inf_nan=False)]
"""A non-negative, finite number of GPUs; fractions allowed."""

GpuAmount = Annotated[float, Strict(), Field(ge=0, le=MAX_GPUS_PER_EVENT, allow_inf_nan=False)]
"""GPUs of a node or pod on input: a finite number from 0 to 65,536; fractions allowed."""
