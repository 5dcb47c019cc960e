"""Duration strings: Go's ``time.ParseDuration`` grammar plus days and weeks (SEMANTICS.md §1)."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Final

from minruntime.core.errors import InvalidDurationError, MinRuntimeError, NegativeDurationError

_NS_PER_UNIT: Final[dict[str, int]] = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # micro sign, as Go accepts
    "\u03bcs": 1_000,  # Greek small letter mu, as Go accepts
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60 * 1_000_000_000,
    "h": 3_600 * 1_000_000_000,
    "d": 24 * 3_600 * 1_000_000_000,
    "w": 7 * 24 * 3_600 * 1_000_000_000,
}

# Go's limit is the int64 nanosecond range; expressed in whole microseconds so that every
# value we accept can be formatted and parsed back unchanged.
MAX_DURATION: Final = timedelta(microseconds=(2**63 - 1) // 1_000)

# Long enough for any real duration, short enough that arithmetic on it stays trivial.
_MAX_TEXT_LENGTH: Final = 256

# A unit is everything up to the next digit or dot, as in Go, so "1h-30m" yields the unit
# "h-" and fails as an unknown unit instead of being silently split.
_COMPONENT: Final = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")

_EXAMPLES: Final = 'use e.g. "300ms", "1.5s", "10m", "1h30m", "2d" or "0"'
_UNITS: Final = "ns, us, ms, s, m, h, d, w"


def parse_duration(text: str) -> timedelta:
    """Parse a non-negative duration such as ``"1h30m"`` or ``"2d"`` into a timedelta."""
    if not isinstance(text, str):
        raise InvalidDurationError(
            f'duration must be a string like "10m", got {type(text).__name__}'
        )
    if len(text) > _MAX_TEXT_LENGTH:
        raise InvalidDurationError(f"invalid duration: longer than {_MAX_TEXT_LENGTH} characters")
    body = text[1:] if text[:1] in ("+", "-") else text
    # "0" is Go's one unit-less special case.
    nanoseconds = 0 if body == "0" else _parse_components(text, body)
    if text.startswith("-"):
        # Checked after the grammar so that "-garbage" reports the garbage, not the sign.
        raise NegativeDurationError(
            f"invalid duration {text!r}: negative durations are not allowed"
        )
    return _to_timedelta(text, nanoseconds)


def read_duration(text: str | None) -> timedelta | None:
    """The duration ``text`` says, or None when it is absent or not a valid one (ignored)."""
    if text is None:
        return None
    try:
        return parse_duration(text)
    except MinRuntimeError:
        return None


def _parse_components(text: str, body: str) -> int:
    if body == "":
        raise InvalidDurationError(f"invalid duration {text!r}: empty; {_EXAMPLES}")
    total = 0
    position = 0
    while position < len(body):
        # The pattern accepts the empty string, so it always matches and the loop advances:
        # an empty component would have neither number nor unit and is rejected below.
        match = _COMPONENT.match(body, position)
        assert match is not None
        whole, fraction, unit = match.group(1), match.group(2) or "", match.group(3)
        if whole == "" and fraction == "":
            where = f" before {unit!r}" if unit else ""
            raise InvalidDurationError(
                f"invalid duration {text!r}: expected a number{where}; {_EXAMPLES}"
            )
        if unit == "":
            raise InvalidDurationError(
                f"invalid duration {text!r}: missing unit after the number "
                f"(one of {_UNITS}); {_EXAMPLES}"
            )
        scale = _NS_PER_UNIT.get(unit)
        if scale is None:
            raise InvalidDurationError(_unknown_unit_message(text, unit))
        # Exact integer arithmetic; fractions of a nanosecond are truncated, as Go does.
        total += int(whole or "0") * scale
        if fraction:
            total += int(fraction) * scale // 10 ** len(fraction)
        position = match.end()
    return total


def _unknown_unit_message(text: str, unit: str) -> str:
    if "+" in unit or "-" in unit:
        return f"invalid duration {text!r}: a sign is only allowed at the very start; {_EXAMPLES}"
    return f"invalid duration {text!r}: unknown unit {unit!r} (use one of {_UNITS})"


def _to_timedelta(text: str, nanoseconds: int) -> timedelta:
    # timedelta stops at microseconds: round to the nearest one, halves to even, which is
    # what timedelta itself does with fractional microseconds.
    microseconds, remainder = divmod(nanoseconds, 1_000)
    if remainder > 500 or (remainder == 500 and microseconds % 2 == 1):
        microseconds += 1
    if microseconds > MAX_DURATION // timedelta(microseconds=1):
        raise InvalidDurationError(
            f"invalid duration {text!r}: out of range (at most {format_duration(MAX_DURATION)})"
        )
    return timedelta(microseconds=microseconds)


def format_duration(duration: timedelta) -> str:
    """Format a non-negative timedelta canonically, e.g. ``"1h30m"``; parse_duration reverses it."""
    if duration < timedelta(0):
        raise NegativeDurationError(
            f"cannot format {duration!r}: negative durations are not allowed"
        )
    microseconds = duration // timedelta(microseconds=1)
    if microseconds == 0:
        return "0s"
    # Below a second the largest whole unit reads best, as Go's Duration.String() does.
    if microseconds < 1_000:
        return f"{microseconds}us"
    if microseconds < 1_000_000:
        return _with_fraction(microseconds, 1_000) + "ms"
    # Hours are the largest unit so the output is also valid Go syntax.
    hours, rest = divmod(microseconds, 3_600_000_000)
    minutes, rest = divmod(rest, 60_000_000)
    parts = []
    if hours:
        parts.append(f"{hours}h")
    if minutes:
        parts.append(f"{minutes}m")
    if rest:
        parts.append(_with_fraction(rest, 1_000_000) + "s")
    return "".join(parts)


def _with_fraction(value: int, per_unit: int) -> str:
    whole, fraction = divmod(value, per_unit)
    if fraction == 0:
        return str(whole)
    digits = len(str(per_unit)) - 1
    return f"{whole}.{fraction:0{digits}d}".rstrip("0")
