"""KAI's proportion rules for GPUs (core.proportion): worked examples, then the planner.

The examples are the ones docs/rule-engine.md ("Queue shares") works through by hand.
"""

from __future__ import annotations

import pytest
from core_testkit import T0, nominated, pending_pg, plan, running_pg

from minruntime.core import (
    ClusterState,
    InvalidQueueError,
    Node,
    Queue,
    QueueTree,
    RequeueOutcome,
    RequeueReason,
)
from minruntime.core.proportion import QuotaJudge, QuotaRule, QuotaVerdict, fair_shares
from minruntime.core.queue_quota import UNLIMITED, QueueResources, ResourceQuota


def gpu(quota: float = 0.0, limit: float = UNLIMITED, weight: float = 1.0) -> QueueResources:
    return QueueResources(gpu=ResourceQuota(quota=quota, limit=limit, over_quota_weight=weight))


def queue(
    name: str,
    resources: QueueResources | None = None,
    *,
    parent: str | None = None,
    priority: int | None = None,
) -> Queue:
    return Queue(name=name, parent=parent, resources=resources, priority=priority)


def fair(tree: QueueTree, total: float, requested: dict[str, float]) -> dict[str, float]:
    return {
        name: share.fair_share for name, share in fair_shares(tree, total, {}, requested).items()
    }


# --- the share computation ------------------------------------------------------------------


def test_deserved_quota_comes_first_then_nothing_is_left() -> None:
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(0))])
    assert fair(tree, 4, {"train": 4, "burst": 4}) == {"train": 4, "burst": 0}


def test_deserved_is_capped_by_what_a_queue_requests() -> None:
    tree = QueueTree([queue("a", gpu(6)), queue("b", gpu(0))])
    # a deserves 6 but asks for 2; the 6 left over go to b, the only one asking for more.
    assert fair(tree, 8, {"a": 2, "b": 10}) == {"a": 2, "b": 6}


def test_over_quota_by_weight_in_whole_gpus_then_the_fractions() -> None:
    tree = QueueTree([queue("q1", gpu(2, weight=1)), queue("q2", gpu(2, weight=3))])
    # 6 left after quotas: shares 1.5 and 4.5, given as 1 and 4; the last GPU goes to the
    # largest remainder (a tie of 0.5: the name decides, KAI's creation time does there).
    assert fair(tree, 10, {"q1": 10, "q2": 10}) == {"q1": 4, "q2": 6}


def test_a_queue_asking_less_than_its_share_frees_the_rest_for_another_round() -> None:
    tree = QueueTree([queue("q1", gpu(0)), queue("q2", gpu(0))])
    assert fair(tree, 10, {"q1": 1, "q2": 20}) == {"q1": 1, "q2": 9}


def test_a_limit_caps_the_share_and_the_rest_goes_round_again() -> None:
    tree = QueueTree([queue("q1", gpu(0)), queue("q2", gpu(0, limit=3))])
    assert fair(tree, 10, {"q1": 20, "q2": 20}) == {"q1": 7, "q2": 3}


def test_higher_priority_queues_take_the_over_quota_first() -> None:
    tree = QueueTree([queue("hi", gpu(0), priority=200), queue("lo", gpu(0))])
    assert fair(tree, 10, {"hi": 10, "lo": 10}) == {"hi": 10, "lo": 0}


def test_weight_zero_gets_no_over_quota_share() -> None:
    tree = QueueTree([queue("a", gpu(1, weight=0)), queue("b", gpu(0))])
    assert fair(tree, 10, {"a": 10, "b": 4}) == {"a": 1, "b": 4}


def test_children_divide_their_parents_fair_share() -> None:
    tree = QueueTree(
        [
            queue("A", gpu(6)),
            queue("a1", gpu(0), parent="A"),
            queue("a2", gpu(2), parent="A"),
            queue("B", gpu(2)),
        ]
    )
    shares = fair(tree, 8, {"a1": 4, "a2": 4, "B": 4})
    assert shares == {"A": 6, "a1": 2, "a2": 4, "B": 2}


def test_an_unmanaged_queue_deserves_what_it_requests() -> None:
    tree = QueueTree([queue("plain"), queue("burst", gpu(0))])
    assert fair(tree, 8, {"plain": 3, "burst": 8}) == {"plain": 3, "burst": 5}


def test_allocated_and_requested_add_up_the_tree() -> None:
    tree = QueueTree([queue("A", gpu(4)), queue("a1", gpu(4), parent="A")])
    shares = fair_shares(tree, 8, {"a1": 3}, {"a1": 5})
    assert (shares["A"].allocated, shares["A"].requested) == (3, 5)
    assert shares["A"].allocatable() == 5  # max(deserved 4, fair share 5)


