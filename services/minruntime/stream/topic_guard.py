"""The processor's side of "offsets belong to one topic's life": refuse loudly, keep the rest.

For each batch the guard asks Kafka for the topic's ID (after the records were fetched, so the
answer is at least as new as they are) and hands it, with the partitions' high watermarks, to
the batch's transaction, which compares them with the stored offsets under their row locks
(``ingest.offsets.lock_offsets``). Once a batch of the topic has committed, the next ones do not
wait for the answer: each is written against the ID the last one confirmed while the request
runs, and its transaction waits for the answer just before it commits; an answer that differs
rolls the batch back, and it is checked again as below, against the answer (a request's round
trip, 1.5 ms at the median and 16 ms at the p99 on a loaded machine, was on every batch's path
before: docs/benchmarks.md). The first batch of a topic, and every batch of a refused one,
waits for the answer first. The watermarks are the fetcher's
last figures, which can be older than the stored offsets when several instances share the
partitions: an instance that stalled past its session resumes with a batch fetched before
another instance took the partition over and read on. So a refusal is never made on the
fetcher's figures alone: the batch is checked again at once with the log ends Kafka reports
now, and only a mismatch then refuses the topic (and every re-check uses Kafka's figures). On
a mismatch nothing is stored and the guard:

- logs one ERROR line naming the topic (once per reason, not on every re-check),
- sets ``minruntime_topic_refused{role}`` to 1 and reports the topic through ``readiness``,
- holds the batch unapplied and uncommitted (the topic's lane of the batched consumer waits,
  its partitions stop being fetched once its buffer is full) and re-checks every few seconds;
  the other topics' lanes go on. Once an operator has re-baselined the topic
  (``minruntime offsets rebaseline``), the held batch is applied and consumption resumes —
  unless the held batch starts past the new baseline (the consumer had read on, or the batch
  is from the old life): then the records in between would never be read, so the processor
  stops (without acknowledging the batch) to be restarted and read the topic from the start.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
from collections.abc import Awaitable, Callable, Mapping
from typing import TypeVar

from aiokafka import AIOKafkaClient
from aiokafka.errors import KafkaError
from prometheus_client import CollectorRegistry, Gauge

from minruntime.core.topic_life import (
    StoredOffset,
    TopicLife,
    life_changed,
    refusal_line,
    unread_gap,
)
from minruntime.errors import TopicLifeChangedError, UserError
from minruntime.ingest import BatchOutcome
from minruntime.ingest.isolation import Confirm
from minruntime.kafka_access import KafkaAccess
from minruntime.retry import retry_async
from minruntime.topic_admin import describe_topics, fetch_topic_ids

log = logging.getLogger(__name__)

# What the processor logs (at ERROR) of a topic it will not consume until an operator acts:
# the demo watches its log for it rather than waiting out its timeout.
REFUSAL = "refusing to consume it until re-baselined"
_Answer = TypeVar("_Answer")

# Applies the batch with these lives; the callable (if any) is called just before its commit.
ApplyWithLives = Callable[[Mapping[str, TopicLife], Confirm | None], Awaitable[BatchOutcome]]
ReadStored = Callable[[str], Awaitable[list[StoredOffset]]]


def _confirmation(topic: str, known: str, answer: concurrent.futures.Future[str | None]) -> Confirm:
    """What a batch written against ``known`` calls before its commit (in its thread): waits
    for Kafka's answer and raises TopicLifeChangedError (a rollback) unless it is ``known``."""

    def confirm() -> None:
        current = answer.result()
        if current != known:
            raise TopicLifeChangedError(
                topic,
                f"topic {topic!r} changed while a batch was written (topic ID was {known}, "
                f"is now {current})",
            )

    return confirm


class RereadRequiredError(RuntimeError):
    """A re-baselined topic must be read again from its baseline: restart the processor."""


