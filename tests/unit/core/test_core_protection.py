from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from core_testkit import T0, s
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    InvalidTimestampError,
    is_protected,
    protected_until,
    remaining_protection,
)
from minruntime.core.protection import FOREVER

US = timedelta(microseconds=1)


def test_protected_strictly_before_the_end() -> None:
    assert is_protected(T0, s(60), T0 + s(60) - US)
    assert not is_protected(T0, s(60), T0 + s(60))
    assert not is_protected(T0, s(60), T0 + s(61))
    assert is_protected(T0, s(60), T0)


def test_zero_min_runtime_never_protects() -> None:
    assert not is_protected(T0, s(0), T0)


def test_no_start_time_never_protects() -> None:
    assert not is_protected(None, s(3600), T0)
    assert protected_until(None, s(3600)) is None
    assert remaining_protection(None, s(3600), T0) == timedelta(0)


def test_future_start_time_is_protected() -> None:
    # A start time ahead of now (clock skew) keeps the window closed: the safe choice.
    assert is_protected(T0 + s(10), s(1), T0)


def test_window_and_remaining() -> None:
    assert protected_until(T0, s(60)) == T0 + s(60)
    assert remaining_protection(T0, s(60), T0 + s(45)) == s(15)
    assert remaining_protection(T0, s(60), T0 + s(60)) == timedelta(0)


def test_overflowing_window_is_forever() -> None:
    assert protected_until(FOREVER - s(1), s(10)) == FOREVER


def test_naive_times_are_rejected() -> None:
    with pytest.raises(InvalidTimestampError, match="no UTC offset"):
        is_protected(datetime(2026, 11, 21), s(1), T0)
    with pytest.raises(InvalidTimestampError, match="now"):
        is_protected(T0, s(1), datetime(2026, 11, 21))


@given(
    st.integers(0, 10**7),
    st.integers(-(10**7), 10**7),
    st.integers(0, 10**7),
)
def test_protection_is_monotone_in_now(runtime: int, offset: int, later: int) -> None:
    now = T0 + timedelta(microseconds=offset)
    if not is_protected(T0, timedelta(microseconds=runtime), now):
        assert not is_protected(T0, timedelta(microseconds=runtime), now + US * later)
