"""The cluster side's counters on its processes' metrics ports (every label a fixed set, each
series there from the start): the bridge's eviction signals and releases (cluster.evictions),
and the evictor's decisions, abandons, open decisions and checkpoint handshakes."""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from minruntime.cluster.evictions import ATTRIBUTIONS, IGNORED_VALUES, OUTCOMES, SIGNALS
from minruntime.core.checkpoint import CHECKPOINT_OUTCOMES
from minruntime.events.inputs import ABANDON_REASONS

DECIDED: Final = ("carried_out", "already_done")
# Seconds from a checkpoint request to its acknowledgement (a grace is at most 30 minutes).
ACK_BUCKETS: Final = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800)


def _counter(
    registry: CollectorRegistry, name: str, documentation: str, label: str, values: Iterable[str]
) -> Counter:
    counter = Counter(name, documentation, [label], registry=registry)
    for value in values:
        counter.labels(value)
    return counter


def _count(counter: Counter, value: str, known: Collection[str]) -> None:
    """Count one ``value``; one outside the label's set makes no series."""
    if value in known:
        counter.labels(value).inc()


class EvictionMetrics:
    """The bridge's eviction signals, deletion releases, ignored values and held releases."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.signals = Counter(
            "minruntime_kube_bridge_eviction_signals",
            "Eviction signals the bridge read (KAI's Evict Events, last-eviction-timestamp, "
            "DisruptionTarget), by what became of them: accepted, or ignored and why.",
            ["signal", "outcome"],
            registry=registry,
        )
        for signal in SIGNALS:
            for outcome in OUTCOMES:
                self.signals.labels(signal, outcome)
        self.releases = _counter(
            registry,
            "minruntime_kube_bridge_deletion_releases",
            "Releases of bound pods ended by their deletion, by the eviction signal they were "
            "attributed to (none: sent as a plain deletion).",
            "attribution",
            ATTRIBUTIONS,
        )
        self.ignored = _counter(
            registry,
            "minruntime_kube_bridge_ignored_values",
            "Values the bridge left out of the events it sent, by which: a Queue's disruption "
            "annotation out of bounds, a top-owner-metadata annotation that does not read.",
            "value",
            IGNORED_VALUES,
        )
        self.held = Gauge(
            "minruntime_kube_bridge_held_releases",
            "Releases of deleted pods waiting (up to the eviction window) for their PodGroup's "
            "eviction signal.",
            registry=registry,
        )

    def signal(self, signal: str, outcome: str) -> None:
        if signal in SIGNALS and outcome in OUTCOMES:
            self.signals.labels(signal, outcome).inc()

    def ignore(self, value: str) -> None:
        _count(self.ignored, value, IGNORED_VALUES)

    def release(self, attribution: str) -> None:
        _count(self.releases, attribution, ATTRIBUTIONS)


class EvictorMetrics:
    """The evictor's decisions, abandons and open decisions, and its checkpoint handshakes."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = _counter(
            registry,
            "minruntime_kube_evictor_decisions",
            "Committed requeues the evictor carried out (or found done already).",
            "outcome",
            DECIDED,
        )
        self.abandons = _counter(
            registry,
            "minruntime_kube_evictor_abandoned",
            "Committed requeues the evictor gave up at their deadline (requeue.abandoned), "
            "by reason.",
            "reason",
            ABANDON_REASONS,
        )
        self.open = Gauge(
            "minruntime_kube_evictor_open_decisions",
            "Decisions read and not yet at an end (carried out or abandoned).",
            registry=registry,
        )
        self.checkpoints = _counter(
            registry,
            "minruntime_kube_evictor_checkpoints",
            "Checkpoint handshakes ended before an eviction, by outcome (acknowledged, "
            "timed_out, gone).",
            "outcome",
            CHECKPOINT_OUTCOMES,
        )
        self.ack_seconds = Histogram(
            "minruntime_kube_evictor_checkpoint_ack_seconds",
            "Seconds from a checkpoint request to the workload's acknowledgement.",
            buckets=ACK_BUCKETS,
            registry=registry,
        )
        self.invalid_graces = Counter(
            "minruntime_kube_evictor_checkpoint_grace_invalid",
            "Decisions whose PodGroup's checkpoint-grace annotation was invalid (no "
            "handshake: evicted at once).",
            registry=registry,
        )

    def decided(self, outcome: str) -> None:
        _count(self.decisions, outcome, DECIDED)

    def abandoned(self, reason: str) -> None:
        _count(self.abandons, reason, ABANDON_REASONS)

    def checkpointed(self, outcome: str, seconds: float) -> None:
        """Count one handshake's end; an acknowledgement's latency goes to the histogram."""
        _count(self.checkpoints, outcome, CHECKPOINT_OUTCOMES)
        if outcome == "acknowledged":
            self.ack_seconds.observe(max(0.0, seconds))

    def invalid_grace(self) -> None:
        self.invalid_graces.inc()
