"""`minruntime_kube_drift_*`: the counts of one comparison of the cluster with the service.

One definition of the names and help texts for both places that export them: the bridge's
metrics port (``DriftGauges``, while its replica is active) and `kube diff --metrics-file`
(``write_textfile``, node_exporter's textfile collector). The alerts MinruntimeKubeDrift and
MinruntimeKubeDriftNotChecked (deploy/monitoring/minruntime-rules.yaml) read them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime
from pathlib import Path
from typing import Final

from prometheus_client import CollectorRegistry, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from minruntime.cluster.drift import Drift

PODGROUPS: Final = "minruntime_kube_drift_podgroups"
CHECKED: Final = "minruntime_kube_drift_checked_podgroups"
CHECKED_AT: Final = "minruntime_kube_drift_checked_timestamp_seconds"


def drift_families(drift: Drift, at: datetime) -> list[Metric]:
    """The three gauges of one comparison made at ``at`` (every field, zeros too)."""
    differing = GaugeMetricFamily(
        PODGROUPS,
        "Podgroups whose field differs between the cluster and the service (kube diff).",
        labels=["field"],
    )
    for field, count in drift.podgroups_by_field().items():
        differing.add_metric([field], count)
    return [
        differing,
        GaugeMetricFamily(CHECKED, "Podgroups compared by the last kube diff.", drift.checked),
        GaugeMetricFamily(
            CHECKED_AT,
            "When the last kube diff compared (Unix time): alert when it is old.",
            at.timestamp(),
        ),
    ]


def write_textfile(drift: Drift, path: Path, at: datetime) -> None:
    """The gauges in Prometheus' text format, replaced atomically (OSError when it cannot)."""
    gauges = DriftGauges(lambda: True)
    gauges.record(drift, at)
    registry = CollectorRegistry()
    registry.register(gauges)
    write_to_textfile(str(path), registry)


class DriftGauges(Collector):
    """The last comparison of the current term, exported only while ``active()`` says the
    replica holds the Lease: a standby, or a replica whose term ended, exports none (a value
    from another term would be stale and could hold an alert up or down)."""

    def __init__(self, active: Callable[[], bool]) -> None:
        self._active = active
        self._lock = threading.Lock()
        self._last: tuple[Drift, datetime] | None = None

    def record(self, drift: Drift, at: datetime) -> None:
        """The comparison made at ``at`` is the one to export."""
        with self._lock:
            self._last = (drift, at)

    def forget(self) -> None:
        """The term ended: nothing to export until the next term's first comparison."""
        with self._lock:
            self._last = None

    def collect(self) -> Iterable[Metric]:
        with self._lock:
            last = self._last
        if last is None or not self._active():
            return []
        return drift_families(*last)
