"""`minruntime kube bridge`: the cluster's objects as contract events on the input topics.

One replica is active (the Lease); the others wait. The active one lists every watched kind
(priority classes first, pods last), then watches each from the list's resourceVersion in a
thread of its own, feeds the notifications to a fresh ClusterMirror and sends the events it
answers, in order, with an idempotent producer. Every id is deterministic, so a new term
(after a restart, a takeover or a lost lease) may send the current state again: the processor
applies each id once. Kafka away: the batch is retried with backoff and the watches wait
(their queue is bounded). API server away: each watch backs off; the lease lapses and the
replica stops sending until it holds the lease again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import signal
import threading
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from minruntime.cluster.api import RELIST, Notification, Watcher, api_client, sources
from minruntime.cluster.lease import Lease, default_identity
from minruntime.cluster.mirror import ClusterMirror, Emission, MirrorOptions
from minruntime.events import encode_event
from minruntime.kafka_access import kafka_access
from minruntime.settings import Settings
from minruntime.stream.topics import TopicRole, ensure_topics, topic_names, topic_specs

log = logging.getLogger(__name__)

# Notifications waiting for the sender; a full queue makes the watches wait (Kafka away).
_QUEUE_SIZE = 10_000
_BATCH = 500


def _utcnow() -> datetime:
    return datetime.now(UTC)


class Bridge:
    """One bridge replica (see the module docstring)."""

    def __init__(
        self, settings: Settings, client: Any, clock: Callable[[], datetime] = _utcnow
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.stop = threading.Event()
        self.lease = Lease(
            client,
            settings.kube_namespace,
            settings.kube_lease_name,
            settings.kube_identity or default_identity(),
            settings.kube_lease_seconds,
        )
        self.options = MirrorOptions(
            node_pool_label=settings.kube_node_pool_label,
            config_node_pool=settings.kube_scheduler_node_pool,
        )
        names = topic_names(settings)
        self.topics: Mapping[str, str] = {role.value: names[role] for role in TopicRole}

    async def run(self) -> None:
        """Stand by, lead while holding the lease, until stopped."""
        leading = said_standby = False
        try:
            while not self.stop.is_set():
                leading = await self._acquire()
                if not leading:
                    if not said_standby:
                        log.warning("bridge %s: standing by", self.lease.identity)
                        said_standby = True
                    await asyncio.to_thread(self.stop.wait, self.settings.kube_lease_seconds / 3)
                    continue
                said_standby = False
                log.warning("bridge %s: active (lease %s)", self.lease.identity, self.lease.name)
                await self._lead()
        finally:
            if leading:
                await asyncio.to_thread(self.lease.release)

    async def _acquire(self) -> bool:
        try:
            return await asyncio.to_thread(self.lease.try_acquire, self.clock())
        except Exception as error:
            log.warning("cannot reach the lease %s: %s", self.lease.name, error)
            return False

    async def _lead(self) -> None:
        term = threading.Event()
        notes: queue.Queue[Notification] = queue.Queue(_QUEUE_SIZE)
        mirror = ClusterMirror(self.options, self.clock)
        producer = await self._producer()
        if producer is None:
            return
        keeper = asyncio.create_task(self._keep_lease(term))
        try:
            watchers = [
                Watcher(
                    source,
                    notes,
                    term,
                    self.settings.kube_watch_seconds,
                    self.settings.kube_backoff_max_seconds,
                )
                for source in sources(self.client, self.settings)
            ]
            for watcher in watchers:  # the first listing in order: classes before podgroups
                await self._first_list(watcher, term)
            first = [emission for note in _drain_all(notes) for emission in _observe(mirror, note)]
            await self._send(producer, first + mirror.listed_everything(), term)
            log.warning("bridge %s: listed everything; watching", self.lease.identity)
            for watcher in watchers:
                threading.Thread(
                    target=watcher.run, daemon=True, name=str(watcher.source.kind)
                ).start()
            while not term.is_set() and not self.stop.is_set():
                batch = await asyncio.to_thread(_drain, notes, 0.5)
                emissions = [emission for note in batch for emission in _observe(mirror, note)]
                if emissions:
                    await self._send(producer, emissions, term)
        finally:
            term.set()
            keeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper
            await producer.stop()

    async def _first_list(self, watcher: Watcher, term: threading.Event) -> None:
        backoff = 0.5
        while not term.is_set():
            try:
                await asyncio.to_thread(watcher.relist)
                return
            except Exception as error:
                log.warning("cannot list %s: %s", watcher.source.kind, error)
                await asyncio.to_thread(term.wait, backoff)
                backoff = min(backoff * 2, self.settings.kube_backoff_max_seconds)

    async def _keep_lease(self, term: threading.Event) -> None:
        """Renew every third of the duration; a lease not renewed in time ends the term."""
        every = self.settings.kube_lease_seconds / 3
        last = self.clock()
        while not term.is_set():
            await asyncio.sleep(every)
            try:
                if not await asyncio.to_thread(self.lease.try_acquire, self.clock()):
                    log.warning("lost the lease to another replica")
                    term.set()
                    return
                last = self.clock()
            except Exception as error:
                log.warning("cannot renew the lease: %s", error)
                if (self.clock() - last).total_seconds() >= self.settings.kube_lease_seconds:
                    term.set()
                    return

    async def _producer(self) -> Any:
        from aiokafka import AIOKafkaProducer

        backoff = 0.5
        while not self.stop.is_set():
            access = kafka_access(self.settings)
            producer = AIOKafkaProducer(
                **access.client_kwargs(), enable_idempotence=True, linger_ms=5
            )
            try:
                await ensure_topics(access, topic_specs(self.settings))
                await producer.start()
                return producer
            except Exception as error:
                log.warning("cannot reach Kafka at %s: %s", self.settings.kafka_bootstrap, error)
                await producer.stop()
                await asyncio.to_thread(self.stop.wait, backoff)
                backoff = min(backoff * 2, self.settings.kube_backoff_max_seconds)
        return None

    async def _send(self, producer: Any, emissions: list[Emission], term: threading.Event) -> None:
        """Send all, in order; on a failure send them all again (ids make repeats harmless)."""
        backoff = 0.5
        while True:
            try:
                futures = [
                    await producer.send(
                        self.topics[emission.role],
                        encode_event(emission.event),
                        key=emission.event.subject.encode(),
                        headers=[("id", emission.event.id.encode())],
                    )
                    for emission in emissions
                ]
                await asyncio.gather(*futures)
                return
            except Exception as error:
                if self.stop.is_set() or term.is_set():
                    return  # the next term sends the current state again
                log.warning("cannot send %d events (%s); retrying", len(emissions), error)
                await asyncio.to_thread(term.wait, backoff)
                backoff = min(backoff * 2, self.settings.kube_backoff_max_seconds)


def _drain(notes: queue.Queue[Notification], wait: float) -> list[Notification]:
    try:
        batch = [notes.get(timeout=wait)]
    except queue.Empty:
        return []
    while len(batch) < _BATCH:
        try:
            batch.append(notes.get_nowait())
        except queue.Empty:
            break
    return batch


def _drain_all(notes: queue.Queue[Notification]) -> list[Notification]:
    batch: list[Notification] = []
    while True:
        try:
            batch.append(notes.get_nowait())
        except queue.Empty:
            return batch


def _observe(mirror: ClusterMirror, note: Notification) -> list[Emission]:
    if note.action == RELIST:
        return mirror.relisted(note.kind, note.objects)
    return [
        emission for obj in note.objects for emission in mirror.observe(note.kind, note.action, obj)
    ]


def run_bridge(settings: Settings) -> None:
    """`minruntime kube bridge`: run one replica until SIGINT/SIGTERM."""
    bridge = Bridge(settings, api_client(settings))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, bridge.stop.set)
        await bridge.run()

    asyncio.run(main())
