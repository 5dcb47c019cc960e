"""The local stack's Kafka cluster (`stack up --brokers 3`): three combined KRaft nodes.

Each node is broker and controller in one process, so the controller quorum has three voters
and survives the loss of any one node: the shape small production clusters run. Node N has
its own directory, `.stack/kafka-N/`, and listens at the first broker port + 10 * (N - 1)
(9092, 9102, 9112 by default), its controller one port above. Node 1 keeps the single broker's
address, so a client configured for it bootstraps from the cluster, and the ports derived from
it (the API server + 3, etcd + 4 and + 5) stay where they were; no node's port meets them, nor
PostgreSQL's or the metrics ports.

Every node's storage is formatted once, with the same cluster id and the same initial
controller set (`--initial-controllers id@host:port:directory-id,...`); the ids are kept in
`.stack/kafka-cluster.json`. Topics get three replicas and two in sync
(`minruntime_dev.stack.kafka.replication_lines`).

For fault tests and operators: `kill` (any signal; SIGKILL by default), `start` (one node,
back in the cluster), `stop`, `leader_of` and `partition_state` (through the admin client).
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from typing import Any

from minruntime.errors import StackError
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime_dev.stack import process
from minruntime_dev.stack.kafka import KafkaNode, NodeSpec, Quorum, new_cluster_id
from minruntime_dev.stack.kafka_probe import admin_request, checked_round_trip

PORT_STEP = 10
IDENTITY_FILE = "kafka-cluster.json"


def node_port(settings: Settings, node_id: int) -> int:
    """Node N's broker port: the first broker port + 10 * (N - 1)."""
    return settings.kafka_port + PORT_STEP * (node_id - 1)


@dataclass(frozen=True)
class ClusterIdentity:
    """What every node's storage is formatted with: the cluster id, each node's directory id."""

    cluster_id: str
    directory_ids: tuple[str, ...]


@dataclass(frozen=True)
class PartitionState:
    """One partition as the cluster reports it."""

    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


