"""The one composition root: builds engines, sinks, relays and apps from Settings.

Nothing connects at import time; every entry point (CLI, tests, benchmarks) comes here.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import sys
from collections.abc import Mapping
from typing import TypeVar

import faust
from prometheus_client import REGISTRY, CollectorRegistry
from sqlalchemy import Engine

from minruntime import health
from minruntime.core.topic_life import StoredOffset
from minruntime.errors import UserError
from minruntime.health.outage import (
    keep_running,
    quiet_kafka_client_repeats,
    wait_until_available,
    waiting_status,
)
from minruntime.ingest import BatchOutcome
from minruntime.ingest.memory import GC_THRESHOLDS
from minruntime.kafka_access import KafkaAccess, KafkaUnreachableError, kafka_access
from minruntime.pgurl import PgAddress
from minruntime.requeue import (
    ExpiryEmitter,
    ExpiryOptions,
    RequeueMetrics,
    RequeueWorker,
    WorkerOptions,
)
from minruntime.retry import KAFKA_GRACE_SECONDS
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.engine import bounded_idle_transactions, reached_server
from minruntime.store.migrate import is_at_head, upgrade
from minruntime.store.offsets import stored_offsets
from minruntime.store.privileges import public_can_take_advisory_locks
from minruntime.store.read_transactions import ping
from minruntime.store.schema import LIVE
from minruntime.stream.app import ProcessorApp, build_app
from minruntime.stream.metrics import ProcessorMetrics
from minruntime.stream.outbox_metrics import OutboxMetrics
from minruntime.stream.relay import OutboxRelay
from minruntime.stream.sink import BatchSink
from minruntime.stream.topic_guard import TopicGuard
from minruntime.topic_admin import TopicRole, ensure_topics, input_topic_roles, topic_specs

log = logging.getLogger(__name__)
OptionsT = TypeVar("OptionsT", WorkerOptions, ExpiryOptions)

# How often the processor checks that PostgreSQL answers (for /readyz while it is idle).
HEALTH_PROBE_SECONDS = 2.0


class NotMigratedError(UserError):
    """The database schema is missing or older than this code."""


def wait_for_kafka(settings: Settings, condition: health.Condition) -> None:
    """Create missing topics, waiting (one status line) for as long as Kafka is away."""
    wait_until_available(
        f"Kafka at {settings.kafka_bootstrap}",
        lambda: asyncio.run(ensure_topics(kafka_access(settings), topic_specs(settings))),
        transient=kafka_transient,
        condition=condition,
    )


def kafka_transient(error: BaseException) -> bool:
    """A Kafka client error that waiting can cure: no broker, no leader, a timeout."""
    from aiokafka.errors import KafkaError, KafkaTimeoutError

    if isinstance(
        error, KafkaUnreachableError | KafkaTimeoutError | TimeoutError | ConnectionError
    ):
        # Unreachable, not refused: wrong credentials or an untrusted certificate stay one line.
        return True
    return isinstance(error, KafkaError) and bool(error.retriable)


def connected_engine(settings: Settings, condition: health.Condition) -> Engine:
    """An engine on a migrated database, waiting (one status line) while PostgreSQL is away."""
    engine = engine_from(settings, connect_args={"connect_timeout": 10})
    server = wait_until_available(
        f"PostgreSQL at {PgAddress.parse(settings.database_url).shown()}",
        lambda: require_migrated(engine),
        condition=condition,
    )
    log.info("PostgreSQL: connected to %s", server)
    return engine


def require_migrated(engine: Engine) -> str:
    """Fail with one line when the schema is not at the newest migration; else say which
    server answered (of several hosts, the one libpq chose: `host:port/database`)."""
    with engine.connect() as conn:
        if not is_at_head(conn):
            raise NotMigratedError(
                "the database schema is not up to date: run `minruntime migrate`"
            )
        return reached_server(conn)


def warn_if_anyone_can_take_the_leader_lock(engine: Engine) -> None:
    """One line at start when PUBLIC may take advisory locks (a reader could stop the worker)."""
    with engine.connect() as conn:
        if public_can_take_advisory_locks(conn):
            log.warning(
                "any database role can take the requeue worker's leader lock (PUBLIC may "
                "EXECUTE pg_advisory_lock): a reader could stop every requeue decision; "
                "see docs/storage.md#advisory-locks for the REVOKE a superuser runs"
            )


def outbox_relay(
    settings: Settings, engine: Engine, access: KafkaAccess, registry: CollectorRegistry
) -> OutboxRelay:
    """The outbox relay of a process (the processor's, a worker replica's), with its metrics."""
    return OutboxRelay(
        engine, access, poll_seconds=settings.outbox_poll_seconds, metrics=OutboxMetrics(registry)
    )


async def run_relay(relay: OutboxRelay) -> None:
    """Publish for ever, restarted with capped backoff when Kafka or PostgreSQL is away."""
    await keep_running("the outbox relay (Kafka or PostgreSQL)", relay.run)


def build_processor(
    settings: Settings,
    registry: CollectorRegistry | None = None,
    engine: Engine | None = None,
    database: health.Condition | None = None,
) -> ProcessorApp:
    """`minruntime processor`: its faust host and batched consumer, sink and relay wired in."""
    database = database or health.Condition(initial=None)
    engine = engine or connected_engine(settings, database)
    sink = BatchSink(
        bounded_idle_transactions(engine),  # a frozen instance cannot hold its partitions
        consumer_group=settings.processor_group,
        topic_roles=input_topic_roles(settings),
        dead_letter_topic=settings.topic_dead_letter,
    )
    registry = REGISTRY if registry is None else registry
    access = kafka_access(settings)
    relay = outbox_relay(settings, engine, access, registry)
    metrics = ProcessorMetrics(registry)
    # Refuses topics whose stored offsets belong to another life of them; its readiness
    # (None or one line) is the processor's "topics" readiness check.
    guard = TopicGuard(
        access,
        registry,
        functools.partial(_stored_offsets, engine, settings.processor_group),
        recheck_seconds=settings.topic_recheck_seconds,
    )

    def on_outcome(
        role: TopicRole, outcome: BatchOutcome, seconds: float, lags: Mapping[int, int]
    ) -> None:
        # After each stored batch: wake the relay when dead letters were written.
        if outcome.dead_lettered:
            relay.notify()
        metrics.observe(role.value, outcome, seconds, lags)
        log.info("%s: %s", role.value, outcome)

    async def publish() -> None:  # faust names its tasks after the function
        await run_relay(relay)

    def on_assigned(owned: set[tuple[TopicRole, int]]) -> None:
        metrics.owned((role.value, partition) for role, partition in owned)

    processor = build_app(
        settings, sink, on_outcome=on_outcome, relay=publish, guard=guard, on_assigned=on_assigned
    )
    started = health.Condition("starting")

    async def watch_health() -> None:
        # Runs once the worker started the app: the loop to probe for liveness is this one.
        health.LIVENESS.watch(asyncio.get_running_loop())
        quiet_kafka_client_repeats()
        started.ok()
        kafka_status = waiting_status(
            f"Kafka at {settings.kafka_bootstrap}", grace=KAFKA_GRACE_SECONDS
        )
        while True:
            problem = await asyncio.to_thread(database_reachable, engine)
            if problem is None:
                database.ok()
            else:
                database.fail(problem)
            problem = processor.consumer.problem()
            if problem is None:
                kafka_status.back()
            else:
                kafka_status.failed(problem)
            await asyncio.sleep(HEALTH_PROBE_SECONDS)

    processor.app.task(watch_health)
    health.add_check("database", database)
    health.add_check("batches", sink.storing)
    health.add_check("started", started)
    health.add_check("kafka", lambda: None if started.failing else processor.consumer.problem())
    health.add_check("topics", guard.readiness)
    return processor


async def _stored_offsets(engine: Engine, group: str, topic: str) -> list[StoredOffset]:
    def read() -> list[StoredOffset]:
        with engine.connect() as conn:
            return stored_offsets(conn, LIVE, group).get(topic, [])

    return await asyncio.to_thread(read)


def database_reachable(engine: Engine) -> str | None:
    """None when PostgreSQL answers, else why not (one line)."""
    try:
        with engine.connect() as conn:
            ping(conn)
    except Exception as error:
        return f"PostgreSQL unreachable: {health.one_line(error)}"
    return None


def tune_gc() -> None:
    """Freeze the objects made at start-up (never scanned again) and collect garbage cycles
    less often (minruntime.ingest.memory says why)."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)  # for the process's whole life


