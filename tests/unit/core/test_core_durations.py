from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    MAX_DURATION,
    InvalidDurationError,
    NegativeDurationError,
    format_duration,
    parse_duration,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("300ms", timedelta(milliseconds=300)),
        ("1.5s", timedelta(seconds=1.5)),
        ("10m5s", timedelta(minutes=10, seconds=5)),
        ("2h45m15s", timedelta(hours=2, minutes=45, seconds=15)),
        ("2d4h30m", timedelta(days=2, hours=4, minutes=30)),
        ("5w4d12h", timedelta(weeks=5, days=4, hours=12)),
        ("0", timedelta(0)),
        ("0s", timedelta(0)),
        ("+5s", timedelta(seconds=5)),
        (".5s", timedelta(milliseconds=500)),
        ("5.s", timedelta(seconds=5)),
        ("1.5h", timedelta(minutes=90)),
        ("7us", timedelta(microseconds=7)),
        ("7\u00b5s", timedelta(microseconds=7)),
        ("7\u03bcs", timedelta(microseconds=7)),
        ("2000ns", timedelta(microseconds=2)),
        ("1h1h", timedelta(hours=2)),
    ],
)
def test_valid_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("5", "missing unit"),
        ("1h2", "missing unit"),
        ("1h-30m", "sign is only allowed at the very start"),
        ("1h+30m", "sign is only allowed at the very start"),
        ("10x", "unknown unit 'x'"),
        ("abc", "expected a number"),
        (".", "expected a number"),
        (".s", "expected a number"),
        (" 5s", "expected a number"),
        ("5s ", "unknown unit"),
        ("5S", "unknown unit 'S'"),
        ("1e3s", "unknown unit"),
        ("--5s", "expected a number"),
        ("9999999999999h", "out of range"),
        ("5" * 300 + "s", "longer than"),
    ],
)
def test_invalid_durations_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(InvalidDurationError, match=message) as caught:
        parse_duration(text)
    assert caught.value.kind == "bad_duration"
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize("text", ["-5m", "-1h30m", "-0", "-0s"])
def test_a_leading_minus_is_a_negative_duration(text: str) -> None:
    with pytest.raises(NegativeDurationError, match="negative durations are not allowed") as e:
        parse_duration(text)
    assert e.value.kind == "negative_duration"


def test_a_minus_before_garbage_reports_the_garbage() -> None:
    with pytest.raises(InvalidDurationError) as caught:
        parse_duration("-abc")
    assert not isinstance(caught.value, NegativeDurationError)


@pytest.mark.parametrize("value", [5, 1.5, None, b"5s", timedelta(seconds=5)])
def test_non_strings_are_rejected(value: object) -> None:
    with pytest.raises(InvalidDurationError, match="must be a string"):
        parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "microseconds"),
    [
        ("1ns", 0),
        ("499ns", 0),
        ("500ns", 0),  # half to even: 0
        ("501ns", 1),
        ("1500ns", 2),  # half to even: 2
        ("2500ns", 2),  # half to even: 2
        ("2501ns", 3),
        ("0.0005ms", 0),
        ("0.0015ms", 2),
    ],
)
def test_nanoseconds_round_to_the_nearest_microsecond_halves_to_even(
    text: str, microseconds: int
) -> None:
    assert parse_duration(text) == timedelta(microseconds=microseconds)


def test_the_largest_duration_is_accepted_and_one_more_microsecond_is_not() -> None:
    assert parse_duration(format_duration(MAX_DURATION)) == MAX_DURATION
    with pytest.raises(InvalidDurationError, match="out of range"):
        parse_duration(format_duration(MAX_DURATION + timedelta(microseconds=1)))


@pytest.mark.parametrize(
    ("duration", "text"),
    [
        (timedelta(0), "0s"),
        (timedelta(minutes=10), "10m"),
        (timedelta(minutes=90), "1h30m"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(hours=1, seconds=5), "1h5s"),
        (timedelta(days=2), "48h"),
        (timedelta(milliseconds=300), "300ms"),
        (timedelta(microseconds=1500), "1.5ms"),
        (timedelta(microseconds=7), "7us"),
        (timedelta(seconds=61, microseconds=1), "1m1.000001s"),
    ],
)
def test_format_duration_is_canonical(duration: timedelta, text: str) -> None:
    assert format_duration(duration) == text


def test_format_duration_rejects_negative() -> None:
    with pytest.raises(NegativeDurationError):
        format_duration(timedelta(seconds=-1))


@given(st.timedeltas(min_value=timedelta(0), max_value=MAX_DURATION))
def test_format_then_parse_round_trips(duration: timedelta) -> None:
    assert parse_duration(format_duration(duration)) == duration


@given(
    st.lists(
        st.tuples(st.integers(0, 1000), st.sampled_from(["ms", "s", "m", "h", "d", "w"])),
        min_size=1,
        max_size=5,
    )
)
def test_components_add_up(components: list[tuple[int, str]]) -> None:
    unit = {
        "ms": timedelta(milliseconds=1),
        "s": timedelta(seconds=1),
        "m": timedelta(minutes=1),
        "h": timedelta(hours=1),
        "d": timedelta(days=1),
        "w": timedelta(weeks=1),
    }
    text = "".join(f"{number}{name}" for number, name in components)
    assert parse_duration(text) == sum((n * unit[u] for n, u in components), timedelta(0))
