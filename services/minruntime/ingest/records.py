"""What the processor hands to ``apply_batch``, and what it gets back."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from minruntime.events import Event, Header
from minruntime.ingest.runs import LostRun


class InboundRecord(NamedTuple):
    """One Kafka record as consumed: where it was, its raw key, value and headers.

    A named tuple: immutable, and made for every record consumed at a fifth of a frozen
    dataclass's cost. ``headers`` are the record's (name, value) pairs as the Kafka client
    gives them (empty for most records): ``ce_`` headers make it a binary-mode CloudEvent.
    """

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int | None = None
    headers: Sequence[Header] = ()


def event_log_row(
    event: Event, payload: bytes, topic: str, partition: int | None, offset: int | None
) -> dict[str, Any]:
    """The ``event_log`` row of an applied event (its structured form: the payload), and where
    it was consumed (no partition nor offset for an event the service made itself)."""
    return {
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "event_id": event.id,
        "source": event.source,
        "type": event.type,
        "subject": event.subject,
        "event_time": event.time,
        "payload": payload.decode("utf-8"),
    }


@dataclass
class BatchOutcome:
    """What one ``apply_batch`` call did with its records."""

    applied: int = 0
    # Records at an offset below the stored next offset: already applied (a redelivery).
    skipped_offsets: int = 0
    # Events whose (source, id) was already applied: counted, not applied, not dead-lettered.
    duplicate_ids: int = 0
    dead_lettered: int = 0
    applied_types: Counter[str] = field(default_factory=Counter)
    dead_letter_kinds: Counter[str] = field(default_factory=Counter)
    # (topic, partition) -> the next offset stored for the consumer group.
    next_offsets: dict[tuple[str, int], int] = field(default_factory=dict)
    # Runs an eviction ended (for the metrics of work lost).
    lost_runs: list[LostRun] = field(default_factory=list)
    # Applied events that carried a value the service ignores (core.IgnoredValue), by field.
    ignored_values: Counter[str] = field(default_factory=Counter)

    def add(self, other: BatchOutcome) -> None:
        """Count ``other``'s records in this outcome too (a batch applied in parts)."""
        self.applied += other.applied
        self.skipped_offsets += other.skipped_offsets
        self.duplicate_ids += other.duplicate_ids
        self.dead_lettered += other.dead_lettered
        self.applied_types.update(other.applied_types)
        self.dead_letter_kinds.update(other.dead_letter_kinds)
        # Parts are applied in order, so a later part's next offset is the larger one.
        self.next_offsets.update(other.next_offsets)
        self.lost_runs.extend(other.lost_runs)
        self.ignored_values.update(other.ignored_values)

    @property
    def records(self) -> int:
        """Every record of the batch, whatever happened to it."""
        return self.applied + self.skipped_offsets + self.duplicate_ids + self.dead_lettered


@dataclass(frozen=True)
class DeadLetter:
    """A record that could not be applied, and why (``kind`` is machine-readable)."""

    record: InboundRecord
    kind: str
    message: str