class KafkaCluster:
    """The cluster's nodes, started, checked, killed and stopped together or one by one."""

    def __init__(self, settings: Settings, count: int = 3) -> None:
        if count < 3:
            raise StackError(f"a Kafka cluster of the stack has 3 or more brokers, not {count}")
        self.settings = settings
        self.count = count
        self.identity_file = settings.stack_dir / IDENTITY_FILE
        self.nodes = self._nodes(self._read_identity())

    def _nodes(self, identity: ClusterIdentity | None) -> dict[int, KafkaNode]:
        ids = identity.directory_ids if identity else ("",) * self.count
        specs = tuple(
            NodeSpec(
                node_id,
                self.settings.stack_dir / f"kafka-{node_id}",
                node_port(self.settings, node_id),
                node_port(self.settings, node_id) + 1,
                ids[node_id - 1],
            )
            for node_id in range(1, self.count + 1)
        )
        quorum = Quorum(specs, identity.cluster_id if identity else "")
        return {spec.node_id: KafkaNode(self.settings, spec, quorum) for spec in specs}

    def _read_identity(self) -> ClusterIdentity | None:
        try:
            data = json.loads(self.identity_file.read_text())
        except FileNotFoundError:
            return None
        identity = ClusterIdentity(data["cluster_id"], tuple(data["directory_ids"]))
        if len(identity.directory_ids) != self.count:
            raise StackError(
                f"{self.identity_file} describes {len(identity.directory_ids)} brokers, not "
                f"{self.count}: delete it and the kafka-N directories to make a new cluster"
            )
        return identity

    def _ensure_identity(self) -> None:
        identity = self._read_identity()
        if identity is None:
            identity = ClusterIdentity(
                new_cluster_id(), tuple(new_cluster_id() for _ in range(self.count))
            )
            process.write_private(self.identity_file, json.dumps(asdict(identity), indent=2) + "\n")
        self.nodes = self._nodes(identity)

    # -- addresses ------------------------------------------------------------------------
    @property
    def bootstrap(self) -> str:
        """Every broker (host:port, node 1 first), comma-separated: what clients bootstrap from."""
        return ",".join(node.address for node in self.nodes.values())

    @property
    def client_settings(self) -> Settings:
        return self.settings.model_copy(update={"kafka_bootstrap": self.bootstrap})

    def node(self, node_id: int) -> KafkaNode:
        """Node `node_id` (1-based); a one-line error for a node the cluster does not have."""
        try:
            return self.nodes[node_id]
        except KeyError:
            raise StackError(f"the cluster has brokers 1 to {self.count}, not {node_id}") from None

    # -- the whole cluster ------------------------------------------------------------------
    def preflight(self) -> None:
        """Fail before anything starts: Java, the jars, every node's two ports."""
        for node in self.nodes.values():
            node.preflight()

    def is_running(self) -> bool:
        return any(node.is_running() for node in self.nodes.values())

    def start(self) -> list[int]:
        """Start every node that is not running (and resume one stopped by SIGSTOP); the ids
        of those started now."""
        self._resume()
        self.preflight()
        self._ensure_identity()
        first = next(iter(self.nodes.values()))
        first.ensure_jars()
        first.write_config()  # the shared secrets and TLS keystores, made once, here
        # Side by side: formatting is a JVM start of its own per node, seconds each.
        with ThreadPoolExecutor(len(self.nodes)) as pool:
            started = dict(
                zip(self.nodes, pool.map(KafkaNode.start, self.nodes.values()), strict=True)
            )
        return [node_id for node_id, now in started.items() if now]

    def wait_ready(self, timeout: float) -> None:
        """Return once every node listens and a round trip through the cluster (a topic with
        a replica on every node, acks=all) succeeds."""
        for node in self.nodes.values():
            node.wait_listening(timeout)
        checked_round_trip(kafka_access(self.client_settings), timeout, replicas=self.count)

    def stop(self, timeout: float = 30.0) -> list[int]:
        """Stop every node (SIGTERM to all at once, so none waits for a quorum that is leaving,
        then SIGKILL what is left); the ids of those that were running."""
        running = {
            node_id: pid
            for node_id, node in self.nodes.items()
            if (pid := process.running_pid(node.pid_file)) is not None
        }
        self._resume()  # a stopped process would sit on its SIGTERM until the SIGKILL
        for pid in running.values():
            process.send_signal(pid, signal.SIGTERM)
        for node_id, pid in running.items():
            process.terminate(pid, timeout)
            self.nodes[node_id].pid_file.unlink(missing_ok=True)
        return sorted(running)

    def _resume(self) -> None:
        for node in self.nodes.values():
            if (pid := process.running_pid(node.pid_file)) is not None:
                process.send_signal(pid, signal.SIGCONT)

    # -- one node ----------------------------------------------------------------------------
    def kill(self, node_id: int, sig: signal.Signals = signal.SIGKILL, timeout: float = 30) -> int:
        """Send `sig` to broker `node_id`; for SIGKILL and SIGTERM wait until it is gone.
        Returns its pid."""
        node = self.node(node_id)
        pid = process.running_pid(node.pid_file)
        if pid is None:
            raise StackError(f"Kafka broker {node_id} is not running")
        process.send_signal(pid, sig)
        if sig in (signal.SIGKILL, signal.SIGTERM) and not process.wait_until(
            lambda: process.exited(pid), timeout, 0.1
        ):
            raise StackError(f"Kafka broker {node_id} (pid {pid}) did not exit on {sig.name}")
        return pid

    def start_node(self, node_id: int, timeout: float) -> bool:
        """Start broker `node_id` unless it runs; return once the cluster lists it again.
        True when it was started now."""
        self.node(node_id)  # a one-line error for an unknown id
        self._ensure_identity()
        node = self.nodes[node_id]
        started = node.start()
        node.wait_listening(timeout)
        if not process.wait_until(lambda: node_id in self.registered(), timeout, 0.5):
            raise StackError(
                f"Kafka broker {node_id} runs but did not rejoin the cluster in {timeout:.0f}s"
            )
        return started

    def stop_node(self, node_id: int, timeout: float = 30.0) -> bool:
        """Stop broker `node_id` cleanly (SIGTERM, then SIGKILL); True when it was running."""
        return self.node(node_id).stop(timeout)

    # -- what the cluster says ---------------------------------------------------------------
    def registered(self) -> set[int]:
        """The ids of the brokers the cluster lists now (empty when none answers)."""
        try:
            described = self._ask(lambda admin: admin.describe_cluster(), timeout=5)
        except Exception:
            return set()
        return {int(broker["node_id"]) for broker in described.get("brokers", [])}

    def partition_state(self, topic: str, partition: int) -> PartitionState:
        """Leader, replicas and in-sync replicas of one partition (leader -1: none)."""
        (described,) = self._ask(lambda admin: admin.describe_topics([topic]))
        for entry in described.get("partitions", []):
            if entry["partition"] == partition:
                return PartitionState(
                    int(entry["leader"]),
                    tuple(int(r) for r in entry["replicas"]),
                    tuple(int(r) for r in entry["isr"]),
                )
        raise StackError(f"topic {topic} has no partition {partition}")

    def leader_of(self, topic: str, partition: int) -> int:
        return self.partition_state(topic, partition).leader

    def _ask(self, request: Any, timeout: float = 15.0) -> Any:
        """One admin request, asked again (a new client) while a broker just lost is still
        the one the client picks; the last error after `timeout`."""
        access = kafka_access(self.client_settings)
        deadline = time.monotonic() + timeout
        while True:
            ask = admin_request(access, request)
            try:
                return asyncio.run(asyncio.wait_for(ask, max(deadline - time.monotonic(), 1)))
            except Exception:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(0.5)

    def health(self) -> dict[int, process.Health]:
        """Each node: is its process alive, and does the cluster list it as a broker?"""
        listed: set[int] = set()
        controller, problem = -1, ""
        if self.is_running():  # else there is nobody to ask
            try:
                described = self._ask(lambda admin: admin.describe_cluster(), timeout=5)
                listed = {int(b["node_id"]) for b in described.get("brokers", [])}
                controller = int(described.get("controller_id", -1))
            except Exception as exc:
                problem = f"the cluster does not answer: {exc!r}"
        protocol = self.settings.kafka_security_protocol
        found: dict[int, process.Health] = {}
        for node_id, node in self.nodes.items():
            pid = process.running_pid(node.pid_file)
            if pid is None:
                found[node_id] = process.Health(False, False, None, f"not running ({node.address})")
            elif node_id not in listed:
                why = problem or "running, but not listed by the cluster"
                found[node_id] = process.Health(True, False, pid, f"{node.address}: {why}")
            else:
                role = ", active controller" if node_id == controller else ""
                detail = (
                    f"broker {node_id} at {node.address}{role}; {len(listed)} of {self.count} "
                    f"brokers up, KRaft, Kafka {self.settings.kafka_version}, {protocol}"
                )
                found[node_id] = process.Health(True, True, pid, detail)
        return found
