"""Readiness as Prometheus metrics, so an alert does not need a probe of `/readyz`.

Read at scrape time from the same checks `/readyz` runs (cheap, no I/O: see `checks`). Labels
are finite: the process's component (its command) and the names the code gives its checks.
"""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from minruntime.health.checks import Readiness


class ReadinessMetrics(Collector):
    """`minruntime_ready{component}` and `minruntime_readiness_check{component, check}`."""

    def __init__(self, readiness: Readiness, component: str) -> None:
        self._readiness = readiness
        self._component = component

    def register(self, registry: CollectorRegistry) -> ReadinessMetrics:
        """Export on ``registry`` (once per registry)."""
        registry.register(self)
        return self

    def collect(self) -> Iterator[Metric]:
        failing = self._readiness.failures()
        ready = GaugeMetricFamily(
            "minruntime_ready",
            "1 while every readiness check of this process passes (/readyz answers 200), else 0.",
            labels=["component"],
        )
        ready.add_metric([self._component], 0.0 if failing else 1.0)
        checks = GaugeMetricFamily(
            "minruntime_readiness_check",
            "1 while this readiness check passes, 0 while it fails (/readyz names the reason).",
            labels=["component", "check"],
        )
        for name in self._readiness.names():
            checks.add_metric([self._component, name], 0.0 if name in failing else 1.0)
        yield ready
        yield checks
