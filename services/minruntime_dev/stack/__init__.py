"""The local stack: Apache Kafka (KRaft, from Maven Central jars) and PostgreSQL, no Docker;
with `--kube` also etcd and a real kube-apiserver, built once from the Go module proxy; with
`--brokers 3` a three-node Kafka cluster, with `--pg-standby` a synchronous PostgreSQL standby."""

from minruntime_dev.stack.manager import (
    ComponentStatus,
    StackStatus,
    kafka_cluster,
    kube_down,
    kube_up,
    stack_down,
    stack_failover,
    stack_status,
    stack_up,
)

__all__ = [
    "ComponentStatus",
    "StackStatus",
    "kafka_cluster",
    "kube_down",
    "kube_up",
    "stack_down",
    "stack_failover",
    "stack_status",
    "stack_up",
]
