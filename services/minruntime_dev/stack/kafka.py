"""An Apache Kafka node (KRaft: broker + controller in one process) run from Maven Central jars.

The jars are fetched once with `mvn dependency:copy-dependencies` into a per-user cache
(`~/.cache/minruntime/kafka-<version>/libs`) and shared by every checkout. The stack's single
broker keeps its data and logs in the checkout's own `.stack/kafka/`; the nodes of a cluster
(`stack up --brokers 3`, minruntime_dev.stack.kafka_cluster) are the same `KafkaNode`, each with
its own directory, ports and place in the controller quorum.
"""

from __future__ import annotations

import asyncio
import base64
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minruntime.errors import MissingToolError, StackError
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime_dev.stack import process
from minruntime_dev.stack.kafka_probe import checked_round_trip, describe
from minruntime_dev.stack.kafka_security import (
    broker_secrets,
    ensure_keystores,
    listener_lines,
    scram_format_arguments,
)

LOG4J_VERSION = "2.24.3"

_POM = """<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>local.minruntime</groupId>
  <artifactId>kafka-runtime</artifactId>
  <version>1</version>
  <packaging>pom</packaging>
  <dependencies>
    <dependency>
      <groupId>org.apache.kafka</groupId><artifactId>kafka_2.13</artifactId>
      <version>{kafka}</version>
    </dependency>
    <!-- Kafka 4.x ships no logging backend; slf4j-api is 1.7.x, so the slf4j 1 binding. -->
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-core</artifactId>
      <version>{log4j}</version>
    </dependency>
    <dependency>
      <groupId>org.apache.logging.log4j</groupId><artifactId>log4j-slf4j-impl</artifactId>
      <version>{log4j}</version>
    </dependency>
  </dependencies>
</project>
"""

_LOG4J2 = """Configuration:
  status: warn
  Appenders:
    Console:
      name: STDOUT
      PatternLayout:
        Pattern: "[%d] %p %m (%c)%n"
  Loggers:
    Logger:
      - name: kafka
        level: INFO
      - name: org.apache.kafka
        level: WARN
      - name: state.change.logger
        level: WARN
    Root:
      level: INFO
      AppenderRef:
        - ref: STDOUT
"""


@dataclass(frozen=True)
class NodeSpec:
    """One KRaft node of the stack: its id, directory and two ports."""

    node_id: int
    home: Path
    port: int
    controller_port: int
    directory_id: str = ""
    """Its metadata directory's id, named in the quorum's `--initial-controllers` (a cluster)."""


@dataclass(frozen=True)
class Quorum:
    """The controller quorum a node belongs to: itself alone, or every node of a cluster."""

    nodes: tuple[NodeSpec, ...]
    cluster_id: str = ""
    """The cluster's id, the same on every node; empty: a new one when the node is formatted."""

    def bootstrap_servers(self, host: str) -> str:
        """`controller.quorum.bootstrap.servers`: every controller."""
        return ",".join(f"{host}:{node.controller_port}" for node in self.nodes)

    def format_arguments(self, host: str) -> list[str]:
        """StorageTool's quorum arguments: `--standalone` alone, else the initial controllers
        (the same list on every node: id@host:port:directory-id)."""
        if len(self.nodes) == 1:
            return ["--standalone"]
        voters = (f"{n.node_id}@{host}:{n.controller_port}:{n.directory_id}" for n in self.nodes)
        return ["--initial-controllers", ",".join(voters)]


def replication_lines(nodes: int) -> list[str]:
    """server.properties lines for the replication of the internal and the new topics.

    One node: everything has one replica, as a single broker must. A cluster: three replicas,
    two in sync before a write with acks=all is acknowledged, and no out-of-sync replica ever
    elected leader (it would lose acknowledged writes).
    """
    if nodes == 1:
        return [
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=10",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
        ]
    factor = min(nodes, 3)
    in_sync = max(factor - 1, 1)
    return [
        f"default.replication.factor={factor}",
        f"min.insync.replicas={in_sync}",
        f"offsets.topic.replication.factor={factor}",
        "offsets.topic.num.partitions=10",
        f"transaction.state.log.replication.factor={factor}",
        f"transaction.state.log.min.isr={in_sync}",
        f"share.coordinator.state.topic.replication.factor={factor}",
        f"share.coordinator.state.topic.min.isr={in_sync}",
        "unclean.leader.election.enable=false",
    ]


