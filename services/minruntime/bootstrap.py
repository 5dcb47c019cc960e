"""The one composition root: builds engines, sinks, relays and apps from Settings.

Nothing connects at import time; every entry point (CLI, tests, benchmarks) comes here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import signal
from collections.abc import Mapping

import faust
from prometheus_client import REGISTRY, CollectorRegistry, start_http_server
from sqlalchemy import Engine

from minruntime.errors import UserError
from minruntime.ingest import BatchOutcome
from minruntime.kafka_access import kafka_access
from minruntime.requeue import (
    ExpiryEmitter,
    ExpiryOptions,
    RequeueMetrics,
    RequeueWorker,
    WorkerOptions,
)
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import is_at_head
from minruntime.stream.app import build_app
from minruntime.stream.metrics import ProcessorMetrics
from minruntime.stream.relay import OutboxRelay
from minruntime.stream.sink import BatchSink
from minruntime.stream.topics import INPUT_ROLES, TopicRole, ensure_topics, topic_specs

log = logging.getLogger(__name__)


class NotMigratedError(UserError):
    """The database schema is missing or older than this code."""


class MetricsPortError(UserError):
    """The Prometheus endpoint could not listen."""


def serve_metrics(host: str, port: int, variable: str) -> None:
    """Expose the default registry on http://host:port/metrics (port 0: not at all)."""
    if not port:
        return
    try:
        start_http_server(port, addr=host)
    except OSError as error:
        raise MetricsPortError(
            f"cannot serve metrics on {host}:{port} ({error.strerror or error}); "
            f"set MINRUNTIME_{variable} to a free port, or 0 to turn metrics off"
        ) from None


def require_migrated(engine: Engine) -> None:
    """Fail with one line when the schema is not at the newest migration."""
    if not is_at_head(engine):
        raise NotMigratedError("the database schema is not up to date: run `minruntime migrate`")


def input_topic_roles(settings: Settings) -> dict[str, str]:
    """Configured input topic name → role name (what `apply_batch` checks types against)."""
    return {
        spec.name: spec.role.value for spec in topic_specs(settings) if spec.role in INPUT_ROLES
    }


def build_processor(settings: Settings, registry: CollectorRegistry | None = None) -> faust.App:
    """The faust app for `minruntime processor`: engine, batch sink and outbox relay wired in."""
    engine = engine_from(settings)
    require_migrated(engine)
    sink = BatchSink(
        engine,
        consumer_group=settings.processor_group,
        topic_roles=input_topic_roles(settings),
        dead_letter_topic=settings.topic_dead_letter,
        attempts=settings.db_retry_attempts,
    )
    relay = OutboxRelay(engine, kafka_access(settings), poll_seconds=settings.outbox_poll_seconds)

    metrics = ProcessorMetrics(REGISTRY if registry is None else registry)

    def on_outcome(
        role: TopicRole, outcome: BatchOutcome, seconds: float, lags: Mapping[int, int]
    ) -> None:
        # After each stored batch: wake the relay when dead letters were written.
        if outcome.dead_lettered:
            relay.notify()
        metrics.observe(role.value, outcome, seconds, lags)
        log.info("%s: %s", role.value, outcome)

    return build_app(settings, sink, on_outcome=on_outcome, relay=relay.run)


def run_processor(settings: Settings, loglevel: str = "warning") -> None:
    """Create missing topics, then run the processor until it is stopped."""
    asyncio.run(ensure_topics(kafka_access(settings), topic_specs(settings)))
    app = build_processor(settings)
    serve_metrics(settings.metrics_host, settings.processor_metrics_port, "PROCESSOR_METRICS_PORT")
    worker = faust.Worker(app, loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()


def worker_options(settings: Settings) -> WorkerOptions:
    """The requeue worker's options from the settings."""
    return WorkerOptions(
        topic=settings.topic_requeue_decisions,
        interval_seconds=settings.requeue_interval_seconds,
        standby_poll_seconds=settings.requeue_standby_poll_seconds,
        settle_seconds=settings.requeue_settle_seconds,
        conflict_retries=settings.requeue_conflict_retries,
        exit_after_commit=settings.requeue_exit_after_commit,
    )


def expiry_options(settings: Settings) -> ExpiryOptions:
    """The protection-expiry emitter's options from the settings."""
    return ExpiryOptions(
        topic=settings.topic_protection,
        max_sleep_seconds=settings.protection_max_sleep_seconds,
        catch_up_seconds=settings.protection_catch_up_seconds,
    )


def run_requeue_worker(settings: Settings) -> None:
    """Run one requeue-worker replica (standby or active) until SIGINT/SIGTERM."""
    engine = engine_from(settings)
    require_migrated(engine)
    asyncio.run(ensure_topics(kafka_access(settings), topic_specs(settings)))
    metrics = RequeueMetrics(REGISTRY, settings.known_nominators)
    serve_metrics(settings.metrics_host, settings.worker_metrics_port, "WORKER_METRICS_PORT")
    try:
        asyncio.run(_serve_requeue_worker(settings, engine, metrics))
    finally:
        engine.dispose()


async def _serve_requeue_worker(
    settings: Settings, engine: Engine, metrics: RequeueMetrics
) -> None:
    loop = asyncio.get_running_loop()
    relay = OutboxRelay(engine, kafka_access(settings), poll_seconds=settings.outbox_poll_seconds)

    def wake_relay() -> None:
        loop.call_soon_threadsafe(relay.notify)

    worker = RequeueWorker(engine, worker_options(settings), metrics, on_recorded=wake_relay)
    emitter = ExpiryEmitter(
        engine, expiry_options(settings), metrics, worker.leading, on_written=wake_relay
    )

    def stop() -> None:
        worker.stop.set()
        emitter.stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop)
    # The crash-before-publish test hook must not race its own relay.
    relay_task = None if settings.requeue_exit_after_commit else asyncio.create_task(relay.run())
    emitter_task = asyncio.create_task(_run_emitter(emitter, worker))
    try:
        await asyncio.to_thread(worker.run)
    finally:
        emitter.stop.set()
        await emitter_task
        if relay_task is not None:
            relay_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay_task


async def _run_emitter(emitter: ExpiryEmitter, worker: RequeueWorker) -> None:
    try:
        await asyncio.to_thread(emitter.run)
    finally:
        # An emitter that fails stops the whole replica loudly (the supervisor restarts it).
        worker.stop.set()
