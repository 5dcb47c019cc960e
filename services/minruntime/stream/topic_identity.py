"""Kafka's topic IDs: now in ``minruntime.topic_admin`` (one module for the stream processor
and the cluster bridge). These names stay importable from here for the modules and tests
that name this module."""

from __future__ import annotations

from minruntime.topic_admin import (
    KafkaTopic,
    TopicIdUnavailableError,
    describe_topics,
    fetch_topic_ids,
)

__all__ = ["KafkaTopic", "TopicIdUnavailableError", "describe_topics", "fetch_topic_ids"]
