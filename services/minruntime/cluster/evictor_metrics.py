"""The evictor's metrics on its port: what became of each decision, why one was abandoned,
how many are open (every label a fixed set)."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from minruntime.core.checkpoint import CHECKPOINT_OUTCOMES
from minruntime.events.inputs import ABANDON_REASONS

DECIDED: Final = ("carried_out", "already_done")
# Seconds from a checkpoint request to its acknowledgement (a grace is at most 30 minutes).
ACK_BUCKETS: Final = (0.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800)


class EvictorMetrics:
    """``minruntime_kube_evictor_decisions_total{outcome}``,
    ``minruntime_kube_evictor_abandoned_total{reason}``,
    ``minruntime_kube_evictor_open_decisions``, and the checkpoint handshake's
    ``minruntime_kube_evictor_checkpoints_total{outcome}``,
    ``minruntime_kube_evictor_checkpoint_ack_seconds`` (histogram) and
    ``minruntime_kube_evictor_checkpoint_grace_invalid_total``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.decisions = Counter(
            "minruntime_kube_evictor_decisions",
            "Committed requeues the evictor carried out (or found done already).",
            ["outcome"],
            registry=registry,
        )
        self.abandons = Counter(
            "minruntime_kube_evictor_abandoned",
            "Committed requeues the evictor gave up at their deadline (requeue.abandoned), "
            "by reason.",
            ["reason"],
            registry=registry,
        )
        self.open = Gauge(
            "minruntime_kube_evictor_open_decisions",
            "Decisions read and not yet at an end (carried out or abandoned).",
            registry=registry,
        )
        self.checkpoints = Counter(
            "minruntime_kube_evictor_checkpoints",
            "Checkpoint handshakes ended before an eviction, by outcome (acknowledged, "
            "timed_out, gone).",
            ["outcome"],
            registry=registry,
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
        for outcome in DECIDED:
            self.decisions.labels(outcome)
        for outcome in CHECKPOINT_OUTCOMES:
            self.checkpoints.labels(outcome)
        for reason in ABANDON_REASONS:
            self.abandons.labels(reason)

    def decided(self, outcome: str) -> None:
        """Count one decision carried out (or already done)."""
        if outcome in DECIDED:
            self.decisions.labels(outcome).inc()

    def abandoned(self, reason: str) -> None:
        if reason in ABANDON_REASONS:
            self.abandons.labels(reason).inc()

    def checkpointed(self, outcome: str, seconds: float) -> None:
        """Count one handshake's end; an acknowledgement's latency goes to the histogram."""
        if outcome in CHECKPOINT_OUTCOMES:
            self.checkpoints.labels(outcome).inc()
        if outcome == "acknowledged":
            self.ack_seconds.observe(max(0.0, seconds))

    def invalid_grace(self) -> None:
        """Count one decision whose PodGroup's checkpoint-grace was not valid."""
        self.invalid_graces.inc()
