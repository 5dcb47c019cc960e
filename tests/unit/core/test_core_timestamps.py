"""parse_rfc3339's fast path (the C parser) agrees with the field-by-field one on every text."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import parse_rfc3339
from minruntime.core.errors import InvalidTimestampError, TimestampOutOfRangeError
from minruntime.core.timestamps import _RFC3339, _from_fields, require_in_range

_DIGITS = "0123456789"


@st.composite
def rfc3339_like(draw: st.DrawFn) -> str:
    """Text the RFC3339 pattern matches, valid or not as a date (years, hours, offsets ...)."""

    def number(width: int) -> str:
        return draw(st.text(_DIGITS, min_size=width, max_size=width))

    separator = draw(st.sampled_from("Tt "))
    fraction = draw(st.one_of(st.just(""), st.text(_DIGITS, min_size=1, max_size=12)))
    if draw(st.booleans()):
        zone = draw(st.sampled_from("Zz"))
    else:
        zone = f"{draw(st.sampled_from('+-'))}{number(2)}:{number(2)}"
    date = f"{number(4)}-{number(2)}-{number(2)}"
    clock = f"{number(2)}:{number(2)}:{number(2)}"
    return f"{date}{separator}{clock}{'.' + fraction if fraction else ''}{zone}"


def _slow(text: str) -> datetime:
    match = _RFC3339.fullmatch(text)
    assert match is not None
    moment = _from_fields(match, text)
    require_in_range(moment, text)
    return moment


def _outcome(parse: object, text: str) -> tuple[str, object]:
    try:
        moment = parse(text)  # type: ignore[operator]
    except (InvalidTimestampError, TimestampOutOfRangeError) as error:
        return ("error", type(error))
    except ValueError:  # an offset of 24 hours or more: timezone() refuses it, either way
        return ("value_error", None)
    return ("ok", (moment, moment.utcoffset()))


@given(rfc3339_like())
def test_fast_path_agrees_with_the_fields(text: str) -> None:
    assert _outcome(parse_rfc3339, text) == _outcome(_slow, text)


@given(
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ),
    st.integers(min_value=-23 * 60, max_value=23 * 60),
)
def test_valid_instants_round_trip(moment: datetime, offset_minutes: int) -> None:
    local = moment.astimezone(timezone(timedelta(minutes=offset_minutes)))
    text = local.isoformat()
    assert parse_rfc3339(text) == moment
    assert parse_rfc3339(text).utcoffset() == timedelta(minutes=offset_minutes)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-11-21T10:00:00Z", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-11-21t10:00:00.123456789z", datetime(2026, 11, 21, 10, 0, 0, 123456, tzinfo=UTC)),
        ("2026-11-21 11:00:00+01:00", datetime(2026, 11, 21, 10, tzinfo=UTC)),
        ("2026-11-21T10:00:00.9999999-00:00", datetime(2026, 11, 21, 10, 0, 0, 999999, tzinfo=UTC)),
    ],
)
def test_examples(text: str, expected: datetime) -> None:
    assert parse_rfc3339(text) == expected


@pytest.mark.parametrize(
    "text", ["2026-02-30T10:00:00Z", "2026-11-21T24:00:00Z", "0000-01-01T00:00:00Z"]
)
def test_impossible_dates_are_refused(text: str) -> None:
    with pytest.raises(InvalidTimestampError, match="invalid timestamp"):
        parse_rfc3339(text)
