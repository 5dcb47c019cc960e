"""A steady load of podgroup lifecycles for the fault tests, and what the service made of it.

`Load` produces ~1,000 events/s (submitted, allocated, released: three per podgroup, every id
once) from a thread with its own event loop and an idempotent producer, like the benchmark
trace's podgroup events. A batch the cluster does not acknowledge is sent again, with the same
ids, until it is: a resend may store a record twice, which the service must apply once
((source, id) in the event log). `acknowledged` counts the distinct events the cluster took;
`longest_stall` is the longest time the producer waited for an acknowledgement.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from typing import Any

from tests import cloudevents as ce
from tests.e2e.harness import Pipeline, wait_for

QUEUE = "faults"
TICK = 0.1  # seconds between two batches


class Load:
    """Podgroup lifecycles at ``rate`` events/s to the pipeline's podgroups topic (uids
    `load-<tag>-<n>`)."""

    def __init__(self, pipeline: Pipeline, *, tag: str, rate: int = 1000) -> None:
        self.pipeline = pipeline
        self.tag = tag
        self.per_tick = max(3, int(rate * TICK) // 3 * 3)
        self.acknowledged = 0
        self.failures = 0
        self.longest_stall = 0.0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load", daemon=True)
        self._next = 0

    def __enter__(self) -> Load:
        ce_queue = ce.queue(QUEUE, preempt="1h", time=ce.at(0))
        self.pipeline.produce_events("queues", [ce_queue])
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()

    def stop(self) -> int:
        """Stop producing; the number of distinct events the cluster acknowledged."""
        self._stop.set()
        self._thread.join(timeout=180)
        if self.error is not None:
            raise AssertionError(f"the load failed: {self.error!r}") from self.error
        return self.acknowledged

    def wait_acknowledged(self, more: int, timeout: float = 60) -> None:
        """Block until ``more`` further events are acknowledged."""
        target = self.acknowledged + more
        wait_for(lambda: self.acknowledged >= target, timeout, f"{more} more acknowledged events")

    def _batch(self) -> list[tuple[bytes, bytes]]:
        records = []
        for _ in range(self.per_tick // 3):
            n = self._next
            self._next += 1
            uid = f"load-{self.tag}-{n}"
            pods = ["p0", "p1"]
            for event in (
                ce.submitted(uid, QUEUE, pods, priority=50, time=ce.at(n * 0.001)),
                ce.allocated(uid, pods, ce.at(n * 0.001 + 1)),
                ce.released(uid, time=ce.at(n * 0.001 + 60), reason="completed"),
            ):
                records.append((uid.encode(), json.dumps(event).encode()))
        return records

    def _run(self) -> None:
        try:
            asyncio.run(self._produce())
        except BaseException as error:  # surfaced by stop()
            self.error = error

    async def _produce(self) -> None:
        from aiokafka import AIOKafkaProducer
        from aiokafka.errors import KafkaError

        access = self.pipeline.kafka
        topic = self.pipeline.topics["podgroups"]
        producer = AIOKafkaProducer(
            **access.client_kwargs(),
            enable_idempotence=True,
            linger_ms=5,
            request_timeout_ms=5000,
        )
        await producer.start()
        try:
            while not self._stop.is_set():
                started = time.monotonic()
                batch = self._batch()
                while True:
                    try:
                        futures = [await producer.send(topic, v, key=k) for k, v in batch]
                        await asyncio.gather(*futures)
                        break
                    except (KafkaError, TimeoutError):
                        self.failures += 1
                        if self._stop.is_set() and self.failures > 1000:
                            raise
                        await asyncio.sleep(0.5)
                self.acknowledged += len(batch)
                self.longest_stall = max(self.longest_stall, time.monotonic() - started)
                await asyncio.sleep(max(0.0, TICK - (time.monotonic() - started)))
        finally:
            await producer.stop()


def applied(pipeline: Pipeline, tag: str) -> int:
    """Distinct events of the load ``tag`` in the event log."""
    return int(
        pipeline.scalar(
            "SELECT count(*) FROM minruntime_state.event_log WHERE subject LIKE %s",
            (f"load-{tag}-%",),
        )
    )


def stored_next_offset(pipeline: Pipeline, role: str, partition: int) -> int:
    """The processor's stored next offset of one input partition (-1: none yet)."""
    value = pipeline.scalar(
        "SELECT next_offset FROM minruntime_state.consumer_offsets"
        " WHERE consumer_group = %s AND topic = %s AND partition = %s",
        (pipeline.group, pipeline.topics[role], partition),
    )
    return -1 if value is None else int(value)


def timed(what: Callable[[], Any], timeout: float, message: str) -> float:
    """Seconds until ``what`` returns something true."""
    started = time.monotonic()
    wait_for(what, timeout, message)
    return time.monotonic() - started
