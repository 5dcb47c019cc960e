from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from core_testkit import T0, s

from minruntime.core import (
    InvalidTimestampError,
    format_rfc3339,
    in_cooldown,
    parse_rfc3339,
    requeue_delay,
    requeue_not_before,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T10:00:00Z", T0),
        ("2026-11-21t10:00:00z", T0),
        ("2026-11-21T11:30:00+01:30", T0),
        ("2026-11-21T05:00:00-05:00", T0),
        ("2026-11-21T10:00:00.5Z", T0 + timedelta(milliseconds=500)),
        ("2026-11-21T10:00:00.123456789Z", T0 + timedelta(microseconds=123456)),
    ],
)
def test_parse_rfc3339(text: str, expected: datetime) -> None:
    parsed = parse_rfc3339(text)
    assert parsed == expected
    assert parsed.utcoffset() is not None


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-21T10:00:00",  # naive
        "2026-11-21",
        "2026-13-01T00:00:00Z",
        "2026-11-21T25:00:00Z",
        "2026-11-21T10:00Z",
        "",
        "yesterday",
        "2026-11-21T10:00:00+0100",
    ],
)
def test_invalid_rfc3339(text: str) -> None:
    with pytest.raises(InvalidTimestampError, match="invalid timestamp") as caught:
        parse_rfc3339(text)
    assert caught.value.kind == "invalid_timestamp"


def test_format_rfc3339_is_utc_with_z_and_round_trips() -> None:
    assert format_rfc3339(T0) == "2026-11-21T10:00:00Z"
    plus_one = datetime(2026, 11, 21, 11, 0, 0, 250000, tzinfo=timezone(timedelta(hours=1)))
    assert format_rfc3339(plus_one) == "2026-11-21T10:00:00.25Z"
    assert parse_rfc3339(format_rfc3339(plus_one)) == plus_one
    with pytest.raises(InvalidTimestampError):
        format_rfc3339(datetime(2026, 11, 21))


def test_in_cooldown_is_strict() -> None:
    assert in_cooldown(T0, T0 - timedelta(microseconds=1))
    assert not in_cooldown(T0, T0)
    assert not in_cooldown(None, T0)


def test_requeue_delay() -> None:
    default = s(300)
    assert requeue_delay(None, default) == (default, None)
    assert requeue_delay("10m", default) == (s(600), None)
    for bad in ["10", "-5m", "0s", "0"]:
        delay, problem = requeue_delay(bad, default)
        assert delay == default
        assert problem is not None
        assert problem.startswith("requeue-delay ignored")


def test_requeue_not_before() -> None:
    assert requeue_not_before(T0, s(300)) == datetime(2026, 11, 21, 10, 5, tzinfo=UTC)


def test_format_rfc3339_zero_pads_early_years() -> None:
    from datetime import UTC, datetime

    from minruntime.core import format_rfc3339, parse_rfc3339

    moment = datetime(33, 1, 2, 3, 4, 5, 60, tzinfo=UTC)
    assert format_rfc3339(moment) == "0033-01-02T03:04:05.00006Z"
    assert parse_rfc3339(format_rfc3339(moment)) == moment
