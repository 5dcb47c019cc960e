"""`stack up | down | status`: the two nodes started, stopped and checked together."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from minruntime.settings import READER_ROLE, Settings, with_role, without_password
from minruntime.stack.kafka import KafkaNode
from minruntime.stack.postgres import PostgresNode

Say = Callable[[str], None]


@dataclass(frozen=True)
class ComponentStatus:
    """One node of the stack as `status` reports it."""

    name: str
    running: bool
    healthy: bool
    pid: int | None
    detail: str


@dataclass(frozen=True)
class StackStatus:
    """The whole stack, plus the connection lines clients need."""

    components: tuple[ComponentStatus, ...]
    kafka_bootstrap: str
    # Printable: no password (the stack's passfile holds them; libpq reads it).
    database_url: str
    owner_database_url: str = ""
    reader_database_url: str = ""

    @property
    def healthy(self) -> bool:
        """True when every component is running and answering."""
        return all(c.healthy for c in self.components)


def _quiet(_: str) -> None:
    return None


def stack_up(settings: Settings, say: Say = _quiet) -> StackStatus:
    """Start PostgreSQL and Kafka unless they run; return once both really work."""
    settings.stack_dir.mkdir(parents=True, exist_ok=True)
    postgres, kafka = PostgresNode(settings), KafkaNode(settings)

    # Check every tool and port first, so a failure leaves nothing half-started.
    postgres.preflight()
    kafka.preflight()
    began = time.monotonic()
    if postgres.start(settings.stack_timeout_seconds):
        say(f"PostgreSQL started on port {settings.database_parts.port}")
    else:
        say("PostgreSQL already running")
    postgres.create_database()

    if kafka.start():
        say(
            f"Kafka {settings.kafka_version} starting on {settings.kafka_bootstrap} "
            f"({settings.kafka_security_protocol})"
        )
        started = True
    else:
        say("Kafka already running")
        started = False
    kafka.wait_ready(settings.stack_timeout_seconds)
    if started:
        say(f"Kafka answered a produce/consume round trip ({time.monotonic() - began:.1f}s)")
    return stack_status(settings)


def stack_down(settings: Settings, say: Say = _quiet) -> None:
    """Stop Kafka, then PostgreSQL; nothing running is fine."""
    kafka, postgres = KafkaNode(settings), PostgresNode(settings)
    say("Kafka stopped" if kafka.stop() else "Kafka was not running")
    say("PostgreSQL stopped" if postgres.stop() else "PostgreSQL was not running")


def stack_status(settings: Settings) -> StackStatus:
    """Check both nodes without changing anything."""
    pg = PostgresNode(settings).health()
    kafka = KafkaNode(settings).health()
    return StackStatus(
        components=(
            ComponentStatus("postgresql", pg.running, pg.healthy, pg.pid, pg.detail),
            ComponentStatus("kafka", kafka.running, kafka.healthy, kafka.pid, kafka.detail),
        ),
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=without_password(settings.database_url, settings.passfile),
        owner_database_url=without_password(settings.owner_url, settings.passfile),
        reader_database_url=with_role(settings.database_url, READER_ROLE, settings.passfile),
    )
