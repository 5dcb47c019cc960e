"""Applying a batch of Kafka records to the projections: one transaction, offsets included."""

from minruntime.ingest.batch import apply_batch
from minruntime.ingest.decisions import apply_decisions, log_decisions, outcome_of, record_decisions
from minruntime.ingest.records import BatchOutcome, InboundRecord
from minruntime.store.requeue import NOMINATIONS_CHANNEL

__all__ = [
    "NOMINATIONS_CHANNEL",
    "BatchOutcome",
    "InboundRecord",
    "apply_batch",
    "apply_decisions",
    "log_decisions",
    "outcome_of",
    "record_decisions",
]
