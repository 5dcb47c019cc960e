"""The checkpoint handshake's contract (core.checkpoint): the grace's bounds, reading a
checkpoint time, the run's last checkpoint, the work an eviction puts at risk, and the podgroup
fold ignoring (and counting) an invalid grace or checkpoint."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from core_testkit import running, submission
from hypothesis import given
from hypothesis import strategies as st
from tests.cloudevents import T0

from minruntime.core import (
    Annotation,
    IgnoredValue,
    PodGroupState,
    Release,
    fold,
    format_duration,
    format_rfc3339,
    ignored_values,
)
from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINTED_AT_ANNOTATION,
    CLOCK_TOLERANCE,
    MAX_CHECKPOINT_GRACE,
    last_checkpoint,
    read_checkpoint_grace,
    read_checkpoint_time,
    work_at_risk,
)

HOUR = timedelta(hours=1)
instants = st.datetimes(
    min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1), timezones=st.just(UTC)
)
offsets = st.timedeltas(min_value=timedelta(days=-30), max_value=timedelta(days=30))


def _grace(text: str | None) -> tuple[timedelta | None, str | None]:
    reading = read_checkpoint_grace({} if text is None else {CHECKPOINT_GRACE_ANNOTATION: text})
    return reading.grace, reading.problem


# --- checkpoint-grace -----------------------------------------------------------------------


def test_an_absent_grace_is_no_grace_and_no_problem() -> None:
    assert _grace(None) == (None, None)


@pytest.mark.parametrize(
    ("text", "grace"),
    [("1s", timedelta(seconds=1)), ("5m", timedelta(minutes=5)), ("30m", MAX_CHECKPOINT_GRACE)],
)
def test_a_grace_in_bounds_is_read(text: str, grace: timedelta) -> None:
    assert _grace(text) == (grace, None)


@pytest.mark.parametrize(
    "text",
    [
        "0",  # zero: nothing to wait for
        "0s",
        "-5m",  # negative (a sign is not in the grammar)
        "30m1s",  # just above the bound
        "31m",
        "1h",
        "5w",
        "2562047h",  # beyond what a wait may be
        "99999999999999999999h",  # beyond any duration
        "5",  # a bare number
        "abc",
        "",
        "x" * 10_000,  # longer than any duration
    ],
)
def test_a_grace_out_of_bounds_or_unreadable_is_a_problem(text: str) -> None:
    grace, problem = _grace(text)
    assert grace is None
    assert problem is not None
    assert CHECKPOINT_GRACE_ANNOTATION in problem
    # The problem names the value at most once, bounded: a log line, not the whole input.
    assert len(problem) < 400


@given(st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=400)))
def test_a_grace_is_accepted_exactly_inside_zero_to_thirty_minutes(duration: timedelta) -> None:
    grace, problem = _grace(format_duration(duration))
    if timedelta(0) < duration <= MAX_CHECKPOINT_GRACE:
        assert (grace, problem) == (duration, None)
    else:
        assert grace is None
        assert problem is not None


# --- checkpointed-at ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-21 10:00",  # no seconds, no offset
        "2026-11-21T10:00:00",  # no offset: ambiguous
        "yesterday",
        "",
        "1700000000",
        "2026-02-30T10:00:00Z",  # no such day
        "0001-01-01T00:00:00+01:00",  # year 0 in UTC
    ],
)
def test_a_checkpoint_time_that_is_not_rfc3339_is_ignored(text: str) -> None:
    assert read_checkpoint_time(text, None, None) is None


def test_a_checkpoint_time_is_read_inside_its_bounds_inclusive() -> None:
    text = format_rfc3339(T0)
    assert read_checkpoint_time(text, None, None) == T0
    assert read_checkpoint_time(text, T0, T0) == T0
    assert read_checkpoint_time(text, T0 - HOUR, T0 + HOUR) == T0


def test_a_checkpoint_in_the_future_or_before_the_start_is_ignored() -> None:
    text = format_rfc3339(T0)
    assert read_checkpoint_time(text, None, T0 - timedelta(microseconds=1)) is None
    assert read_checkpoint_time(text, T0 + timedelta(microseconds=1), None) is None
    assert read_checkpoint_time(None, None, None) is None


@given(instants, offsets, offsets)
def test_a_checkpoint_time_is_kept_iff_between_its_bounds(
    moment: datetime, before: timedelta, after: timedelta
) -> None:
    not_before, not_after = moment + before, moment + after
    read = read_checkpoint_time(format_rfc3339(moment), not_before, not_after)
    assert read == (moment if not_before <= moment <= not_after else None)


def test_the_last_checkpoint_is_bounded_by_the_run_start_and_now() -> None:
    annotations = {CHECKPOINTED_AT_ANNOTATION: format_rfc3339(T0 + HOUR)}
    assert last_checkpoint(annotations, T0, T0 + 2 * HOUR) == T0 + HOUR
    # Written before this run started: a previous run's checkpoint.
    assert last_checkpoint(annotations, T0 + 2 * HOUR, T0 + 3 * HOUR) is None
    # In the future of now, by more than the clock tolerance (whole-second change times).
    assert last_checkpoint(annotations, T0, T0 + HOUR - timedelta(seconds=3)) is None
    assert last_checkpoint(annotations, T0, T0 + HOUR - CLOCK_TOLERANCE) == T0 + HOUR
    assert last_checkpoint({}, T0, T0 + HOUR) is None
    # No run start known: only the future bound applies.
    assert last_checkpoint(annotations, None, T0 + 2 * HOUR) == T0 + HOUR


# --- work at risk ---------------------------------------------------------------------------


def test_work_at_risk_is_the_time_since_the_last_checkpoint_times_the_gpus() -> None:
    assert work_at_risk(T0, T0 + HOUR, 4.0, T0 + 3 * HOUR) == 2 * 3600 * 4.0
    # No checkpoint: the whole run is at risk.
    assert work_at_risk(T0, None, 4.0, T0 + 3 * HOUR) == 3 * 3600 * 4.0
    # A checkpoint older than the start is the previous run's: the whole run again.
    assert work_at_risk(T0, T0 - HOUR, 2.0, T0 + HOUR) == 3600 * 2.0
    # Now before the checkpoint (clock skew): nothing negative.
    assert work_at_risk(T0, T0 + HOUR, 2.0, T0) == 0.0
    assert work_at_risk(T0, None, 0.0, T0 + HOUR) == 0.0


@given(instants, offsets, st.none() | offsets, st.floats(min_value=0, max_value=100_000))
def test_work_at_risk_is_bounded_by_the_whole_run_and_never_negative(
    start: datetime, elapsed: timedelta, since_start: timedelta | None, gpus: float
) -> None:
    now = start + elapsed
    checkpoint = None if since_start is None else start + since_start
    risk = work_at_risk(start, checkpoint, gpus, now)
    whole = work_at_risk(start, None, gpus, now)
    assert 0.0 <= risk <= whole
    assert whole == max(0.0, elapsed.total_seconds()) * gpus
    if checkpoint is not None and start <= checkpoint <= now:
        assert risk == pytest.approx((now - checkpoint).total_seconds() * gpus)


@given(instants, st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=30)))
def test_a_later_checkpoint_never_puts_more_at_risk(start: datetime, run: timedelta) -> None:
    now = start + run
    earlier, later = start + run / 3, start + run / 2
    assert work_at_risk(start, later, 1.0, now) <= work_at_risk(start, earlier, 1.0, now)


# --- the podgroup fold: ignored and counted -------------------------------------------------


def _started(at: datetime = T0) -> PodGroupState:
    """A submitted podgroup whose run started at ``at``."""
    return running(fold(PodGroupState("u"), submission(at=at - HOUR)), at)


def _checkpoint_at(moment: datetime, at: datetime) -> Annotation:
    return Annotation({CHECKPOINTED_AT_ANNOTATION: format_rfc3339(moment)}, at)


def test_a_valid_checkpoint_is_held_and_not_counted() -> None:
    state = _started()
    change = _checkpoint_at(T0 + HOUR, T0 + HOUR)
    assert ignored_values(state, change) == frozenset()
    after = fold(state, change)
    assert after.annotations[CHECKPOINTED_AT_ANNOTATION] == format_rfc3339(T0 + HOUR)


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("not a time", T0 + HOUR),
        ("2026-11-21T10:00:00", T0 + HOUR),  # no offset
        (format_rfc3339(T0 + 2 * HOUR), T0 + HOUR),  # in the future of its event
        (format_rfc3339(T0 - timedelta(seconds=1)), T0 + HOUR),  # before the run started
    ],
)
def test_an_invalid_checkpoint_is_ignored_counted_and_the_previous_one_stays(
    text: str, at: datetime
) -> None:
    held = fold(_started(), _checkpoint_at(T0 + timedelta(minutes=10), T0 + timedelta(minutes=10)))
    change = Annotation({CHECKPOINTED_AT_ANNOTATION: text}, at)
    assert ignored_values(held, change) == {IgnoredValue.CHECKPOINTED_AT}
    after = fold(held, change)
    assert after.annotations[CHECKPOINTED_AT_ANNOTATION] == format_rfc3339(
        T0 + timedelta(minutes=10)
    )
    # Without one before, none is held.
    assert CHECKPOINTED_AT_ANNOTATION not in fold(_started(), change).annotations
    # The same in a submission (the bridge sends every annotation on each change).
    resubmitted = submission(annotations={CHECKPOINTED_AT_ANNOTATION: text}, at=at)
    assert ignored_values(held, resubmitted) == {IgnoredValue.CHECKPOINTED_AT}
    assert fold(held, resubmitted).annotations[CHECKPOINTED_AT_ANNOTATION] == format_rfc3339(
        T0 + timedelta(minutes=10)
    )


def test_a_checkpoint_held_already_is_not_news_and_a_removal_is_taken() -> None:
    held = fold(_started(), _checkpoint_at(T0 + HOUR, T0 + HOUR))
    text = held.annotations[CHECKPOINTED_AT_ANNOTATION]
    # Re-sent unchanged after the run ended and another began: not counted again.
    later = running(fold(held, Release(None, T0 + 2 * HOUR, "evicted")), T0 + 3 * HOUR)
    again = submission(annotations={CHECKPOINTED_AT_ANNOTATION: text}, at=T0 + 4 * HOUR)
    assert ignored_values(later, again) == frozenset()
    assert fold(later, again).annotations[CHECKPOINTED_AT_ANNOTATION] == text
    removal = Annotation({CHECKPOINTED_AT_ANNOTATION: None}, T0 + 4 * HOUR)
    assert ignored_values(held, removal) == frozenset()
    assert CHECKPOINTED_AT_ANNOTATION not in fold(held, removal).annotations


def test_a_checkpoint_of_a_pending_podgroup_has_no_start_to_be_before() -> None:
    pending = fold(PodGroupState("u"), submission(at=T0))
    change = _checkpoint_at(T0 - HOUR, T0)
    assert ignored_values(pending, change) == frozenset()
    assert CHECKPOINTED_AT_ANNOTATION in fold(pending, change).annotations


@pytest.mark.parametrize("text", ["0", "-5m", "31m", "1h", "abc", "", "5"])
def test_an_invalid_grace_is_counted_in_a_submission_or_an_annotation(text: str) -> None:
    state = fold(PodGroupState("u"), submission())
    change = Annotation({CHECKPOINT_GRACE_ANNOTATION: text}, T0)
    assert ignored_values(state, change) == {IgnoredValue.CHECKPOINT_GRACE}
    resubmitted = submission(annotations={CHECKPOINT_GRACE_ANNOTATION: text})
    assert ignored_values(state, resubmitted) == {IgnoredValue.CHECKPOINT_GRACE}
    assert ignored_values(state, Annotation({CHECKPOINT_GRACE_ANNOTATION: "5m"}, T0)) == set()
    assert ignored_values(state, Annotation({CHECKPOINT_GRACE_ANNOTATION: None}, T0)) == set()


@given(st.timedeltas(min_value=timedelta(hours=-3), max_value=timedelta(hours=3)))
def test_a_new_checkpoint_is_held_iff_between_the_run_start_and_its_event(
    offset: timedelta,
) -> None:
    # "Its event" with the clock tolerance: up to CLOCK_TOLERANCE after the event's time.
    at = T0 + HOUR
    state = _started()
    change = _checkpoint_at(T0 + offset, at)
    held = CHECKPOINTED_AT_ANNOTATION in fold(state, change).annotations
    counted = IgnoredValue.CHECKPOINTED_AT in ignored_values(state, change)
    assert held == (T0 <= T0 + offset <= at + CLOCK_TOLERANCE)
    assert counted == (not held)
