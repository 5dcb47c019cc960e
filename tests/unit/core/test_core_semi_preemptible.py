"""Semi-preemptible podgroups (SEMANTICS.md §10): the core is never evictable, never requeued."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal

from core_testkit import T0, node, nominated, pending_pg, plan, running, running_pg, s, submission
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    ClusterState,
    EndedRun,
    NodePoolConfigs,
    PodGroupPods,
    PodGroupState,
    Preemptibility,
    Queue,
    QueueTree,
    Release,
    RequeueOutcome,
    RequeueReason,
    RunRules,
    SubGroup,
    Verdict,
    above_core,
    core_pods,
    ended_run,
    evictable_pods,
    fold,
    format_rfc3339,
    run_verdict,
)

SEMI = Preemptibility.SEMI_PREEMPTIBLE

# --- evictable pods: Σ max(0, running − minAvailable), protected or not --------------------


@st.composite
def pod_sets(draw: st.DrawFn) -> PodGroupPods:
    names = draw(st.lists(st.sampled_from("abc"), min_size=1, max_size=3, unique=True))
    subgroups = tuple(SubGroup(name, draw(st.integers(0, 4))) for name in names)
    pods = {f"p{i}": draw(st.sampled_from(names)) for i in range(draw(st.integers(0, 8)))}
    running = draw(st.sets(st.sampled_from(sorted(pods)))) if pods else set()
    return PodGroupPods(uid="pg", pods=pods, running=frozenset(running), subgroups=subgroups)


@given(pod_sets(), st.booleans())
def test_a_semi_preemptible_podgroup_may_lose_only_the_pods_above_its_core(
    pods: PodGroupPods, protected: bool
) -> None:
    running = Counter(pods.pods[pod] for pod in pods.running)
    expected = sum(max(0, running[sub.name] - sub.min_available) for sub in pods.subgroups)
    assert evictable_pods(pods, protected, SEMI) == expected
    assert above_core(pods.subgroups, running) == expected
    # The core and the pods above it are the running pods.
    assert core_pods(pods.subgroups, running) + expected == len(pods.running)
    # Never more than a preemptible podgroup of the same shape may lose.
    assert expected <= evictable_pods(pods, protected)
    if protected:
        # §6 counts the same pods above minAvailable for a protected podgroup.
        assert expected == evictable_pods(pods, True)


def test_the_worked_example() -> None:
    # docs/rule-engine.md "Semi-preemptible": workers minAvailable 2 of 4 running, launcher 1 of 1.
    pods = PodGroupPods(
        uid="train",
        pods={"l": "launcher", "w0": "workers", "w1": "workers", "w2": "workers", "w3": "workers"},
        running=frozenset({"l", "w0", "w1", "w2", "w3"}),
        subgroups=(SubGroup("launcher", 1), SubGroup("workers", 2)),
    )
    assert evictable_pods(pods, protected=False) == 5
    assert evictable_pods(pods, protected=True) == 2
    assert evictable_pods(pods, protected=False, preemptibility=SEMI) == 2
    assert evictable_pods(pods, protected=True, preemptibility=SEMI) == 2


def test_the_wire_flag_means_the_first_two_values() -> None:
    assert Preemptibility.of_flag(True) is Preemptibility.PREEMPTIBLE
    assert Preemptibility.of_flag(False) is Preemptibility.NON_PREEMPTIBLE
    assert [value.preemptible for value in Preemptibility] == [True, False, True]


# --- the fold, runs and violations ---------------------------------------------------------


def submitted(preemptibility: Preemptibility, min_available: int = 1) -> PodGroupState:
    pods = (("p0", "default", 1.0), ("p1", "default", 1.0), ("p2", "default", 1.0))
    subgroups = (SubGroup("default", min_available),)
    change = submission(pods, subgroups, priority=1, preemptibility=preemptibility)
    return fold(PodGroupState("pg"), change)


def test_the_fold_keeps_the_value_and_the_flag_says_some_pods_may_go() -> None:
    state = running(submitted(SEMI))
    assert state.preemptibility is SEMI
    assert state.preemptible
    assert not running(submitted(Preemptibility.NON_PREEMPTIBLE)).preemptible
    assert PodGroupState("placeholder").preemptibility is Preemptibility.PREEMPTIBLE


def evicted(
    state: PodGroupState, at: datetime, pods: tuple[str, ...] | None = None
) -> EndedRun | None:
    """The run an eviction of ``pods`` (None: all) at ``at`` ended, if any."""
    change = Release(pods, at, "evicted")
    return ended_run(state, fold(state, change), change, at)


def rules(preempt: timedelta) -> RunRules:
    return RunRules(
        QueueTree([Queue(name="q", preempt_min_runtime=preempt, reclaim_min_runtime=preempt)]),
        NodePoolConfigs(),
    )


def test_evicting_a_semi_preemptible_core_is_a_definite_violation_after_every_window() -> None:
    run = evicted(running(submitted(SEMI, min_available=2)), T0 + s(3600))
    assert run is not None
    assert (run.preemptibility, run.core, run.gpus) == (SEMI, 2, Decimal("3.000000"))
    # Every window (10 minutes) is long over: a preemptible run would be no violation.
    rule_set = rules(s(600)).rules("q", "default")
    assert rule_set.verdict(run.start, run.end) == (Verdict.NONE, None)
    assert run_verdict(rule_set, run) == (Verdict.DEFINITE, None)
    # Inside a window the window's cut short is kept.
    assert run_verdict(rules(s(7200)).rules("q", "default"), run) == (Verdict.DEFINITE, s(3600))


def test_a_semi_preemptible_run_without_a_core_is_judged_by_its_windows() -> None:
    # minAvailable 0: nothing is the core, every pod follows §5–§6.
    run = evicted(running(submitted(SEMI, min_available=0)), T0 + s(3600))
    assert run is not None
    assert run.core == 0
    assert run_verdict(rules(s(600)).rules("q", "default"), run) == (Verdict.NONE, None)


def test_a_partial_release_above_the_core_ends_no_run() -> None:
    assert evicted(running(submitted(SEMI, min_available=2)), T0 + s(60), ("p2",)) is None


def test_other_values_hold_no_core() -> None:
    for value in (Preemptibility.PREEMPTIBLE, Preemptibility.NON_PREEMPTIBLE):
        run = evicted(running(submitted(value, min_available=3)), T0 + s(1))
        assert run is not None
        assert run.core == 0


# --- the planner ---------------------------------------------------------------------------


def contended(preemptibility: Preemptibility, **kwargs: object) -> ClusterState:
    return ClusterState(
        nodes=(node("n1", 4.0),),
        running=(running_pg("job", preemptibility=preemptibility, **kwargs),),  # type: ignore[arg-type]
        pending=(pending_pg("urgent"),),
    )


def test_the_planner_skips_an_externally_nominated_semi_preemptible_gang() -> None:
    # Unprotected and a contender that needs its GPUs: a preemptible job is committed.
    (committed,) = plan(contended(Preemptibility.PREEMPTIBLE), nominated("job")).decisions
    assert committed.outcome is RequeueOutcome.COMMITTED
    (decision,) = plan(contended(SEMI), nominated("job", by="proportion")).decisions
    assert (decision.outcome, decision.reason) == (
        RequeueOutcome.SKIPPED,
        RequeueReason.SEMI_PREEMPTIBLE,
    )
    assert decision.beneficiaries == ()


def test_the_gate_comes_after_the_cooldown_and_not_running() -> None:
    cooling = {
        EXPECTED_RUNTIME_ANNOTATION: "1h",
        REQUEUE_NOT_BEFORE_ANNOTATION: format_rfc3339(T0 + s(60)),
    }
    (decision,) = plan(contended(SEMI, annotations=cooling), nominated("job")).decisions
    assert decision.reason is RequeueReason.COOLDOWN
    (decision,) = plan(contended(SEMI), nominated("ghost", "job")).decisions[:1]
    assert decision.reason is RequeueReason.SEMI_PREEMPTIBLE


def test_a_semi_preemptible_gang_with_an_empty_core_is_still_not_requeued() -> None:
    # A requeue evicts the whole gang; the gate does not look at the core's size (docs).
    snapshot = contended(SEMI, subgroups=(SubGroup(min_available=0),))
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.reason is RequeueReason.SEMI_PREEMPTIBLE
