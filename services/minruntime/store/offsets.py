"""The one writer of the consumer offsets, tied to the life of the topic they were read from.

``lock_offsets`` is the offsets part of ``apply_batch``: it locks the batch's offset rows and,
when the caller says which life of each topic Kafka holds now, refuses (raises) before a single
record is skipped or applied if the stored offsets belong to another one. The check runs in the
batch's own transaction, under the row locks, so no batch can store offsets across a change of
topic. The operator commands (`minruntime offsets show|rebaseline`) read and reset the rows here.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Final

from sqlalchemy import Connection

from minruntime.core.topic_life import StoredOffset, TopicLife, life_changed, untied
from minruntime.errors import TopicLifeChangedError
from minruntime.store.schema import StateTables

_LOCK_OFFSETS: Final = (
    "INSERT INTO minruntime_state.consumer_offsets AS o (consumer_group, topic, partition,"
    " next_offset, topic_id) SELECT :group, t, p, 0, i FROM unnest(CAST(:topics AS text[]),"
    " CAST(:partitions AS int[]), CAST(:ids AS text[])) AS u(t, p, i) ORDER BY t, p"
    " ON CONFLICT (consumer_group, topic, partition) DO UPDATE SET next_offset = o.next_offset"
    " RETURNING topic, partition, next_offset, topic_id"
)
_STORE_OFFSET: Final = (
    "UPDATE minruntime_state.consumer_offsets SET next_offset = :next, updated_at = now()"
    " WHERE consumer_group = :group AND topic = :topic AND partition = :partition"
)
_TIE: Final = (
    "UPDATE minruntime_state.consumer_offsets SET topic_id = :topic_id, updated_at = now()"
    " WHERE consumer_group = :group AND topic = :topic AND partition = ANY(:partitions)"
)
_STORED: Final = (
    "SELECT topic, partition, next_offset, topic_id, updated_at"
    " FROM minruntime_state.consumer_offsets WHERE consumer_group = :group"
    " ORDER BY topic, partition"
)
_LOCK_TOPIC: Final = (
    "SELECT partition, next_offset, topic_id FROM minruntime_state.consumer_offsets"
    " WHERE consumer_group = :group AND topic = :topic ORDER BY partition FOR UPDATE"
)
_FORGET_TOPIC: Final = (
    "DELETE FROM minruntime_state.consumer_offsets WHERE consumer_group = :group AND topic = :topic"
)
_BASELINE: Final = (
    "INSERT INTO minruntime_state.consumer_offsets (consumer_group, topic, partition,"
    " next_offset, topic_id) VALUES (:group, :topic, :partition, :next, :topic_id)"
)


def lock_offsets(
    conn: Connection,
    tables: StateTables,
    group: str,
    partitions: Sequence[tuple[str, int]],
    lives: Mapping[str, TopicLife] | None,
) -> dict[tuple[str, int], int]:
    """Lock (creating at 0) the offset rows of ``partitions``; (topic, partition) -> next offset.

    With ``lives`` (topic -> what Kafka holds now), raise TopicLifeChangedError when a topic's
    stored offsets belong to another life of it, and tie rows stored without an ID to it.
    """
    lives = lives or {}
    rows = conn.execute(
        tables.text(_LOCK_OFFSETS),
        {
            "group": group,
            "topics": [topic for topic, _ in partitions],
            "partitions": [partition for _, partition in partitions],
            "ids": [lives[topic].topic_id if topic in lives else None for topic, _ in partitions],
        },
    ).all()
    stored: dict[str, list[StoredOffset]] = defaultdict(list)
    for row in rows:
        stored[row.topic].append(StoredOffset(row.partition, row.next_offset, row.topic_id))
    for topic, life in sorted(lives.items()):
        if topic not in stored:
            continue
        reason = life_changed(topic, stored[topic], life)
        if reason is not None:
            raise TopicLifeChangedError(topic, reason)
        loose = untied(stored[topic])
        if loose:
            conn.execute(
                tables.text(_TIE),
                {"group": group, "topic": topic, "topic_id": life.topic_id, "partitions": loose},
            )
    return {(row.topic, row.partition): row.next_offset for row in rows}


def store_offsets(
    conn: Connection, tables: StateTables, group: str, next_offsets: Mapping[tuple[str, int], int]
) -> None:
    """Store the next offsets ((topic, partition) -> offset) of rows ``lock_offsets`` locked."""
    if next_offsets:
        conn.execute(
            tables.text(_STORE_OFFSET),
            [
                {"group": group, "topic": topic, "partition": partition, "next": offset}
                for (topic, partition), offset in next_offsets.items()
            ],
        )


def stored_offsets(
    conn: Connection, tables: StateTables, group: str
) -> dict[str, list[StoredOffset]]:
    """Every stored row of ``group``: topic -> rows in partition order."""
    stored: dict[str, list[StoredOffset]] = defaultdict(list)
    for row in conn.execute(tables.text(_STORED), {"group": group}):
        stored[row.topic].append(StoredOffset(row.partition, row.next_offset, row.topic_id))
    return dict(stored)


def lock_topic(conn: Connection, tables: StateTables, group: str, topic: str) -> list[StoredOffset]:
    """The stored rows of one topic, locked against a concurrent batch until commit."""
    rows = conn.execute(tables.text(_LOCK_TOPIC), {"group": group, "topic": topic})
    return [StoredOffset(row.partition, row.next_offset, row.topic_id) for row in rows]


def rebaseline(
    conn: Connection,
    tables: StateTables,
    group: str,
    topic: str,
    topic_id: str,
    next_offsets: Mapping[int, int],
) -> None:
    """Replace the topic's rows by ``next_offsets`` (partition -> next offset) under ``topic_id``.

    Every row goes: the topic's new life may have another number of partitions.
    """
    conn.execute(tables.text(_FORGET_TOPIC), {"group": group, "topic": topic})
    conn.execute(
        tables.text(_BASELINE),
        [
            {"group": group, "topic": topic, "partition": p, "next": n, "topic_id": topic_id}
            for p, n in sorted(next_offsets.items())
        ],
    )


_REWIND: Final = (
    "UPDATE minruntime_state.consumer_offsets AS o SET next_offset = u.first"
    " FROM unnest(CAST(:topics AS text[]), CAST(:partitions AS int[]),"
    " CAST(:firsts AS bigint[])) AS u(t, p, first)"
    " WHERE o.consumer_group = :group AND o.topic = u.t AND o.partition = u.p"
    " AND o.next_offset > u.first"
)


def rewind_to(
    conn: Connection, tables: StateTables, group: str, firsts: Mapping[tuple[str, int], int]
) -> None:
    """Lower the stored next offsets to ``firsts`` ((topic, partition) -> offset), never raise them.

    Only for replays (``ingest.offsets.rewind_to``).
    """
    conn.execute(
        tables.text(_REWIND),
        {
            "group": group,
            "topics": [topic for topic, _ in firsts],
            "partitions": [partition for _, partition in firsts],
            "firsts": list(firsts.values()),
        },
    )
