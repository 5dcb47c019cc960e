"""The run an event ended (SEMANTICS.md §10): when, why (``ended_by``), GPUs, GPU-seconds."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import pytest
from core_testkit import T0, running, s, submission
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    EVICTIONS,
    Allocation,
    Annotation,
    Deletion,
    EndedRun,
    PodGroupChange,
    PodGroupState,
    Preemptibility,
    Release,
    SubGroup,
    ended_run,
    fold,
    format_rfc3339,
)
from minruntime.core.checkpoint import CHECKPOINTED_AT_ANNOTATION


def submitted(
    uid: str = "pg", gpus: tuple[float, ...] = (1, 1), preemptible: bool = True
) -> PodGroupState:
    pods = tuple((f"p{i}", "default", gpu) for i, gpu in enumerate(gpus))
    preemptibility = Preemptibility.of_flag(preemptible)
    spec = {"namespace": "team", "node_pool": "a100", "priority": 1}
    change = submission(pods, (SubGroup("default", 1),), preemptibility=preemptibility, **spec)
    return fold(PodGroupState(uid), change)


def end(state: PodGroupState, change: PodGroupChange, at: datetime) -> EndedRun | None:
    return ended_run(state, fold(state, change), change, at)


def test_releasing_the_last_pod_ends_the_run_with_its_reason_gpus_and_gpu_seconds() -> None:
    state = running(submitted(gpus=(1, 0.5)))
    at = T0 + s(600)
    run = end(state, Release(None, at, "evicted"), at)
    assert run == EndedRun("pg", "q", "a100", "preemptible", T0, at, "evicted", Decimal("1.5"))
    assert run.eviction
    assert run.duration == s(600)
    assert run.gpu_seconds == Decimal("900.000")


def test_a_partial_release_ends_nothing_and_the_last_one_counts_what_was_still_held() -> None:
    state = running(submitted(gpus=(1, 2)))
    first = Release(("p1",), T0 + s(10), "evicted")
    assert end(state, first, T0 + s(10)) is None
    state = fold(state, first)
    last = Release(("p0",), T0 + s(20), "completed")
    run = end(state, last, T0 + s(20))
    assert run is not None
    assert (run.ended_by, run.gpus, run.eviction) == ("completed", Decimal("1"), False)


@pytest.mark.parametrize(
    ("change", "awaiting", "ended_by"),
    [
        (Release(None, T0, None), False, "released"),
        (Release(None, T0, None), True, "requeued"),
        (Release(None, T0, "requeued"), False, "requeued"),
        (Release(None, T0, "preempted"), False, "preempted"),
        (Release(None, T0, "completed"), True, "completed"),
        (Release(None, T0, "deleted"), False, "deleted"),
        (Release(None, T0, "deleted"), True, "deleted-by-eviction"),
        (Deletion(), False, "deleted"),
        (Deletion(), True, "deleted-by-eviction"),
    ],
)
def test_ended_by(change: PodGroupChange, awaiting: bool, ended_by: str) -> None:
    state = running(submitted())._replace(awaiting_release=awaiting)
    run = end(state, change, T0 + s(1))
    assert run is not None
    assert run.ended_by == ended_by
    assert run.eviction == (ended_by in {"requeued", "preempted", "deleted-by-eviction"})
    assert {"evicted", "preempted", "requeued", "deleted-by-eviction"} == EVICTIONS


def test_only_a_running_podgroup_has_a_run_to_end() -> None:
    pending = submitted()
    assert end(pending, Release(None, T0), T0) is None
    assert end(pending, Deletion(), T0) is None
    deleted = fold(running(submitted()), Deletion())
    assert end(deleted, Release(None, T0 + s(5), "evicted"), T0 + s(5)) is None
    state = running(submitted())
    assert end(state, Annotation({"a": "b"}), T0) is None
    assert end(state, Allocation((("p9", "n2"),), T0), T0) is None


def test_a_placeholder_run_has_no_queue_nor_known_gpus() -> None:
    state = fold(PodGroupState("ph"), Allocation((("w0", "n1"),), T0))
    run = end(state, Release(None, T0 + s(30), "evicted"), T0 + s(30))
    assert run is not None
    assert (run.queue, run.node_pool, run.gpus, run.gpu_seconds) == (None, "default", None, None)


def test_a_non_preemptible_podgroup_says_so_and_an_end_before_the_start_ran_zero() -> None:
    state = running(submitted(preemptible=False), T0 + s(60))
    run = end(state, Release(None, T0, "failed"), T0)
    assert run is not None
    assert run.preemptibility == "non-preemptible"
    assert run.duration == timedelta(0)
    assert run.gpu_seconds == Decimal("0.000")


@given(
    gpus=st.lists(
        st.floats(0, 64, allow_nan=False).map(lambda g: round(g, 3)), min_size=1, max_size=5
    )
)
def test_gpus_are_the_same_whether_folded_from_floats_or_loaded_as_numerics(
    gpus: list[float],
) -> None:
    from_wire = running(submitted(gpus=tuple(gpus)))
    loaded = from_wire._replace(
        pods={name: pod._replace(gpu=Decimal(str(pod.gpu))) for name, pod in from_wire.pods.items()}
    )
    change = Release(None, T0 + s(7), "evicted")
    first, second = end(from_wire, change, T0 + s(7)), end(loaded, change, T0 + s(7))
    assert first is not None
    assert second is not None
    assert (str(first.gpus), str(first.gpu_seconds)) == (str(second.gpus), str(second.gpu_seconds))


@pytest.mark.parametrize("gpu", ["Infinity", "NaN", "1E+40"])
def test_gpus_no_count_can_be_are_unknown_not_an_error(gpu: str) -> None:
    state = running(submitted())
    hostile = state._replace(pods={**state.pods, "p0": state.pods["p0"]._replace(gpu=Decimal(gpu))})
    run = end(hostile, Release(None, T0 + s(9), "evicted"), T0 + s(9))
    assert run is not None
    assert run.gpus is None
    assert run.gpu_seconds is None


# --- the work lost since the last checkpoint --------------------------------------------------


def _checkpointed(at: datetime) -> Annotation:
    return Annotation({CHECKPOINTED_AT_ANNOTATION: format_rfc3339(at)}, at)


def test_an_evicted_run_loses_only_the_work_since_its_last_checkpoint() -> None:
    state = fold(running(submitted(gpus=(1, 0.5))), _checkpointed(T0 + s(400)))
    at = T0 + s(600)
    run = end(state, Release(None, at, "evicted"), at)
    assert run is not None
    assert run.checkpoint == T0 + s(400)
    assert run.gpu_seconds == Decimal("900.000")
    assert run.gpu_seconds_since_checkpoint == Decimal("300.000")
    assert run.gpu_seconds_lost == Decimal("300.000")


def test_no_checkpoint_or_no_eviction_means_no_figure_since_checkpoint() -> None:
    plain = running(submitted())
    run = end(plain, Release(None, T0 + s(60), "evicted"), T0 + s(60))
    assert run is not None
    assert (run.checkpoint, run.gpu_seconds_since_checkpoint) == (None, None)
    assert run.gpu_seconds_lost == run.gpu_seconds == Decimal("120.000")
    saved = fold(plain, _checkpointed(T0 + s(30)))
    done = end(saved, Release(None, T0 + s(60), "completed"), T0 + s(60))
    assert done is not None
    # A completion loses nothing: the checkpoint is kept, no figure since it.
    assert done.checkpoint == T0 + s(30)
    assert done.gpu_seconds_since_checkpoint is None


def test_a_previous_runs_checkpoint_is_not_this_runs() -> None:
    state = fold(running(submitted()), _checkpointed(T0 + s(30)))
    state = fold(state, Release(None, T0 + s(60), "evicted"))
    again = fold(state, Allocation((("p0", "n1"), ("p1", "n1")), T0 + s(120)))
    run = end(again, Release(None, T0 + s(180), "evicted"), T0 + s(180))
    assert run is not None
    assert (run.checkpoint, run.gpu_seconds_since_checkpoint) == (None, None)


@given(
    st.integers(min_value=1, max_value=10**6),
    st.integers(min_value=0, max_value=10**6),
    st.sampled_from(["evicted", "preempted", "requeued", "completed", "failed"]),
)
def test_the_work_lost_since_a_checkpoint_never_exceeds_the_runs(
    ran: int, saved: int, reason: str
) -> None:
    state = running(submitted(gpus=(2, 0.25)))
    saved = min(saved, ran)
    state = fold(state, _checkpointed(T0 + s(saved)))
    run = end(state, Release(None, T0 + s(ran), reason), T0 + s(ran))
    assert run is not None
    assert run.gpu_seconds is not None
    since = run.gpu_seconds_since_checkpoint
    if reason in EVICTIONS:
        assert since == Decimal(str(2.25 * (ran - saved))).quantize(Decimal("0.001"))
        assert since <= run.gpu_seconds
        assert run.gpu_seconds_lost == since
    else:
        assert since is None
        assert run.gpu_seconds_lost == run.gpu_seconds
