"""The evictor's checkpoint wait as rules (core.checkpoint_wait): when a request is made,
when a request on the PodGroup is this decision's, and when the wait ends."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import format_rfc3339
from minruntime.core.checkpoint import (
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    CHECKPOINTED_AT_ANNOTATION,
)
from minruntime.core.checkpoint_wait import (
    WaitEnd,
    pending_request,
    request_time,
    time_left,
    wait_end,
)

T0 = datetime(2026, 11, 29, 10, 0, 0, 700_000, tzinfo=UTC)
GRACE = timedelta(seconds=3)


def test_the_request_is_written_in_whole_seconds_so_a_second_precision_answer_counts() -> None:
    asked = request_time(T0)
    assert asked == datetime(2026, 11, 29, 10, 0, 0, tzinfo=UTC)
    answer = {CHECKPOINTED_AT_ANNOTATION: "2026-11-29T10:00:00Z"}  # `date -u +%FT%TZ` at once
    assert wait_end(answer, asked, GRACE, T0) == WaitEnd("acknowledged", T0, asked)


def test_a_request_on_the_podgroup_is_this_decisions_only_at_or_after_its_decision() -> None:
    def on(value: str) -> dict[str, str | None]:
        return {CHECKPOINT_REQUESTED_AT_ANNOTATION: value}

    assert pending_request({}, T0) is None
    assert pending_request(on("2026-11-29T10:00:00Z"), T0) == request_time(T0)  # same second
    assert pending_request(on("2026-11-29T10:00:05Z"), T0) == T0.replace(second=5, microsecond=0)
    assert pending_request(on("2026-11-29T09:59:59Z"), T0) is None  # an earlier decision's
    assert pending_request(on("yesterday"), T0) is None


def test_the_wait_ends_gone_acknowledged_or_timed_out() -> None:
    asked = request_time(T0)
    assert wait_end(None, asked, GRACE, T0) == WaitEnd("gone", T0)
    assert wait_end({}, asked, GRACE, T0) is None
    assert wait_end({}, asked, GRACE, asked + GRACE) == WaitEnd("timed_out", asked + GRACE)
    old = {CHECKPOINTED_AT_ANNOTATION: format_rfc3339(asked - timedelta(seconds=1))}
    assert wait_end(old, asked, GRACE, T0) is None  # a checkpoint from before the request
    later = asked + timedelta(seconds=2)
    future = {CHECKPOINTED_AT_ANNOTATION: format_rfc3339(later)}
    assert wait_end(future, asked, GRACE, T0) is None  # not yet: in the future of now
    assert wait_end(future, asked, GRACE, later) == WaitEnd("acknowledged", later, later)
    assert wait_end({CHECKPOINTED_AT_ANNOTATION: "soon"}, asked, GRACE, T0) is None
    assert time_left(asked, GRACE, T0) == 2.3


@given(
    grace=st.timedeltas(min_value=timedelta(seconds=1), max_value=timedelta(minutes=30)),
    after=st.timedeltas(min_value=timedelta(0), max_value=timedelta(hours=1)),
    answered=st.one_of(st.none(), st.timedeltas(timedelta(hours=-1), timedelta(hours=1))),
)
def test_a_wait_never_outlasts_its_grace_and_never_times_out_before_it(
    grace: timedelta, after: timedelta, answered: timedelta | None
) -> None:
    asked = request_time(T0)
    now = asked + after
    annotations: dict[str, str | None] = {}
    if answered is not None:
        annotations[CHECKPOINTED_AT_ANNOTATION] = format_rfc3339(asked + answered)
    end = wait_end(annotations, asked, grace, now)
    if now >= asked + grace:
        assert end is not None  # the grace is over: it ends, whatever the workload did
    if end is not None and end.outcome == "timed_out":
        assert now >= asked + grace
    if end is not None and end.outcome == "acknowledged":
        assert end.checkpointed_at is not None
        assert asked <= end.checkpointed_at <= now
