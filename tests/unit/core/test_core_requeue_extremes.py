"""The pure planner never raises on extreme inputs the snapshot accepts (issue 12, finding 2).

Values at the edges of what the model allows — GPU amounts from 0 to MAX_GPUS_IN_PLAN, times in the
first and last days of years 1 and 9999, huge priorities, absurd annotations and delays —
must give a decision or an exclusion for every candidate, never an exception. Values outside
the model (1e308 GPUs, NaN, negatives) are refused when the snapshot is built, with a reason.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    MAX_DURATION,
    MAX_GPUS_IN_PLAN,
    REQUEUE_DELAY_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    ClusterState,
    InvalidGpuError,
    MinRuntimeConfig,
    Node,
    NodePoolConfigs,
    PendingPodGroup,
    Pod,
    Queue,
    QueueTree,
    RunningPodGroup,
    SubGroup,
    expected_runtime_nominations,
    plan_requeue_cycle,
)

EARLIEST = datetime(1, 1, 2, tzinfo=UTC)
LATEST = datetime(9999, 12, 30, tzinfo=UTC)
gpus = st.one_of(
    st.sampled_from([0.0, 1e-300, 1e-7, 0.5, 1.0, 8.0, float(MAX_GPUS_IN_PLAN)]),
    st.floats(0, MAX_GPUS_IN_PLAN, allow_nan=False, allow_infinity=False),
)
moments = st.one_of(
    st.sampled_from([EARLIEST, LATEST]),
    st.datetimes(
        min_value=EARLIEST.replace(tzinfo=None), max_value=LATEST.replace(tzinfo=None)
    ).map(lambda moment: moment.replace(tzinfo=UTC)),
)
priorities = st.one_of(st.sampled_from([-(2**63), 2**63 - 1, 0]), st.integers(-100, 100))
texts = st.sampled_from(
    ["1h", "0", "bad", "2562047h", "292y", "9999-12-31T23:59:59Z", "0001-01-01T00:00:00Z", ""]
)
durations = st.sampled_from([timedelta(0), timedelta(hours=1), MAX_DURATION])
NODES = ("n0", "n1", "n2")


@st.composite
def annotations(draw: st.DrawFn) -> dict[str, str]:
    keys = (EXPECTED_RUNTIME_ANNOTATION, REQUEUE_DELAY_ANNOTATION, REQUEUE_NOT_BEFORE_ANNOTATION)
    return {key: draw(texts) for key in keys if draw(st.booleans())}


@st.composite
def pods(draw: st.DrawFn, uid: str, running: bool) -> tuple[Pod, ...]:
    count = draw(st.integers(1, 3))
    return tuple(
        Pod(
            name=f"{uid}-{i}",
            gpu=draw(gpus),
            node=draw(st.sampled_from(NODES)) if running else None,
            running=running,
        )
        for i in range(count)
    )


@st.composite
def snapshots(draw: st.DrawFn) -> tuple[ClusterState, dict[str, frozenset[str]], datetime]:
    nodes = tuple(Node(name=name, gpu=draw(gpus)) for name in NODES)
    running = tuple(
        RunningPodGroup(
            uid=f"r{i}",
            queue=draw(st.sampled_from(["a", "b", "nowhere"])),
            priority=draw(priorities),
            start_time=draw(st.none() | moments),
            pods=draw(pods(f"r{i}", True)),
            annotations=draw(annotations()),
            subgroups=(SubGroup(min_available=draw(st.integers(0, 2))),),
        )
        for i in range(draw(st.integers(1, 3)))
    )
    pending = tuple(
        PendingPodGroup(
            uid=f"p{i}",
            queue=draw(st.sampled_from(["a", "b"])),
            priority=draw(priorities),
            pods=draw(pods(f"p{i}", False)),
            submitted_at=draw(st.none() | moments),
        )
        for i in range(draw(st.integers(0, 3)))
    )
    promised = {name: draw(gpus) for name in NODES if draw(st.booleans())}
    snapshot = ClusterState(nodes=nodes, running=running, pending=pending, promised=promised)
    candidates = {pg.uid: frozenset({"proportion"}) for pg in running if draw(st.booleans())}
    candidates["unknown"] = frozenset({"x"})
    return snapshot, candidates, draw(moments)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=snapshots(), preempt=durations, reclaim=durations, delay=durations)
def test_the_planner_never_raises_on_extreme_values(
    case: tuple[ClusterState, dict[str, frozenset[str]], datetime],
    preempt: timedelta,
    reclaim: timedelta,
    delay: timedelta,
) -> None:
    snapshot, candidates, now = case
    tree = QueueTree([Queue(name="a", preempt_min_runtime=MAX_DURATION), Queue(name="b")])
    config = MinRuntimeConfig(
        default_preempt_min_runtime=preempt,
        default_reclaim_min_runtime=reclaim,
        default_requeue_delay=delay or timedelta(minutes=5),
    )
    expected_runtime_nominations(snapshot.running, now)
    plan = plan_requeue_cycle(
        snapshot, candidates, tree=tree, configs=NodePoolConfigs({"default": config}), now=now
    )
    decided = {d.uid for d in plan.decisions} | {e.name for e in plan.excluded}
    assert decided == set(candidates)


@pytest.mark.parametrize(
    "gpu", [1e308, math.inf, -math.inf, math.nan, -1.0, MAX_GPUS_IN_PLAN * 1.5]
)
def test_gpu_amounts_outside_the_range_are_refused_with_their_kind(gpu: float) -> None:
    with pytest.raises(InvalidGpuError) as caught:
        Node(name="n", gpu=gpu)
    assert caught.value.kind == "invalid_gpu"
    with pytest.raises(InvalidGpuError):
        Pod(name="p", gpu=gpu)


def test_a_candidate_whose_cooldown_ends_after_year_9999_is_excluded_not_raised() -> None:
    victim = RunningPodGroup(
        uid="v",
        queue="a",
        priority=1,
        start_time=EARLIEST,
        pods=tuple(Pod(name=f"v{i}", gpu=1.0, node="n0", running=True) for i in range(8)),
        annotations={REQUEUE_DELAY_ANNOTATION: "2562047h"},
    )
    contender = PendingPodGroup(
        uid="hi",
        queue="a",
        priority=100,
        pods=tuple(Pod(name=f"h{i}", gpu=1.0) for i in range(4)),
        subgroups=(SubGroup(min_available=4),),
    )
    other = RunningPodGroup(
        uid="w",
        queue="a",
        priority=1,
        start_time=EARLIEST,
        pods=(Pod(name="w0", gpu=1.0, node="n1", running=True),),
    )
    snapshot = ClusterState(
        nodes=(Node(name="n0", gpu=8.0), Node(name="n1", gpu=1.0)),
        running=(victim, other),
        pending=(contender,),
    )

    plan = plan_requeue_cycle(
        snapshot,
        {"v": frozenset({"proportion"}), "w": frozenset({"proportion"})},
        tree=QueueTree([Queue(name="a")]),
        configs=NodePoolConfigs(),
        now=LATEST,
    )

    assert [(e.name, e.reason.value) for e in plan.excluded] == [("v", "planner_error")]
    # The ledger was rolled back: the next candidate is judged on the capacity as it was.
    assert [(d.uid, d.outcome.value) for d in plan.decisions] == [("w", "rolled_back")]
