"""The evictor's metrics on its port: what became of each decision, why one was abandoned,
how many are open (every label a fixed set)."""

from __future__ import annotations

from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge

from minruntime.events.inputs import ABANDON_REASONS

DECIDED: Final = ("carried_out", "already_done")


class EvictorMetrics:
    """``minruntime_kube_evictor_decisions_total{outcome}``,
    ``minruntime_kube_evictor_abandoned_total{reason}`` and
    ``minruntime_kube_evictor_open_decisions``."""

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
        for outcome in DECIDED:
            self.decisions.labels(outcome)
        for reason in ABANDON_REASONS:
            self.abandons.labels(reason)

    def decided(self, outcome: str) -> None:
        """Count one decision carried out (or already done)."""
        if outcome in DECIDED:
            self.decisions.labels(outcome).inc()

    def abandoned(self, reason: str) -> None:
        """Count one abandoned decision."""
        if reason in ABANDON_REASONS:
            self.abandons.labels(reason).inc()
