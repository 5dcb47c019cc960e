"""Applying a batch of Kafka records to the projections: one transaction, offsets included."""

from minruntime.ingest.batch import apply_batch, topic_types_for
from minruntime.ingest.records import BatchOutcome, DeadLetter, InboundRecord

__all__ = ["BatchOutcome", "DeadLetter", "InboundRecord", "apply_batch", "topic_types_for"]