def test_bad_quota_values_are_refused() -> None:
    for bad in (-2.0, float("nan"), float("inf"), 1e16):
        with pytest.raises(InvalidQueueError):
            ResourceQuota(quota=bad)
    with pytest.raises(InvalidQueueError):
        ResourceQuota(over_quota_weight=-1.0)
    with pytest.raises(InvalidQueueError):
        Queue(name="q", priority=True)


# --- the judge: would KAI keep the beneficiary? -----------------------------------------------


def verdict_of(
    judge: QuotaJudge, victim: str, beneficiary: str, gpus: float
) -> QuotaVerdict | None:
    """The verdict on a 4-GPU victim (its gang 4 GPUs too) for a beneficiary of ``gpus``."""
    return judge.judge(
        victim_queue=victim,
        victim_gpus=4,
        victim_demand=4,
        beneficiary_queue=beneficiary,
        beneficiary_gpus=gpus,
    )


def judge_of(tree: QueueTree, total: float, allocated: dict[str, float]) -> QuotaJudge:
    requested = {"train": 4.0, "burst": 4.0}
    return QuotaJudge(tree, fair_shares(tree, total, allocated, requested))


def test_the_issue_case_quota_zero_beneficiary_is_reclaimed_back() -> None:
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(0))])
    judge = judge_of(tree, 4, {"train": 4})
    verdict = verdict_of(judge, "train", "burst", 4)
    assert verdict is not None
    assert verdict.rule is QuotaRule.FAIR_SHARE
    assert verdict.queue == "burst"
    assert (verdict.beneficiary.fair_share, verdict.beneficiary.deserved) == (0, 0)
    assert (verdict.beneficiary.allocated_before, verdict.beneficiary.allocated_after) == (0, 4)
    assert (verdict.victim.fair_share, verdict.victim.deserved) == (4, 4)
    assert (verdict.victim.allocated_before, verdict.victim.allocated_after) == (4, 0)


def test_the_issue_case_within_quota_is_kept() -> None:
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(4))])
    judge = judge_of(tree, 4, {"train": 4})
    assert verdict_of(judge, "train", "burst", 4) is None


def test_a_victim_queue_over_its_own_share_cannot_reclaim() -> None:
    tree = QueueTree([queue("train", gpu(2)), queue("burst", gpu(2))])
    judge = judge_of(tree, 4, {"train": 4})
    # burst ends over its fair share 2, but train asking 4 back is over its own 2.
    assert verdict_of(judge, "train", "burst", 4) is None


def test_a_limit_on_the_beneficiarys_path_refuses_it() -> None:
    tree = QueueTree(
        [queue("dept", gpu(8, limit=2)), queue("burst", gpu(8), parent="dept"), queue("train")]
    )
    judge = QuotaJudge(tree, fair_shares(tree, 8, {"train": 4}, {"train": 4, "burst": 4}))
    verdict = verdict_of(judge, "train", "burst", 4)
    assert verdict is not None
    assert (verdict.rule, verdict.queue) == (QuotaRule.LIMIT, "dept")


def test_deserved_quota_strategy_reclaims_from_a_queue_over_its_quota() -> None:
    # 8 GPUs: train deserves 4, burst 0 but gets the 4 left over as its fair share. Once
    # burst holds 4, it is within its fair share but over its quota, and train asking its 4
    # back is within its own: KAI's quota strategy takes them back.
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(0))])
    judge = QuotaJudge(tree, fair_shares(tree, 8, {"train": 4}, {"train": 4, "burst": 4}))
    verdict = verdict_of(judge, "train", "burst", 4)
    assert verdict is not None
    assert verdict.rule is QuotaRule.DESERVED_QUOTA
    assert verdict.beneficiary.fair_share == 4


def test_same_queue_is_a_preempt_not_a_reclaim() -> None:
    tree = QueueTree([queue("train", gpu(0))])
    judge = QuotaJudge(tree, fair_shares(tree, 4, {"train": 4}, {"train": 8}))
    assert verdict_of(judge, "train", "train", 4) is None


# --- the planner ----------------------------------------------------------------------------


def issue_cluster() -> ClusterState:
    """One 4-GPU node: hog (train, over its runtime) holds it; lift (burst) waits for it."""
    return ClusterState(
        nodes=(Node(name="n1", gpu=4.0),),
        running=(running_pg("hog", queue="train"),),
        pending=(pending_pg("lift", queue="burst", priority=10),),
    )


def test_planner_rolls_back_a_beneficiary_kai_would_reclaim_back() -> None:
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(0))])
    (decision,) = plan(issue_cluster(), nominated("hog"), tree=tree).decisions
    assert decision.outcome is RequeueOutcome.ROLLED_BACK
    assert decision.reason is RequeueReason.BENEFICIARY_OVER_QUOTA
    assert decision.quota is not None
    assert decision.quota.beneficiary.queue == "burst"
    assert decision.quota.victim.queue == "train"
    assert decision.beneficiaries == ()


