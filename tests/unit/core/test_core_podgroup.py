"""The podgroup fold (``core.fold``), rule by rule, on examples."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from core_testkit import T0, s, submission

from minruntime.core import (
    DEFAULT_NODE_POOL,
    EXPECTED_RUNTIME_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    Allocation,
    Annotation,
    Deletion,
    InvalidTimestampError,
    MemberPod,
    PodGroupChange,
    PodGroupState,
    Release,
    SubGroup,
    fallback_subgroup,
    fold,
)


def allocation(*pods: str, at: datetime = T0, node: str = "n1") -> Allocation:
    return Allocation(tuple((pod, node) for pod in pods), at)


def folded(*changes: PodGroupChange, state: PodGroupState | None = None) -> PodGroupState:
    state = state or PodGroupState("pg")
    for change in changes:
        state = fold(state, change)
    return state


def test_an_unknown_podgroup_is_a_pending_placeholder() -> None:
    state = PodGroupState("pg")
    assert not state.submitted
    assert state.status == "pending"
    assert (state.node_pool, state.preemptible, state.subgroups) == (DEFAULT_NODE_POOL, True, ())
    assert state.elasticity() == (False, 0)
    assert state.fallback_subgroup == "default"


def test_a_submission_fills_in_the_spec_pods_and_first_submission_time() -> None:
    state = folded(submission(node_pool="b", annotations={"x": "1"}))
    assert state.submitted
    assert state.spec is not None
    assert (state.spec.name, state.spec.queue, state.spec.priority) == ("job", "q", 5)
    assert state.node_pool == "b"
    assert state.pods == {"p0": MemberPod("default", 1.0), "p1": MemberPod("default", 1.0)}
    assert state.annotations == {"x": "1"}
    assert state.submitted_at == T0
    # A second submission replaces the spec, not the first submission's time.
    again = fold(state, submission(at=T0 + s(9), priority=7))
    assert again.spec is not None
    assert (again.spec.priority, again.node_pool, again.submitted_at) == (7, "default", T0)


def test_the_first_allocation_starts_the_run_and_scale_up_keeps_it() -> None:
    state = folded(submission(), allocation("p0", at=T0 + s(10)))
    assert (state.status, state.running_pods, state.run.start_time) == ("running", 1, T0 + s(10))
    state = fold(state, allocation("p1", at=T0 + s(20), node="n2"))
    assert state.run.start_time == T0 + s(10)
    assert state.allocated == {"p0": "n1", "p1": "n2"}
    assert state.running_pods == 2


def test_a_redelivered_allocation_changes_nothing() -> None:
    state = folded(submission(), allocation("p0", at=T0 + s(10)))
    assert fold(state, allocation("p0", at=T0 + s(30))) is state


def test_an_allocation_on_another_node_moves_the_pod_but_not_the_start() -> None:
    state = folded(submission(), allocation("p0", at=T0 + s(10)))
    moved = fold(state, allocation("p0", at=T0 + s(30), node="n9"))
    assert moved.allocated == {"p0": "n9"}
    assert moved.pods is state.pods
    assert moved.run == state.run


def test_releasing_some_pods_keeps_the_run_and_clears_their_nodes() -> None:
    state = folded(submission(), allocation("p0", "p1", at=T0 + s(10)))
    state = fold(state, Release(("p1",), T0 + s(20)))
    assert state.run.start_time == T0 + s(10)
    assert state.allocated == {"p0": "n1"}
    assert state.status == "running"


def test_releasing_every_pod_ends_the_run_and_the_wait_for_release() -> None:
    state = folded(submission(), allocation("p0", "p1", at=T0 + s(10)))
    state = state._replace(awaiting_release=True)  # the requeue worker committed a requeue
    assert state.stored_awaiting_release
    ended = fold(state, Release(None, T0 + s(50)))
    # No reason while a requeue waited: the requeue ended it, the gang waits to run again.
    assert ended.status == "pending"
    assert (ended.run.start_time, ended.run.last_start_time) == (None, T0 + s(10))
    assert ended.run.ended_at == T0 + s(50)
    assert not ended.awaiting_release
    assert ended.allocated == {}
    assert ended.pods is state.pods
    # The next run starts afresh, at its own time.
    again = fold(ended, allocation("p0", at=T0 + s(60)))
    assert (again.run.start_time, again.run.ended_at) == (T0 + s(60), None)
    assert not again.awaiting_release


@pytest.mark.parametrize(
    ("reason", "status"),
    [
        ("completed", "finished"),
        ("failed", "finished"),
        (None, "finished"),
        ("evicted", "pending"),
        ("preempted", "pending"),
        ("requeued", "pending"),
    ],
)
def test_a_run_an_eviction_ended_leaves_the_gang_pending_again(
    reason: str | None, status: str
) -> None:
    ran = folded(submission(), allocation("p0", "p1", at=T0 + s(10)))
    ended = fold(ran, Release(None, T0 + s(50), reason))
    assert ended.status == status
    # Running again, then completed: finished, whatever ended the run before.
    again = fold(ended, allocation("p0", at=T0 + s(60)))
    assert again.status == "running"
    assert fold(again, Release(None, T0 + s(90), "completed")).status == "finished"


def test_releasing_unknown_pods_changes_nothing() -> None:
    state = folded(submission(), allocation("p0", at=T0 + s(10)))
    assert fold(state, Release(("ghost",), T0 + s(20))) is state
    pending = folded(submission())
    assert fold(pending, Release(None, T0)) is pending


def test_a_placeholder_keeps_its_allocations_through_the_submission() -> None:
    # The allocation arrives first: the pods are counted in the fallback subgroup.
    placeholder = folded(allocation("p0", "p9", at=T0 + s(5)))
    assert not placeholder.submitted
    assert placeholder.pods["p9"] == MemberPod("default", None)
    assert placeholder.allocated == {"p0": "n1", "p9": "n1"}
    assert placeholder.elasticity() == (False, 0)
    # The submission lists p0 but not p9, and declares no "default" subgroup.
    state = fold(
        placeholder,
        submission(
            pods=(("p0", "b", 2.0), ("p1", "a", 1.0)),
            subgroups=(SubGroup("a", 1), SubGroup("b", 1)),
            at=T0 + s(9),
        ),
    )
    assert state.pods == {
        "p0": MemberPod("b", 2.0),
        "p1": MemberPod("a", 1.0),
        "p9": MemberPod("a", None),  # the first declared subgroup
    }
    assert state.allocated == placeholder.allocated
    assert state.allocated is placeholder.allocated
    assert state.run == placeholder.run
    assert state.run.start_time == T0 + s(5)
    assert state.status == "running"
    assert state.submitted_at == T0 + s(9)


def test_a_resubmission_drops_unlisted_pods_that_hold_nothing() -> None:
    state = folded(submission(), allocation("p0", at=T0 + s(1)))
    state = fold(state, submission(pods=(("p2", "default", 1.0),), at=T0 + s(2)))
    assert list(state.pods) == ["p2", "p0"]
    assert state.pods["p0"] == MemberPod("default", None)
    assert state.allocated == {"p0": "n1"}


def test_fallback_subgroup_prefers_default_then_the_first_declared() -> None:
    assert fallback_subgroup(()) == "default"
    assert fallback_subgroup((SubGroup("a"), SubGroup("default"))) == "default"
    assert fallback_subgroup((SubGroup("b"), SubGroup("a"))) == "b"


def test_annotations_merge_and_none_removes() -> None:
    state = folded(Annotation({"a": "1", "b": "2"}), submission(annotations={"b": "3", "c": "4"}))
    assert state.annotations == {"a": "1", "b": "3", "c": "4"}
    state = fold(state, Annotation({"a": None, "c": "5", "missing": None}))
    assert state.annotations == {"b": "3", "c": "5"}


def test_parsed_annotations_are_none_when_absent_or_invalid() -> None:
    state = folded(
        submission(
            annotations={
                EXPECTED_RUNTIME_ANNOTATION: "90m",
                REQUEUE_NOT_BEFORE_ANNOTATION: "2026-11-21T11:00:00Z",
            }
        )
    )
    assert state.expected_runtime == timedelta(minutes=90)
    assert state.requeue_not_before == T0 + s(3600)
    bad = fold(
        state,
        Annotation({EXPECTED_RUNTIME_ANNOTATION: "soon", REQUEUE_NOT_BEFORE_ANNOTATION: "later"}),
    )
    assert (bad.expected_runtime, bad.requeue_not_before) == (None, None)
    gone = fold(state, Annotation({EXPECTED_RUNTIME_ANNOTATION: None}))
    assert gone.expected_runtime is None


def test_deleted_is_sticky_and_hides_the_run() -> None:
    state = folded(submission(), allocation("p0", at=T0 + s(1)))
    state = state._replace(awaiting_release=True)
    deleted = fold(state, Deletion())
    assert deleted.status == "deleted"
    assert deleted.running_pods == 1
    assert not deleted.stored_awaiting_release
    assert fold(deleted, Deletion()) is deleted
    again = folded(submission(), allocation("p1", at=T0 + s(2)), state=deleted)
    assert again.status == "deleted"


def test_status_pending_running_finished() -> None:
    state = folded(submission())
    assert state.status == "pending"
    state = fold(state, allocation("p0", at=T0 + s(1)))
    assert state.status == "running"
    state = fold(state, Release(("p0",), T0 + s(2)))
    assert state.status == "finished"


def test_elasticity_and_protected_evictable_pods() -> None:
    pods = tuple((f"p{i}", "w", 1.0) for i in range(4))
    state = folded(
        submission(pods=(("l", "lead", 1.0), *pods), subgroups=(SubGroup("lead"), SubGroup("w", 2)))
    )
    assert state.elasticity() == (True, 0)
    state = fold(state, allocation("l", "p0", "p1", "p2", at=T0 + s(1)))
    # 3 running workers, minAvailable 2: one may go; the leader may not.
    assert state.elasticity() == (True, 1)
    gang = folded(submission())
    assert gang.elasticity() == (False, 0)


def test_naive_event_times_are_refused_and_leave_the_state_alone() -> None:
    state = folded(submission())
    with pytest.raises(InvalidTimestampError):
        fold(state, allocation("p0", at=datetime(2026, 11, 21)))
    assert state.allocated == {}
    assert state.running_pods == 0


def test_the_state_is_frozen_and_the_fold_never_changes_its_mappings() -> None:
    state = folded(submission(annotations={"k": "v"}), allocation("p0", at=T0))
    pods, allocated, annotations = dict(state.pods), dict(state.allocated), dict(state.annotations)
    with pytest.raises(AttributeError):
        state.deleted = True  # type: ignore[misc]
    folded(
        allocation("p1", "p9", at=T0 + s(1), node="n2"),
        Annotation({"k": None, "j": "w"}),
        submission(pods=(("p1", "default", 4.0),), at=T0 + s(2)),
        Release(("p9",), T0 + s(3)),
        Release(None, T0 + s(4)),
        state=state,
    )
    assert (state.pods, state.allocated, state.annotations) == (pods, allocated, annotations)
