"""The service's Kafka topics: now in ``minruntime.topic_admin`` (one module for the stream
processor and the cluster bridge). These names stay importable from here for the modules
and tests that name this module."""

from __future__ import annotations

from minruntime.topic_admin import (
    FOREVER,
    INPUT_ROLES,
    SEVEN_DAYS_MS,
    THIRTY_DAYS_MS,
    ClusterFacts,
    Replication,
    TopicRole,
    TopicSpec,
    ensure_topics,
    input_topic_roles,
    replication_for,
    topic_names,
    topic_specs,
)

__all__ = [
    "FOREVER",
    "INPUT_ROLES",
    "SEVEN_DAYS_MS",
    "THIRTY_DAYS_MS",
    "ClusterFacts",
    "Replication",
    "TopicRole",
    "TopicSpec",
    "ensure_topics",
    "input_topic_roles",
    "replication_for",
    "topic_names",
    "topic_specs",
]
