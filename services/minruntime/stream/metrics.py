"""The processor's Prometheus metrics: events applied, dead-lettered, duplicates, consumer lag.

Labels are finite: the topic role (not the configurable topic name), the event type and the
dead-letter kind (both closed sets of the wire contract), and the partition number.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from minruntime.ingest import BatchOutcome


class ProcessorMetrics:
    """Counters of one processor process, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.applied = Counter(
            "minruntime_events_applied",
            "Input events applied to the projections, by topic role and event type.",
            ["role", "type"],
            registry=registry,
        )
        self.dead_lettered = Counter(
            "minruntime_events_dead_lettered",
            "Input records dead-lettered, by topic role and error kind.",
            ["role", "kind"],
            registry=registry,
        )
        self.duplicates = Counter(
            "minruntime_events_duplicate",
            "Records not applied again: a redelivered offset or an already-applied event id.",
            ["role"],
            registry=registry,
        )
        self.lag = Gauge(
            "minruntime_consumer_lag",
            "Records in the partition after the last one applied (high watermark - next offset).",
            ["role", "partition"],
            registry=registry,
        )
        self._lag_series: set[tuple[str, str]] = set()
        self.batch_seconds = Histogram(
            "minruntime_batch_seconds",
            "Wall time of applying one batch in one transaction.",
            ["role"],
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
            registry=registry,
        )

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
        for partition, lag in lags.items():
            self.lag.labels(role, str(partition)).set(lag)
            self._lag_series.add((role, str(partition)))

    def owned(self, partitions: Iterable[tuple[str, int]]) -> None:
        """After a rebalance: drop the lag of every partition not in ``partitions`` (role, number).

        With several instances a partition moves; its old owner's last figure would otherwise
        stay exported for ever beside the new owner's.
        """
        keep = {(role, str(partition)) for role, partition in partitions}
        for series in sorted(self._lag_series - keep):
            self.lag.remove(*series)
        self._lag_series &= keep
