from __future__ import annotations

from datetime import datetime

import pytest
from core_testkit import T0, s

from minruntime.core import NOT_STARTED, InvalidTimestampError, apply_allocated, apply_released


def test_first_allocation_sets_the_start() -> None:
    state = apply_allocated(NOT_STARTED, ["p0", "p1"], T0)
    assert state.start_time == T0
    assert len(state.allocated) == 2
    assert state.running


def test_scale_up_keeps_the_start() -> None:
    state = apply_allocated(apply_allocated(NOT_STARTED, ["p0"], T0), ["p1"], T0 + s(60))
    assert state.start_time == T0
    assert state.allocated == {"p0", "p1"}


def test_reallocating_an_allocated_pod_is_idempotent() -> None:
    state = apply_allocated(NOT_STARTED, ["p0"], T0)
    assert apply_allocated(state, ["p0"], T0 + s(5)) is state


def test_partial_release_keeps_the_start() -> None:
    state = apply_allocated(NOT_STARTED, ["p0", "p1"], T0)
    state = apply_released(state, ["p1"], T0 + s(30))
    assert state.start_time == T0
    assert state.allocated == {"p0"}


def test_releasing_unknown_pods_is_a_no_op() -> None:
    state = apply_allocated(NOT_STARTED, ["p0"], T0)
    assert apply_released(state, ["ghost"], T0 + s(1)) is state
    assert apply_released(NOT_STARTED, None, T0) is NOT_STARTED


def test_full_release_ends_the_run_and_keeps_the_last_start() -> None:
    state = apply_allocated(NOT_STARTED, ["p0", "p1"], T0)
    ended = apply_released(state, None, T0 + s(100))
    assert ended.start_time is None
    assert not ended.running
    assert ended.last_start_time == T0
    assert ended.ended_at == T0 + s(100)
    # Releasing every pod by name ends it too.
    assert apply_released(state, ["p0", "p1"], T0 + s(100)) == ended


def test_reallocation_after_full_release_gets_a_new_start() -> None:
    state = apply_released(apply_allocated(NOT_STARTED, ["p0"], T0), None, T0 + s(10))
    state = apply_allocated(state, ["p0"], T0 + s(20))
    assert state.start_time == T0 + s(20)
    assert state.ended_at is None


def test_the_fold_uses_event_times() -> None:
    first = apply_allocated(NOT_STARTED, ["a"], T0)
    state = apply_allocated(first, ["b"], T0 + s(5))
    state = apply_allocated(apply_released(state, ["a"], T0 + s(6)), ["a"], T0 + s(7))
    assert state.start_time == T0
    assert NOT_STARTED.start_time is None
    assert apply_released(first, ["a"], T0 + s(1)).start_time is None


def test_allocating_no_pods_starts_nothing() -> None:
    assert apply_allocated(NOT_STARTED, [], T0) is NOT_STARTED


def test_naive_event_times_are_rejected() -> None:
    with pytest.raises(InvalidTimestampError):
        apply_allocated(NOT_STARTED, ["p0"], datetime(2026, 11, 21))
