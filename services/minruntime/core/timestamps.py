"""RFC3339 timestamps, strictly: an explicit UTC offset is required."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Final

from minruntime.core.errors import InvalidTimestampError, MinRuntimeError, TimestampOutOfRangeError

BEGINNING: Final = datetime.min.replace(tzinfo=UTC)

# Stricter than datetime.fromisoformat, which also takes dates without times, week dates
# and naive times: an annotation either is RFC3339 or it is rejected.
_RFC3339: Final = re.compile(
    r"(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))",
    re.ASCII,
)


def parse_rfc3339(text: str) -> datetime:
    """Parse an RFC3339 timestamp such as ``2026-11-21T10:00:00Z`` into an aware datetime."""
    if not isinstance(text, str):
        raise InvalidTimestampError(
            f"timestamp must be an RFC3339 string, got {type(text).__name__}"
        )
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise InvalidTimestampError(
            f"invalid timestamp {text!r}: expected RFC3339 with a UTC offset, "
            'e.g. "2026-11-21T10:00:00Z" or "2026-11-21T11:00:00+01:00"'
        )
    try:
        # The hot path (every event's time): for text of the form above, the C parser gives
        # the same instant and offset as the fields below (sub-microseconds truncated too);
        # what it refuses (a lowercase t or z, a minute offset of 60 or more, a bad date)
        # goes the long way, which also says why.
        moment = datetime.fromisoformat(text)
    except ValueError:
        moment = _from_fields(match, text)
    # An offset is less than a day, so only the first and the last year can leave the range.
    if not 1 < moment.year < 9999:
        require_in_range(moment, text)
    return moment


def _from_fields(match: re.Match[str], text: str) -> datetime:
    """The datetime of an RFC3339 text matched by ``_RFC3339`` (no range check)."""
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    # Sub-microsecond digits (Go writes nanoseconds) are truncated: datetime stops at µs.
    microsecond = int((match.group(7) or "0")[:6].ljust(6, "0"))
    if match.group(8):
        offset = timedelta(0)
    else:
        sign = -1 if match.group(9) == "-" else 1
        offset = sign * timedelta(hours=int(match.group(10)), minutes=int(match.group(11)))
    try:
        return datetime(
            year, month, day, hour, minute, second, microsecond, tzinfo=timezone(offset)
        )
    except ValueError as error:
        raise InvalidTimestampError(f"invalid timestamp {text!r}: {error}") from error


def require_in_range(moment: datetime, text: str | None = None) -> None:
    """Raise TimestampOutOfRangeError unless ``moment`` lies in years 1..9999 in UTC.

    ``0001-01-01T00:00:00+01:00`` is a valid RFC3339 text, but in UTC it falls in year 0:
    PostgreSQL would store it (as 1 BC) and every later read of it would fail.
    """
    try:
        moment.astimezone(UTC)
    except OverflowError:
        shown = moment.isoformat() if text is None else text
        raise TimestampOutOfRangeError(
            f"timestamp {shown!r} is outside years 0001-9999 once converted to UTC"
        ) from None


def format_rfc3339(moment: datetime) -> str:
    """Format an aware datetime as RFC3339 in UTC with a ``Z`` suffix."""
    require_aware(moment, "timestamp")
    # isoformat (in C) zero-pads the year to four digits, as RFC3339 requires (strftime("%Y")
    # does not below 1000), and writes the microseconds only when there are any; in UTC it
    # ends in "+00:00". A report formats hundreds of thousands of instants.
    text = moment.astimezone(UTC).isoformat()[:-6]
    if "." in text:
        text = text.rstrip("0")
    return text + "Z"


def window_start(now: datetime, window: timedelta) -> datetime:
    """``now - window``, or the first instant (year 1) where that falls before it."""
    try:
        return now - window
    except OverflowError:
        return BEGINNING


def require_aware(moment: datetime, what: str) -> None:
    """Raise InvalidTimestampError unless ``moment`` carries a UTC offset."""
    if not isinstance(moment, datetime):
        raise InvalidTimestampError(f"{what} must be a datetime, got {type(moment).__name__}")
    if moment.utcoffset() is None:
        # Naive times are ambiguous across the cluster and cannot be compared with aware ones.
        raise InvalidTimestampError(f"{what} {moment.isoformat()} has no UTC offset")


def read_time_between(
    text: str | None, not_before: datetime | None, not_after: datetime | None
) -> datetime | None:
    """An annotation's RFC3339 instant, or None when absent, unreadable, before ``not_before``
    or after ``not_after`` (either bound None: none on that side): a time a workload or the
    scheduler wrote, ignored when it cannot be the one it claims to be."""
    if text is None:
        return None
    try:
        moment = parse_rfc3339(text)
    except MinRuntimeError:
        return None
    if not_before is not None and moment < not_before:
        return None
    if not_after is not None and moment > not_after:
        return None
    return moment
