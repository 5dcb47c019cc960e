"""Whether stored offsets belong to the life of a topic that Kafka holds now.

The processor skips a record whose offset is below the next offset stored for its partition,
as already applied. That is only true while the topic is the one those offsets were read
from: a topic deleted and created again, or a new or restored cluster, numbers its records
from 0 again, and the skip would drop new records without a trace. Two pieces of evidence:
Kafka's topic ID (a new one for every creation of a topic) and the partition's log end (a log
shorter than what was applied from it is not the log it was applied from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field


@dataclass(frozen=True)
class TopicLife:
    """What Kafka says of a topic now: its ID (None: not reported) and known log ends."""

    topic_id: str | None
    # partition -> log end offset (high watermark); partitions without a figure are absent.
    log_ends: Mapping[int, int] = field(default_factory=dict)


@dataclass(frozen=True)
class StoredOffset:
    """One stored row: the next offset to apply and the topic ID it was read under."""

    partition: int
    next_offset: int
    topic_id: str | None


def life_changed(topic: str, stored: Sequence[StoredOffset], life: TopicLife) -> str | None:
    """One line saying why ``stored`` does not belong to ``life`` of ``topic``; None if it does.

    A row without a topic ID (stored before IDs were kept) is not evidence either way: it is
    tied to the current ID by the caller (see ``untied``).
    """
    if life.topic_id is None:
        return f"Kafka reports no topic ID for topic {topic!r} (was it deleted?)"
    for row in stored:
        if row.topic_id is not None and row.topic_id != life.topic_id:
            return (
                f"topic {topic!r} is not the one its stored offsets were read from "
                f"(topic ID was {row.topic_id}, is now {life.topic_id}: deleted and "
                "recreated, or another cluster)"
            )
    for row in sorted(stored, key=lambda item: item.partition):
        log_end = life.log_ends.get(row.partition)
        if log_end is not None and log_end < row.next_offset:
            return (
                f"topic {topic!r} partition {row.partition} ends at offset {log_end} but "
                f"offsets up to {row.next_offset} were applied from it (a restored or "
                "truncated log)"
            )
    return None


def unread_gap(topic: str, stored: Sequence[StoredOffset], firsts: Mapping[int, int]) -> str | None:
    """One line when a held batch starts after the stored next offset of a partition; else None.

    After a re-baseline, the batch the processor held while the topic was refused may begin
    past the new baseline (the consumer had read on, or the batch is from the old life): the
    records in between would never be read. ``firsts``: partition -> first offset in the batch.
    """
    for row in sorted(stored, key=lambda item: item.partition):
        first = firsts.get(row.partition)
        if first is not None and first > row.next_offset:
            return (
                f"topic {topic!r} partition {row.partition} was re-baselined to offset "
                f"{row.next_offset} but the consumer is at offset {first}"
            )
    return None


def untied(stored: Sequence[StoredOffset]) -> list[int]:
    """Partitions whose stored row carries no topic ID yet, in order."""
    return sorted(row.partition for row in stored if row.topic_id is None)


def refusal_line(refused: Mapping[str, str]) -> str | None:
    """The readiness answer for refused topics: None when none, else one line naming them."""
    if not refused:
        return None
    topics = ", ".join(sorted(refused))
    first = refused[min(refused)]
    more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
    return (
        f"refusing to consume {topics}: {first}{more}; "
        "see `minruntime offsets show` and `minruntime offsets rebaseline`"
    )