def test_planner_commits_when_the_beneficiary_is_within_quota() -> None:
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(4))])
    (decision,) = plan(issue_cluster(), nominated("hog"), tree=tree).decisions
    assert decision.outcome is RequeueOutcome.COMMITTED
    assert decision.beneficiaries == ("lift",)
    assert decision.quota is None


def test_planner_without_resources_commits_as_before() -> None:
    tree = QueueTree([queue("train"), queue("burst")])
    (decision,) = plan(issue_cluster(), nominated("hog"), tree=tree).decisions
    assert decision.outcome is RequeueOutcome.COMMITTED


def kai_zero() -> QueueResources:
    """What a KAI Queue without spec.resources carries: quota, limit and weight 0 for all
    three resources (KAI's getQueueQuota, pkg/scheduler/api/queue_info/queue_info.go)."""
    zero = ResourceQuota(quota=0, limit=0, over_quota_weight=0)
    return QueueResources(gpu=zero, cpu=zero, memory=zero)


def test_planner_rolls_back_a_beneficiary_in_a_queue_without_resources() -> None:
    # KAI never places anything in such a queue (limit 0): evicting hog would help no one.
    tree = QueueTree([queue("train"), queue("burst", kai_zero())])
    (decision,) = plan(issue_cluster(), nominated("hog"), tree=tree).decisions
    assert decision.outcome is RequeueOutcome.ROLLED_BACK
    assert decision.reason is RequeueReason.BENEFICIARY_OVER_QUOTA
    assert decision.quota is not None
    assert (decision.quota.rule, decision.quota.queue) == (QuotaRule.LIMIT, "burst")
    assert decision.beneficiaries == ()


@pytest.mark.parametrize(
    "queues",
    [
        pytest.param(
            [queue("train"), queue("burst", kai_zero()), queue("fair")],
            id="a_queue_without_resources_for_a_placeable_contender",
        ),
        pytest.param(
            [queue("train", gpu(4)), queue("burst", gpu(0)), queue("fair", gpu(4))],
            id="the_refused_contender_for_the_next_one",
        ),
    ],
)
def test_planner_skips(queues: list[Queue]) -> None:
    tree = QueueTree(queues)
    cluster = ClusterState(
        nodes=(Node(name="n1", gpu=4.0),),
        running=(running_pg("hog", queue="train"),),
        pending=(
            pending_pg("lift", queue="burst", priority=20),
            pending_pg("ok", queue="fair", priority=10),
        ),
    )
    (decision,) = plan(cluster, nominated("hog"), tree=tree).decisions
    assert decision.outcome is RequeueOutcome.COMMITTED
    assert decision.beneficiaries == ("ok",)


def test_planner_counts_earlier_commits_of_the_cycle() -> None:
    # Two victims in train; burst deserves 4 of 8. The first requeue fills burst's quota; the
    # second would put burst over its share while train is under its own: rolled back.
    tree = QueueTree([queue("train", gpu(4)), queue("burst", gpu(4))])
    cluster = ClusterState(
        nodes=(Node(name="n1", gpu=4.0), Node(name="n2", gpu=4.0)),
        running=(
            running_pg("hog1", queue="train", gpus=(("n1", 4.0),)),
            running_pg("hog2", queue="train", gpus=(("n2", 4.0),)),
        ),
        pending=(
            pending_pg("lift1", queue="burst", priority=10, submitted_at=T0),
            pending_pg("lift2", queue="burst", priority=10),
        ),
    )
    decisions = plan(cluster, nominated("hog1", "hog2"), tree=tree).decisions
    outcomes = {d.uid: (d.outcome, d.reason) for d in decisions}
    assert outcomes["hog1"] == (RequeueOutcome.COMMITTED, None)
    assert outcomes["hog2"] == (RequeueOutcome.ROLLED_BACK, RequeueReason.BENEFICIARY_OVER_QUOTA)


def test_a_limit_holds_even_for_a_victim_in_a_queue_the_tree_does_not_know() -> None:
    tree = QueueTree([queue("burst", gpu(8, limit=2))])
    judge = QuotaJudge(tree, fair_shares(tree, 8, {}, {"burst": 4}))
    verdict = verdict_of(judge, "nowhere", "burst", 4)
    assert verdict is not None
    assert (verdict.rule, verdict.queue) == (QuotaRule.LIMIT, "burst")
    # No reclaim back without the victim's queue, and no limit for a job asking for no GPUs.
    assert verdict_of(QuotaJudge(tree, fair_shares(tree, 8, {}, {})), "nowhere", "burst", 0) is None
