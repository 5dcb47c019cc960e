"""The requeue cap (SEMANTICS.md §10): the config, the annotation, the count, the planner gate."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from core_testkit import T0, node, nominated, pending_pg, plan, running_pg, s
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    MAX_REQUEUES,
    MAX_REQUEUES_ANNOTATION,
    MAX_REQUEUES_WINDOW,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    CapSource,
    ClusterState,
    InvalidConfigError,
    InvalidTimestampError,
    MinRuntimeConfig,
    NodePoolConfigs,
    Preemptibility,
    RequeueCap,
    RequeueOutcome,
    RequeueReason,
    annotated_max_requeues,
    format_rfc3339,
    requeue_cap,
)

HOUR = timedelta(hours=1)


def capped(limit: int | None = 2, window: timedelta | None = HOUR, pool: str = "default"):
    return NodePoolConfigs({pool: MinRuntimeConfig(max_requeues=limit, max_requeues_window=window)})


def contention(*, annotations: dict[str, str] | None = None, pool: str = "default"):
    """n1 (4 GPUs) held by the over-running ``job``; ``urgent`` waits for them."""
    ann = {EXPECTED_RUNTIME_ANNOTATION: "1h", **(annotations or {})}
    return (
        running_pg("job", annotations=ann, pool=pool),
        pending_pg("urgent", pool=pool),
        node("n1", 4.0, pool=pool),
    )


def snapshot_with(history: tuple, **kwargs: object) -> ClusterState:
    job, urgent, n1 = contention(**kwargs)  # type: ignore[arg-type]
    return ClusterState(
        nodes=(n1,), running=(job,), pending=(urgent,), requeue_history={"job": history}
    )


# --- the node pool's configuration ------------------------------------------------------------


def test_a_config_has_no_cap_unless_told() -> None:
    config = MinRuntimeConfig()
    assert config.max_requeues is None
    assert config.max_requeues_window is None
    assert "maxRequeues" not in config.to_arguments()


def test_the_cap_round_trips_through_plugin_arguments() -> None:
    config = MinRuntimeConfig.from_arguments({"maxRequeues": "3", "maxRequeuesWindow": "2h"})
    assert (config.max_requeues, config.max_requeues_window) == (3, 2 * HOUR)
    assert MinRuntimeConfig.from_arguments(config.to_arguments()) == config


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"maxRequeues": "0"}, "maxRequeues must be from 1 to 1000, got 0"),
        ({"maxRequeues": "1001"}, "maxRequeues must be from 1 to 1000, got 1001"),
        ({"maxRequeues": "-1"}, "maxRequeues must be a whole number from 1 to 1000, got '-1'"),
        ({"maxRequeues": "2.5"}, "maxRequeues must be a whole number"),
        ({"maxRequeues": "three"}, "maxRequeues must be a whole number"),
        ({"maxRequeues": "9" * 40}, "maxRequeues must be a whole number"),
        ({"maxRequeuesWindow": "0s"}, "maxRequeuesWindow must be positive and at most"),
        ({"maxRequeuesWindow": "367d"}, "maxRequeuesWindow must be positive and at most 8784h"),
        ({"maxRequeuesWindow": "soon"}, "maxRequeuesWindow: invalid duration"),
    ],
)
def test_a_bad_cap_argument_is_a_config_error(arguments: dict[str, str], message: str) -> None:
    with pytest.raises(InvalidConfigError, match="^" + message.replace("(", r"\(")):
        MinRuntimeConfig.from_arguments(arguments)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_requeues", 0),
        ("max_requeues", MAX_REQUEUES + 1),
        ("max_requeues", True),
        ("max_requeues", 2.0),
        ("max_requeues_window", timedelta(0)),
        ("max_requeues_window", -HOUR),
        ("max_requeues_window", MAX_REQUEUES_WINDOW + s(1)),
    ],
)
def test_the_config_refuses_a_cap_out_of_bounds(field: str, value: object) -> None:
    with pytest.raises(InvalidConfigError):
        MinRuntimeConfig(**{field: value})  # type: ignore[arg-type]


def test_the_bounds_themselves_are_accepted() -> None:
    config = MinRuntimeConfig(max_requeues=MAX_REQUEUES, max_requeues_window=MAX_REQUEUES_WINDOW)
    assert config.max_requeues == MAX_REQUEUES
    assert MinRuntimeConfig(max_requeues=1, max_requeues_window=s(1)).max_requeues == 1


# --- the podgroup's annotation ----------------------------------------------------------------


@pytest.mark.parametrize(("text", "value"), [("1", 1), (" 7 ", 7), ("007", 7), ("1000", 1000)])
def test_a_valid_annotation_is_read(text: str, value: int) -> None:
    assert annotated_max_requeues({MAX_REQUEUES_ANNOTATION: text}).value == value


@pytest.mark.parametrize("text", ["0", "-2", "1001", "", "two", "+3", "3_0", "١", "1e3", "9" * 99])
def test_an_invalid_annotation_is_a_problem_not_a_value(text: str) -> None:
    read = annotated_max_requeues({MAX_REQUEUES_ANNOTATION: text})
    assert read.value is None
    assert read.problem is not None
    assert read.problem.startswith(MAX_REQUEUES_ANNOTATION)
    assert read.problem.endswith("ignored")


def test_no_annotation_is_neither() -> None:
    read = annotated_max_requeues({})
    assert (read.value, read.problem) == (None, None)


def test_the_annotation_lowers_the_cap_and_never_raises_it() -> None:
    config = MinRuntimeConfig(max_requeues=3, max_requeues_window=HOUR)
    lower = requeue_cap(config, {MAX_REQUEUES_ANNOTATION: "1"})
    assert lower == RequeueCap(1, HOUR, CapSource.ANNOTATION)
    higher = requeue_cap(config, {MAX_REQUEUES_ANNOTATION: "9"})
    assert higher == RequeueCap(3, HOUR, CapSource.NODE_POOL)
    assert requeue_cap(config, {MAX_REQUEUES_ANNOTATION: "x"}) == higher


def test_the_annotation_caps_a_podgroup_of_an_unlimited_pool() -> None:
    assert requeue_cap(MinRuntimeConfig(), {}) is None
    cap = requeue_cap(MinRuntimeConfig(), {MAX_REQUEUES_ANNOTATION: "2"})
    assert cap == RequeueCap(2, None, CapSource.ANNOTATION)


# --- counting ---------------------------------------------------------------------------------


def test_a_requeue_counts_while_decided_after_now_minus_window() -> None:
    cap = RequeueCap(1, HOUR, CapSource.NODE_POOL)
    assert cap.reached([T0 - HOUR + s(1)], T0)
    # decidedAt > now - window, strictly: at exactly one window ago it has left.
    assert not cap.reached([T0 - HOUR], T0)
    assert cap.counted([T0 - s(5), T0 - 2 * HOUR, T0 - s(60)], T0) == (T0 - s(60), T0 - s(5))


def test_without_a_window_every_requeue_counts() -> None:
    cap = RequeueCap(2, None, CapSource.NODE_POOL)
    long_ago = T0 - timedelta(days=3000)
    assert cap.reached([long_ago, T0 - s(1)], T0)
    assert cap.frees_at([long_ago, T0 - s(1)], T0) is None


def test_frees_at_is_when_enough_requeues_left_the_window() -> None:
    cap = RequeueCap(2, HOUR, CapSource.NODE_POOL)
    times = [T0 - s(50 * 60), T0 - s(40 * 60), T0 - s(10 * 60)]
    # Three in the window, cap two: the two oldest must leave; the second leaves last.
    assert cap.frees_at(times, T0) == T0 - s(40 * 60) + HOUR
    assert not cap.reached(times, cap.frees_at(times, T0))  # type: ignore[arg-type]
    assert cap.frees_at(times[:1], T0) is None


def test_a_window_reaching_before_year_one_counts_everything() -> None:
    early = T0.replace(year=1, month=1, day=1, hour=0, minute=30)
    cap = RequeueCap(1, HOUR, CapSource.NODE_POOL)
    assert cap.reached([early - s(60)], early)


def test_the_snapshot_refuses_naive_requeue_times() -> None:
    with pytest.raises(InvalidTimestampError):
        ClusterState(nodes=(), requeue_history={"job": (T0.replace(tzinfo=None),)})


# --- the planner's gate -----------------------------------------------------------------------


def test_worked_example_two_requeues_in_an_hour() -> None:
    """docs/rule-engine.md "Requeue cap": maxRequeues 2, maxRequeuesWindow 1h."""
    configs = capped(2, HOUR)
    once = snapshot_with((T0 - s(50 * 60),))
    assert plan(once, nominated("job"), configs=configs).decisions[0].outcome is (
        RequeueOutcome.COMMITTED
    )
    twice = snapshot_with((T0 - s(50 * 60), T0 - s(20 * 60)))
    (decision,) = plan(twice, nominated("job"), configs=configs).decisions
    assert decision.outcome is RequeueOutcome.SKIPPED
    assert decision.reason is RequeueReason.REQUEUE_LIMIT
    assert decision.beneficiaries == ()
    # Ten minutes later the first left the window: the cap no longer holds it back.
    later = plan(twice, nominated("job"), configs=configs, now=T0 + s(10 * 60) + s(1))
    assert later.decisions[0].outcome is RequeueOutcome.COMMITTED


def test_no_cap_no_limit_whatever_the_history() -> None:
    history = tuple(T0 - s(60 * i) for i in range(1, 50))
    decision = plan(snapshot_with(history), nominated("job")).decisions[0]
    assert decision.outcome is RequeueOutcome.COMMITTED


def test_the_annotation_caps_alone_and_a_bad_one_is_ignored() -> None:
    one = (T0 - s(60),)
    lowered = snapshot_with(one, annotations={MAX_REQUEUES_ANNOTATION: "1"})
    assert plan(lowered, nominated("job")).decisions[0].reason is RequeueReason.REQUEUE_LIMIT
    raised = snapshot_with(one, annotations={MAX_REQUEUES_ANNOTATION: "5"})
    assert plan(raised, nominated("job"), configs=capped(1)).decisions[0].reason is (
        RequeueReason.REQUEUE_LIMIT
    )
    garbage = snapshot_with(one, annotations={MAX_REQUEUES_ANNOTATION: "0"})
    assert plan(garbage, nominated("job")).decisions[0].outcome is RequeueOutcome.COMMITTED


def test_the_pool_of_the_podgroup_decides() -> None:
    history = (T0 - s(60),)
    job, urgent, n1 = contention(pool="b")
    snapshot = ClusterState(
        nodes=(n1,), running=(job,), pending=(urgent,), requeue_history={"job": history}
    )
    # Only pool "a" is capped; "b" falls back to "default", which has no entry: unlimited.
    decision = plan(snapshot, nominated("job"), configs=capped(1, pool="a")).decisions[0]
    assert decision.outcome is RequeueOutcome.COMMITTED
    decision = plan(snapshot, nominated("job"), configs=capped(1, pool="default")).decisions[0]
    assert decision.reason is RequeueReason.REQUEUE_LIMIT


def test_the_earlier_gates_come_first() -> None:
    history = (T0 - s(60),)
    cooling = snapshot_with(
        history, annotations={REQUEUE_NOT_BEFORE_ANNOTATION: format_rfc3339(T0 + s(60))}
    )
    assert plan(cooling, nominated("job"), configs=capped(1)).decisions[0].reason is (
        RequeueReason.COOLDOWN
    )
    job, urgent, n1 = contention()
    for preemptibility, reason in (
        (Preemptibility.NON_PREEMPTIBLE, RequeueReason.NOT_PREEMPTIBLE),
        (Preemptibility.SEMI_PREEMPTIBLE, RequeueReason.SEMI_PREEMPTIBLE),
    ):
        gated = ClusterState(
            nodes=(n1,),
            running=(replace(job, preemptibility=preemptibility),),
            pending=(urgent,),
            requeue_history={"job": history},
        )
        assert plan(gated, nominated("job"), configs=capped(1)).decisions[0].reason is reason
    waiting = ClusterState(
        nodes=(n1,),
        running=(job,),
        pending=(urgent,),
        requeue_history={"job": history},
        awaiting_release=frozenset({"job"}),
    )
    assert plan(waiting, nominated("job"), configs=capped(1)).decisions[0].reason is (
        RequeueReason.ALREADY_COMMITTED
    )


def test_the_gate_holds_whether_or_not_anyone_waits() -> None:
    job, _, n1 = contention()
    alone = ClusterState(nodes=(n1,), running=(job,), requeue_history={"job": (T0,)})
    assert plan(alone, nominated("job"), configs=capped(1)).decisions[0].reason is (
        RequeueReason.REQUEUE_LIMIT
    )


# --- properties -------------------------------------------------------------------------------

limits = st.integers(1, 6)
windows = st.one_of(st.none(), st.sampled_from([s(1), s(600), HOUR, timedelta(days=2)]))
ages = st.lists(st.integers(0, 3 * 24 * 3600), max_size=10)
annotation_texts = st.one_of(
    st.none(), st.integers(-3, 12).map(str), st.sampled_from(["x", "", "1.5", "1001"])
)


@settings(max_examples=300, deadline=None)
@given(limit=limits, window=windows, ages=ages, text=annotation_texts)
def test_the_gate_is_exactly_the_count_rule(
    limit: int, window: timedelta | None, ages: list[int], text: str | None
) -> None:
    history = tuple(T0 - s(age) for age in ages)
    annotations = {} if text is None else {MAX_REQUEUES_ANNOTATION: text}
    config = MinRuntimeConfig(max_requeues=limit, max_requeues_window=window)
    decision = plan(
        snapshot_with(history, annotations=annotations),
        nominated("job"),
        configs=NodePoolConfigs({"default": config}),
    ).decisions[0]
    cap = requeue_cap(config, annotations)
    assert cap is not None
    start = T0 - window if window is not None else None
    count = sum(1 for t in history if start is None or t > start)
    assert (decision.reason is RequeueReason.REQUEUE_LIMIT) == (count >= cap.limit)
    if count < cap.limit:
        assert decision.outcome is RequeueOutcome.COMMITTED


@settings(max_examples=300, deadline=None)
@given(limit=st.one_of(st.none(), limits), window=windows, text=annotation_texts)
def test_an_annotation_never_raises_the_cap(
    limit: int | None, window: timedelta | None, text: str | None
) -> None:
    config = MinRuntimeConfig(max_requeues=limit, max_requeues_window=window)
    annotations = {} if text is None else {MAX_REQUEUES_ANNOTATION: text}
    cap = requeue_cap(config, annotations)
    if limit is not None:
        assert cap is not None
        assert cap.limit <= limit
    if cap is not None:
        assert cap.window == window
        valid = annotated_max_requeues(annotations).value
        assert cap.limit == min(x for x in (limit, valid) if x is not None)


@settings(max_examples=200, deadline=None)
@given(limit=limits, window=windows, ages=ages, extra=st.integers(0, 3 * 24 * 3600))
def test_one_more_requeue_never_lifts_the_cap(
    limit: int, window: timedelta | None, ages: list[int], extra: int
) -> None:
    cap = RequeueCap(limit, window, CapSource.NODE_POOL)
    history = [T0 - s(age) for age in ages]
    if cap.reached(history, T0):
        assert cap.reached([*history, T0 - s(extra)], T0)
    freed = cap.frees_at(history, T0)
    if freed is not None:
        assert not cap.reached(history, freed)
        assert cap.reached(history, freed - s(1))