class KafkaNode:
    """A local broker: fetch, configure, format, start, check, stop.

    Without `spec`, the stack's single broker: node 1 in `.stack/kafka/` on the settings'
    broker port (the controller one above), a quorum of itself.
    """

    def __init__(
        self, settings: Settings, spec: NodeSpec | None = None, quorum: Quorum | None = None
    ) -> None:
        self.settings = settings
        self.spec = spec or NodeSpec(
            1, settings.stack_dir / "kafka", settings.kafka_port, settings.kafka_controller_port
        )
        self.quorum = quorum or Quorum((self.spec,))
        self.home = self.spec.home
        self.data_dir = self.home / "data"
        self.config_file = self.home / "server.properties"
        self.log4j_file = self.home / "log4j2.yaml"
        self.pid_file = self.home / "kafka.pid"
        self.log_file = self.home / "kafka.out"
        self.libs = settings.cache_dir / f"kafka-{settings.kafka_version}" / "libs"

    # -- installation -------------------------------------------------------------------
    def ensure_jars(self) -> None:
        """Fetch Kafka and its runtime dependencies from Maven Central once."""
        marker = self.libs / ".complete"
        if marker.is_file():
            return
        mvn = shutil.which("mvn")
        if mvn is None:
            raise MissingToolError(
                "Maven (mvn) is not installed; it is needed once to fetch the Kafka jars "
                "(install it, e.g. `apt-get install maven`)"
            )
        self.libs.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=self.libs.parent) as work:
            pom = Path(work) / "pom.xml"
            pom.write_text(_POM.format(kafka=self.settings.kafka_version, log4j=LOG4J_VERSION))
            staging = Path(work) / "libs"
            process.run(
                [mvn, "-q", "-B", "-f", str(pom), "dependency:copy-dependencies",
                 f"-DoutputDirectory={staging}", "-DincludeScope=runtime"],
                what=f"fetching Kafka {self.settings.kafka_version} jars with mvn",
            )  # fmt: skip
            if not any(staging.glob("kafka_2.13-*.jar")):
                raise StackError("mvn finished but no kafka_2.13 jar was fetched")
            if self.libs.exists():
                shutil.rmtree(self.libs)
            staging.rename(self.libs)
        marker.write_text(self.settings.kafka_version + "\n")

    def write_config(self) -> None:
        """Write server.properties (mode 0600: it holds secrets) and the log4j2 configuration."""
        host = self.settings.kafka_host
        port, controller = self.spec.port, self.spec.controller_port
        protocol = self.settings.kafka_security_protocol
        self.home.mkdir(parents=True, exist_ok=True)
        stored = broker_secrets(self.settings.stack_dir, formatted=self.formatted)
        if protocol.startswith("SASL_") and not stored.scram:
            raise StackError(
                f"this stack's Kafka storage was formatted before it had SASL credentials, so "
                f"it has no SCRAM user: run `minruntime stack down`, delete {self.data_dir}, "
                "then `minruntime stack up` (its topics are lost)"
            )
        # One CA and one certificate (for 127.0.0.1) in `.stack/kafka/tls`, whichever node:
        # the nodes of a cluster trust each other, and clients trust them all, through it.
        tls_home = self.settings.stack_dir / "kafka"
        keystores = ensure_keystores(tls_home, stored) if "SSL" in protocol else None
        process.write_private(
            self.config_file,
            "\n".join(
                [
                    "process.roles=broker,controller",
                    f"node.id={self.spec.node_id}",
                    *listener_lines(protocol, host, port, controller, stored, keystores),
                    "controller.listener.names=CONTROLLER",
                    f"controller.quorum.bootstrap.servers={self.quorum.bootstrap_servers(host)}",
                    f"log.dirs={self.data_dir}",
                    *replication_lines(len(self.quorum.nodes)),
                    "group.initial.rebalance.delay.ms=0",
                    # Topics are created explicitly, with documented partitions and
                    # retention; a typo'd topic name must fail, not appear silently.
                    "auto.create.topics.enable=false",
                    "num.partitions=1",
                    "num.network.threads=2",
                    "num.io.threads=4",
                    "",
                ]
            ),
        )
        self.log4j_file.write_text(_LOG4J2)

    @property
    def formatted(self) -> bool:
        """True once the KRaft metadata log exists."""
        return (self.data_dir / "meta.properties").is_file()

    def _java(self) -> str:
        java = shutil.which("java")
        if java is None:
            raise MissingToolError(
                "Java is not installed; Kafka needs a Java 17+ runtime "
                "(install it, e.g. `apt-get install openjdk-17-jre-headless`)"
            )
        return java

    def _classpath_command(self, main_class: str, *args: str) -> list[str]:
        return [
            self._java(), "-cp", f"{self.libs}/*",
            f"-Dlog4j2.configurationFile={self.log4j_file}", f"-Dkafka.logs.dir={self.home}",
            main_class, *args,
        ]  # fmt: skip

    def format_storage(self) -> None:
        """Format the KRaft metadata log once (a no-op when already formatted)."""
        if self.formatted:
            return
        stored = broker_secrets(self.settings.stack_dir, formatted=False)
        cluster_id = self.quorum.cluster_id or new_cluster_id()
        process.run(
            self._classpath_command(
                "kafka.tools.StorageTool", "format",
                *self.quorum.format_arguments(self.settings.kafka_host), "--ignore-formatted",
                "-t", cluster_id, "-c", str(self.config_file),
                # SCRAM users live in the metadata log: created now, whatever the protocol,
                # so the stack can be switched to SASL later without reformatting.
                *scram_format_arguments(stored),
            ),
            what=f"formatting Kafka storage ({self.home.name})",
            timeout=120,
        )  # fmt: skip

    # -- lifecycle ------------------------------------------------------------------------
    def is_running(self) -> bool:
        return process.running_pid(self.pid_file) is not None

    def preflight(self) -> None:
        """Fail before anything starts: Java present, jars fetchable, both ports free."""
        if self.is_running():
            return
        self._java()
        if not (self.libs / ".complete").is_file() and shutil.which("mvn") is None:
            self.ensure_jars()  # raises the one-line "Maven is not installed" error
        host = self.settings.kafka_host
        process.require_free_port(host, self.spec.port, self.name, "MINRUNTIME_KAFKA_BOOTSTRAP")
        process.require_free_port(
            host,
            self.spec.controller_port,
            f"the {self.name} controller (broker port + 1)",
            "MINRUNTIME_KAFKA_BOOTSTRAP",
        )

    @property
    def name(self) -> str:
        """How messages name it: "Kafka", or "Kafka broker N" in a cluster."""
        return "Kafka" if len(self.quorum.nodes) == 1 else f"Kafka broker {self.spec.node_id}"

    @property
    def address(self) -> str:
        return f"{self.settings.kafka_host}:{self.spec.port}"

    def start(self) -> bool:
        """Start the broker unless it already runs; True when it was started now."""
        if self.is_running():
            return False
        self.preflight()
        java = self._java()
        self.ensure_jars()
        self.write_config()
        self.format_storage()
        heap = self.settings.kafka_heap
        command = [
            java, f"-Xms{min_heap(heap)}", f"-Xmx{heap}", "-server",
            "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true",
            *self._classpath_command("kafka.Kafka", str(self.config_file))[1:],
        ]  # fmt: skip
        process.spawn_daemon(command, self.log_file, self.pid_file, self.home)
        return True

    def wait_listening(self, timeout: float) -> None:
        """Return once the broker's port accepts connections; fail if the process exits."""
        host, port = self.settings.kafka_host, self.spec.port
        if not process.wait_until(
            lambda: process.port_in_use(host, port) or not self.is_running(), timeout
        ):
            log = process.tail(self.log_file, 3)
            raise StackError(f"{self.name} did not open port {port} in {timeout:.0f}s: {log}")
        if not self.is_running():
            raise StackError(
                f"{self.name} exited during start-up: {process.tail(self.log_file, 3)}"
            )

    def wait_ready(self, timeout: float) -> None:
        """Return once a real produce/consume round trip through the broker succeeds."""
        self.wait_listening(timeout)
        checked_round_trip(kafka_access(self.settings), timeout)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL); True when one was running."""
        return process.stop_daemon(self.pid_file, timeout)

    def health(self) -> process.Health:
        """Is the process alive, and does the broker answer a metadata request?"""
        pid = process.running_pid(self.pid_file)
        if pid is None:
            return process.Health(False, False, None, "not running")
        try:
            brokers = asyncio.run(asyncio.wait_for(describe(kafka_access(self.settings)), 10))
        except Exception as exc:
            return process.Health(True, False, pid, f"not answering: {exc!r}")
        protocol = self.settings.kafka_security_protocol
        version = self.settings.kafka_version
        return process.Health(
            True, True, pid, f"{brokers} broker(s), KRaft, Kafka {version}, {protocol}"
        )


def min_heap(heap: str) -> str:
    """A quarter of the maximum heap as the initial heap (e.g. 768m -> 192m)."""
    digits = heap.rstrip("mMgG")
    unit = heap[len(digits) :] or "m"
    if not digits.isdigit():
        return heap
    value = int(digits) * (1024 if unit.lower() == "g" else 1)
    return f"{max(value // 4, 64)}m"


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A KRaft cluster ID: a random UUID in base64url, never starting with '-'.

    One in 64 random UUIDs encodes with a leading '-', which the storage tool's argument
    parser takes for an option ("argument --cluster-id/-t: expected one argument"); Kafka's
    own ``Uuid.randomUuid`` draws again in that case, and so does this.
    """
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id
