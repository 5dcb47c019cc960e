"""The processor's Kafka consumer: the input topics read in batches, one lane per topic.

One aiokafka consumer in the processor's group fetches every input topic with ``getmany`` and
hands the records to a *lane* per topic: the lane's task takes up to ``batch_max_events``
records (waiting at most ``batch_within_seconds`` after the first one to fill a batch) and
awaits ``apply`` on them, one batch at a time, in fetch order, so batches of one topic are
applied strictly in order. Lanes run concurrently: a topic held by the topic guard or slowed
by its batches stops only its own lane; once the lane holds ``buffered_max`` records its
partitions are no longer fetched (backpressure) while the others are.

Kafka's committed offsets follow the database, never lead it: after ``apply`` returned (the
batch's transaction committed) the next offsets of its partitions are committed to Kafka, in
the background and in order (the next batch does not wait for that round trip; a rebalance
and a stop wait for it).
The database's stored offsets stay the authority: a record read again (a failed Kafka commit,
a crash, a rebalance) is skipped there. ``apply`` must not raise: whatever escapes it stops
the process loudly (``stop_loudly``), before any offset past the batch is committed.

Rebalances (aiokafka's listener, called before the group is re-joined): records buffered for
revoked partitions are dropped at once (the next owner reads them from the committed
offset); a batch in flight for one of them is awaited (bounded: the offset row locks in the
database make a late batch a no-op anyway).

Why not faust's agents (docs/pipeline.md; the figure in docs/benchmarks.md, "Figures behind
the code's choices"): faust's per-record path (an Event, the stream's channel, a
``wait_first`` with four futures per record, per-message acks) cost more CPU per event than
the rest of the pipeline but ``apply_batch``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from aiokafka import AIOKafkaConsumer, ConsumerRebalanceListener, TopicPartition
from aiokafka.errors import KafkaError

from minruntime.health.outage import waiting_status
from minruntime.ingest import InboundRecord
from minruntime.kafka_access import KafkaAccess, KafkaUnreachableError, start_client
from minruntime.retry import Backoff, retry_async
from minruntime.stream.backlog import behind_after
from minruntime.stream.fetch_pace import FetchPace
from minruntime.stream.sink import stop_loudly
from minruntime.topic_admin import TopicRole

log = logging.getLogger(__name__)

# Applies one batch of one topic; returns once its transaction committed. Must not raise.
ApplyBatch = Callable[[TopicRole, list[InboundRecord]], Awaitable[None]]
# Prepares a batch (the Python work that needs no database: decoding) while the batch before
# it is written; returns how to apply what it prepared. Must not raise.
PrepareBatch = Callable[[TopicRole, list[InboundRecord]], Awaitable[ApplyBatch]]
# (role, partition) of every input partition this process owns after a rebalance
AssignmentListener = Callable[[set[tuple[TopicRole, int]]], None]

# How long one fetch waits for records (then the loop looks again).
FETCH_WAIT_MS: Final = 200
# ... while a lane is full: it may have room again at any moment.
FULL_POLL_MS: Final = 10
# How long a revocation waits for a batch in flight on a revoked partition.
REVOKE_WAIT_SECONDS: Final = 30.0
# How long a Kafka offset commit may take (a failed one is harmless: see the module doc).
COMMIT_TIMEOUT_SECONDS: Final = 10.0


@dataclass(frozen=True)
class ConsumerOptions:
    """Batching, bounds and group membership of the batched consumer."""

    group: str
    batch_max_events: int
    batch_within_seconds: float
    group_instance_id: str | None = None  # static membership (KIP-345) when set
    session_timeout_seconds: float = 10.0
    heartbeat_interval_seconds: float = 3.0
    # Records a lane may hold before its partitions wait; 0: two batches (a full batch
    # ready while one is in flight, plus what one fetch adds).
    lane_records: int = 0
    # Lanes per topic: a topic's partitions are dealt to this many lanes (partition modulo
    # lanes), which apply their batches concurrently, each in order (see the module doc).
    lanes_per_topic: int = 1
    # While records flow, each fetch waits up to this long at the broker for more (0: Kafka
    # answers as soon as one record is there): stream/fetch_pace.py.
    fetch_linger_ms: int = 0

    @property
    def buffered_max(self) -> int:
        """Records a lane may hold before its partitions wait."""
        return self.lane_records or 2 * self.batch_max_events


class _Lane:
    """Some partitions of one input topic (its ``shard``: the partitions whose number modulo
    the lanes per topic is ``shard``): their buffered records, applied in order, one batch at
    a time."""

    def __init__(self, topic: str, role: TopicRole, shard: int, buffered_max: int) -> None:
        self.topic = topic
        self.role = role
        self.shard = shard
        self.buffer: list[InboundRecord] = []
        self.since = 0.0  # when the oldest buffered record arrived (monotonic)
        self.arrived = asyncio.Event()
        self.in_flight: frozenset[int] = frozenset()  # partitions of the batch being applied
        self.idle = asyncio.Event()
        self.idle.set()
        self.buffered_max = buffered_max
        # True while the fetcher has read every buffered partition to its end: nothing more
        # is on its way, so a small batch is applied at once instead of waiting for more.
        self.at_end = False
        # The Kafka commit of the last applied batch, running while the next one is applied.
        self.committing: asyncio.Task[None] | None = None
        # True while a batch of the lane is being applied (the next one may be prepared).
        self.applying = False
        # The next batch, taken while one is applied (in the bound and the lag until applied).
        self.ahead: list[InboundRecord] = []

    @property
    def full(self) -> bool:
        """True while the lane holds as many records as it may (its partitions wait)."""
        return len(self.buffer) + len(self.ahead) >= self.buffered_max

    def add(self, records: list[InboundRecord]) -> None:
        if not self.buffer:
            self.since = time.monotonic()
        self.buffer.extend(records)
        self.arrived.set()

    def take(self, most: int) -> list[InboundRecord]:
        batch = self.buffer[:most]
        del self.buffer[:most]
        self.since = time.monotonic()
        return batch

    def drop(self, partitions: set[int]) -> int:
        """Forget the buffered records of ``partitions``; how many there were."""
        kept = [record for record in self.buffer if record.partition not in partitions]
        dropped = len(self.buffer) - len(kept)
        self.buffer = kept
        return dropped


class BatchedConsumer:
    """Reads the input topics in the processor's group and applies them batch by batch."""

    def __init__(
        self,
        access: KafkaAccess,
        topics: Mapping[str, TopicRole],
        apply: ApplyBatch,
        options: ConsumerOptions,
        *,
        on_assigned: AssignmentListener | None = None,
        prepare: PrepareBatch | None = None,
    ) -> None:
        self._access = access
        self._apply = apply
        self._prepare = prepare
        self._options = options
        self._on_assigned = on_assigned
        self._shards = max(1, options.lanes_per_topic)
        self._lanes = {
            (topic, shard): _Lane(topic, role, shard, options.buffered_max)
            for topic, role in topics.items()
            for shard in range(self._shards)
        }
        self._client: Any = None  # the AIOKafkaConsumer, once started
        self._assigned: set[TopicPartition] = set()
        self._revoking: set[TopicPartition] = set()  # still ours until their batches end
        self._paused: set[TopicPartition] = set()
        self._rebalancing = False
        self._stopping = False
        self._tasks: list[asyncio.Task[None]] = []
        self._done = asyncio.Event()
        # How the running client's fetches are paced (set once it fetches).
        self.fetch_pace: FetchPace | None = None

    @property
    def stopping(self) -> bool:
        """True once `stop` was called."""
        return self._stopping

    async def run(self) -> None:
        """Join the group and consume until `stop` (started as a task of the process host)."""
        try:
            self._client = await self._started_client()
            if self._client is None:
                return
            self._tasks = [
                asyncio.create_task(self._apply_lane(lane), name=f"lane {lane.topic}/{lane.shard}")
                for lane in self._lanes.values()
            ]
            await self._fetch()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            stop_loudly(exc)
            raise
        finally:
            self._done.set()

    async def stop(self, wait_seconds: float = REVOKE_WAIT_SECONDS) -> None:
        """Finish the batches in flight (no new ones), then leave Kafka."""
        self._stopping = True
        for lane in self._lanes.values():
            lane.arrived.set()
        if self._tasks:
            _, pending = await asyncio.wait(self._tasks, timeout=wait_seconds)
            for task in pending:
                log.warning("stopping with a batch of %s still in flight", task.get_name())
                task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._done.wait(), FETCH_WAIT_MS / 1000 * 5)
        if self._client is not None:
            # A static member does not leave the group (KIP-345): its restart gets the same
            # partitions back at once; a dynamic one sends LeaveGroup.
            await self._client.stop()
            self._client = None

    def problem(self) -> str | None:
        """Why the consumer is not consuming now (None: in its group, connected).

        Reads the aiokafka consumer's coordinator and connections: private API, so anything
        unexpected counts as "cannot tell", not as a failure.
        """
        if self._rebalancing:
            return "the consumer group is rebalancing"
        client = self._client
        if client is None:
            return "the Kafka consumer has not started"
        try:
            coordinator = client._coordinator
            connected = any(conn.connected() for conn in client._client._conns.values())
            generation, coordinator_id = coordinator.generation, coordinator.coordinator_id
        except AttributeError:
            return None
        if not connected:
            return "no connection to any Kafka broker"
        if coordinator_id is None:
            return "no group coordinator (Kafka unreachable or electing one)"
        if generation is None or generation < 0:
            return "not a member of the consumer group yet"
        return None

    def owned(self) -> set[tuple[TopicRole, int]]:
        """(role, partition) of every input partition assigned to this process now."""
        return {(self._lane(tp).role, tp.partition) for tp in self._assigned}

    def _lane(self, tp: TopicPartition) -> _Lane:
        """The lane that applies ``tp``'s records."""
        return self._lanes[tp.topic, tp.partition % self._shards]

    def _topic_lanes(self, topic: str) -> list[_Lane]:
        return [self._lanes[topic, shard] for shard in range(self._shards)]

    def buffered(self, topic: str) -> int:
        """Records of ``topic`` fetched and not yet taken into a batch."""
        return sum(len(lane.buffer) for lane in self._topic_lanes(topic))

    def highwaters(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Partition -> the high watermark the fetcher last saw (only those it knows)."""
        found: dict[int, int] = {}
        if self._client is None:
            return found
        for partition in partitions:
            try:
                highwater = self._client.highwater(TopicPartition(topic, partition))
            except Exception:  # not assigned any more (a rebalance): no figure now
                continue
            if highwater is not None:
                found[partition] = int(highwater)
        return found

    def behind(self, topic: str, partitions: Iterable[int]) -> dict[int, int]:
        """Partition -> records still to apply (fetched: buffered or taken ahead; not fetched yet).

        In records, not offsets: the fetcher's position is past every transaction marker it
        read, so a partition applied to its end is 0 behind (stream.backlog). A partition
        without a figure now (not assigned any more, its position being reset) is left out.
        """
        wanted = set(partitions)
        buffered = dict.fromkeys(wanted, 0)
        for lane in self._topic_lanes(topic):
            for record in (*lane.ahead, *lane.buffer):
                if record.partition in buffered:
                    buffered[record.partition] += 1
        found: dict[int, int] = {}
        for partition in sorted(wanted):
            position, end = self._fetch_state(TopicPartition(topic, partition))
            behind = behind_after(position, end, buffered[partition])
            if behind is not None:
                found[partition] = behind
        return found

    def _fetch_state(self, tp: TopicPartition) -> tuple[int | None, int | None]:
        """(the fetcher's next offset, the last stable offset) of ``tp``; None: not known now.

        Reads aiokafka's partition state, private API (its ``position`` is async only to wait
        for a position being reset): anything unexpected counts as "not known".
        """
        try:
            state = self._client._subscription.subscription.assignment.state_value(tp)
            # read_committed: the last stable offset; else (-1, None) the high watermark
            end = state.lso if state.lso is not None and state.lso >= 0 else state.highwater
            position = state.position if state.has_valid_position else None
        except (AttributeError, KeyError, TypeError):
            return None, None
        return position, end

    async def _started_client(self) -> Any:
        """The started aiokafka consumer, subscribed; waits while Kafka is unreachable (None:
        stopped meanwhile)."""

        async def started() -> Any:
            if self._stopping:
                raise InterruptedError("stopped while starting the Kafka consumer")
            options = self._options
            client = AIOKafkaConsumer(
                **self._access.client_kwargs(),
                group_id=options.group,
                group_instance_id=options.group_instance_id,
                session_timeout_ms=round(options.session_timeout_seconds * 1000),
                heartbeat_interval_ms=round(options.heartbeat_interval_seconds * 1000),
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                max_poll_records=options.batch_max_events,
                # The bridge writes in transactions: an aborted one (a fenced replica) is
                # never applied, an open one is read once committed.
                isolation_level="read_committed",
            )
            client.subscribe(
                list(dict.fromkeys(t for t, _ in self._lanes)), listener=_Rebalance(self)
            )
            await start_client(client, self._access)
            return client

        try:
            return await retry_async(
                started,
                what="Kafka (starting the consumer)",
                transient=lambda error: isinstance(error, KafkaUnreachableError),
                outage=waiting_status("Kafka (starting the consumer)"),
            )
        except InterruptedError:
            return None

    async def _fetch(self) -> None:
        """Fetch for ever, handing records to their lanes; a full lane's partitions wait.

        Only the partitions of lanes with room are asked for (``getmany(*partitions)``):
        aiokafka keeps at most one fetched response per partition, so a full lane holds back
        its partitions without pausing them (a pause would drop what was prefetched). While
        every lane is full the partitions are paused and the loop keeps polling, so the
        group does not take the consumer for dead (``max_poll_interval_ms``).
        """
        client = self._client
        most, full_poll = self._options.batch_max_events, FULL_POLL_MS
        pace = self.fetch_pace = FetchPace(client, self._options.fetch_linger_ms)
        status, backoff, failing = waiting_status("Kafka (fetching)"), Backoff(), False
        while not self._stopping:
            fetch_from = [tp for tp in self._assigned if not self._lane(tp).full]
            if fetch_from or not self._assigned:
                if self._paused:
                    client.resume(*(self._paused & self._assigned))
                    self._paused = set()
                waiting = full_poll if len(fetch_from) < len(self._assigned) else FETCH_WAIT_MS
            else:
                if not self._paused:
                    self._paused = set(self._assigned)
                    client.pause(*self._paused)
                waiting = full_poll
            try:
                fetched = await client.getmany(*fetch_from, timeout_ms=waiting, max_records=most)
            except KafkaError as error:
                # A partition's fetch failed for a reason aiokafka does not handle itself (not
                # authorized, a record too large ...): one status line every few seconds, retried.
                status.failed(f"fetching failed: {error!r}")
                failing = True
                await asyncio.sleep(backoff.next())
                continue
            if failing:
                status.back()
                backoff.reset()
                failing = False
            pace.follow(bool(fetched))
            filled: set[_Lane] = set()
            for tp, messages in fetched.items():
                if tp not in self._assigned:
                    continue  # revoked while the fetch was answered: the next owner reads it
                lane = self._lane(tp)
                filled.add(lane)
                lane.add(
                    [
                        InboundRecord(
                            tp.topic,
                            tp.partition,
                            message.offset,
                            message.key,
                            message.value,
                            message.timestamp,
                            message.headers,
                        )
                        for message in messages
                    ]
                )
            for lane in filled:
                lane.at_end = self._read_to_end(lane)
                if lane.at_end:
                    lane.arrived.set()

    def _read_to_end(self, lane: _Lane) -> bool:
        """True when the fetcher's position is at the end of every partition ``lane`` buffers
        (anything not known counts as "more may come": the ``within`` wait)."""
        for partition in {record.partition for record in lane.buffer}:
            position, end = self._fetch_state(TopicPartition(lane.topic, partition))
            if position is None or end is None or position < end:
                return False
        return True

    async def _apply_lane(self, lane: _Lane) -> None:
        """Apply the lane's batches one at a time, committing Kafka offsets after each.

        Pipelined: while a batch is applied, the next full batch is taken and prepared
        (``prepare``: decoded, no database), so the Python work of batch N+1 overlaps
        PostgreSQL's work on batch N. Only one batch of a lane is ever being applied, in
        order, and a prepared batch applies nothing until the one before it committed; one
        prepared but not applied (a stop, a crash) was never written, so it is read again.
        """
        upcoming = asyncio.create_task(
            self._upcoming(lane), name=f"next batch {lane.topic}/{lane.shard}"
        )
        try:
            while True:
                try:
                    taken = await upcoming
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # PrepareBatch must not raise either
                    stop_loudly(exc)
                    raise
                lane.ahead = []
                if taken is None or self._stopping:  # a stop: no new batch (one prepared waits)
                    await self._committed([lane])
                    return
                batch, apply = taken
                batch = self._owned(lane, batch)
                if not batch:  # every partition of it revoked while it was prepared
                    upcoming = asyncio.create_task(self._upcoming(lane))
                    continue
                lane.in_flight = frozenset(record.partition for record in batch)
                lane.idle.clear()
                lane.applying = True
                upcoming = asyncio.create_task(self._upcoming(lane))
                try:
                    await apply(lane.role, batch)
                except asyncio.CancelledError:
                    raise
                except BaseException as exc:  # ApplyBatch must not raise: see the module doc
                    stop_loudly(exc)
                    raise
                finally:
                    lane.in_flight = frozenset()
                    lane.applying = False
                    lane.idle.set()
                    lane.arrived.set()  # the next batch may now be taken without filling up
                # Off the batch's path (a round trip to the group coordinator): the next batch
                # is taken at once; commits stay in order, each after the one before it.
                lane.committing = asyncio.create_task(
                    self._commit_after(lane.committing, lane.topic, batch)
                )
        finally:
            upcoming.cancel()

    async def _upcoming(self, lane: _Lane) -> tuple[list[InboundRecord], ApplyBatch] | None:
        """The lane's next batch and how to apply it: prepared ahead when it was taken while
        the batch before it was being applied (else the apply does all the work at once)."""
        batch = await self._next_batch(lane)
        if batch is None:
            return None
        if self._prepare is None or not lane.applying:
            return batch, self._apply
        lane.ahead = batch  # until it is applied
        return batch, await self._prepare(lane.role, batch)

    def _owned(self, lane: _Lane, batch: list[InboundRecord]) -> list[InboundRecord]:
        """``batch`` without the records of partitions revoked since it was taken (the next
        owner reads them from the committed offset, as buffered records are dropped)."""
        owned = {tp.partition for tp in self._assigned if self._lane(tp) is lane}
        if all(record.partition in owned for record in batch):
            return batch
        return [record for record in batch if record.partition in owned]

    async def _commit_after(
        self, previous: asyncio.Task[None] | None, topic: str, batch: list[InboundRecord]
    ) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # in order; its own failure is its own (logged)
        await self._commit(topic, batch)

    async def _committed(self, lanes: Iterable[_Lane]) -> None:
        """Wait for the Kafka commits under way of ``lanes`` (bounded like a commit)."""
        pending = [lane.committing for lane in lanes if lane.committing is not None]
        if pending:
            await asyncio.wait(pending, timeout=COMMIT_TIMEOUT_SECONDS)

    async def _next_batch(self, lane: _Lane) -> list[InboundRecord] | None:
        """Up to a full batch once it is full or its oldest record waited long enough (or
        nothing more is coming); while the lane applies a batch, only a full one (a smaller
        one is taken once the lane is free: it can still grow meanwhile)."""
        most, within = self._options.batch_max_events, self._options.batch_within_seconds
        early = self._prepare is not None  # else nothing is taken while the lane applies
        while not self._stopping:
            timeout: float | None = None
            if lane.buffer and (early or not lane.applying):
                if len(lane.buffer) >= most:
                    return lane.take(most)
                if not lane.applying:
                    waited = time.monotonic() - lane.since
                    if waited >= within or lane.at_end:
                        return lane.take(most)
                    timeout = within - waited
            lane.arrived.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(lane.arrived.wait(), timeout)
        return None

    async def _commit(self, topic: str, batch: list[InboundRecord]) -> None:
        """Commit the next offsets of the batch's partitions that this process still owns."""
        nexts: dict[TopicPartition, int] = {}
        for record in batch:
            nexts[TopicPartition(topic, record.partition)] = record.offset + 1
        ours = self._assigned | self._revoking
        owned = {tp: offset for tp, offset in nexts.items() if tp in ours}
        if not owned or self._client is None:  # nothing of ours, or stopped meanwhile
            return
        try:
            await asyncio.wait_for(self._client.commit(owned), COMMIT_TIMEOUT_SECONDS)
        except (KafkaError, TimeoutError) as error:
            # The database's offsets are the authority: the records are skipped when re-read.
            log.info("Kafka offsets of %r not committed (%s); the database has them", topic, error)

    async def revoked(self, revoked: set[TopicPartition]) -> None:
        """Before a rebalance: drop what is buffered for ``revoked``, finish what is in flight."""
        self._rebalancing = True
        self._assigned -= revoked
        self._revoking = revoked
        self._paused -= revoked  # a new assignment starts unpaused
        waits: list[Awaitable[bool]] = []
        for lane in self._lanes.values():
            partitions = {tp.partition for tp in revoked if self._lane(tp) is lane}
            if not partitions:
                continue
            dropped = lane.drop(partitions)
            if dropped:
                log.debug("dropped %d buffered records of %r (revoked)", dropped, lane.topic)
            if lane.in_flight & partitions:
                waits.append(lane.idle.wait())
        if waits:
            _, pending = await asyncio.wait(
                [asyncio.ensure_future(wait) for wait in waits], timeout=REVOKE_WAIT_SECONDS
            )
            for future in pending:
                future.cancel()
            if pending:
                log.warning(
                    "a batch of a revoked partition is still in flight after %.0fs; the "
                    "offset locks in the database keep it from applying anything twice",
                    REVOKE_WAIT_SECONDS,
                )
        # The offsets of what was applied on the revoked partitions reach Kafka before the
        # group re-joins (the next owner starts from them).
        await self._committed(
            lane for lane in self._lanes.values() if any(self._lane(tp) is lane for tp in revoked)
        )
        self._revoking = set()

    def assigned(self, assigned: set[TopicPartition]) -> None:
        """After a rebalance: the partitions this process now owns."""
        self._assigned = set(assigned)
        self._rebalancing = False
        if self._on_assigned is not None:
            self._on_assigned(self.owned())


class _Rebalance(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, consumer: BatchedConsumer) -> None:
        self._consumer = consumer

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        await self._consumer.revoked(set(revoked))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self._consumer.assigned(set(assigned))
