"""How many records the processor can still apply per partition: its backlog, in records.

An offset is not a record. A transactional producer (the bridge writes in Kafka transactions)
ends every transaction with a commit marker, a control record that takes an offset but is no
event: the processor's stored next offset (the last applied record's offset + 1) then stays
one short of the log end for ever, and "log end - next offset" would report 1 per partition
on a processor that has applied everything. So the backlog is counted in records a
``read_committed`` reader is handed (data of committed transactions and non-transactional
data; markers and aborted transactions are skipped), never in offsets.

``records_behind`` reads from the stored next offset to the last stable offset (what a
``read_committed`` reader can see now), at most ``most`` records and ``seconds`` in all;
past those bounds the figure is "at most": the records counted plus the offsets not read.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Final, NamedTuple

from minruntime.kafka_access import KafkaAccess, start_client

# Records one `offsets show` reads at most to count a backlog exactly (all partitions).
BEHIND_READ_MOST: Final = 50_000
# ... and how long it reads at most.
BEHIND_READ_SECONDS: Final = 5.0
# One fetch's wait for records.
_FETCH_WAIT_MS: Final = 200


class Behind(NamedTuple):
    """Records still to apply in one partition; ``exact`` False: an upper bound."""

    records: int
    exact: bool


async def records_behind(
    access: KafkaAccess,
    nexts: Mapping[tuple[str, int], int],
    *,
    most: int = BEHIND_READ_MOST,
    seconds: float = BEHIND_READ_SECONDS,
) -> dict[tuple[str, int], Behind]:
    """(topic, partition) -> the records from its next offset that a reader would be handed."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    if not nexts:
        return {}
    consumer = AIOKafkaConsumer(
        **access.client_kwargs(), enable_auto_commit=False, isolation_level="read_committed"
    )
    await start_client(consumer, access)
    try:
        tps = [TopicPartition(topic, partition) for topic, partition in nexts]
        # read_committed: the end offsets are the last stable offsets.
        ends = {
            (tp.topic, tp.partition): int(end)
            for tp, end in (await consumer.end_offsets(tps)).items()
        }
        found: dict[tuple[str, int], Behind] = {}
        reading: dict[tuple[str, int], TopicPartition] = {}
        for tp in tps:
            key = (tp.topic, tp.partition)
            if nexts[key] >= ends[key]:
                found[key] = Behind(0, exact=True)
            else:
                reading[key] = tp
        if not reading:
            return found
        consumer.assign(list(reading.values()))
        for key, tp in reading.items():
            consumer.seek(tp, nexts[key])
        counted = dict.fromkeys(reading, 0)
        deadline = time.monotonic() + seconds
        while reading and sum(counted.values()) < most and time.monotonic() < deadline:
            fetched = await consumer.getmany(*reading.values(), timeout_ms=_FETCH_WAIT_MS)
            for tp, messages in fetched.items():
                counted[(tp.topic, tp.partition)] += len(messages)
            for key, tp in list(reading.items()):
                # The position moves past markers and aborted records as well as records.
                if await consumer.position(tp) >= ends[key]:
                    found[key] = Behind(counted[key], exact=True)
                    del reading[key]
        for key, tp in reading.items():
            left = max(ends[key] - await consumer.position(tp), 0)
            found[key] = Behind(counted[key] + left, exact=False)
        return found
    finally:
        await consumer.stop()


def behind_after(position: int | None, end: int | None, buffered: int) -> int | None:
    """Records still to apply in a partition the processor reads: ``None`` when unknown.

    ``buffered``: records fetched and not yet applied; ``position``: the fetcher's next
    offset (past every marker it read); ``end``: the last stable offset. Exact once the
    fetcher has read up to the end; before, the offsets not fetched yet count as records.
    """
    if position is None or end is None or end < 0:
        return None
    return buffered + max(end - position, 0)
