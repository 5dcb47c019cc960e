"""A stack of its own for fault tests: a three-broker Kafka cluster and a PostgreSQL standby.

`fault_stack` is package-scoped: started once for this folder's tests (`stack up --brokers 3
--pg-standby`, about a minute on two cores), on ports and in a stack directory of its own, so
the default stack that the rest of the suite shares is never touched; stopped and deleted when
this folder's tests end (its JVMs and servers do not stay around for the rest of the suite).
A test that kills or fails over something calls `fault_stack.heal()` when it is done (or
relies on the next test doing so): `stack up` again, which restarts what is down, resumes a
broker stopped with SIGSTOP and re-clones a fenced PostgreSQL as the standby.

    leader = fault_stack.cluster.leader_of(topic, 0)
    fault_stack.cluster.kill(leader)             # kill -9; signal.SIGSTOP for a hung broker
    fault_stack.cluster.start_node(leader, 120)  # back, and listed by the cluster again
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus, kafka_cluster, stack_status, stack_up
from minruntime_dev.stack.kafka_cluster import KafkaCluster
from minruntime_dev.stack.manager import with_topology
from minruntime_dev.stack.pg_standby import PostgresPair
from minruntime_dev.topology import read_topology
from tests.conftest import free_port_pair, free_ports, private_stack_env, remove_stack

# Node N of the cluster listens at the first port + 10 * (N - 1), its controller one above.
_CLUSTER_PORT_SPAN = 24


@dataclass
class FaultStack:
    """The private stack: its environment (for `run_cli`), settings and handles."""

    env: dict[str, str]
    base: Settings
    """As `MINRUNTIME_*` give it: the first broker, the first server (what `stack up` takes)."""

    @property
    def settings(self) -> Settings:
        """A client's settings: every broker, both servers (read-write), as `Settings()` in
        this stack's environment reads them."""
        topology = read_topology(self.base.stack_dir)
        return with_topology(self.base, topology, topology)

    @property
    def cluster(self) -> KafkaCluster:
        """The Kafka cluster: kill, start, leader_of, partition_state."""
        return kafka_cluster(self.base)

    def postgres(self) -> PostgresPair:
        """The two PostgreSQL servers, which is primary as the stack remembers it now."""
        return PostgresPair(self.settings, read_topology(self.base.stack_dir))

    def status(self) -> StackStatus:
        """`stack status`, as a value."""
        return stack_status(self.base)

    def heal(self) -> StackStatus:
        """Everything up again: dead brokers started, a fenced server re-cloned as the standby."""
        status = stack_up(self.base)
        assert status.healthy, status
        return status


@pytest.fixture(scope="package")
def fault_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FaultStack]:
    """Three brokers and a primary with a synchronous standby, on ports of their own."""
    kafka_port = free_ports(_CLUSTER_PORT_SPAN)
    pg_port = free_port_pair()  # the standby listens one above
    stack_dir = tmp_path_factory.mktemp("fault-stack") / "stack"
    env = private_stack_env(stack_dir, kafka_port, pg_port)
    base = Settings(
        stack_dir=stack_dir,
        kafka_bootstrap=env["MINRUNTIME_KAFKA_BOOTSTRAP"],
        database_url=env["MINRUNTIME_DATABASE_URL"],
        kafka_heap="384m",
    )
    try:
        status = stack_up(base, brokers=3, pg_standby=True)
        assert status.healthy, status
        yield FaultStack(env, base)
    finally:
        remove_stack(base)
        shutil.rmtree(stack_dir, ignore_errors=True)
