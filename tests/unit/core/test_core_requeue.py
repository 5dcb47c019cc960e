"""Requeue planning (SEMANTICS.md §8): the five §9 scenarios and the planner's edge cases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from core_testkit import (
    EXPECTED,
    T0,
    flat_tree,
    node,
    nominated,
    pending_pg,
    plan,
    running_pg,
    s,
)

from minruntime.core import (
    EXPECTED_RUNTIME_ANNOTATION,
    EXPECTED_RUNTIME_PLUGIN,
    REQUEUE_DELAY_ANNOTATION,
    REQUEUE_NOT_BEFORE_ANNOTATION,
    ClusterState,
    InvalidClusterStateError,
    MinRuntimeConfig,
    MinRuntimeError,
    NodePoolConfigs,
    Pod,
    PodPlacement,
    RequeueOutcome,
    RequeueReason,
    RunningPodGroup,
    SkipReason,
    SubGroup,
    collect_candidates,
    expected_runtime_nominations,
    format_rfc3339,
)

COMMITTED = RequeueOutcome.COMMITTED
ROLLED_BACK = RequeueOutcome.ROLLED_BACK
SKIPPED = RequeueOutcome.SKIPPED
FIVE_MINUTES = timedelta(minutes=5)


def busy_node(*extra: RunningPodGroup, pending: tuple[object, ...] = ()) -> ClusterState:
    """n1 (8 GPUs): the over-running ``job`` holds 4, ``filler`` (never nominated) the rest."""
    return ClusterState(
        nodes=(node("n1"),),
        running=(
            running_pg("job"),
            running_pg("filler", gpus=(("n1", 4.0),), annotations={}),
            *extra,
        ),
        pending=tuple(pending),  # type: ignore[arg-type]
    )


# --- the five scenarios of SEMANTICS.md §9 --------------------------------------------------


def test_scenario_1_no_contention_rolls_back_without_cooldown() -> None:
    snapshot = busy_node()
    report = expected_runtime_nominations(snapshot.running, T0)
    assert report.nominated == ("job",)
    result = plan(snapshot, collect_candidates(report.nominated, ()))
    (decision,) = result.decisions
    assert decision.uid == "job"
    assert decision.outcome is ROLLED_BACK
    assert decision.reason is RequeueReason.NO_HIGHER_PRIORITY_PENDING
    assert decision.requeue_not_before is None
    assert decision.beneficiaries == ()
    assert decision.reservations == {}
    assert result.promised == {}


def test_scenario_2_contention_commits_with_a_cooldown() -> None:
    snapshot = busy_node(pending=(pending_pg("urgent", gpus=(4.0,), priority=10),))
    result = plan(snapshot, nominated("job"))
    (decision,) = result.decisions
    assert decision.outcome is COMMITTED
    assert decision.reason is None
    assert decision.beneficiaries == ("urgent",)
    assert decision.nominated_by == (EXPECTED_RUNTIME_PLUGIN,)
    assert decision.decided_at == T0
    assert decision.requeue_not_before == T0 + FIVE_MINUTES
    assert decision.delay_problem is None
    assert decision.reservations == {"n1": 4.0}
    assert decision.placements == (PodPlacement("urgent", "urgent-0", "n1", 4.0),)
    assert result.promised == {"n1": 4.0}
    assert result.committed() == (decision,)


def test_scenario_2_delay_comes_from_the_annotation_else_the_pool_default() -> None:
    annotated = running_pg(
        "job", annotations={EXPECTED_RUNTIME_ANNOTATION: EXPECTED, REQUEUE_DELAY_ANNOTATION: "15m"}
    )
    snapshot = ClusterState(
        nodes=(node("n1", 4.0),), running=(annotated,), pending=(pending_pg("urgent"),)
    )
    assert plan(snapshot, nominated("job")).decisions[0].requeue_not_before == T0 + s(900)
    configs = NodePoolConfigs({"default": MinRuntimeConfig(default_requeue_delay=s(420))})
    plain = ClusterState(
        nodes=(node("n1", 4.0),), running=(running_pg("job"),), pending=(pending_pg("urgent"),)
    )
    decision = plan(plain, nominated("job"), configs=configs).decisions[0]
    assert decision.requeue_not_before == T0 + s(420)


def test_scenario_3_cooldown_stops_the_nominator_and_the_gate() -> None:
    committed = plan(busy_node(pending=(pending_pg("urgent"),)), nominated("job")).decisions[0]
    assert committed.requeue_not_before is not None
    # The worker writes the cooldown; the job runs on and over again.
    annotations = {
        EXPECTED_RUNTIME_ANNOTATION: EXPECTED,
        REQUEUE_NOT_BEFORE_ANNOTATION: format_rfc3339(committed.requeue_not_before),
    }
    cooled = running_pg("job", annotations=annotations)
    later = T0 + s(60)
    snapshot = ClusterState(nodes=(node("n1"),), running=(cooled,), pending=(pending_pg("urgent"),))
    report = expected_runtime_nominations(snapshot.running, later)
    assert report.nominated == ()
    assert report.skipped == {"job": SkipReason.COOLDOWN}
    assert report.skip_counts() == {SkipReason.COOLDOWN: 1}
    # Another nominator does not get around it: the planner's gate skips it too.
    result = plan(snapshot, collect_candidates((), [("job", "proportion")]), now=later)
    (decision,) = result.decisions
    assert (decision.outcome, decision.reason) == (SKIPPED, RequeueReason.COOLDOWN)
    assert decision.nominated_by == ("proportion",)
    # At exactly requeue-not-before the cooldown is over.
    again = expected_runtime_nominations(snapshot.running, committed.requeue_not_before)
    assert again.nominated == ("job",)


def test_scenario_4_inside_min_runtime_nominated_but_not_evicted() -> None:
    tree = flat_tree("team", "other", preempt=s(3 * 3600))
    snapshot = busy_node(pending=(pending_pg("urgent"),))
    assert expected_runtime_nominations(snapshot.running, T0).nominated == ("job",)
    (decision,) = plan(snapshot, nominated("job"), tree=tree).decisions
    assert (decision.outcome, decision.reason) == (ROLLED_BACK, RequeueReason.PROTECTED)
    assert decision.requeue_not_before is None
    # Once the window (start + 3h) has passed, the same job is evicted.
    (later,) = plan(snapshot, nominated("job"), tree=tree, now=T0 + s(3600)).decisions
    assert later.outcome is COMMITTED


def test_scenario_5_two_nominators_one_attempt() -> None:
    candidates = collect_candidates(["job"], [("job", "proportion"), ("job", "proportion")])
    assert candidates == {"job": frozenset({EXPECTED_RUNTIME_PLUGIN, "proportion"})}
    result = plan(busy_node(pending=(pending_pg("urgent"),)), candidates)
    (decision,) = result.decisions
    assert decision.outcome is COMMITTED
    assert decision.nominated_by == (EXPECTED_RUNTIME_PLUGIN, "proportion")


# --- protection: preempt within a queue, reclaim across queues, elastic -------------------


def test_reclaim_rule_applies_across_queues() -> None:
    snapshot = busy_node(pending=(pending_pg("urgent", queue="other"),))
    protected_tree = flat_tree("team", "other", reclaim=s(3 * 3600))
    (decision,) = plan(snapshot, nominated("job"), tree=protected_tree).decisions
    assert decision.reason is RequeueReason.PROTECTED
    # The preempt value does not matter across queues.
    preempt_only = flat_tree("team", "other", preempt=s(3 * 3600), reclaim=s(3600))
    assert plan(snapshot, nominated("job"), tree=preempt_only).decisions[0].outcome is COMMITTED


def test_protected_against_one_queue_only_serves_the_other() -> None:
    tree = flat_tree("team", "other", preempt=s(3 * 3600), reclaim=s(0))
    snapshot = busy_node(
        pending=(pending_pg("same", priority=20), pending_pg("cross", queue="other", priority=10))
    )
    (decision,) = plan(snapshot, nominated("job"), tree=tree).decisions
    assert decision.beneficiaries == ("cross",)


def test_protected_is_the_reason_when_protection_alone_blocked_a_fit() -> None:
    tree = flat_tree("team", "other", preempt=s(3 * 3600), reclaim=s(0))
    snapshot = busy_node(
        pending=(
            pending_pg("same", priority=20),
            pending_pg("too-big", queue="other", gpus=(16.0,), priority=10),
        )
    )
    (decision,) = plan(snapshot, nominated("job"), tree=tree).decisions
    assert (decision.outcome, decision.reason) == (ROLLED_BACK, RequeueReason.PROTECTED)


def elastic_job(min_available: int) -> RunningPodGroup:
    return running_pg(
        "job",
        gpus=(("n1", 2.0), ("n1", 2.0)),
        subgroups=(SubGroup(min_available=min_available),),
    )


@pytest.mark.parametrize(
    ("min_available", "protected", "outcome"),
    [
        (1, True, ROLLED_BACK),  # whole eviction would leave 0 < minAvailable 1
        (0, True, COMMITTED),  # minAvailable 0: §6 allows losing every pod
        (1, False, COMMITTED),  # unprotected elastic podgroups may lose any pod
    ],
)
def test_elastic_candidates(min_available: int, protected: bool, outcome: RequeueOutcome) -> None:
    tree = flat_tree("team", preempt=s(3 * 3600) if protected else None)
    snapshot = ClusterState(
        nodes=(node("n1"),),
        running=(elastic_job(min_available), running_pg("filler", annotations={})),
        pending=(pending_pg("urgent"),),
    )
    (decision,) = plan(snapshot, nominated("job"), tree=tree).decisions
    assert decision.outcome is outcome
    if outcome is ROLLED_BACK:
        assert decision.reason is RequeueReason.PROTECTED


# --- gates --------------------------------------------------------------------------------


def test_unparsable_not_before_is_skipped() -> None:
    broken = running_pg(
        "job",
        annotations={EXPECTED_RUNTIME_ANNOTATION: EXPECTED, REQUEUE_NOT_BEFORE_ANNOTATION: "soon"},
    )
    snapshot = ClusterState(nodes=(node("n1"),), running=(broken,))
    (decision,) = plan(snapshot, nominated("job", by="proportion")).decisions
    assert (decision.outcome, decision.reason) == (SKIPPED, RequeueReason.INVALID_NOT_BEFORE)


def never_started(annotations: dict[str, str]) -> RunningPodGroup:
    """``idle``: a listed podgroup whose run never started (one pod, placed nowhere)."""
    return RunningPodGroup(
        uid="idle",
        queue="team",
        priority=0,
        start_time=None,
        annotations=annotations,
        pods=(Pod(name="p", gpu=1.0),),
    )


def test_candidates_that_are_not_running_are_skipped() -> None:
    idle = never_started({})
    snapshot = ClusterState(nodes=(node("n1"),), running=(idle,))
    result = plan(snapshot, nominated("idle", "gone", by="proportion"))
    assert [(d.uid, d.reason) for d in result.decisions] == [
        ("idle", RequeueReason.NOT_RUNNING),
        ("gone", RequeueReason.NOT_RUNNING),
    ]


def test_a_cooldown_is_checked_before_running() -> None:
    idle = never_started({REQUEUE_NOT_BEFORE_ANNOTATION: format_rfc3339(T0 + s(1))})
    snapshot = ClusterState(nodes=(node("n1"),), running=(idle,))
    assert plan(snapshot, nominated("idle")).decisions[0].reason is RequeueReason.COOLDOWN


def test_an_already_committed_victim_is_not_attempted_again() -> None:
    snapshot = ClusterState(
        nodes=(node("n1"),),
        running=(running_pg("job"),),
        pending=(pending_pg("urgent"),),
        awaiting_release=frozenset({"job"}),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert (decision.outcome, decision.reason) == (SKIPPED, RequeueReason.ALREADY_COMMITTED)


def test_a_non_preemptible_podgroup_is_never_evicted() -> None:
    pinned = running_pg("job", preemptible=False)
    snapshot = ClusterState(nodes=(node("n1", 4.0),), running=(pinned,), pending=(pending_pg("u"),))
    (decision,) = plan(snapshot, nominated("job", by="proportion")).decisions
    assert (decision.outcome, decision.reason) == (SKIPPED, RequeueReason.NOT_PREEMPTIBLE)


# --- contenders and placement -------------------------------------------------------------


def test_equal_or_lower_priority_pending_does_not_count() -> None:
    snapshot = busy_node(pending=(pending_pg("peer", priority=0), pending_pg("low", priority=-1)))
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.reason is RequeueReason.NO_HIGHER_PRIORITY_PENDING


def test_a_contender_that_fits_anyway_does_not_justify_an_eviction() -> None:
    snapshot = ClusterState(
        nodes=(node("n1"), node("n2")),
        running=(running_pg("job"), running_pg("filler", annotations={})),
        pending=(pending_pg("urgent"),),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert (decision.outcome, decision.reason) == (ROLLED_BACK, RequeueReason.NO_CONTENDER_FITS)


def test_two_candidates_one_contender_commits_exactly_once() -> None:
    snapshot = ClusterState(
        nodes=(node("n1"),),
        running=(running_pg("a"), running_pg("b")),
        pending=(pending_pg("urgent"),),
    )
    result = plan(snapshot, nominated("a", "b"))
    assert [(d.uid, d.outcome) for d in result.decisions] == [("a", COMMITTED), ("b", ROLLED_BACK)]
    # The only contender is served: nothing of higher priority is left for b.
    assert result.decisions[1].reason is RequeueReason.NO_HIGHER_PRIORITY_PENDING
    assert result.promised == {"n1": 4.0}


def test_candidates_go_lowest_priority_then_least_at_risk_then_largest_overrun_then_uid() -> None:
    # Equal work at risk (same start, same GPUs): e-over is further over a shorter estimate.
    over = {EXPECTED_RUNTIME_ANNOTATION: "30m"}
    snapshot = ClusterState(
        nodes=(node("n1", 20.0),),
        running=(
            running_pg("c-high", priority=5),
            running_pg("b-long", start=T0 - s(5 * 3600)),
            running_pg("a-short"),
            running_pg("d-short"),
            running_pg("e-over", annotations=over),
        ),
        pending=(pending_pg("urgent"),),
    )
    result = plan(snapshot, nominated("a-short", "b-long", "c-high", "d-short", "e-over", "ghost"))
    # b-long has run 5h: its eviction would lose the most work (no checkpoint is known).
    assert [d.uid for d in result.decisions] == [
        "e-over",
        "a-short",
        "d-short",
        "b-long",
        "c-high",
        "ghost",
    ]
    assert result.committed()[0].uid == "e-over"


def test_contenders_go_highest_priority_then_oldest_then_uid() -> None:
    def contenders(*pending: object) -> tuple[str, ...]:
        snapshot = busy_node(pending=pending)
        return plan(snapshot, nominated("job")).decisions[0].beneficiaries

    assert contenders(pending_pg("a", priority=10), pending_pg("b", priority=20)) == ("b",)
    assert contenders(
        pending_pg("a", submitted_at=T0 - s(1)), pending_pg("b", submitted_at=T0 - s(2))
    ) == ("b",)
    assert contenders(pending_pg("a"), pending_pg("b", submitted_at=T0)) == ("b",)
    assert contenders(pending_pg("b"), pending_pg("a")) == ("a",)


def test_one_eviction_may_serve_several_beneficiaries() -> None:
    snapshot = ClusterState(
        nodes=(node("n1"),),
        running=(running_pg("job", gpus=(("n1", 8.0),)),),
        pending=(pending_pg("x", priority=20), pending_pg("y", priority=10), pending_pg("z")),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.beneficiaries == ("x", "y")
    assert decision.reservations == {"n1": 8.0}


def test_a_gang_split_across_nodes_does_not_fit() -> None:
    snapshot = ClusterState(
        nodes=(node("n1", 4.0), node("n2", 4.0)),
        running=(
            running_pg("job", gpus=(("n1", 1.0), ("n2", 1.0))),
            running_pg("filler", gpus=(("n1", 3.0), ("n2", 3.0)), annotations={}),
        ),
        pending=(pending_pg("wide", gpus=(2.0,)),),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert (decision.outcome, decision.reason) == (ROLLED_BACK, RequeueReason.NO_CONTENDER_FITS)
    # Two 1-GPU pods of one gang do fit, one on each node.
    two = ClusterState(
        nodes=snapshot.nodes,
        running=snapshot.running,
        pending=(pending_pg("pair", gpus=(1.0, 1.0)),),
    )
    (fits,) = plan(two, nominated("job")).decisions
    assert fits.reservations == {"n1": 1.0, "n2": 1.0}


def test_fractional_gpus_share_one_node() -> None:
    snapshot = ClusterState(
        nodes=(node("n1", 1.0),),
        running=(running_pg("job", gpus=(("n1", 0.5),)),),
        pending=(pending_pg("halves", gpus=(0.5, 0.5)),),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.outcome is COMMITTED
    assert decision.reservations == {"n1": 1.0}
    assert {p.node for p in decision.placements} == {"n1"}


def test_tenths_add_up_exactly() -> None:
    snapshot = ClusterState(
        nodes=(node("n1", 1.0),),
        running=(running_pg("job", gpus=(("n1", 0.3),)),),
        pending=(pending_pg("tenths", gpus=(0.1,) * 10),),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.outcome is COMMITTED
    assert decision.reservations == {"n1": 1.0}


def test_only_min_available_pods_are_placed() -> None:
    elastic = pending_pg("elastic", gpus=(4.0, 4.0, 4.0), subgroups=(SubGroup(min_available=1),))
    (decision,) = plan(busy_node(pending=(elastic,)), nominated("job")).decisions
    assert decision.placements == (PodPlacement("elastic", "elastic-0", "n1", 4.0),)


def test_every_subgroup_needs_its_minimum() -> None:
    gang = pending_pg(
        "gang",
        gpus=(2.0, 2.0, 2.0),
        subgroups=(SubGroup("a", 1), SubGroup("b", 2)),
        pod_subgroups=("a", "b", "b"),
    )
    (decision,) = plan(busy_node(pending=(gang,)), nominated("job")).decisions
    assert (decision.outcome, decision.reason) == (ROLLED_BACK, RequeueReason.NO_CONTENDER_FITS)
    short = pending_pg("short", gpus=(1.0,), subgroups=(SubGroup(min_available=2),))
    (decision,) = plan(busy_node(pending=(short,)), nominated("job")).decisions
    assert decision.reason is RequeueReason.NO_CONTENDER_FITS


def test_other_node_pools_are_ignored() -> None:
    snapshot = ClusterState(
        nodes=(node("n1"), node("b1", pool="b")),
        running=(running_pg("job"), running_pg("filler", annotations={})),
        pending=(pending_pg("elsewhere", pool="b", gpus=(16.0,)),),
    )
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.reason is RequeueReason.NO_HIGHER_PRIORITY_PENDING


def test_capacity_in_another_pool_does_not_help() -> None:
    snapshot = ClusterState(
        nodes=(node("n1", 4.0), node("b1", pool="b")),
        running=(running_pg("job", gpus=(("n1", 2.0),)), running_pg("f", gpus=(("n1", 2.0),))),
        pending=(pending_pg("urgent", gpus=(2.0,)),),
    )
    # b1's 8 free GPUs are in another pool: the contender still needs the eviction.
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.outcome is COMMITTED
    assert decision.reservations == {"n1": 2.0}


def test_promised_capacity_of_earlier_cycles_is_not_handed_out_again() -> None:
    def snapshot(need: float) -> ClusterState:
        return ClusterState(
            nodes=(node("n1"),),
            running=(running_pg("job"), running_pg("old", annotations={})),
            pending=(pending_pg("first", priority=50), pending_pg("second", gpus=(need,))),
            promised={"n1": 4.0},
            awaiting_release=frozenset({"old"}),
            promised_to=frozenset({"first"}),
        )

    # Without the promise, evicting job would free all 8 GPUs of n1.
    (decision,) = plan(snapshot(8.0), nominated("job")).decisions
    assert (decision.outcome, decision.reason) == (ROLLED_BACK, RequeueReason.NO_CONTENDER_FITS)
    result = plan(snapshot(4.0), nominated("job", "old"))
    assert [(d.uid, d.outcome) for d in result.decisions] == [
        ("job", COMMITTED),
        ("old", SKIPPED),
    ]
    assert result.decisions[0].beneficiaries == ("second",)
    assert result.promised == {"n1": 8.0}


@pytest.mark.parametrize("annotation", ["soon", "0", "-5m", "5"])
def test_a_bad_requeue_delay_uses_the_default_and_says_why(annotation: str) -> None:
    job = running_pg(
        "job",
        annotations={EXPECTED_RUNTIME_ANNOTATION: EXPECTED, REQUEUE_DELAY_ANNOTATION: annotation},
    )
    snapshot = ClusterState(nodes=(node("n1", 4.0),), running=(job,), pending=(pending_pg("u"),))
    (decision,) = plan(snapshot, nominated("job")).decisions
    assert decision.outcome is COMMITTED
    assert decision.requeue_not_before == T0 + FIVE_MINUTES
    assert decision.delay_problem is not None
    assert decision.delay_problem.startswith("requeue-delay ignored")


def test_the_promised_ledger_keeps_unknown_nodes_and_drops_nothing() -> None:
    snapshot = ClusterState(
        nodes=(node("n1", 4.0),),
        running=(running_pg("job"),),
        pending=(pending_pg("u"),),
        promised={"gone": 1.5},
    )
    assert plan(snapshot, nominated("job")).promised == {"gone": 1.5, "n1": 4.0}


# --- inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "build",
    [
        lambda: ClusterState(nodes=(node("n1"), node("n1"))),
        lambda: ClusterState(nodes=(), running=(running_pg("a"),), pending=(pending_pg("a"),)),
        lambda: ClusterState(nodes=(), promised={"n1": -1.0}),
        lambda: node("n1", float("nan")),
        lambda: Pod(name="p", gpu=-1.0),
        lambda: Pod(name="p", gpu=1.0, running=True),
        lambda: running_pg("a", gpus=(("n1", 1.0), ("n1", 1.0)), pod_subgroups=("x", "x")),
    ],
)
def test_inconsistent_snapshots_are_rejected(build: object) -> None:
    with pytest.raises(MinRuntimeError):
        build()  # type: ignore[operator]


def test_snapshot_errors_are_value_errors_with_a_kind() -> None:
    with pytest.raises(ValueError, match="duplicate node name"):
        ClusterState(nodes=(node("n1"), node("n1")))
    assert InvalidClusterStateError.kind == "invalid_snapshot"


def test_now_must_be_aware() -> None:
    with pytest.raises(MinRuntimeError):
        plan(busy_node(), nominated("job"), now=T0.replace(tzinfo=None))


def test_collect_candidates_keeps_every_nominator() -> None:
    candidates = collect_candidates(["b", "a", "a"], [("c", "proportion"), ("a", "x")])
    assert candidates == {
        "a": frozenset({EXPECTED_RUNTIME_PLUGIN, "x"}),
        "b": frozenset({EXPECTED_RUNTIME_PLUGIN}),
        "c": frozenset({"proportion"}),
    }
    with pytest.raises(MinRuntimeError):
        collect_candidates([], [("a", "")])


def test_expected_runtime_nominations_report_every_skip() -> None:
    fresh = running_pg("fresh", start=T0 - s(60))
    pinned = running_pg("pinned", preemptible=False)
    unannotated = running_pg("plain", annotations={})
    report = expected_runtime_nominations([fresh, pinned, unannotated, running_pg("job")], T0)
    assert report.nominated == ("job",)
    assert report.overruns == {"job": s(3600)}
    assert report.skipped == {
        "pinned": SkipReason.NOT_PREEMPTIBLE,
        "plain": SkipReason.INVALID_DURATION,
    }
