"""Lanes and offsets: work read from Kafka carried out concurrently, committed in order.

`Lanes` runs one lane per key (a podgroup uid): the jobs of a key one after the other, in the
order they were read; lanes of different keys run side by side. `Offsets` remembers, per
partition, which read records have reached an end: `committable()` gives each partition's
next offset to commit, which never passes a record still open, so a restart reads the open
ones (and any after them) again.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

log = logging.getLogger(__name__)

P = TypeVar("P")


class Offsets(Generic[P]):
    """Open and finished records per partition (offsets read in increasing order)."""

    def __init__(self) -> None:
        self._open: dict[P, OrderedDict[int, bool]] = {}
        self._committed: dict[P, int] = {}

    def read(self, partition: P, offset: int) -> None:
        """A record was read: open until `finish`."""
        self._open.setdefault(partition, OrderedDict())[offset] = False

    def finish(self, partition: P, offset: int) -> None:
        """A record reached its end."""
        records = self._open.get(partition)
        if records is not None and offset in records:
            records[offset] = True

    @property
    def open_count(self) -> int:
        """How many read records have not reached their end."""
        return sum(not done for records in self._open.values() for done in records.values())

    def committable(self) -> dict[P, int]:
        """Per partition, the next offset to commit, where it moved since the last call."""
        moved: dict[P, int] = {}
        for partition, records in self._open.items():
            position = None
            while records:
                offset, done = next(iter(records.items()))
                if not done:
                    break
                records.popitem(last=False)
                position = offset + 1
            if position is not None and position != self._committed.get(partition):
                self._committed[partition] = position
                moved[partition] = position
        return moved


class Lanes:
    """One lane per key: a key's jobs in order; different keys concurrently."""

    def __init__(self) -> None:
        self._lanes: dict[str, asyncio.Queue[Callable[[], Awaitable[None]]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        # The first error a job raised (a bug: a job ends its work itself): the owner raises it.
        self.failure: Exception | None = None

    @property
    def busy(self) -> int:
        """How many lanes have work."""
        return len(self._lanes)

    def add(self, key: str, job: Callable[[], Awaitable[None]]) -> None:
        """Queue `job` behind the key's earlier jobs (starting its lane if it has none)."""
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = asyncio.Queue()
            task = asyncio.create_task(self._run(key, lane), name=f"lane {key}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        lane.put_nowait(job)

    async def _run(self, key: str, lane: asyncio.Queue[Callable[[], Awaitable[None]]]) -> None:
        try:
            while not lane.empty():
                await lane.get_nowait()()
        except Exception as error:
            if self.failure is None:
                self.failure = error
        del self._lanes[key]  # not when cancelled: `close` clears every lane

    async def close(self) -> None:
        """Cancel every lane (their unfinished jobs stay open) and wait for them."""
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self._lanes.clear()
