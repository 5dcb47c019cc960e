"""The local stack: Apache Kafka (KRaft, from Maven Central jars) and PostgreSQL, no Docker."""

from minruntime.stack.manager import (
    ComponentStatus,
    StackStatus,
    stack_down,
    stack_status,
    stack_up,
)

__all__ = ["ComponentStatus", "StackStatus", "stack_down", "stack_status", "stack_up"]