# How long a thread holds the interpreter lock before one waiting for it may take it (CPython's
# default is 5 ms). The processor's batch thread waits for PostgreSQL some twenty times a
# batch; while it waits, the thread decoding the next batch takes the lock, and each time the
# batch thread's answer came it waited up to the whole interval to get it back: at 241,501
# events the three round trips that open a batch (the pool's ping, BEGIN, the transaction's
# bounds) took 27 ms a batch with 5 ms, 10 ms with 0.5 ms (py-spy; docs/benchmarks.md, "Python
# per event and the interpreter lock").
SWITCH_INTERVAL_SECONDS = 0.0005


def tune_switching() -> None:
    """Hand the interpreter lock over every ``SWITCH_INTERVAL_SECONDS`` (not 5 ms), for the
    process's whole life: a thread back from PostgreSQL waits less for the decoding thread."""
    sys.setswitchinterval(SWITCH_INTERVAL_SECONDS)


def migrate(settings: Settings, revision: str = "head") -> None:
    """`minruntime migrate`: upgrade the schema (alembic) to ``revision``, before the services
    start (they refuse a schema that is not at head)."""
    upgrade(settings, revision)


def run_processor(settings: Settings, loglevel: str = "warning") -> None:
    """Wait for Kafka and PostgreSQL, then run the processor until it is stopped.

    /healthz and /readyz answer from the start: alive (not yet ready) while it waits.
    """
    health.serve_metrics(
        settings.metrics_host,
        settings.processor_metrics_port,
        "PROCESSOR_METRICS_PORT",
        "processor",
    )
    kafka, database = health.Condition("starting"), health.Condition("starting")
    health.add_check("kafka", kafka)
    health.add_check("database", database)
    wait_for_kafka(settings, kafka)
    engine = connected_engine(settings, database)
    processor = build_processor(settings, engine=engine, database=database)
    worker = faust.Worker(processor.app, loglevel=loglevel, quiet=True)
    tune_gc()
    tune_switching()
    worker.execute_from_commandline()


