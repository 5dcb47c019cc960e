"""Batches from a faust stream, gathered while the previous batch is being applied.

faust's ``Stream.take_events`` buffers nothing while the agent works on a batch: its buffering
processor waits until the batch is consumed, so faust's per-record work (fetch, stream,
processors) for the next batch starts only once the previous batch is stored, and is on the
critical path of every batch. ``take_batches`` keeps ONE batch filling meanwhile (at most
``max_events`` records, then the stream waits), so the next batch is ready, and decoded
(``stream.app``'s processor), when the sink asks for it.

Acknowledgements are as with ``take_events``: the records of a batch are acked when the loop
body that got it ends (faust then commits Kafka offsets up to the highest record all of whose
predecessors are acked), never before; the records filling the next batch are not acked, so
no Kafka offset moves past them. The database's stored offsets decide what is applied
(``apply_batch``), so a batch gathered before a rebalance is harmless: what another instance
applied meanwhile is skipped.

This reuses the stream internals ``take_events`` uses (``_enable_passive``, ``_processors``,
``_active_agens``): faust-streaming is pinned in constraints.txt.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any


async def take_batches(stream: Any, max_events: int, within: float) -> AsyncIterator[list[Any]]:
    """Yield lists of at most ``max_events`` faust events: full ones, or what ``within`` gave."""
    filling: list[Any] = []
    full = asyncio.Event()  # ``filling`` holds max_events
    taken = asyncio.Event()  # ``filling`` was handed out: there is room again

    async def add_to_batch(value: Any) -> Any:
        event = stream.current_event
        if event is None:
            raise RuntimeError("batching found no current event")
        while len(filling) >= max_events:
            taken.clear()
            if await stream.wait_for_stopped(taken):
                return value  # stopping: the record is not acked, Kafka keeps it
        filling.append(event)
        if len(filling) >= max_events:
            full.set()
        return value

    acks = stream.enable_acks
    stream.enable_acks = False  # this generator acks, after the body that got the batch
    stream.add_processor(add_to_batch)
    stream._enable_passive(aiter(stream.channel))
    try:
        while not stream.should_stop:
            if not full.is_set():
                await stream.wait_for_stopped(full, timeout=within)
            if not filling or stream.should_stop:
                continue
            batch = filling[:]
            filling.clear()
            full.clear()
            taken.set()
            try:
                yield batch
            finally:
                for event in batch:
                    await stream.ack(event)
    finally:
        stream.enable_acks = acks
        stream._processors.remove(add_to_batch)
