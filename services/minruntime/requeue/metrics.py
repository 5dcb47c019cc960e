"""The requeue worker's Prometheus metrics (SEMANTICS.md §8 names, exactly).

Label values are finite: plugin / nominator names outside the configured list of known
nominators are reported as ``other`` (a nominator name comes from other components' events
and must not be able to grow the number of series), and reasons are the core's enums.
Counters count every evaluation, cycle by cycle, like KAI's session metrics; the decision log
records only changes (docs/requeue-worker.md).
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import partial
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from minruntime.core import (
    EXPECTED_RUNTIME_PLUGIN,
    Exclusion,
    ProtectionRule,
    ProtectionWindow,
    RequeueOutcome,
)
from minruntime.ingest import outcome_of
from minruntime.requeue.cycle import CycleReport

OTHER_NOMINATOR: Final = "other"
# The reason label of a commit (a committed decision has no reason).
NO_REASON: Final = "none"


class RequeueMetrics:
    """Counters and gauges of one worker process, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry, known_nominators: Iterable[str]) -> None:
        self.known = frozenset(known_nominators) | {EXPECTED_RUNTIME_PLUGIN}
        counter = partial(Counter, registry=registry)
        self.nominations = counter(
            "kai_requeue_nominations", "Nominations per cycle, by nominating plugin.", ["plugin"]
        )
        self.nomination_skipped = counter(
            "kai_requeue_nomination_skipped",
            "Podgroups the expected-runtime nominator skipped, by reason (SEMANTICS.md §7).",
            ["plugin", "reason"],
        )
        self.commits = counter(
            "kai_requeue_commits",
            "Committed requeues, counted under every nominator of the candidate.",
            ["nominated_by"],
        )
        self.rollbacks = counter(
            "kai_requeue_rollbacks",
            "Requeue attempts rolled back, counted under every nominator of the candidate.",
            ["nominated_by"],
        )
        self.skipped = counter(
            "kai_requeue_skipped",
            "Candidates not attempted, by nominator and reason.",
            ["nominated_by", "reason"],
        )
        self.cycles = counter(
            "minruntime_requeue_cycles",
            "Requeue cycles run by this worker, by result (ok, conflict, failed).",
            ["result"],
        )
        self.cycle_seconds = Histogram(
            "minruntime_requeue_cycle_seconds",
            "Wall time of one requeue cycle (read, plan, write, commit).",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0),
            registry=registry,
        )
        self.decisions = counter(
            "minruntime_requeue_decisions",
            "Requeue decisions per cycle, by outcome and reason (a commit's reason: none); each"
            " candidate once, whatever its nominators.",
            ["outcome", "reason"],
        )
        self.decisions_recorded = counter(
            "minruntime_requeue_decisions_recorded",
            "Decision events written to the log and the outbox, by outcome.",
            ["outcome"],
        )
        self.active = Gauge(
            "minruntime_requeue_worker_active",
            "1 while this replica holds the leader lock and runs cycles, else 0.",
            registry=registry,
        )
        self.notifications_ignored = counter(
            "minruntime_requeue_notifications_ignored",
            "NOTIFYs on the nominations channel not sent by a backend of the worker's own role "
            "(any role may NOTIFY; only the processor's wake the worker).",
        )
        self.protection_expired = counter(
            "minruntime_protection_expired",
            "protection.expired events written to the outbox, by rule (preempt, reclaim).",
            ["rule"],
        )
        self.protection_expiry_delay = Histogram(
            "minruntime_protection_expiry_delay_seconds",
            "From a window's end (protectedUntil) to its protection.expired event being written.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0, 300.0),
            registry=registry,
        )
        self.excluded = counter(
            "kai_requeue_excluded",
            "Stored nodes, podgroups, node pools or queue trees left out of a requeue cycle or a"
            " protection-expiry check because their values are unusable, by what and reason.",
            ["what", "reason"],
        )
        self.nominations.labels(EXPECTED_RUNTIME_PLUGIN)
        for outcome in RequeueOutcome:
            self.decisions_recorded.labels(outcome.value)
        for rule in ProtectionRule:
            self.protection_expired.labels(rule.value)

    def label(self, nominator: str) -> str:
        """A finite label value for a nominator name."""
        return nominator if nominator in self.known else OTHER_NOMINATOR

    def observe(self, report: CycleReport) -> None:
        """Count one committed cycle's nominations and decisions."""
        for nominators in report.candidates.values():
            for nominator in nominators:
                self.nominations.labels(self.label(nominator)).inc()
        for reason, count in report.nominations.skip_counts().items():
            self.nomination_skipped.labels(EXPECTED_RUNTIME_PLUGIN, reason.value).inc(count)
        for decision in report.plan.decisions:
            cause = decision.reason.value if decision.reason else NO_REASON
            self.decisions.labels(decision.outcome.value, cause).inc()
            for nominator in decision.nominated_by:
                label = self.label(nominator)
                if decision.outcome is RequeueOutcome.COMMITTED:
                    self.commits.labels(label).inc()
                elif decision.outcome is RequeueOutcome.ROLLED_BACK:
                    self.rollbacks.labels(label).inc()
                else:
                    why = decision.reason.value if decision.reason else "unknown"
                    self.skipped.labels(label, why).inc()
        for event in report.recorded:
            self.decisions_recorded.labels(outcome_of(event)).inc()
        self.observe_excluded(report.excluded)

    def observe_excluded(self, excluded: Iterable[Exclusion]) -> None:
        """Count what a cycle or a check left out (labels: closed sets of the core)."""
        for exclusion in excluded:
            self.excluded.labels(exclusion.what, exclusion.reason.value).inc()

    def observe_expiry(self, written: Iterable[ProtectionWindow], at: datetime) -> None:
        """Count the protection.expired events written (committed) at ``at``."""
        for window in written:
            self.protection_expired.labels(window.rule.value).inc()
            self.protection_expiry_delay.observe((at - window.protected_until).total_seconds())
