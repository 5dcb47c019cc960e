"""The requeue worker's decisions by outcome and reason (`minruntime_requeue_decisions_total`),
counted from a cycle's report: each candidate once, whatever its nominators."""

from __future__ import annotations

from datetime import UTC, datetime

from prometheus_client import CollectorRegistry

from minruntime.core import ClusterState, NodePoolConfigs, QueueTree, RequeueOutcome, RequeueReason
from minruntime.core.requeue_candidates import NominationReport
from minruntime.core.requeue_model import CyclePlan, RequeueDecision
from minruntime.requeue import CycleReport, RequeueMetrics
from minruntime.requeue.cycle_inputs import CycleInputs

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)


def decision(
    uid: str, outcome: RequeueOutcome, reason: RequeueReason | None, *nominators: str
) -> RequeueDecision:
    return RequeueDecision(
        uid=uid, outcome=outcome, reason=reason, nominated_by=nominators, decided_at=NOW
    )


def report(*decisions: RequeueDecision) -> CycleReport:
    return CycleReport(
        now=NOW,
        inputs=CycleInputs(ClusterState(nodes=()), QueueTree(()), NodePoolConfigs(), ()),
        nominations=NominationReport(nominated=(), skipped={}, overruns={}),
        candidates={d.uid: frozenset(d.nominated_by) for d in decisions},
        plan=CyclePlan(decisions=decisions, promised={}),
        timings={},
        decided_at=NOW,
        recorded=(),
        repeats=0,
    )


def test_decisions_are_counted_by_outcome_and_reason_once_per_candidate() -> None:
    registry = CollectorRegistry()
    metrics = RequeueMetrics(registry, ["proportion"])
    cycle = report(
        decision("a", RequeueOutcome.COMMITTED, None, "expectedruntime", "proportion"),
        decision("b", RequeueOutcome.ROLLED_BACK, RequeueReason.PROTECTED, "expectedruntime"),
        decision("c", RequeueOutcome.ROLLED_BACK, RequeueReason.PROTECTED, "proportion"),
        decision("d", RequeueOutcome.SKIPPED, RequeueReason.COOLDOWN, "expectedruntime"),
    )
    metrics.observe(cycle)
    metrics.observe(cycle)  # every cycle counts again, like KAI's session metrics

    def count(outcome: str, reason: str) -> float | None:
        labels = {"outcome": outcome, "reason": reason}
        return registry.get_sample_value("minruntime_requeue_decisions_total", labels)

    assert count("committed", "none") == 2  # once per cycle, not once per nominator
    assert count("rolled_back", "protected") == 4
    assert count("skipped", "cooldown") == 2
    assert count("rolled_back", "no_higher_priority_pending") is None
    # The per-nominator counters of SEMANTICS.md §8 are unchanged beside it.
    commits = {"nominated_by": "proportion"}
    assert registry.get_sample_value("kai_requeue_commits_total", commits) == 2