def options_from(settings: Settings, cls: type[OptionsT], prefix: str, topic: str) -> OptionsT:
    """A requeue-side process's options: ``topic``, and each other field from the setting of
    its name after ``prefix`` (``requeue_interval_seconds`` for a worker's ``interval_seconds``)."""
    values = {name: getattr(settings, prefix + name) for name in cls._fields if name != "topic"}
    return cls(topic=topic, **values)


def run_requeue_worker(settings: Settings) -> None:
    """Run one requeue-worker replica (standby or active) until SIGINT/SIGTERM.

    Waits (one status line, /readyz 503) while PostgreSQL or Kafka is away at the start, and
    rides out their outages afterwards.
    """
    metrics = RequeueMetrics(REGISTRY, settings.known_nominators)
    health.serve_metrics(
        settings.metrics_host, settings.worker_metrics_port, "WORKER_METRICS_PORT", "requeue-worker"
    )
    kafka, database = health.Condition("starting"), health.Condition("starting")
    health.add_check("database", database)
    health.add_check("kafka", kafka)
    engine = connected_engine(settings, database)
    warn_if_anyone_can_take_the_leader_lock(engine)
    wait_for_kafka(settings, kafka)
    health.remove_check("kafka")  # only the relay needs it afterwards, and it rides outages
    try:
        asyncio.run(_serve_requeue_worker(settings, engine, metrics, database))
    finally:
        engine.dispose()


async def _serve_requeue_worker(
    settings: Settings, engine: Engine, metrics: RequeueMetrics, database: health.Condition
) -> None:
    loop = asyncio.get_running_loop()
    health.LIVENESS.watch(loop)
    quiet_kafka_client_repeats()  # the relay's producer, while the broker is away
    relay = outbox_relay(settings, engine, kafka_access(settings), REGISTRY)

    def wake_relay() -> None:
        loop.call_soon_threadsafe(relay.notify)

    options = options_from(settings, WorkerOptions, "requeue_", settings.topic_requeue_decisions)
    worker = RequeueWorker(engine, options, metrics, on_recorded=wake_relay, database=database)
    health.add_check("leader loop", worker.loop_problem)
    expiry = options_from(settings, ExpiryOptions, "protection_", settings.topic_protection)
    emitter = ExpiryEmitter(engine, expiry, metrics, worker.leading, on_written=wake_relay)

    def stop() -> None:
        worker.stop.set()
        emitter.stop.set()

    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop)
    # The crash-before-publish test hook must not race its own relay.
    relay_task = (
        None if settings.requeue_exit_after_commit else asyncio.create_task(run_relay(relay))
    )
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
