"""`stack up | down | status`: the nodes started, stopped and checked together.

The Kubernetes part (etcd + kube-apiserver) joins only with `up --kube` and stays part of the
stack until `down`; without `--kube` the stack is PostgreSQL and Kafka, as before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minruntime.settings import READER_ROLE, Settings, with_role, without_password
from minruntime.stack.apiserver import KubeNode
from minruntime.stack.crds import apply_crds, crd_directory
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
    kubeconfig: Path | None = None
    """Set when the Kubernetes part belongs to the stack (`up --kube`)."""

    @property
    def healthy(self) -> bool:
        """True when every component is running and answering."""
        return all(c.healthy for c in self.components)


def _quiet(_: str) -> None:
    return None


def stack_up(settings: Settings, say: Say = _quiet, *, kube: bool = False) -> StackStatus:
    """Start PostgreSQL and Kafka (and with `kube` etcd + kube-apiserver) unless they run;
    return once each really works."""
    settings.stack_dir.mkdir(parents=True, exist_ok=True)
    postgres, kafka = PostgresNode(settings), KafkaNode(settings)

    # Check every tool and port first, so a failure leaves nothing half-started.
    if kube:
        KubeNode(settings).preflight()
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
    if kube:
        kube_up(settings, say)
    return stack_status(settings)


def kube_up(settings: Settings, say: Say = _quiet) -> None:
    """Start etcd and kube-apiserver (building them once), apply the CRDs, write the kubeconfig."""
    node = KubeNode(settings)
    began = time.monotonic()
    if node.start(say, settings.stack_timeout_seconds):
        say(
            f"Kubernetes API server {settings.kube_version} ready at {node.server} "
            f"({time.monotonic() - began:.1f}s)"
        )
    else:
        say("Kubernetes API server already running")
    names = apply_crds(node.kubeconfig, crd_directory(), settings.stack_timeout_seconds)
    say(f"CRDs established: {', '.join(names)}")


def kube_down(settings: Settings, say: Say = _quiet) -> None:
    """Stop kube-apiserver and etcd only; say so only when they were running."""
    if KubeNode(settings).stop():
        say("Kubernetes API server stopped")


def stack_down(settings: Settings, say: Say = _quiet) -> None:
    """Stop the Kubernetes part, Kafka, then PostgreSQL; nothing running is fine."""
    kube_down(settings, say)
    kafka, postgres = KafkaNode(settings), PostgresNode(settings)
    say("Kafka stopped" if kafka.stop() else "Kafka was not running")
    say("PostgreSQL stopped" if postgres.stop() else "PostgreSQL was not running")


def stack_status(settings: Settings) -> StackStatus:
    """Check every node without changing anything."""
    pg = PostgresNode(settings).health()
    kafka = KafkaNode(settings).health()
    components = [
        ComponentStatus("postgresql", pg.running, pg.healthy, pg.pid, pg.detail),
        ComponentStatus("kafka", kafka.running, kafka.healthy, kafka.pid, kafka.detail),
    ]
    kube = KubeNode(settings)
    if kube.enabled:
        components.extend(
            ComponentStatus(h.name, h.running, h.healthy, h.pid, h.detail) for h in kube.health()
        )
    return StackStatus(
        components=tuple(components),
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=without_password(settings.database_url, settings.passfile),
        owner_database_url=without_password(settings.owner_url, settings.passfile),
        reader_database_url=with_role(settings.database_url, READER_ROLE, settings.passfile),
        kubeconfig=kube.kubeconfig if kube.enabled else None,
    )
