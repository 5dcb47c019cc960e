"""Replays' view of the consumer offsets: cut a log into the lives of its topics, rewind to them.

The offsets themselves are read and written by ``minruntime.store.offsets`` only.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy import Connection

from minruntime.ingest.records import InboundRecord
from minruntime.store import offsets as stored
from minruntime.store.schema import StateTables


def laps(records: Sequence[InboundRecord]) -> list[list[InboundRecord]]:
    """``records`` cut where a partition's offset goes back: where a later life of a topic starts.

    For replays of a log in which every record appears once (the event log, a topic read
    from its start): there, an offset at or below an earlier one is a new life, not a repeat.
    """
    cut: list[list[InboundRecord]] = [[]]
    last: dict[tuple[str, int], int] = {}
    for record in records:
        where = (record.topic, record.partition)
        if where in last and record.offset <= last[where]:
            cut.append([])
            last = {}
        cut[-1].append(record)
        last[where] = record.offset
    return [lap for lap in cut if lap]


def rewind_to(
    conn: Connection, tables: StateTables, group: str, records: Sequence[InboundRecord]
) -> None:
    """Lower the stored next offsets to the first offset of each partition in ``records``.

    Only for replays (see ``laps``): a record is then never a redelivery, so a record below
    the stored offset starts another life of its topic, and must be applied.
    """
    firsts: dict[tuple[str, int], int] = {}
    for record in records:
        firsts.setdefault((record.topic, record.partition), record.offset)
    stored.rewind_to(conn, tables, group, firsts)
