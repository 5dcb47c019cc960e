"""A queue's own disruption gap (minruntime.kai.scheduler/min-eviction-gap), the one check of
a Queue's override, and the top owner the submission carries (topOwner) preferred to the
annotation, by runs and by the planner's gap (core.disruption, core.podgroup, core.runs)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest
from core_testkit import T0, node, nominated, pending_pg, plan, running, running_pg, submission
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    ClusterState,
    InvalidConfigError,
    MinRuntimeConfig,
    NodePoolConfigs,
    PodGroupState,
    Release,
    RequeueReason,
    fold,
)
from minruntime.core.disruption import (
    EVICTION_WINDOW_ANNOTATION,
    MAX_EVICTIONS_ANNOTATION,
    MIN_EVICTION_GAP_ANNOTATION,
    TOP_OWNER_ANNOTATION,
    DisruptionPolicy,
    TopOwner,
    check_queue_annotation,
    queue_policy,
)
from minruntime.core.podgroup import owner_of
from minruntime.core.runs import ended_run

MIN = timedelta(minutes=1)
ANNOTATED = '{"kind": "JobSet", "name": "train", "uid": "js-1"}'
WIRE = TopOwner("RayJob", "tune", "rj-9")


def test_a_queue_gap_overrides_the_pools_and_a_bad_one_is_ignored_with_a_problem() -> None:
    pool = DisruptionPolicy(min_eviction_gap=5 * MIN)
    own = queue_policy(pool, {MIN_EVICTION_GAP_ANNOTATION: "1h"})
    assert (own.policy.min_eviction_gap, own.problems) == (60 * MIN, ())
    # A pool without a gap: the queue turns one on for itself.
    assert queue_policy(DisruptionPolicy(), {MIN_EVICTION_GAP_ANNOTATION: "2m"}).policy == (
        DisruptionPolicy(min_eviction_gap=2 * MIN)
    )
    for bad in ("0s", "-1m", "169h", "whenever"):
        ignored = queue_policy(pool, {MIN_EVICTION_GAP_ANNOTATION: bad})
        assert ignored.policy == pool
        assert len(ignored.problems) == 1
        assert ignored.problems[0].endswith("ignored")


@given(minutes=st.integers(1, 168 * 60))
def test_every_gap_in_bounds_is_the_queues_gap(minutes: int) -> None:
    check_queue_annotation(MIN_EVICTION_GAP_ANNOTATION, f"{minutes}m")
    policy = queue_policy(DisruptionPolicy(), {MIN_EVICTION_GAP_ANNOTATION: f"{minutes}m"}).policy
    assert policy.min_eviction_gap == minutes * MIN


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (MAX_EVICTIONS_ANNOTATION, "0"),
        (MAX_EVICTIONS_ANNOTATION, "100001"),
        (EVICTION_WINDOW_ANNOTATION, "745h"),
        (MIN_EVICTION_GAP_ANNOTATION, "-5m"),
        ("minruntime.kai.scheduler/other", "1"),
    ],
)
def test_an_override_out_of_bounds_is_a_one_line_config_error(key: str, value: str) -> None:
    with pytest.raises(InvalidConfigError) as error:
        check_queue_annotation(key, value)
    assert "\n" not in str(error.value)


def test_the_submissions_top_owner_wins_over_the_annotation() -> None:
    annotated = {TOP_OWNER_ANNOTATION: ANNOTATED}
    plain = fold(PodGroupState("pg"), submission(annotations=annotated))
    assert owner_of(plain) == TopOwner("JobSet", "train", "js-1")
    carried = fold(PodGroupState("pg"), submission(annotations=annotated, owner=WIRE))
    assert owner_of(carried) == WIRE
    # The run it ends carries the same owner.
    before = running(carried)
    after = fold(before, Release(None, T0 + MIN, "evicted"))
    run = ended_run(before, after, Release(None, T0 + MIN, "evicted"), T0 + MIN)
    assert run is not None
    assert (run.owner, run.owner_kind) == (WIRE, "RayJob")


def test_the_planners_gap_uses_the_stored_owner_before_the_annotation() -> None:
    # Two victims whose annotations name different owners, but whose submissions carried the
    # same one: the gap lets only one of them go.
    victims = [
        dataclasses.replace(
            running_pg(
                f"job-{i}",
                gpus=((f"n{i}", 4.0),),
                annotations={
                    EXPECTED_RUNTIME_ANNOTATION: "1h",
                    TOP_OWNER_ANNOTATION: f'{{"kind": "JobSet", "name": "j{i}", "uid": "u{i}"}}',
                },
            ),
            owner=WIRE,
        )
        for i in range(2)
    ]
    snapshot = ClusterState(
        nodes=(node("n0", 4.0), node("n1", 4.0)),
        running=tuple(victims),
        pending=(pending_pg("urgent-0", priority=10), pending_pg("urgent-1", priority=10)),
    )
    configs = NodePoolConfigs({"default": MinRuntimeConfig(min_eviction_gap=5 * MIN)})
    reasons = sorted(
        str(d.reason)
        for d in plan(snapshot, nominated("job-0", "job-1"), configs=configs).decisions
    )
    assert reasons == ["None", str(RequeueReason.EVICTION_GAP)]


def test_an_unreadable_owner_annotation_is_an_ignored_value_unless_the_wire_carried_one() -> None:
    from minruntime.core import Annotation
    from minruntime.core.podgroup import ignored_values
    from minruntime.core.preemption_delay import IgnoredValue

    bad = {TOP_OWNER_ANNOTATION: "[not, fields]"}
    empty = PodGroupState("pg")
    assert IgnoredValue.TOP_OWNER_METADATA in ignored_values(empty, submission(annotations=bad))
    good = {TOP_OWNER_ANNOTATION: ANNOTATED}
    assert not ignored_values(empty, submission(annotations=good))
    # The submission's topOwner is what counts: the annotation is not read, not ignored.
    assert not ignored_values(empty, submission(annotations=bad, owner=WIRE))
    carried = fold(empty, submission(owner=WIRE))
    assert not ignored_values(carried, Annotation(bad, T0))
    plain = fold(empty, submission())
    assert ignored_values(plain, Annotation(bad, T0)) == {IgnoredValue.TOP_OWNER_METADATA}