class TopicGuard:
    """Topic IDs for the processor's batches, and the topics it refuses to consume."""

    def __init__(
        self,
        access: KafkaAccess,
        registry: CollectorRegistry,
        read_stored: ReadStored,
        *,
        recheck_seconds: float = 5.0,
    ) -> None:
        self._access = access
        self._read_stored = read_stored
        self._recheck = recheck_seconds
        self._client: AIOKafkaClient | None = None
        self._client_lock = asyncio.Lock()
        self._refused: dict[str, str] = {}
        # Topic -> the ID the last committed batch of it was checked against.
        self._confirmed: dict[str, str] = {}
        self._refused_gauge = Gauge(
            "minruntime_topic_refused",
            "1 while the processor refuses to consume the topic of this role because its "
            "stored offsets belong to another life of it (see `minruntime offsets show`).",
            ["role"],
            registry=registry,
        )

    def readiness(self) -> str | None:
        """None while every topic is consumed, else one line naming the refused topics."""
        return refusal_line(dict(self._refused))

    async def apply(
        self,
        topic: str,
        role: str,
        firsts: Mapping[int, int],
        log_ends: Callable[[], Mapping[int, int]],
        run: ApplyWithLives,
        stopping: Callable[[], bool] = lambda: False,
    ) -> BatchOutcome:
        """Run ``run`` with what Kafka holds of ``topic`` now; hold while the topic is refused.

        ``firsts``: partition -> the batch's first offset there. ``stopping``: True once the
        processor is shutting down (a held batch then ends the process, unacknowledged).
        """
        from_broker = False  # log ends: the fetcher's watermarks, or Kafka's figures now
        while True:
            ends = await self._broker_log_ends(topic, firsts) if from_broker else log_ends()
            known = self._confirmed.get(topic)
            answer: concurrent.futures.Future[str | None] | None = None
            confirm: Confirm | None = None
            if known is None or from_broker or topic in self._refused:
                life = TopicLife(await self._topic_id(topic), ends)
                if topic in self._refused:
                    await self._check_rebaselined(topic, life, firsts)
            else:
                # Asked now, awaited by the batch's transaction just before it commits.
                loop = asyncio.get_running_loop()
                answer = asyncio.run_coroutine_threadsafe(self._topic_id(topic), loop)
                confirm = _confirmation(topic, known, answer)
                life = TopicLife(known, ends)
            try:
                outcome = await run({topic: life}, confirm)
            except TopicLifeChangedError as refused:
                if not from_broker:
                    from_broker = True  # the watermarks may be stale: ask Kafka, at once
                    continue
                self._refuse(topic, role, refused.reason)
                await self._hold(topic, stopping)
                continue
            finally:
                if answer is not None:
                    answer.cancel()  # a batch that failed before its commit: not waited for
            if life.topic_id is not None:
                self._confirmed[topic] = life.topic_id
            self._resume(topic, role)
            return outcome

    async def _hold(self, topic: str, stopping: Callable[[], bool]) -> None:
        """Wait until the next re-check; leave at once, unacknowledged, when shutting down."""
        waited = 0.0
        while waited < self._recheck:
            if stopping():
                # The consumer's stop waits for the batch in flight, which would wait for an
                # operator. Ending the process leaves the batch (never committed) to be read
                # again.
                log.warning("stopping while topic %r is refused; its batch stays unread", topic)
                logging.shutdown()
                os._exit(0)
            step = min(0.5, self._recheck - waited)
            await asyncio.sleep(step)
            waited += step

    async def _check_rebaselined(
        self, topic: str, life: TopicLife, firsts: Mapping[int, int]
    ) -> None:
        stored = await self._read_stored(topic)
        if life_changed(topic, stored, life) is not None:
            return  # still refused: the batch's own check says so again
        gap = unread_gap(topic, stored, firsts)
        if gap is not None:
            log.error("%s; stopping so that a restart reads it from there", gap)
            raise RereadRequiredError(gap)

    async def close(self) -> None:
        """Close the Kafka connection (at shutdown)."""
        if self._client is not None:
            await self._client.close()
            self._client = None

    async def _topic_id(self, topic: str) -> str | None:
        async def ask() -> str | None:
            # One client for the four lanes: one of them at a time makes, uses or drops it.
            async with self._client_lock:
                try:
                    if self._client is None:
                        self._client = AIOKafkaClient(**self._access.client_kwargs())
                        await self._client.bootstrap()
                    return (await fetch_topic_ids(self._client, [topic])).get(topic)
                except (KafkaError, OSError, UserError):
                    # A new client next time: the brokers it knew may be gone (a new cluster).
                    await self.close()
                    raise

        return await self._until_answered("the ID", topic, ask)

    async def _broker_log_ends(self, topic: str, partitions: Mapping[int, int]) -> dict[int, int]:
        """Partition -> log end offset as Kafka reports it now, for ``partitions``."""
        described = await self._until_answered(
            "the ends", topic, lambda: describe_topics(self._access, [topic])
        )
        found = described.get(topic)
        ends = {} if found is None else found.log_ends
        return {partition: ends[partition] for partition in partitions if partition in ends}

    async def _until_answered(
        self, what: str, topic: str, ask: Callable[[], Awaitable[_Answer]]
    ) -> _Answer:
        """``ask()``'s answer; while Kafka is unreachable (so is the topic) the batch waits."""
        return await retry_async(
            ask,
            what=f"asking Kafka for {what} of topic {topic!r}",
            transient=lambda error: isinstance(error, KafkaError | OSError | UserError),
            logger=log,
        )

    def _refuse(self, topic: str, role: str, reason: str) -> None:
        self._confirmed.pop(topic, None)
        if self._refused.get(topic) != reason:
            log.error(
                "%s; " + REFUSAL + ": `minruntime offsets rebaseline %s --from-start` "
                "(or --from-end)",
                reason,
                topic,
            )
        self._refused[topic] = reason
        self._refused_gauge.labels(role).set(1)

    def _resume(self, topic: str, role: str) -> None:
        if self._refused.pop(topic, None) is not None:
            log.warning("consuming topic %r again: its offsets were re-baselined", topic)
        self._refused_gauge.labels(role).set(0)
