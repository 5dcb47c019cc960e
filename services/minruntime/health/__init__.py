"""Health of a long-running process: `/healthz`, `/readyz` (beside `/metrics`), riding out outages.

Other parts of the service add readiness checks with::

    from minruntime import health
    health.add_check("offsets", lambda: None if fine else "topic X's identity changed")

A check returns None when fine, else a one-line reason; it is called on every `/readyz`
request from the server's thread, so it reads state and does no I/O.
"""

from minruntime.health.checks import (
    LIVENESS,
    Condition,
    Liveness,
    Readiness,
    add_check,
    one_line,
    remove_check,
)
from minruntime.health.metrics import ReadinessMetrics
from minruntime.health.server import HealthServer, MetricsPortError, serve_metrics

__all__ = [
    "LIVENESS",
    "Condition",
    "HealthServer",
    "Liveness",
    "MetricsPortError",
    "Readiness",
    "ReadinessMetrics",
    "add_check",
    "one_line",
    "remove_check",
    "serve_metrics",
]
