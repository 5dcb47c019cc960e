"""The outbox relay's Prometheus metrics: backlog, age of the oldest pending row, set-aside rows.

Both relays (the processor's and the requeue worker's) publish from the same table, so the
gauges read the table (every few seconds) and say the same thing in both processes; the
counters count what this process's relay did. Labels are finite: the set-aside reasons of
``relay.permanent_reason``.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Final

from prometheus_client import CollectorRegistry, Counter, Gauge
from sqlalchemy import Engine

from minruntime.store.outbox import OutboxStats, outbox_stats
from minruntime.store.schema import LIVE

if TYPE_CHECKING:
    from minruntime.stream.relay import PublishReport

SET_ASIDE_REASONS: Final = ("too_large", "invalid_topic", "invalid_record", "unencodable")


def read_outbox_stats(engine: Engine) -> OutboxStats:
    """Pending rows, the age of the oldest one, and rows set aside."""
    with engine.connect() as conn:
        return outbox_stats(conn, LIVE)


class OutboxMetrics:
    """The relay's gauges and counters, registered on ``registry``."""

    def __init__(self, registry: CollectorRegistry) -> None:
        counter = partial(Counter, registry=registry)
        gauge = partial(Gauge, registry=registry)
        self.backlog = gauge(
            "minruntime_outbox_backlog", "Outbox rows waiting to be published (not set aside)."
        )
        self.oldest_age = gauge(
            "minruntime_outbox_oldest_age_seconds",
            "Age of the oldest outbox row waiting to be published (0 when none waits).",
        )
        self.set_aside_rows = gauge(
            "minruntime_outbox_set_aside_rows",
            "Outbox rows set aside (the broker refused them for good) and not retried yet.",
        )
        self.set_aside = counter(
            "minruntime_outbox_set_aside",
            "Outbox rows this relay set aside, by reason.",
            ["reason"],
        )
        self.published = counter("minruntime_outbox_published", "Outbox rows this relay published.")
        self.retries = counter(
            "minruntime_outbox_retries",
            "Outbox rows whose publish failed for a retriable reason (left pending).",
        )
        for reason in SET_ASIDE_REASONS:
            self.set_aside.labels(reason)

    def observe(self, report: PublishReport) -> None:
        """Count one claim-send-mark round."""
        self.published.inc(len(report.published))
        for _, reason, _ in report.set_aside:
            self.set_aside.labels(reason).inc()
        if report.retry:
            self.retries.inc(len(report.retry))

    def set_stats(self, stats: OutboxStats) -> None:
        """Set the gauges from the table's figures."""
        self.backlog.set(stats.backlog)
        self.oldest_age.set(stats.oldest_age_seconds)
        self.set_aside_rows.set(stats.set_aside)
