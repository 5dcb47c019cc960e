"""The local stack: Apache Kafka (KRaft, from Maven Central jars) and PostgreSQL, no Docker;
with `--kube` also etcd and a real kube-apiserver, built once from the Go module proxy."""

from minruntime.stack.manager import (
    ComponentStatus,
    StackStatus,
    kube_down,
    kube_up,
    stack_down,
    stack_status,
    stack_up,
)

__all__ = [
    "ComponentStatus",
    "StackStatus",
    "kube_down",
    "kube_up",
    "stack_down",
    "stack_status",
    "stack_up",
]
