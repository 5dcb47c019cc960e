"""Applying a batch of Kafka records to the projections: one transaction, offsets included."""

from minruntime.ingest.batch import NOMINATIONS_CHANNEL, apply_batch, topic_types_for
from minruntime.ingest.decisions import (
    apply_decisions,
    log_decisions,
    outcome_of,
    record_decisions,
)
from minruntime.ingest.records import BatchOutcome, DeadLetter, InboundRecord

__all__ = [
    "NOMINATIONS_CHANNEL",
    "BatchOutcome",
    "DeadLetter",
    "InboundRecord",
    "apply_batch",
    "apply_decisions",
    "log_decisions",
    "outcome_of",
    "record_decisions",
    "topic_types_for",
]
