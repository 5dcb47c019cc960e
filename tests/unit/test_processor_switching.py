"""The processor hands the interpreter lock over often (bootstrap.tune_switching, issue 30)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest

from minruntime import bootstrap


@pytest.fixture
def restored() -> Iterator[None]:
    before = sys.getswitchinterval()
    yield
    sys.setswitchinterval(before)


@pytest.mark.usefixtures("restored")
def test_the_processor_hands_the_lock_over_ten_times_as_often_as_cpython() -> None:
    sys.setswitchinterval(0.005)  # CPython's default
    bootstrap.tune_switching()
    assert sys.getswitchinterval() == pytest.approx(0.0005)
    assert bootstrap.SWITCH_INTERVAL_SECONDS < 0.005 / 5
