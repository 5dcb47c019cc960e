"""A single-node Apache Kafka (KRaft: broker + controller) run from Maven Central jars.

The jars are fetched once with `mvn dependency:copy-dependencies` into a per-user cache
(`~/.cache/minruntime/kafka-<version>/libs`) and shared by every checkout; the broker's data
and logs live in the checkout's own `.stack/kafka/`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from minruntime.errors import MissingToolError, StackError
from minruntime.kafka_access import KafkaAccess, kafka_access, start_client
from minruntime.settings import Settings
from minruntime.stack.kafka_security import (
    broker_secrets,
    ensure_keystores,
    listener_lines,
    scram_format_arguments,
    write_private,
)
from minruntime.stack.process import (
    pid_alive,
    port_in_use,
    read_pid,
    require_free_port,
    run,
    spawn_daemon,
    stop_daemon,
    tail,
    wait_until,
)

LOG4J_VERSION = "2.24.3"
HEALTHCHECK_TOPIC = "minruntime.stack-healthcheck"

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
class KafkaHealth:
    """What a health check of the broker found."""

    running: bool
    healthy: bool
    pid: int | None
    detail: str


class KafkaNode:
    """The local broker: fetch, configure, format, start, check, stop."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.home = settings.stack_dir / "kafka"
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
            run(
                [
                    mvn,
                    "-q",
                    "-B",
                    "-f",
                    str(pom),
                    "dependency:copy-dependencies",
                    f"-DoutputDirectory={staging}",
                    "-DincludeScope=runtime",
                ],
                what=f"fetching Kafka {self.settings.kafka_version} jars with mvn",
            )
            if not any(staging.glob("kafka_2.13-*.jar")):
                raise StackError("mvn finished but no kafka_2.13 jar was fetched")
            if self.libs.exists():
                shutil.rmtree(self.libs)
            staging.rename(self.libs)
        marker.write_text(self.settings.kafka_version + "\n")

    def write_config(self) -> None:
        """Write server.properties (mode 0600: it holds secrets) and the log4j2 configuration."""
        host = self.settings.kafka_host
        port = self.settings.kafka_port
        controller = self.settings.kafka_controller_port
        protocol = self.settings.kafka_security_protocol
        self.home.mkdir(parents=True, exist_ok=True)
        stored = broker_secrets(self.settings.stack_dir, formatted=self.formatted)
        if protocol.startswith("SASL_") and not stored.scram:
            raise StackError(
                f"this stack's Kafka storage was formatted before it had SASL credentials, so "
                f"it has no SCRAM user: run `minruntime stack down`, delete {self.data_dir}, "
                "then `minruntime stack up` (its topics are lost)"
            )
        keystores = ensure_keystores(self.home, stored) if "SSL" in protocol else None
        write_private(
            self.config_file,
            "\n".join(
                [
                    "process.roles=broker,controller",
                    "node.id=1",
                    *listener_lines(protocol, host, port, controller, stored, keystores),
                    "controller.listener.names=CONTROLLER",
                    f"controller.quorum.bootstrap.servers={host}:{controller}",
                    f"log.dirs={self.data_dir}",
                    "offsets.topic.replication.factor=1",
                    "offsets.topic.num.partitions=10",
                    "transaction.state.log.replication.factor=1",
                    "transaction.state.log.min.isr=1",
                    "share.coordinator.state.topic.replication.factor=1",
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
            self._java(),
            "-cp",
            f"{self.libs}/*",
            f"-Dlog4j2.configurationFile={self.log4j_file}",
            f"-Dkafka.logs.dir={self.home}",
            main_class,
            *args,
        ]

    def format_storage(self) -> None:
        """Format the KRaft metadata log once (a no-op when already formatted)."""
        if self.formatted:
            return
        stored = broker_secrets(self.settings.stack_dir, formatted=False)
        cluster_id = new_cluster_id()
        run(
            self._classpath_command(
                "kafka.tools.StorageTool",
                "format",
                "--standalone",
                "--ignore-formatted",
                "-t",
                cluster_id,
                "-c",
                str(self.config_file),
                # SCRAM users live in the metadata log: created now, whatever the protocol,
                # so the stack can be switched to SASL later without reformatting.
                *scram_format_arguments(stored),
            ),
            what="formatting Kafka storage",
            timeout=120,
        )

    # -- lifecycle ------------------------------------------------------------------------
    def is_running(self) -> bool:
        """True when the broker process this checkout started is alive."""
        return pid_alive(read_pid(self.pid_file))

    def preflight(self) -> None:
        """Fail before anything starts: Java present, jars fetchable, both ports free."""
        if self.is_running():
            return
        self._java()
        if not (self.libs / ".complete").is_file() and shutil.which("mvn") is None:
            self.ensure_jars()  # raises the one-line "Maven is not installed" error
        host = self.settings.kafka_host
        require_free_port(host, self.settings.kafka_port, "Kafka", "MINRUNTIME_KAFKA_BOOTSTRAP")
        require_free_port(
            host,
            self.settings.kafka_controller_port,
            "the Kafka controller (broker port + 1)",
            "MINRUNTIME_KAFKA_BOOTSTRAP",
        )

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
            java,
            f"-Xms{min_heap(heap)}",
            f"-Xmx{heap}",
            "-server",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djava.awt.headless=true",
            *self._classpath_command("kafka.Kafka", str(self.config_file))[1:],
        ]
        spawn_daemon(command, self.log_file, self.pid_file, self.home)
        return True

    def wait_ready(self, timeout: float) -> None:
        """Return once a real produce/consume round trip through the broker succeeds."""
        host, port = self.settings.kafka_host, self.settings.kafka_port
        if not wait_until(lambda: port_in_use(host, port) or not self.is_running(), timeout):
            raise StackError(
                f"Kafka did not open port {port} in {timeout:.0f}s: {self._log_tail()}"
            )
        if not self.is_running():
            raise StackError(f"Kafka exited during start-up: {self._log_tail()}")
        # The group coordinator is created on first use; aiokafka logs that wait as errors.
        aiokafka_log = logging.getLogger("aiokafka")
        level = aiokafka_log.level
        aiokafka_log.setLevel(logging.CRITICAL)
        try:
            asyncio.run(asyncio.wait_for(round_trip(kafka_access(self.settings)), timeout))
        except (TimeoutError, OSError, RuntimeError) as exc:
            raise StackError(
                f"Kafka is up but a produce/consume round trip failed: {exc!r}"
            ) from exc
        finally:
            aiokafka_log.setLevel(level)

    def _log_tail(self) -> str:
        return tail(self.log_file, 3)

    def stop(self, timeout: float = 30.0) -> bool:
        """Stop the broker (SIGTERM, then SIGKILL); True when one was running."""
        return stop_daemon(self.pid_file, timeout)

    def health(self) -> KafkaHealth:
        """Is the process alive, and does the broker answer a metadata request?"""
        pid = read_pid(self.pid_file)
        if not pid_alive(pid):
            return KafkaHealth(False, False, None, "not running")
        try:
            brokers = asyncio.run(asyncio.wait_for(describe(kafka_access(self.settings)), 10))
        except Exception as exc:
            return KafkaHealth(True, False, pid, f"not answering: {exc!r}")
        protocol = self.settings.kafka_security_protocol
        return KafkaHealth(
            True, True, pid, f"{brokers} broker(s), KRaft, Kafka {self.version}, {protocol}"
        )

    @property
    def version(self) -> str:
        """The Kafka version in use."""
        return self.settings.kafka_version


def min_heap(heap: str) -> str:
    """A quarter of the maximum heap as the initial heap (e.g. 768m -> 192m)."""
    digits = heap.rstrip("mMgG")
    unit = heap[len(digits) :] or "m"
    if not digits.isdigit():
        return heap
    value = int(digits) * (1024 if unit.lower() == "g" else 1)
    return f"{max(value // 4, 64)}m"


async def round_trip(access: KafkaAccess) -> None:
    """Produce a unique record and read it back through a consumer group."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic
    from aiokafka.errors import KafkaError, TopicAlreadyExistsError

    admin = AIOKafkaAdminClient(**access.client_kwargs())
    await start_client(admin, access)
    try:
        if HEALTHCHECK_TOPIC not in await admin.list_topics():
            with contextlib.suppress(TopicAlreadyExistsError):
                await admin.create_topics(
                    [NewTopic(HEALTHCHECK_TOPIC, 1, 1, topic_configs={"retention.ms": "3600000"})]
                )
    finally:
        await admin.close()

    marker = uuid.uuid4().hex.encode()
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    await start_client(producer, access)
    try:
        sent = await producer.send_and_wait(HEALTHCHECK_TOPIC, marker, key=b"stack")
    finally:
        await producer.stop()

    partition = TopicPartition(HEALTHCHECK_TOPIC, sent.partition)
    consumer = AIOKafkaConsumer(
        **access.client_kwargs(),
        group_id="minruntime-stack-healthcheck",
        enable_auto_commit=False,
    )
    await start_client(consumer, access)
    try:
        consumer.assign([partition])
        consumer.seek(partition, sent.offset)
        record = await consumer.getone()
        if record.value != marker:
            raise RuntimeError("round trip returned a different record")
        # Committing creates __consumer_offsets, so later consumer groups start at once.
        while True:
            try:
                await consumer.commit({partition: sent.offset + 1})
                break
            except KafkaError:
                await asyncio.sleep(0.2)
    finally:
        await consumer.stop()


async def describe(access: KafkaAccess) -> int:
    """Number of brokers the cluster reports (a cheap liveness probe)."""
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(**access.client_kwargs(), request_timeout_ms=5000)
    await start_client(admin, access)
    try:
        cluster = await admin.describe_cluster()
    finally:
        await admin.close()
    return len(cluster.get("brokers", []))


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
