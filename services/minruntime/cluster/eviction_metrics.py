"""The bridge's eviction counters on its metrics port: what became of each eviction signal
and how each deletion's release was attributed (cluster.evictions; every label a fixed set)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge

from minruntime.cluster.evictions import ATTRIBUTIONS, IGNORED_VALUES, OUTCOMES, SIGNALS


class EvictionMetrics:
    """``minruntime_kube_bridge_eviction_signals_total{signal,outcome}``,
    ``minruntime_kube_bridge_deletion_releases_total{attribution}`` and
    ``minruntime_kube_bridge_held_releases``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.signals = Counter(
            "minruntime_kube_bridge_eviction_signals",
            "Eviction signals the bridge read (KAI's Evict Events, last-eviction-timestamp, "
            "DisruptionTarget), by what became of them: accepted, or ignored and why.",
            ["signal", "outcome"],
            registry=registry,
        )
        self.releases = Counter(
            "minruntime_kube_bridge_deletion_releases",
            "Releases of bound pods ended by their deletion, by the eviction signal they were "
            "attributed to (none: sent as a plain deletion).",
            ["attribution"],
            registry=registry,
        )
        self.ignored = Counter(
            "minruntime_kube_bridge_ignored_values",
            "Values the bridge left out of the events it sent, by which: a Queue's disruption "
            "annotation out of bounds, a top-owner-metadata annotation that does not read.",
            ["value"],
            registry=registry,
        )
        for value in IGNORED_VALUES:
            self.ignored.labels(value)
        self.held = Gauge(
            "minruntime_kube_bridge_held_releases",
            "Releases of deleted pods waiting (up to the eviction window) for their PodGroup's "
            "eviction signal.",
            registry=registry,
        )
        for signal in SIGNALS:
            for outcome in OUTCOMES:
                self.signals.labels(signal, outcome)
        for attribution in ATTRIBUTIONS:
            self.releases.labels(attribution)

    def signal(self, signal: str, outcome: str) -> None:
        if signal in SIGNALS and outcome in OUTCOMES:
            self.signals.labels(signal, outcome).inc()

    def ignore(self, value: str) -> None:
        if value in IGNORED_VALUES:
            self.ignored.labels(value).inc()

    def release(self, attribution: str) -> None:
        if attribution in ATTRIBUTIONS:
            self.releases.labels(attribution).inc()
