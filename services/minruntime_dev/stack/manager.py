"""`stack up | down | status | failover`: the nodes started, stopped and checked together.

The Kubernetes part (etcd + kube-apiserver) joins only with `up --kube` and stays part of the
stack until `down`; without `--kube` the stack is PostgreSQL and Kafka, as before.

`up --brokers 3` makes Kafka a three-node KRaft cluster (minruntime_dev.stack.kafka_cluster)
and `up --pg-standby` gives PostgreSQL a synchronous streaming standby
(minruntime_dev.stack.pg_standby). The stack remembers them (minruntime_dev.topology), so
`status`, `down` and the next `up` without flags know, and exports its clients' addresses
(`<stack dir>/stack.env`); without them, and with no remembered topology, everything is as it
always was.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from minruntime.errors import StackError
from minruntime.pgurl import PgAddress
from minruntime.settings import READER_ROLE, Settings, with_role, without_password
from minruntime_dev.stack.apiserver import KubeNode
from minruntime_dev.stack.crds import CrdChoice, apply_crds, chosen_crds
from minruntime_dev.stack.kafka import KafkaNode
from minruntime_dev.stack.kafka_cluster import KafkaCluster, node_port
from minruntime_dev.stack.pg_standby import PostgresPair
from minruntime_dev.stack.postgres import PostgresNode
from minruntime_dev.stack.process import Health
from minruntime_dev.topology import StackTopology, read_topology, write_stack_env, write_topology

Say = Callable[[str], None]


@dataclass(frozen=True)
class ComponentStatus:
    """One node of the stack as `status` reports it."""

    name: str
    running: bool
    healthy: bool
    pid: int | None
    detail: str


def _component(name: str, health: Health) -> ComponentStatus:
    return ComponentStatus(name, health.running, health.healthy, health.pid, health.detail)


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
        return all(c.healthy for c in self.components)


def _quiet(_: str) -> None:
    return None


def plan_topology(
    settings: Settings, remembered: StackTopology, brokers: int | None, pg_standby: bool | None
) -> StackTopology:
    """What `stack up` brings: the flags given, else what the stack remembers."""
    count = brokers if brokers is not None else max(len(remembered.brokers), 1)
    if count not in (1, 3):
        raise StackError(f"--brokers takes 1 (one broker) or 3 (a KRaft cluster), not {count}")
    host = settings.kafka_host
    cluster = tuple(f"{host}:{node_port(settings, n)}" for n in range(1, count + 1))
    brokers_now = cluster if count > 1 else ()
    standby = remembered.standby if pg_standby is None else pg_standby
    if not standby and remembered.primary != 0:
        raise StackError(
            f"since the failover the primary is the server on {remembered.postgres[1]}, and "
            f"a stack without a standby has the one on {remembered.postgres[0]}: fail back "
            "first (`minruntime stack up`, then `minruntime stack failover`)"
        )
    if not standby:
        return StackTopology(brokers_now)
    db = settings.database_parts
    servers = (f"{db.host}:{db.port}", f"{db.host}:{db.port + 1}")
    if remembered.standby:  # where a failover left the primary, and whether one is fenced
        return StackTopology(brokers_now, servers, remembered.primary, remembered.fenced)
    return StackTopology(brokers_now, servers)


def with_topology(settings: Settings, old: StackTopology, new: StackTopology) -> Settings:
    """The settings as clients of `new` see them, from settings read under `old`."""
    bootstrap = new.bootstrap_for(old.base_bootstrap(settings.kafka_bootstrap))
    url = new.database_url_for(old.base_database_url(settings.database_url))
    return settings.model_copy(update={"kafka_bootstrap": bootstrap, "database_url": url})


def stack_up(
    settings: Settings,
    say: Say = _quiet,
    *,
    kube: bool = False,
    brokers: int | None = None,
    pg_standby: bool | None = None,
    crds: CrdChoice | None = None,
) -> StackStatus:
    """Start PostgreSQL and Kafka (and with `kube` etcd + kube-apiserver) unless they run;
    return once each really works. `brokers` and `pg_standby` (None: as remembered) choose
    one broker or a cluster of three, and a standby or none; `crds` which CRDs `kube` applies
    (the project's by default)."""
    if crds is not None and not kube:
        raise StackError("--kai-crds and --semi-preemptible go with --kube")
    remembered = read_topology(settings.stack_dir)
    topology = plan_topology(settings, remembered, brokers, pg_standby)
    settings.stack_dir.mkdir(parents=True, exist_ok=True)
    settings = with_topology(settings, remembered, topology)
    _refuse_to_switch_a_running_kafka(settings, remembered, topology)

    # Check every tool, port and file first, so a failure leaves nothing half-started.
    chosen = chosen_crds(crds or CrdChoice()) if kube else []
    if kube:
        KubeNode(settings).preflight()
    _postgres(settings, topology).preflight()
    _kafka(settings, topology).preflight()
    write_topology(settings.stack_dir, topology)
    began = time.monotonic()
    topology = _postgres_up(settings, remembered, topology, say)
    _remember(settings, topology)
    if topology.cluster:
        _cluster_up(KafkaCluster(settings, len(topology.brokers)), settings, say, began)
    else:
        _kafka_up(settings, say, began)
    if kube:
        kube_up(settings, say, chosen)
    return stack_status(settings)


def _remember(settings: Settings, topology: StackTopology) -> None:
    """Remember `topology`, and export the addresses its clients use (`settings`: as seen
    under it, `with_topology`)."""
    write_topology(settings.stack_dir, topology)
    addresses = {
        "MINRUNTIME_KAFKA_BOOTSTRAP": settings.kafka_bootstrap,
        "MINRUNTIME_DATABASE_URL": without_password(settings.database_url, settings.passfile),
    }
    write_stack_env(settings.stack_dir, topology, addresses)


def _postgres(settings: Settings, topology: StackTopology) -> PostgresNode | PostgresPair:
    return PostgresPair(settings, topology) if topology.standby else PostgresNode(settings)


def _kafka(settings: Settings, topology: StackTopology) -> KafkaNode | KafkaCluster:
    if topology.cluster:
        return KafkaCluster(settings, len(topology.brokers))
    return KafkaNode(settings)


def _refuse_to_switch_a_running_kafka(
    settings: Settings, remembered: StackTopology, topology: StackTopology
) -> None:
    if len(remembered.brokers) == len(topology.brokers):
        return
    if _kafka(settings, remembered).is_running():
        now = f"{len(remembered.brokers)} brokers" if remembered.cluster else "one broker"
        raise StackError(
            f"the stack's Kafka runs with {now}: stop it with `minruntime stack down` first "
            "(each keeps its own data; a database's stored offsets name the other's topics)"
        )


def _postgres_up(
    settings: Settings, remembered: StackTopology, topology: StackTopology, say: Say
) -> StackTopology:
    timeout = settings.stack_timeout_seconds
    if topology.standby:
        return PostgresPair(settings, topology).up(timeout, say)
    if remembered.standby:
        PostgresPair(settings, remembered).detach(say)
    postgres = PostgresNode(settings)
    started = postgres.start(timeout)
    say(f"PostgreSQL started on port {postgres.port}" if started else "PostgreSQL already running")
    postgres.create_database()
    return topology


def _kafka_up(settings: Settings, say: Say, began: float) -> None:
    kafka = KafkaNode(settings)
    started = kafka.start()
    if started:
        say(
            f"Kafka {settings.kafka_version} starting on {settings.kafka_bootstrap} "
            f"({settings.kafka_security_protocol})"
        )
    else:
        say("Kafka already running")
    kafka.wait_ready(settings.stack_timeout_seconds)
    if started:
        say(f"Kafka answered a produce/consume round trip ({time.monotonic() - began:.1f}s)")


def _cluster_up(cluster: KafkaCluster, settings: Settings, say: Say, began: float) -> None:
    started = cluster.start()
    if started:
        say(
            f"Kafka {settings.kafka_version} brokers {', '.join(map(str, started))} starting "
            f"on {cluster.bootstrap} ({settings.kafka_security_protocol})"
        )
    else:
        say("Kafka cluster already running")
    cluster.wait_ready(settings.stack_timeout_seconds)
    if started:
        say(
            f"Kafka cluster answered a produce/consume round trip ({cluster.count} replicas, "
            f"acks=all) ({time.monotonic() - began:.1f}s)"
        )


def kube_up(
    settings: Settings, say: Say = _quiet, crds: list[dict[str, Any]] | None = None
) -> None:
    """Start etcd and kube-apiserver (building them once), apply the CRDs (the project's
    unless given), write the kubeconfig."""
    node = KubeNode(settings)
    began = time.monotonic()
    if node.start(say, settings.stack_timeout_seconds):
        say(
            f"Kubernetes API server {settings.kube_version} ready at {node.server} "
            f"({time.monotonic() - began:.1f}s)"
        )
    else:
        say("Kubernetes API server already running")
    chosen = crds if crds is not None else chosen_crds(CrdChoice())
    names = apply_crds(node.kubeconfig, chosen, settings.stack_timeout_seconds)
    say(f"CRDs established: {', '.join(names)}")


def kube_down(settings: Settings, say: Say = _quiet) -> None:
    """Stop kube-apiserver and etcd only; say so only when they were running."""
    if KubeNode(settings).stop():
        say("Kubernetes API server stopped")


def stack_down(settings: Settings, say: Say = _quiet) -> None:
    """Stop the Kubernetes part, Kafka, then PostgreSQL; nothing running is fine."""
    kube_down(settings, say)
    topology = read_topology(settings.stack_dir)
    if topology.cluster:
        stopped = KafkaCluster(settings, len(topology.brokers)).stop()
        brokers = ", ".join(map(str, stopped))
        say(f"Kafka brokers {brokers} stopped" if stopped else "Kafka cluster was not running")
    else:
        say("Kafka stopped" if KafkaNode(settings).stop() else "Kafka was not running")
    if topology.standby:
        PostgresPair(settings, topology).down(say)
    else:
        postgres = PostgresNode(settings)
        say("PostgreSQL stopped" if postgres.stop() else "PostgreSQL was not running")


def stack_failover(settings: Settings, say: Say = _quiet) -> StackStatus:
    """Fence the PostgreSQL primary and promote its standby (`up --pg-standby` first)."""
    topology = read_topology(settings.stack_dir)
    if not topology.standby:
        raise StackError(
            "the stack's PostgreSQL has no standby to fail over to: "
            "start one with `minruntime stack up --pg-standby`"
        )
    settings = with_topology(settings, topology, topology)
    failed_over = PostgresPair(settings, topology).failover(settings.stack_timeout_seconds, say)
    _remember(settings, failed_over)
    return stack_status(settings)


def kafka_cluster(settings: Settings) -> KafkaCluster:
    """The stack's Kafka cluster, for one broker's kill, stop or start (`up --brokers 3`)."""
    topology = read_topology(settings.stack_dir)
    if not topology.cluster:
        raise StackError(
            "the stack runs one Kafka broker, not a cluster: "
            "`minruntime stack down`, then `minruntime stack up --brokers 3`"
        )
    return KafkaCluster(with_topology(settings, topology, topology), len(topology.brokers))


def stack_status(settings: Settings) -> StackStatus:
    """Check every node without changing anything."""
    topology = read_topology(settings.stack_dir)
    settings = with_topology(settings, topology, topology)
    if topology.standby:
        components = [_component(n, h) for n, h in PostgresPair(settings, topology).health()]
    else:
        components = [_component("postgresql", PostgresNode(settings).health())]
    if topology.cluster:
        cluster = KafkaCluster(settings, len(topology.brokers))
        components += [_component(f"kafka-{n}", h) for n, h in cluster.health().items()]
    else:
        components.append(_component("kafka", KafkaNode(settings).health()))
    kube = KubeNode(settings)
    if kube.enabled:
        components.extend(_component(n, h) for n, h in kube.health())
    reader = with_role(settings.database_url, READER_ROLE, settings.passfile)
    if topology.standby:
        # Reads may go to the standby (hot_standby), the primary when it is the only one.
        address = PgAddress.parse(reader).with_params(target_session_attrs="prefer-standby")
        reader = address.uri()
    return StackStatus(
        components=tuple(components),
        kafka_bootstrap=settings.kafka_bootstrap,
        database_url=without_password(settings.database_url, settings.passfile),
        owner_database_url=without_password(settings.owner_url, settings.passfile),
        reader_database_url=reader,
        kubeconfig=kube.kubeconfig if kube.enabled else None,
    )
