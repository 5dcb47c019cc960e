"""The preemption delay of beneficiaries (SEMANTICS.md §10): resolution, window, fold, planner."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from core_testkit import T0, flat_tree, node, nominated, pending_pg, plan, running_pg, s, submission
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import (
    LAST_EVICTION_ANNOTATION,
    PREEMPTION_DELAY_ANNOTATION,
    Allocation,
    Annotation,
    ClusterState,
    DelaySource,
    IgnoredValue,
    LastEviction,
    PodGroupState,
    PreemptionDelay,
    Release,
    RequeueOutcome,
    RequeueReason,
    SubGroup,
    Submission,
    delay_window,
    fold,
    format_rfc3339,
    ignored_values,
    in_delay_window,
    last_eviction,
    last_eviction_annotation,
    parse_duration,
    resolve_delay,
    submitted_delay,
    valid_delay,
)
from minruntime.core.annotations import MAX_REQUEUES_ANNOTATION
from minruntime.core.errors import MinRuntimeError

TEN_MINUTES = s(600)
DURATION_TEXTS = ["10m", "0", "1h30m", "2d", "-5m", "abc", "", "5", "1h-30m", "300ms"]


def _naive_first_valid(texts: list[str | None]) -> timedelta | None:
    for text in texts:
        if text is None:
            continue
        try:
            return parse_duration(text)
        except MinRuntimeError:
            continue
    return None


# --- where the delay comes from -------------------------------------------------------------


def test_the_spec_wins_over_the_annotation_which_wins_over_the_pods() -> None:
    pods = (("p0", "1m"), ("p1", "2m"))
    assert resolve_delay(submitted_delay("10m", pods), "5m") == PreemptionDelay(
        TEN_MINUTES, DelaySource.SPEC
    )
    assert resolve_delay(submitted_delay(None, pods), "5m") == PreemptionDelay(
        s(300), DelaySource.ANNOTATION
    )
    assert resolve_delay(submitted_delay(None, pods), None) == PreemptionDelay(
        s(60), DelaySource.POD, "p0"
    )
    assert resolve_delay(None, None) is None


@pytest.mark.parametrize("bad", ["-10m", "abc", "", "5", "1h-30m", "10x"])
def test_invalid_or_negative_values_are_skipped_for_the_next_source(bad: str) -> None:
    assert valid_delay(bad) is None
    pods = (("p0", bad), ("p1", "3m"))
    assert resolve_delay(submitted_delay(bad, pods), bad) == PreemptionDelay(
        s(180), DelaySource.POD, "p1"
    )


@settings(max_examples=300, deadline=None)
@given(
    spec=st.none() | st.sampled_from(DURATION_TEXTS),
    annotation=st.none() | st.sampled_from(DURATION_TEXTS),
    pods=st.lists(st.sampled_from(DURATION_TEXTS), max_size=4),
)
def test_the_delay_is_the_first_valid_of_spec_annotation_pods(
    spec: str | None, annotation: str | None, pods: list[str]
) -> None:
    named = tuple((f"p{i}", text) for i, text in enumerate(pods))
    resolved = resolve_delay(submitted_delay(spec, named), annotation)
    expected = _naive_first_valid([spec, annotation, *pods])
    assert (None if resolved is None else resolved.delay) == expected


# --- the window ------------------------------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(
    delay=st.integers(0, 7200),
    evicted=st.none() | st.integers(-3600, 3600),
    annotated=st.none() | st.integers(-3600, 3600),
    now=st.integers(-3600, 14400),
)
def test_the_window_starts_at_the_latest_of_submission_and_evictions_and_is_strict(
    delay: int, evicted: int | None, annotated: int | None, now: int
) -> None:
    service = None if evicted is None else T0 + s(evicted)
    kai = None if annotated is None else T0 + s(annotated)
    window = delay_window(
        PreemptionDelay(s(delay), DelaySource.SPEC), T0, last_eviction(service, kai)
    )
    assert window is not None
    start = max(moment for moment in (T0, service, kai) if moment is not None)
    assert window.start == start
    assert window.ends_at == start + s(delay)
    moment = T0 + s(now)
    assert window.inside(moment) == (moment < start + s(delay))
    assert in_delay_window(window.ends_at, moment) == window.inside(moment)
    assert not in_delay_window(None, moment)


def test_the_later_eviction_says_where_the_window_starts() -> None:
    assert last_eviction(T0, T0 + s(1)) == LastEviction(T0 + s(1), "annotation")
    assert last_eviction(T0 + s(1), T0) == LastEviction(T0 + s(1), "service")
    assert last_eviction(None, None) is None
    assert delay_window(None, T0, None) is None
    # A window past what a datetime holds ends far in the future, never raises.
    huge = PreemptionDelay(parse_duration("5000w"), DelaySource.SPEC)
    window = delay_window(huge, T0.replace(year=9990), None)
    assert window is not None
    assert window.inside(T0.replace(year=9999, month=1))


def test_a_last_eviction_in_the_future_or_before_the_podgroup_is_ignored() -> None:
    text = format_rfc3339(T0)
    assert last_eviction_annotation(text, T0, T0 - s(60)) == T0
    assert last_eviction_annotation(text, T0 - s(1), None) is None  # after the event
    assert last_eviction_annotation(text, T0 + s(60), T0 + s(1)) is None  # before the podgroup
    assert last_eviction_annotation("yesterday", T0, None) is None
    assert last_eviction_annotation(None, T0, None) is None


# --- the fold ---------------------------------------------------------------------------------


def _submission(
    at_seconds: int = 0,
    *,
    spec: str | None = "10m",
    annotations: dict[str, str] | None = None,
    pods: tuple[tuple[str, str], ...] = (),
) -> Submission:
    fields = {"namespace": "team", "queue": "team", "priority": 10, "preemption_delay": spec}
    pod, at = (("p0", "default", 1.0),), T0 + s(at_seconds)
    return submission(pod, (SubGroup(),), annotations, at, pod_preemption_delays=pods, **fields)


def _ran(state: PodGroupState, start: int, end: int, reason: str | None) -> PodGroupState:
    state = fold(state, Allocation((("p0", "n1"),), T0 + s(start)))
    return fold(state, Release(None, T0 + s(end), reason))


def test_a_submission_opens_the_window_and_an_eviction_re_arms_it() -> None:
    state = fold(PodGroupState("u"), _submission())
    window = state.delay_window()
    assert window is not None
    assert (window.start, window.ends_at, window.last_eviction) == (T0, T0 + TEN_MINUTES, None)
    evicted = _ran(state, 60, 900, "evicted")
    assert evicted.evicted_at == T0 + s(900)
    window = evicted.delay_window()
    assert window is not None
    assert window.ends_at == T0 + s(1500)
    assert window.last_eviction == LastEviction(T0 + s(900), "service")


@pytest.mark.parametrize(
    ("reason", "awaiting", "re_arms"),
    [
        ("evicted", False, True),
        ("preempted", False, True),
        ("requeued", False, True),
        (None, True, True),  # the cluster carried out a committed requeue
        ("completed", False, False),
        ("failed", False, False),
        (None, False, False),
    ],
)
def test_only_a_run_an_eviction_ended_re_arms_the_window(
    reason: str | None, awaiting: bool, re_arms: bool
) -> None:
    state = fold(PodGroupState("u"), _submission())
    state = fold(state, Allocation((("p0", "n1"),), T0 + s(60)))
    state = state._replace(awaiting_release=awaiting)
    ended = fold(state, Release(None, T0 + s(900), reason))
    assert (ended.evicted_at == T0 + s(900)) is re_arms
    assert (ended.evicted_at is None) is not re_arms


def test_a_partial_release_does_not_re_arm() -> None:
    state = fold(PodGroupState("u"), _submission())
    state = fold(state, Allocation((("p0", "n1"), ("p1", "n1")), T0 + s(60)))
    state = fold(state, Release(("p1",), T0 + s(120), "evicted"))
    assert state.evicted_at is None


def test_kai_annotation_re_arms_and_removing_it_forgets_it() -> None:
    state = fold(PodGroupState("u"), _submission(spec=None))
    annotated = fold(
        state,
        Annotation(
            {
                PREEMPTION_DELAY_ANNOTATION: "5m",
                LAST_EVICTION_ANNOTATION: format_rfc3339(T0 + s(60)),
            },
            T0 + s(90),
        ),
    )
    window = annotated.delay_window()
    assert window is not None
    assert window.delay == PreemptionDelay(s(300), DelaySource.ANNOTATION)
    assert window.last_eviction == LastEviction(T0 + s(60), "annotation")
    assert window.ends_at == T0 + s(360)
    removed = fold(annotated, Annotation({LAST_EVICTION_ANNOTATION: None}, T0 + s(100)))
    assert removed.eviction_annotated_at is None
    window = removed.delay_window()
    assert window is not None
    assert window.ends_at == T0 + s(300)


def test_ignored_values_are_reported_once_per_field_per_event() -> None:
    state = PodGroupState("u")
    bad = _submission(
        spec="-1m",
        annotations={PREEMPTION_DELAY_ANNOTATION: "abc", LAST_EVICTION_ANNOTATION: "soon"},
        pods=(("p0", "x"),),
    )
    assert ignored_values(state, bad) == {
        IgnoredValue.PREEMPTION_DELAY,
        IgnoredValue.LAST_EVICTION_TIMESTAMP,
    }
    assert ignored_values(state, _submission()) == frozenset()
    submitted = fold(state, _submission())
    future = Annotation({LAST_EVICTION_ANNOTATION: format_rfc3339(T0 + s(3600))}, T0 + s(60))
    assert ignored_values(submitted, future) == {IgnoredValue.LAST_EVICTION_TIMESTAMP}
    assert fold(submitted, future).eviction_annotated_at is None
    before = Annotation({LAST_EVICTION_ANNOTATION: format_rfc3339(T0 - s(60))}, T0 + s(60))
    assert ignored_values(submitted, before) == {IgnoredValue.LAST_EVICTION_TIMESTAMP}
    assert ignored_values(submitted, Release(None, T0, "evicted")) == frozenset()


@pytest.mark.parametrize("text", ["0", "-1", "1001", "3.5", "three", ""])
def test_a_max_requeues_annotation_out_of_range_is_an_ignored_value(text: str) -> None:
    submitted = fold(PodGroupState("u"), _submission())
    change = Annotation({MAX_REQUEUES_ANNOTATION: text}, T0 + s(60))
    assert ignored_values(submitted, change) == {IgnoredValue.MAX_REQUEUES}
    assert ignored_values(submitted, _submission(annotations={MAX_REQUEUES_ANNOTATION: text})) == {
        IgnoredValue.MAX_REQUEUES
    }


def test_a_valid_or_removed_max_requeues_annotation_is_not_ignored() -> None:
    submitted = fold(PodGroupState("u"), _submission())
    for value in ("1", "1000", None):
        change = Annotation({MAX_REQUEUES_ANNOTATION: value}, T0 + s(60))
        assert ignored_values(submitted, change) == frozenset()


# --- the planner --------------------------------------------------------------------------------


def _snapshot(*pending: object) -> ClusterState:
    """n1 (4 GPUs) held by the over-running ``job``; the pending podgroups need it."""
    return ClusterState(
        nodes=(node("n1", 4.0),),
        running=(running_pg("job"),),
        pending=tuple(pending),  # type: ignore[arg-type]
    )


def test_a_beneficiary_inside_its_window_is_not_served() -> None:
    delayed = replace(pending_pg("urgent"), delay_ends_at=T0 + s(60))
    (decision,) = plan(_snapshot(delayed), nominated("job")).decisions
    assert decision.outcome is RequeueOutcome.ROLLED_BACK
    assert decision.reason is RequeueReason.PREEMPTION_DELAY
    assert decision.delay_ends_at == T0 + s(60)
    assert decision.beneficiaries == ()
    # At exactly the window's end it is no longer inside: strict, as protection.
    (later,) = plan(_snapshot(delayed), nominated("job"), now=T0 + s(60)).decisions
    assert later.outcome is RequeueOutcome.COMMITTED
    assert later.beneficiaries == ("urgent",)


def test_the_decision_names_the_earliest_window_end() -> None:
    first = replace(pending_pg("a", priority=20), delay_ends_at=T0 + s(600))
    second = replace(pending_pg("b", priority=15), delay_ends_at=T0 + s(120))
    (decision,) = plan(_snapshot(first, second), nominated("job")).decisions
    assert decision.reason is RequeueReason.PREEMPTION_DELAY
    assert decision.delay_ends_at == T0 + s(120)


def test_a_contender_outside_its_window_is_served_past_a_delayed_one() -> None:
    delayed = replace(pending_pg("urgent", priority=20), delay_ends_at=T0 + s(60))
    ready = pending_pg("ready", priority=15)
    (decision,) = plan(_snapshot(delayed, ready), nominated("job")).decisions
    assert decision.outcome is RequeueOutcome.COMMITTED
    assert decision.beneficiaries == ("ready",)
    assert decision.delay_ends_at is None


def test_the_delay_outranks_protection_against_other_contenders() -> None:
    # The victim is protected against "other" (reclaim 1h) but not "team" (preempt unset).
    tree = flat_tree("team", "other", reclaim=s(86400))
    protected_against = pending_pg("other-job", queue="other", priority=20)
    delayed = replace(pending_pg("urgent", priority=15), delay_ends_at=T0 + s(60))
    snapshot = _snapshot(protected_against, delayed)
    (decision,) = plan(snapshot, nominated("job"), tree=tree).decisions
    assert decision.reason is RequeueReason.PREEMPTION_DELAY
    # Without the delayed one, protection is the reason.
    (alone,) = plan(_snapshot(protected_against), nominated("job"), tree=tree).decisions
    assert alone.reason is RequeueReason.PROTECTED


def test_a_delayed_gang_that_cannot_use_the_freed_capacity_is_not_a_possible_beneficiary() -> None:
    too_big = replace(pending_pg("huge", gpus=(8.0,)), delay_ends_at=T0 + s(60))
    (decision,) = plan(_snapshot(too_big), nominated("job")).decisions
    assert decision.reason is RequeueReason.NO_CONTENDER_FITS
    assert decision.delay_ends_at is None


@settings(max_examples=200, deadline=None)
@given(
    delays=st.lists(st.none() | st.integers(-600, 600), min_size=1, max_size=4),
    priorities=st.lists(st.integers(11, 30), min_size=4, max_size=4),
)
def test_delays_only_take_beneficiaries_away(
    delays: list[int | None], priorities: list[int]
) -> None:
    pending = [
        replace(
            pending_pg(f"w{i}", priority=priorities[i]),
            delay_ends_at=None if delay is None else T0 + s(delay),
        )
        for i, delay in enumerate(delays)
    ]
    (decision,) = plan(_snapshot(*pending), nominated("job")).decisions
    inside = {pg.uid for pg in pending if in_delay_window(pg.delay_ends_at, T0)}
    assert not inside & set(decision.beneficiaries)
    undelayed = [replace(pg, delay_ends_at=None) for pg in pending if pg.uid not in inside]
    (expected,) = plan(_snapshot(*undelayed), nominated("job")).decisions
    if expected.outcome is RequeueOutcome.COMMITTED:
        assert decision.beneficiaries == expected.beneficiaries
    elif inside:
        assert decision.reason is RequeueReason.PREEMPTION_DELAY
        ends = [pg.delay_ends_at for pg in pending if pg.uid in inside]
        assert decision.delay_ends_at == min(end for end in ends if end is not None)
    else:
        assert decision == expected
