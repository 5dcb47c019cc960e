"""The one composition root: builds engines, sinks, relays and apps from Settings.

Nothing connects at import time; every entry point (CLI, tests, benchmarks) comes here.
"""

from __future__ import annotations

import asyncio
import logging

import faust
from sqlalchemy import Engine

from minruntime.errors import UserError
from minruntime.ingest import BatchOutcome
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import is_at_head
from minruntime.stream.app import build_app
from minruntime.stream.relay import OutboxRelay
from minruntime.stream.sink import BatchSink
from minruntime.stream.topics import INPUT_ROLES, TopicRole, ensure_topics, topic_specs

log = logging.getLogger(__name__)


class NotMigratedError(UserError):
    """The database schema is missing or older than this code."""


def require_migrated(engine: Engine) -> None:
    """Fail with one line when the schema is not at the newest migration."""
    if not is_at_head(engine):
        raise NotMigratedError("the database schema is not up to date: run `minruntime migrate`")


def input_topic_roles(settings: Settings) -> dict[str, str]:
    """Configured input topic name → role name (what `apply_batch` checks types against)."""
    return {
        spec.name: spec.role.value for spec in topic_specs(settings) if spec.role in INPUT_ROLES
    }


def build_processor(settings: Settings) -> faust.App:
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
    relay = OutboxRelay(engine, settings.kafka_bootstrap, poll_seconds=settings.outbox_poll_seconds)

    def on_outcome(role: TopicRole, outcome: BatchOutcome) -> None:
        # After each stored batch: wake the relay when dead letters were written.
        if outcome.dead_lettered:
            relay.notify()
        log.info("%s: %s", role.value, outcome)

    return build_app(settings, sink, on_outcome=on_outcome, relay=relay.run)


def run_processor(settings: Settings, loglevel: str = "warning") -> None:
    """Create missing topics, then run the processor until it is stopped."""
    asyncio.run(ensure_topics(settings.kafka_bootstrap, topic_specs(settings)))
    worker = faust.Worker(build_processor(settings), loglevel=loglevel, quiet=True)
    worker.execute_from_commandline()
