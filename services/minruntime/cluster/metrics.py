"""The cluster bridge's Prometheus metrics: whether this replica holds the Lease."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge


class BridgeMetrics:
    """Gauges of one bridge replica, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.active = Gauge(
            "minruntime_kube_bridge_active",
            "1 while this bridge replica holds the Lease and sends the cluster's events, else 0.",
            registry=registry,
        )
