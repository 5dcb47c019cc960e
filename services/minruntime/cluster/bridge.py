"""`minruntime kube bridge`: the cluster's objects as contract events on the input topics.

One replica is active (the Lease); the others wait. A term (the time one replica holds the
Lease) goes:

1. Start a transactional producer whose ``transactional.id`` every replica shares: Kafka
   fences the previous holder's producer (its open transaction is aborted, its later ones
   refused), so a replica that lost the Lease cannot land a late batch even if it tried.
2. Read the ledger (``cluster.ledger``): what earlier terms sent, per object.
3. List every watched kind in pages (priority classes first, pods last; nodes, PodGroups and
   pods from the API server's watch cache, cut into pages as read), folding each page
   into a ClusterMirror that starts from the ledger, then send what differs: nothing for an
   unchanged cluster, one submission per new gang, a release for each pod that went away
   while no bridge watched.
4. Watch each kind from its list's resourceVersion, on a thread per kind, and send what each
   change causes.

Every batch of events goes in one Kafka transaction with the ledger records it changed. The
listing, the mapping and the HTTP calls run on worker threads; the Lease is renewed on a
thread of its own (``LeaseKeeper``) and nothing is sent once the replica cannot prove it
holds the Lease: the term ends and what it had not sent is discarded (the next term, here or
on another replica, finds it from the ledger and the cluster). Kafka away: the batch is
retried with backoff while the Lease holds; the watchers wait behind a bounded inbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import signal
import threading
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Final, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry, Gauge

from minruntime import health
from minruntime.cluster.api import (
    LIST_END,
    LIST_PAGE,
    LIST_RESTART,
    LIST_START,
    Inbox,
    Notification,
    Watcher,
    api_client,
    mirror_options,
    preload_sources,
    sources,
)
from minruntime.cluster.drift_metrics import DriftGauges
from minruntime.cluster.drift_watch import DriftWatch, ServiceReader
from minruntime.cluster.lease import Lease, LeaseKeeper, default_identity
from minruntime.cluster.ledger import (
    META_KEY,
    ledger_spec,
    meta_record,
    read_ledger,
    topic_ids,
)
from minruntime.cluster.metrics import EvictionMetrics
from minruntime.cluster.mirror import ClusterMirror, Emission
from minruntime.cluster.partitioner import KeyPartitioner
from minruntime.cluster.records import Record, to_json
from minruntime.cluster.sending import send_records
from minruntime.cluster.transient import transient
from minruntime.collector import collector_paused
from minruntime.events import encode_event
from minruntime.kafka_access import kafka_access
from minruntime.retry import Backoff, Outage, retry_async
from minruntime.settings import Settings
from minruntime.topic_admin import ensure_topics, topic_names, topic_specs

if TYPE_CHECKING:
    from aiokafka import AIOKafkaProducer
    from kubernetes.client import ApiClient

log = logging.getLogger(__name__)

T = TypeVar("T")

# Objects the watchers may hold in the inbox before they wait for the bridge.
_INBOX_OBJECTS: Final = 5_000
# Events (and their ledger records) per Kafka transaction.
_CHUNK: Final = 1_000
# A partition's records per produce request (aiokafka's default: 16 KiB, 40 events): a full
# batch waits for the one before it to be acknowledged, so a first listing's 1,000-event
# transaction took a round trip per 40 events and partition. Within the request size.
_BATCH_BYTES: Final = 512 * 1024
# A record over this is refused by a broker with the default max.message.bytes (1 MiB).
MAX_RECORD_BYTES: Final = 1_000_000
# Who sent a record (replica identity), for audits of "one active replica".
PRODUCER_HEADER: Final = "minruntime-bridge"
_ROLES: Final = ("queues", "podgroups", "nodes")


class TermEndedError(Exception):
    """The replica can no longer prove it holds the Lease (or is stopping)."""


class Bridge:
    """One bridge replica (see the module docstring)."""

    def __init__(
        self,
        settings: Settings,
        client: ApiClient,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        registry: CollectorRegistry | None = None,
        read_service: ServiceReader | None = None,
    ) -> None:
        self.settings = settings
        self.client = client
        self.clock = clock
        self.keeper: LeaseKeeper | None = None  # the term in progress
        registry = registry or CollectorRegistry()
        self.eviction_metrics = EvictionMetrics(registry)
        Gauge(
            "minruntime_kube_bridge_active",
            "1 while this bridge replica holds the Lease and sends the cluster's events, else 0.",
            registry=registry,
        ).set_function(self._holds)
        # The drift check, when the command gives a way to read the service (cluster.drift_watch).
        self.drift: DriftWatch | None = None
        if read_service is not None and settings.kube_drift_seconds > 0:
            gauges = DriftGauges(lambda: self._holds() == 1.0)
            registry.register(gauges)
            self.drift = DriftWatch(settings, client, read_service, gauges, clock)
        self.stop = threading.Event()
        self.lease = Lease(
            client,
            settings.kube_namespace,
            settings.kube_lease_name,
            settings.kube_identity or default_identity(),
            settings.kube_lease_seconds,
        )
        self.options = mirror_options(settings)
        names = topic_names(settings)
        self.topics: Mapping[str, str] = {role.value: name for role, name in names.items()}
        self.ledger_topic = settings.kube_ledger_topic_resolved
        self.sent_total = 0
        self.partitioner = KeyPartitioner()  # the producer's, and send_records'
        self.input_topic_ids: dict[str, str] = {}
        self._lease_outage = Outage(f"the lease {self.lease.name}", log)

    async def run(self) -> None:
        """Stand by, lead while holding the lease, until stopped."""
        said_standby = False
        while not self.stop.is_set():
            started = time.monotonic()
            if not await self._acquire():
                if not said_standby:
                    log.warning("bridge %s: standing by", self.lease.identity)
                    said_standby = True
                await asyncio.to_thread(self.stop.wait, self.settings.kube_lease_seconds / 3)
                continue
            said_standby = False
            log.warning("bridge %s: active (lease %s)", self.lease.identity, self.lease.name)
            keeper = self.keeper = LeaseKeeper(self.lease, started, self.clock).start()
            try:
                await self._lead(keeper)
            finally:
                self.keeper = None
                held = keeper.holds()
                keeper.end()
                if self.stop.is_set() and held:
                    await asyncio.to_thread(self.lease.release)
            if keeper.failure is not None:
                raise keeper.failure
            if not self.stop.is_set():
                log.warning("bridge %s: term ended", self.lease.identity)

    def _holds(self) -> float:
        """1 while a term runs and its keeper can prove the Lease is held (the metric)."""
        keeper = self.keeper
        return 1.0 if keeper is not None and keeper.holds() else 0.0

    async def _acquire(self) -> bool:
        """Take or renew the Lease; False when another replica holds it or the API server is
        away (one status line per outage); any other error propagates."""
        try:
            held = await asyncio.to_thread(self.lease.try_acquire, self.clock())
        except Exception as error:
            if not transient(error):
                raise
            self._lease_outage.failed(error)
            return False
        self._lease_outage.back()
        return held

    # -- one term --------------------------------------------------------------------------

    async def _lead(self, keeper: LeaseKeeper) -> None:
        term = threading.Event()  # set: the watchers stop
        drift: asyncio.Task[None] | None = None
        producer = await self._producer(keeper)
        if producer is None:
            return
        try:
            memory = await self._read_ledger(keeper)
            counts = self.eviction_metrics
            mirror = ClusterMirror(
                self.options,
                self.clock,
                memory,
                tally=counts.signal,
                released=counts.release,
                ignored=counts.ignore,
            )
            records = len(memory)
            del memory  # the mirror holds what it needs of it
            log.warning(
                "bridge %s: %d ledger records; listing the cluster", self.lease.identity, records
            )
            inbox = Inbox(_INBOX_OBJECTS)
            watchers = [
                Watcher(
                    source,
                    inbox,
                    term,
                    self.settings.kube_watch_seconds,
                    self.settings.kube_backoff_max_seconds,
                    self.settings.kube_list_page_size,
                )
                for source in sources(self.client, self.settings)
            ]
            listing = self._list_everything(mirror, watchers, keeper)
            with long_lived_listing():
                await self._send_listing(producer, listing, mirror, keeper)
            log.warning(
                "bridge %s: listed everything; watching (%d events sent)",
                self.lease.identity,
                self.sent_total,
            )
            for watcher in watchers:
                threading.Thread(
                    target=watcher.run, daemon=True, name=str(watcher.source.kind)
                ).start()
            if self.drift is not None:
                drift = asyncio.create_task(self.drift.run(keeper))
            while keeper.holds() and not self.stop.is_set():
                notes = await asyncio.to_thread(inbox.take, 0.5, _CHUNK)
                _raise_failure(watchers)
                # Folded also without notes: releases held for an eviction signal fall due.
                emissions, changes = await asyncio.to_thread(_fold, mirror, notes)
                counts.held.set(mirror.evictions.held_count)
                if emissions or changes:
                    await self._commit(producer, emissions, changes, keeper)
        except TermEndedError:
            pass
        finally:
            term.set()
            if drift is not None:
                drift.cancel()
                with contextlib.suppress(BaseException):
                    await drift
            with contextlib.suppress(Exception):
                await producer.stop()

    async def _send_listing(
        self,
        producer: AIOKafkaProducer,
        listing: Iterator[Emission],
        mirror: ClusterMirror,
        keeper: LeaseKeeper,
    ) -> None:
        """Send the first listing a chunk at a time, each in its transaction (the first with
        the ledger's meta record, even when empty). The next chunk is made on a worker thread
        while this one is sent: the mapping and Kafka's round trips overlap, and a chunk is
        still sent only once the one before it is committed."""
        chunk, changes = await asyncio.to_thread(_next_chunk, listing, mirror)
        first = True
        while first or chunk or changes:
            following = asyncio.ensure_future(asyncio.to_thread(_next_chunk, listing, mirror))
            try:
                await self._commit(producer, chunk, changes, keeper, meta=first)
            except BaseException:
                # The worker still folds into the mirror: let it finish before the term ends.
                with contextlib.suppress(BaseException):
                    await following
                raise
            first = False
            chunk, changes = await following

    def _list_everything(
        self, mirror: ClusterMirror, watchers: list[Watcher], keeper: LeaseKeeper
    ) -> Iterator[Emission]:
        """The first listing of a term (runs on worker threads, a chunk at a time)."""
        # Every kind is listed before any podgroup is synced (each listing's LIST_START and
        # LIST_END bracket its pages; the last LIST_END syncs): one submission per gang.
        mirror.start_listing([watcher.source.kind for watcher in watchers])
        for watcher in watchers:
            backoff = Backoff(cap=self.settings.kube_backoff_max_seconds)
            outage = Outage(f"listing of {watcher.source.kind}", log)
            while True:
                self._check(keeper)
                try:
                    for note in watcher.pages():
                        self._check(keeper)
                        yield from _apply(mirror, note)
                    outage.back()
                    break
                except Exception as error:
                    if not transient(error):
                        raise  # a bug, or the term ended (TermEndedError): not an outage
                    outage.failed(error)
                    mirror.restart_listing(watcher.source.kind)
                    if keeper.ended.wait(backoff.next()):
                        raise TermEndedError from error

    def _check(self, keeper: LeaseKeeper) -> None:
        if self.stop.is_set() or not keeper.holds():
            raise TermEndedError

    # -- Kafka -----------------------------------------------------------------------------

    async def _producer(self, keeper: LeaseKeeper) -> AIOKafkaProducer | None:
        """A started transactional producer (fencing the previous holder's), or None when
        the term ended first."""
        from aiokafka import AIOKafkaProducer

        async def started() -> AIOKafkaProducer:
            self._check(keeper)
            access = kafka_access(self.settings)
            producer = AIOKafkaProducer(
                **access.client_kwargs(),
                enable_idempotence=True,
                transactional_id=self._transactional_id(),
                transaction_timeout_ms=round(max(2 * self.settings.kube_lease_seconds, 10) * 1000),
                linger_ms=5,
                max_request_size=MAX_RECORD_BYTES + 64 * 1024,
                max_batch_size=_BATCH_BYTES,
                partitioner=self.partitioner,
            )
            try:
                await ensure_topics(
                    access, [*topic_specs(self.settings), ledger_spec(self.settings)]
                )
                await producer.start()
            except Exception:
                with contextlib.suppress(Exception):
                    await producer.stop()
                raise
            return producer

        try:
            return await self._retry(started, f"Kafka at {self.settings.kafka_bootstrap}", keeper)
        except TermEndedError:
            return None

    def _transactional_id(self) -> str:
        """Shared by every replica of one bridge deployment (its Lease): the fencing key."""
        return f"minruntime-kube-bridge/{self.settings.kube_namespace}/{self.lease.name}"

    async def _read_ledger(self, keeper: LeaseKeeper) -> Mapping[str, Record]:
        access = kafka_access(self.settings)

        async def read() -> Mapping[str, Record]:
            self._check(keeper)
            ids = await topic_ids(access, [self.topics[role] for role in _ROLES])
            self.input_topic_ids = ids
            return await read_ledger(access, self.ledger_topic, ids)

        return await self._retry(read, f"the ledger {self.ledger_topic}", keeper)

    async def _retry(
        self,
        attempt: Callable[[], Awaitable[T]],
        what: str,
        keeper: LeaseKeeper,
        fatal: tuple[type[Exception], ...] = (),
    ) -> T:
        """`attempt()` until it returns, with one status line per outage. TermEndedError (from
        `attempt`'s own `_check`) once the term ends, and a `fatal` error, propagate at once."""
        return await retry_async(
            attempt,
            what=what,
            transient=lambda error: not isinstance(error, (TermEndedError, *fatal)),
            logger=log,
            cap=self.settings.kube_backoff_max_seconds,
            sleep=lambda delay: asyncio.to_thread(keeper.ended.wait, delay),
        )

    async def _commit(
        self,
        producer: AIOKafkaProducer,
        emissions: list[Emission],
        changes: Mapping[str, Record | None],
        keeper: LeaseKeeper,
        *,
        meta: bool = False,
    ) -> None:
        """Send the events and their ledger records in one transaction; retried while the
        Lease holds; TermEndedError when it no longer does (nothing more is sent)."""
        from aiokafka.errors import ProducerFenced

        records = self._records(emissions, changes, meta)

        async def send() -> None:
            self._check(keeper)
            await producer.begin_transaction()
            try:
                await send_records(producer, records, self.partitioner)
                self._check(keeper)
                await producer.commit_transaction()
            except BaseException:
                with contextlib.suppress(Exception):
                    await producer.abort_transaction()
                raise

        try:
            what = f"sending to Kafka at {self.settings.kafka_bootstrap}"
            await self._retry(send, what, keeper, fatal=(ProducerFenced,))
        except ProducerFenced as error:
            log.warning("another replica's producer took over (%s): term ended", error)
            raise TermEndedError from error
        self.sent_total += len(emissions)
        if emissions and log.isEnabledFor(logging.INFO):
            kinds = Counter(emission.event.type for emission in emissions)
            log.info("sent %s", ", ".join(f"{n} {t}" for t, n in sorted(kinds.items())))

    def _records(
        self, emissions: list[Emission], changes: Mapping[str, Record | None], meta: bool
    ) -> list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]]:
        who = [(PRODUCER_HEADER, self.lease.identity.encode())]
        records: list[tuple[str, bytes, bytes | None, list[tuple[str, bytes]]]] = []
        for emission, value in sendable(emissions):
            headers = [("id", emission.event.id.encode()), *who]
            records.append(
                (self.topics[emission.role], emission.event.subject.encode(), value, headers)
            )
        if meta:
            records.append(
                (self.ledger_topic, META_KEY.encode(), meta_record(self.input_topic_ids), who)
            )
        for key, record in changes.items():
            records.append((self.ledger_topic, key.encode(), to_json(record), who))
        return records


@contextlib.contextmanager
def long_lived_listing() -> Iterator[None]:
    """A listing builds the bridge's long-lived state: no cyclic garbage collection meanwhile,
    then one collection, and that state exempt from every later one (``gc.freeze``).

    CPython's collections walk the tracked objects of their generations; the state a listing
    builds is tens of thousands of dicts, so with the default thresholds a listing of 20,000
    pods spent a third of its CPU collecting, and its CPU per pod grew by half from 1,000 to
    20,000 pods (by 38 % to 50,000 with raised thresholds); without collections it is flat
    (docs/benchmarks.md, "The bridge at scale"). The state is a tree of dicts and strings
    without cycles, and the listing makes little cyclic garbage (a logged error's traceback):
    reference counting frees the rest as it goes.
    """
    try:
        with collector_paused():
            yield
    finally:
        gc.collect()
        gc.freeze()


def sendable(emissions: list[Emission]) -> list[tuple[Emission, bytes]]:
    """Each emission with its encoded value, but for those over a record's size: they are
    logged (one line each) and not sent, rather than stalling every event behind them.

    The bound is Kafka's: a broker refuses a record over its max.message.bytes (1 MiB by
    default), which a podgroup.submitted of the contract's 10,000 pods reaches when their
    names are long (10,000 names of 253 characters are 2.5 MB).
    """
    kept: list[tuple[Emission, bytes]] = []
    for emission in emissions:
        value = encode_event(emission.event)
        if len(value) > MAX_RECORD_BYTES:
            log.warning(
                "not sent: %s %s is %d bytes, over the %d-byte record limit",
                emission.event.type,
                emission.event.subject,
                len(value),
                MAX_RECORD_BYTES,
            )
            continue
        kept.append((emission, value))
    return kept


def _next_chunk(
    listing: Iterator[Emission], mirror: ClusterMirror
) -> tuple[list[Emission], dict[str, Record | None]]:
    """The next chunk of a listing's events and the ledger records they changed."""
    chunk = list(itertools.islice(listing, _CHUNK))
    return chunk, mirror.take_changes()


def _fold(
    mirror: ClusterMirror, notes: list[Notification]
) -> tuple[list[Emission], dict[str, Record | None]]:
    emissions = [emission for note in notes for emission in _apply(mirror, note)]
    emissions += mirror.due()
    return emissions, mirror.take_changes()


def _raise_failure(watchers: list[Watcher]) -> None:
    """A watcher ended by an error that is not an outage: raise it here (the process fails)."""
    for watcher in watchers:
        if watcher.failure is not None:
            raise watcher.failure


def _apply(mirror: ClusterMirror, note: Notification) -> Iterator[Emission]:
    if note.action == LIST_START:
        mirror.start_listing([note.kind])
    elif note.action == LIST_PAGE:
        yield from mirror.listed(note.kind, note.objects)
    elif note.action == LIST_RESTART:
        mirror.restart_listing(note.kind)
    elif note.action == LIST_END:
        yield from mirror.finish_listing([note.kind])
    else:
        for obj in note.objects:
            yield from mirror.observe(note.kind, note.action, obj)


def run_bridge(settings: Settings, read_service: ServiceReader | None = None) -> None:
    """`minruntime kube bridge`: run one replica until SIGINT/SIGTERM (with ``read_service``,
    checking drift while active)."""
    bridge = Bridge(settings, api_client(settings), registry=REGISTRY, read_service=read_service)
    preload_sources()  # while the Lease and the ledger are waited for
    health.serve_metrics(
        settings.metrics_host,
        settings.kube_bridge_metrics_port,
        "KUBE_BRIDGE_METRICS_PORT",
        "kube-bridge",
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        health.LIVENESS.watch(loop)
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, bridge.stop.set)
        await bridge.run()

    asyncio.run(main())
