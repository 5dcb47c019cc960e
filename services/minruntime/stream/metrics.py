"""The processor's Prometheus metrics: events applied, dead-lettered, duplicates, consumer lag,
and the work evictions took away.

Labels are finite: the topic role (not the configurable topic name), the event type and the
dead-letter kind (both closed sets of the wire contract), the partition number, how a run was
evicted (``core.EVICTIONS``), the scheduler's action that evicted it (KAI's four, ``other``
for another word, ``none`` when not said: never the evictor's name) and its verdict (definite,
possible, none; violated, honoured, unguarded for an exact one), and queue names bounded
twice: only queues of the tree (a run of a queue the tree did not know is ``unknown``), and of
those only the first ``MAX_QUEUE_LABELS`` this process saw (later ones are ``other``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from minruntime.core import EvictionAction, ExactVerdict, IgnoredValue, Verdict
from minruntime.ingest import BatchOutcome
from minruntime.ingest.runs import LostRun

# Queue label values one process exports at most (beyond: "other"); a tree of thousands of
# queues would otherwise make as many series.
MAX_QUEUE_LABELS: Final = 100
UNKNOWN_QUEUE: Final = "unknown"
VIOLATION_VERDICTS: Final = (
    *(verdict.value for verdict in Verdict if verdict is not Verdict.NONE),
    ExactVerdict.VIOLATED.value,
)
# The action label: KAI's actions, any other word, or none said (an unattributed run).
ACTIONS: Final = frozenset(action.value for action in EvictionAction)
OTHER: Final = "other"
NOT_SAID: Final = "none"
# The owner_kind label: the kinds of top owners KAI's podgrouper knows well; any other kind
# is "other", no top-owner metadata "none" (never a name: the labels stay finite).
OWNER_KINDS: Final = frozenset(
    {
        "JobSet",
        "RayJob",
        "RayCluster",
        "PyTorchJob",
        "TFJob",
        "MPIJob",
        "XGBoostJob",
        "Job",
        "CronJob",
        "Deployment",
        "StatefulSet",
        "ReplicaSet",
        "Pod",
        "Notebook",
        "Workflow",
        "LeaderWorkerSet",
    }
)
# The protection-honoured SLO's outcome of an evicted run: inside a window every rule (or
# the one the scheduler's eviction met) still protected (the SLO's bad events), possibly
# inside one, or outside protection (good).
INSIDE_VERDICTS: Final = frozenset({Verdict.DEFINITE.value, ExactVerdict.VIOLATED.value})
MAYBE_VERDICTS: Final = frozenset({Verdict.POSSIBLE.value})


class ProcessorMetrics:
    """Counters of one processor process, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        counter = partial(Counter, registry=registry)
        gauge = partial(Gauge, registry=registry)
        histogram = partial(Histogram, registry=registry)
        self.applied = counter(
            "minruntime_events_applied",
            "Input events applied to the projections, by topic role and event type.",
            ["role", "type"],
        )
        self.dead_lettered = counter(
            "minruntime_events_dead_lettered",
            "Input records dead-lettered, by topic role and error kind.",
            ["role", "kind"],
        )
        self.duplicates = counter(
            "minruntime_events_duplicate",
            "Records not applied again: a redelivered offset or an already-applied event id.",
            ["role"],
        )
        self.lag = gauge(
            "minruntime_consumer_lag",
            "Records of the partition the processor can still apply (a commit marker is none).",
            ["role", "partition"],
        )
        self._lag_series: set[tuple[str, str]] = set()
        self.batch_seconds = histogram(
            "minruntime_batch_seconds",
            "Wall time of applying one batch in one transaction.",
            ["role"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
        )
        self.run_seconds_lost = histogram(
            "minruntime_run_seconds_lost",
            "How long the runs that evictions and requeues ended had run since their last"
            " checkpoint (the whole run when none is known): the run time lost.",
            ["ended_by"],
            buckets=(60, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 259200),
        )
        self.gpu_seconds_lost = counter(
            "minruntime_gpu_seconds_lost",
            "GPU-seconds the runs that evictions and requeues ended lost (since their last"
            " checkpoint when one is known, else the whole run), by queue.",
            ["queue"],
        )
        self.violations = counter(
            "minruntime_protection_violations",
            "Runs an eviction ended while a protection window still protected them.",
            ["verdict"],
        )
        # Every verdict exported from the start: increase() misses a series' first sample, and
        # the first violation is the one an alert must not miss.
        for verdict in VIOLATION_VERDICTS:
            self.violations.labels(verdict)
        self.evictions = counter(
            "minruntime_evictions",
            "Runs an eviction ended, by the scheduler's action and the verdict.",
            ["action", "verdict"],
        )
        self.run_seconds_lost_by_action = counter(
            "minruntime_run_seconds_lost_by_action",
            "How long the runs evictions ended had run since their last checkpoint (the whole"
            " run when none is known), by the scheduler's action.",
            ["action"],
        )
        self.gpu_seconds_lost_by_action = counter(
            "minruntime_gpu_seconds_lost_by_action",
            "GPU-seconds the runs evictions ended lost (since their last checkpoint when one is"
            " known), by the scheduler's action.",
            ["action"],
        )
        self.evicted_runs = counter(
            "minruntime_evicted_runs",
            "Runs an eviction ended, by queue, top owner's kind and whether the run was inside"
            " protection (inside | maybe | outside): the protection-honoured SLO's events.",
            ["queue", "owner_kind", "protection"],
        )
        self.ignored_values = counter(
            "minruntime_ignored_values",
            "Applied events that carried a value the service ignored, as KAI does, with this"
            " warning (an invalid or negative preemption delay, an unusable"
            " last-eviction-timestamp, a bad max-requeues, checkpoint-grace or"
            " checkpointed-at), by field.",
            ["field"],
        )
        # Every field exported from the start (zero until one is ignored); a new field is a
        # new member of core.IgnoredValue.
        for ignored in IgnoredValue:
            self.ignored_values.labels(ignored.value)
        self._queue_labels: set[str] = set()

    def observe(
        self, role: str, outcome: BatchOutcome, seconds: float, lags: Mapping[int, int]
    ) -> None:
        """Count one stored batch and the lag of the partitions it came from."""
        for event_type, count in outcome.applied_types.items():
            self.applied.labels(role, event_type).inc(count)
        for kind, count in outcome.dead_letter_kinds.items():
            self.dead_lettered.labels(role, kind).inc(count)
        repeats = outcome.skipped_offsets + outcome.duplicate_ids
        if repeats:
            self.duplicates.labels(role).inc(repeats)
        self.batch_seconds.labels(role).observe(seconds)
        for run in outcome.lost_runs:
            self.lost(run)
        for ignored, count in outcome.ignored_values.items():
            self.ignored_values.labels(str(ignored)).inc(count)
        for partition, lag in lags.items():
            self.lag.labels(role, str(partition)).set(lag)
            self._lag_series.add((role, str(partition)))

    def lost(self, run: LostRun) -> None:
        """Count a run an eviction ended."""
        self.run_seconds_lost.labels(run.ended_by).observe(run.seconds_lost)
        # The work really lost: since the run's last checkpoint when one is known.
        lost = run.gpu_seconds_lost
        if lost is not None:
            self.gpu_seconds_lost.labels(self.queue_label(run)).inc(max(lost, 0.0))
        action = bounded_label(run.action, ACTIONS)
        verdict = run.protection if run.exact_verdict is None else run.exact_verdict
        self.evictions.labels(action, verdict).inc()
        self.run_seconds_lost_by_action.labels(action).inc(max(run.seconds_lost, 0.0))
        if lost is not None:
            self.gpu_seconds_lost_by_action.labels(action).inc(max(lost, 0.0))
        owner = bounded_label(run.owner_kind, OWNER_KINDS)
        self.evicted_runs.labels(self.queue_label(run), owner, protection_label(verdict)).inc()
        # An exact verdict replaces definite / possible: honoured and unguarded are no violation.
        if verdict in VIOLATION_VERDICTS:
            self.violations.labels(verdict).inc()

    def queue_label(self, run: LostRun) -> str:
        """The run's queue as a label value: bounded by the tree and by ``MAX_QUEUE_LABELS``."""
        queue = run.queue
        if queue is None or not run.queue_known:
            return UNKNOWN_QUEUE
        if queue in self._queue_labels:
            return queue
        if len(self._queue_labels) < MAX_QUEUE_LABELS:
            self._queue_labels.add(queue)
            return queue
        return OTHER

    def owned(self, partitions: Iterable[tuple[str, int]]) -> None:
        """After a rebalance: drop the lag of every partition not in ``partitions`` (role, number).

        With several instances a partition moves; its old owner's last figure would otherwise
        stay exported for ever beside the new owner's.
        """
        keep = {(role, str(partition)) for role, partition in partitions}
        for series in sorted(self._lag_series - keep):
            self.lag.remove(*series)
        self._lag_series &= keep


def bounded_label(value: str | None, known: frozenset[str]) -> str:
    """``value`` as a label value: a ``known`` one, ``other``, or ``none`` when not said."""
    if not value:
        return NOT_SAID
    return value if value in known else OTHER


def protection_label(verdict: str) -> str:
    """inside | maybe | outside: where an evicted run ended relative to its protection."""
    if verdict in INSIDE_VERDICTS:
        return "inside"
    return "maybe" if verdict in MAYBE_VERDICTS else "outside"
