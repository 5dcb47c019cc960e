"""`minruntime kube evictor`: carries out `requeue.committed` decisions in the cluster.

For each decision read from the decisions topic: find the PodGroup by uid, evict every pod of
it through the Eviction API (policy/v1), then write `kai.scheduler/requeue-not-before` and the
decision id on the PodGroup. Idempotent by decision id: a PodGroup that already carries the
decision's id is done; a pod already being deleted (deletionTimestamp) is not evicted again; a
pod created after the decision belongs to a later run and is left alone. So a redelivered
decision, or an evictor restarted mid-way, evicts nothing twice.

Nothing blocks the others (`Lanes`): decisions are carried out concurrently, one lane per
podgroup (its decisions in order), at most `evictor_concurrency` API calls at once. A refusal
(a PodDisruptionBudget's 429, a 403, the API server away) delays only its own lane, retried
with backoff until the decision's deadline (`decidedAt` + the node pool's eviction deadline);
then the decision ends as `requeue.abandoned` (sent to the podgroups topic, the id derived
from the decision's, so a repeat is applied once) with the reason. A decision whose PodGroup
is gone is abandoned at once (`not_found`). A partition's offset is committed only up to the
first decision that has not reached an end: a restart reads the rest again, and the marks on
the PodGroups make each of them happen exactly once.

A PodGroup that declares a valid `minruntime.kai.scheduler/checkpoint-grace` is asked for a
checkpoint first (`DecisionRunner._handshake`; the rules in core.checkpoint_wait): the
evictor writes `checkpoint-requested-at` (unless this decision's request is on it already: a
restart resumes the wait), sleeps between reads of the PodGroup until `checkpointed-at`
answers, the grace runs out or the PodGroup is gone, sends `requeue.checkpoint`, then evicts.
The decision's deadline is longer by the grace.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any, Final, TypeVar

from prometheus_client import REGISTRY, CollectorRegistry

from minruntime import health
from minruntime.cluster import mapping
from minruntime.cluster.api import (
    KAI_GROUP,
    PODGROUP_VERSION,
    Source,
    annotate_podgroup,
    api_client,
    list_all,
)
from minruntime.cluster.lanes import Lanes, Offsets
from minruntime.cluster.mapping import NODE_POOL_LABEL
from minruntime.cluster.metrics import EvictorMetrics
from minruntime.cluster.mirror import Kind
from minruntime.cluster.transient import transient
from minruntime.core import DEFAULT_NODE_POOL, format_rfc3339
from minruntime.core.checkpoint import (
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    GraceReading,
    read_checkpoint_grace,
)
from minruntime.core.checkpoint_wait import (
    WaitEnd,
    pending_request,
    request_time,
    time_left,
    wait_end,
)
from minruntime.events import (
    Event,
    EventRejected,
    EventType,
    RequeueAbandonedData,
    RequeueCheckpointData,
    RequeueCommittedData,
    decode_event,
    encode_event,
    new_event,
)
from minruntime.kafka_access import kafka_access
from minruntime.retry import Outage, one_line, retry_async
from minruntime.settings import Settings

log = logging.getLogger(__name__)

ABANDON_SOURCE: Final = "minruntime/kube-evictor"
# A namespace's pod listing serves the decisions decided this long before it (the worker's
# and the evictor's clocks may differ by that much).
LISTING_MARGIN: Final = timedelta(seconds=1)
LIST_PAGE_SIZE = 500


T = TypeVar("T")
Ending = RequeueCheckpointData | RequeueAbandonedData  # the events that end a decision


class EvictionRefusedError(Exception):
    """The Eviction API's 429: a PodDisruptionBudget allows no disruption now (it passes)."""


class PodGroupGoneError(Exception):
    """The decision's PodGroup no longer exists: nothing is left to carry out."""


class DeadlinePassedError(Exception):
    """Read again after its deadline and not done: the decision is abandoned, not attempted."""


@dataclass(frozen=True)
class Look:
    """The decision's PodGroup as read before acting on it."""

    podgroup: Mapping[str, Any]
    namespace: str
    name: str
    done: bool
    grace: GraceReading
    requested_at: datetime | None


@dataclass(frozen=True)
class Outcome:
    """What carrying out one decision did (for the log and the tests)."""

    decision: str
    evicted: tuple[str, ...] = ()
    skipped: str | None = None


def abandon_reason(error: BaseException | None) -> str:
    """The `requeue.abandoned` reason of the last error (ABANDON_REASONS)."""
    from kubernetes.client.exceptions import ApiException

    if isinstance(error, EvictionRefusedError):
        return "pdb"
    if isinstance(error, PodGroupGoneError):
        return "not_found"
    if isinstance(error, DeadlinePassedError):
        return "expired"
    if isinstance(error, ApiException):
        if error.status == HTTPStatus.FORBIDDEN:
            return "forbidden"
        if error.status == HTTPStatus.NOT_FOUND:
            return "not_found"
    return "api_error"


def waits(error: BaseException) -> bool:
    """What a decision's lane waits out until its deadline: an outage (`transient`) or the
    cluster's refusal (a disruption budget's 429, any other answer of the API server: 403,
    409, ...). Anything else is a bug and propagates."""
    from kubernetes.client.exceptions import ApiException

    return transient(error) or isinstance(error, EvictionRefusedError | ApiException)


class Evictor:
    """Carries out decisions against the API server (blocking; run it in a thread)."""

    def __init__(self, client: Any) -> None:
        from kubernetes import client as k8s

        self.core = k8s.CoreV1Api(client)
        self.custom = k8s.CustomObjectsApi(client)
        # PodGroup uid -> its node pool (label), as last read: which deadline applies.
        self.pools: dict[str, str] = {}
        # PodGroup uid -> its valid checkpoint grace, as last read: the deadline is that longer.
        self.graces: dict[str, timedelta] = {}
        self._index: dict[str, tuple[str, str]] = {}
        self._index_lock = threading.Lock()
        # Namespace -> (when listed, PodGroup name -> its pods).
        self._namespace_pods: dict[str, tuple[datetime, dict[str, list[Mapping[str, Any]]]]] = {}

    def carry_out(
        self,
        decision_id: str,
        decision: RequeueCommittedData,
        *,
        evict: bool = True,
        read: Mapping[str, Any] | None = None,
    ) -> Outcome:
        """Evict the podgroup's pods and mark the PodGroup (see the module docstring).

        One attempt: a refusal raises (EvictionRefusedError, the API's errors), a PodGroup
        gone raises PodGroupGoneError; with `evict` False (past its deadline) a decision
        not done yet raises DeadlinePassedError instead of evicting anything. `read`: the
        PodGroup as `look` just read it (not read again), else None.
        """
        podgroup, annotations = self._read(decision.uid, read)
        if annotations.get(mapping.REQUEUE_DECISION_ANNOTATION) == decision_id:
            return Outcome(decision_id, skipped="already_done")
        if not evict:
            raise DeadlinePassedError(f"decision {decision_id} read again after its deadline")
        namespace, name = mapping.namespace_of(podgroup), mapping.name_of(podgroup)
        evicted = tuple(
            mapping.name_of(pod)
            for pod in self._pods(namespace, name, decision.decided_at)
            if _of_this_run(pod, decision.decided_at) and self._evict(pod)
        )
        marks = {
            mapping.REQUEUE_NOT_BEFORE_ANNOTATION: format_rfc3339(decision.requeue_not_before),
            mapping.REQUEUE_DECISION_ANNOTATION: decision_id,
        }
        annotate_podgroup(self.custom, namespace, name, marks)
        return Outcome(decision_id, evicted)

    def look(self, decision_id: str, decision: RequeueCommittedData) -> Look:
        """Read the decision's PodGroup before acting on it: done already, its checkpoint
        grace (remembered for the deadline), a request already on it (PodGroupGoneError:
        gone)."""
        podgroup, annotations = self._read(decision.uid)
        reading = read_checkpoint_grace(annotations)
        if reading.grace is not None:
            self.graces[decision.uid] = reading.grace
        else:
            self.graces.pop(decision.uid, None)
        return Look(
            podgroup=podgroup,
            namespace=mapping.namespace_of(podgroup),
            name=mapping.name_of(podgroup),
            done=annotations.get(mapping.REQUEUE_DECISION_ANNOTATION) == decision_id,
            grace=reading,
            requested_at=pending_request(annotations, decision.decided_at),
        )

    def _read(
        self, uid: str, read: Mapping[str, Any] | None = None
    ) -> tuple[Mapping[str, Any], Mapping[str, str]]:
        """The PodGroup (``read``, else read fresh) and its annotations, its node pool
        remembered (PodGroupGoneError: gone)."""
        podgroup = read if read is not None else self._podgroup(uid)
        if podgroup is None:
            raise PodGroupGoneError(f"PodGroup {uid} not found")
        metadata = mapping.metadata(podgroup)
        self.pools[uid] = (metadata.get("labels") or {}).get(NODE_POOL_LABEL, DEFAULT_NODE_POOL)
        return podgroup, metadata.get("annotations") or {}

    def request_checkpoint(self, namespace: str, name: str, requested_at: datetime) -> datetime:
        """Write ``checkpoint-requested-at`` on the PodGroup, return it (PodGroupGoneError:
        gone)."""
        from kubernetes.client.exceptions import ApiException

        try:
            request = {CHECKPOINT_REQUESTED_AT_ANNOTATION: format_rfc3339(requested_at)}
            annotate_podgroup(self.custom, namespace, name, request)
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND:
                raise PodGroupGoneError(f"PodGroup {namespace}/{name} not found") from error
            raise
        log.info("asked PodGroup %s/%s for a checkpoint at %s", namespace, name, requested_at)
        return requested_at

    def annotations(self, uid: str) -> Mapping[str, str] | None:
        """The PodGroup's annotations as they are now (None: gone)."""
        podgroup = self._podgroup(uid)
        if podgroup is None:
            return None
        found: Mapping[str, str] = mapping.metadata(podgroup).get("annotations") or {}
        return found

    def _podgroup(self, uid: str) -> Mapping[str, Any] | None:
        """The PodGroup with this uid, read fresh (None: gone).

        A custom resource cannot be selected by uid: the evictor keeps an index uid ->
        (namespace, name) from one cluster-wide listing, lists again only for a uid it does
        not know (one listing serves every decision read with it, instead of one listing per
        decision), and reads the PodGroup itself by name (its annotations as they are now).
        """
        with self._index_lock:
            known = self._index.get(uid)
            if known is None:
                self._relist()
                known = self._index.get(uid)
        if known is None:
            return None
        from kubernetes.client.exceptions import ApiException

        try:
            podgroup: Mapping[str, Any] = self.custom.get_namespaced_custom_object(
                KAI_GROUP, PODGROUP_VERSION, known[0], "podgroups", known[1]
            )
        except ApiException as error:
            if error.status != HTTPStatus.NOT_FOUND:
                raise
            with self._index_lock:
                self._index.pop(uid, None)
            return None
        if mapping.metadata(podgroup).get("uid") != uid:  # deleted and created again
            return None
        return podgroup

    def _relist(self) -> None:
        listing = functools.partial(
            self.custom.list_cluster_custom_object, KAI_GROUP, PODGROUP_VERSION, "podgroups"
        )
        self._index = {
            str(mapping.metadata(podgroup).get("uid")): (
                mapping.namespace_of(podgroup),
                mapping.name_of(podgroup),
            )
            for podgroup in list_all(Source(Kind.POD_GROUP, listing), LIST_PAGE_SIZE)[0]
        }

    def _pods(self, namespace: str, podgroup: str, decided_at: datetime) -> list[Mapping[str, Any]]:
        """The PodGroup's pods, from a listing of its namespace made after ``decided_at``
        (plus a margin for the clocks): every pod of the decided run exists in it, so one
        listing serves every decision of that namespace decided before it, instead of one
        listing per decision. A pod it shows as not deleted may be going already: its
        eviction is then answered 404 (gone) or accepted again (it is going anyway)."""
        with self._index_lock:
            cached = self._namespace_pods.get(namespace)
            if cached is None or cached[0] <= decided_at + LISTING_MARGIN:
                listed_at = datetime.now(UTC)
                listing = functools.partial(self.core.list_namespaced_pod, namespace)
                by_podgroup: dict[str, list[Mapping[str, Any]]] = {}
                for pod in list_all(Source(Kind.POD, listing), LIST_PAGE_SIZE)[0]:
                    name = mapping.pod_group_name(pod)
                    if name is not None:
                        by_podgroup.setdefault(name, []).append(pod)
                cached = self._namespace_pods[namespace] = (listed_at, by_podgroup)
            return list(cached[1].get(podgroup, ()))

    def _evict(self, pod: Mapping[str, Any]) -> bool:
        """Evict one pod; False when it is already going or gone. A PDB's 429 raises
        EvictionRefusedError (the decision's lane retries it), other API errors propagate."""
        from kubernetes.client.exceptions import ApiException

        if mapping.deleted_at(pod) is not None:
            return False  # evicted before (a redelivered decision) or being deleted anyway
        namespace, name = mapping.namespace_of(pod), mapping.name_of(pod)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }
        try:
            self.core.create_namespaced_pod_eviction(name, namespace, body)
        except ApiException as error:
            if error.status == HTTPStatus.NOT_FOUND:
                return False
            if error.status == HTTPStatus.TOO_MANY_REQUESTS:
                raise EvictionRefusedError(
                    f"eviction of pod {namespace}/{name} refused by a disruption budget (429)"
                ) from error
            raise
        log.info("evicted pod %s/%s", namespace, name)
        return True


def _of_this_run(pod: Mapping[str, Any], decided_at: datetime) -> bool:
    created = mapping.created_at(pod)
    return created is None or created <= decided_at


class DecisionRunner:
    """Carries out one decision until it reaches an end: done, or abandoned at its deadline.
    The checkpoint wait (the module docstring) holds no thread and no API slot between reads."""

    def __init__(
        self,
        settings: Settings,
        evictor: Evictor,
        publish: Callable[[Event], Awaitable[None]],
        stopping: asyncio.Event,
        metrics: EvictorMetrics,
        *,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        self.settings, self.evictor, self.publish = settings, evictor, publish
        self.stopping, self.metrics, self.clock = stopping, metrics, clock
        self.executor = executor
        self.calls = asyncio.Semaphore(settings.evictor_concurrency)

    def deadline(self, decision: RequeueCommittedData) -> datetime:
        """decidedAt + its node pool's eviction deadline (the default while the pool is
        unknown) + its checkpoint grace, if it declares one: the wait is not held against it."""
        pool = self.evictor.pools.get(decision.uid, DEFAULT_NODE_POOL)
        grace = self.evictor.graces.get(decision.uid, timedelta(0))
        return decision.decided_at + self.settings.evictor_deadline_for(pool) + grace

    async def run(self, event_id: str, decision: RequeueCommittedData) -> None:
        """Until done or abandoned; CancelledError when the evictor stops first (stays open)."""
        read_at = self.clock()  # late or not: judged when read, not after the first call
        look = await self._attempt(event_id, decision, self.evictor.look, event_id, decision)
        if look is None:
            return
        evict = read_at < self.deadline(decision)  # with the pool and the grace just read
        if look.grace.problem is not None:
            self.metrics.invalid_grace()
            _say(event_id, decision, "no checkpoint handshake: %s", look.grace.problem)
        grace = look.grace.grace if evict and not look.done else None
        if grace is not None and await self._handshake(event_id, decision, look, grace):
            return
        # Without a wait, what `look` read is current: the first attempt does not read again.
        current = [look.podgroup] if grace is None else []

        def carry_out() -> Outcome:
            read = current.pop() if current else None
            return self.evictor.carry_out(event_id, decision, evict=evict, read=read)

        outcome = await self._attempt(event_id, decision, carry_out)
        if outcome is None:
            return
        self.metrics.decided(outcome.skipped or "carried_out")
        done = outcome.skipped or f"evicted {', '.join(outcome.evicted) or 'no pod'}"
        _say(event_id, decision, "%s", done)

    async def _attempt(
        self,
        event_id: str,
        decision: RequeueCommittedData,
        call: Callable[..., T],
        *args: Any,
    ) -> T | None:
        """``call(*args)`` in the executor, holding an API slot, retried with backoff while
        the cluster refuses or is away (`waits`) until it succeeds (its result) or the
        decision is abandoned (None: the event is sent). Any other error propagates."""

        def left() -> float:
            return (self.deadline(decision) - self.clock()).total_seconds()

        async def sleep(delay: float) -> None:
            await self._sleep(min(delay, left()))

        try:
            return await retry_async(
                lambda: self._call(call, *args),
                what=f"decision {event_id}",
                stop=self.stopping,
                transient=lambda error: waits(error) and left() > 0,
                logger=log,
                cap=self.settings.kube_backoff_max_seconds,
                sleep=sleep,
            )
        except InterruptedError:
            raise asyncio.CancelledError from None
        except (PodGroupGoneError, DeadlinePassedError) as error:
            await self._abandon(event_id, decision, error)
            return None
        except Exception as error:
            if not waits(error):
                raise  # a bug: not an outage, and not the cluster's refusal
            await self._abandon(event_id, decision, error)  # refused until its deadline
            return None

    async def _call(self, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)`` in the executor, holding an API slot."""
        async with self.calls:
            return await asyncio.get_running_loop().run_in_executor(
                self.executor, functools.partial(call, *args)
            )

    async def _sleep(self, seconds: float) -> None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.stopping.wait(), seconds)

    async def _handshake(
        self, event_id: str, decision: RequeueCommittedData, look: Look, grace: timedelta
    ) -> bool:
        """Ask for a checkpoint (unless asked already for this decision), wait for its end,
        send `requeue.checkpoint`; True when that ended the decision (the PodGroup went away:
        abandoned, not_found)."""
        requested_at = look.requested_at
        if requested_at is None:
            asked = await self._attempt(
                event_id,
                decision,
                self.evictor.request_checkpoint,
                look.namespace,
                look.name,
                request_time(self.clock()),
            )
            if asked is None:
                return True  # gone before it was asked: abandoned (not_found)
            requested_at = asked
        else:
            at = format_rfc3339(requested_at)
            _say(event_id, decision, "resuming the checkpoint wait requested at %s", at)
        end = await self._wait(event_id, decision.uid, requested_at, grace)
        checkpoint = RequeueCheckpointData(
            uid=decision.uid,
            decision=event_id,
            outcome=end.outcome,
            requested_at=requested_at,
            grace=grace,
            ended_at=end.ended_at,
            checkpointed_at=end.checkpointed_at,
        )
        await self._send(
            event_id, "checkpoint", EventType.REQUEUE_CHECKPOINT, checkpoint, end.ended_at
        )
        waited = (end.ended_at - requested_at).total_seconds()
        self.metrics.checkpointed(end.outcome, waited)
        _say(event_id, decision, "checkpoint %s after %.1f s", end.outcome, waited)
        if end.outcome != "gone":
            return False
        await self._abandon(
            event_id,
            decision,
            PodGroupGoneError(f"PodGroup {decision.uid} deleted during the checkpoint wait"),
        )
        return True

    async def _wait(
        self, event_id: str, uid: str, requested_at: datetime, grace: timedelta
    ) -> WaitEnd:
        """Read the PodGroup every poll interval (an API slot only for the read) until the
        wait ends (core.checkpoint_wait.wait_end). A read still unanswered when the grace
        runs out, or failed after it, ends the wait as timed out: a slow or absent API server
        never makes it longer (past the grace already, e.g. resumed late: one read, so an
        answer written meanwhile still counts)."""
        outage = Outage(f"checkpoint wait of decision {event_id}", log)
        poll = self.settings.evictor_checkpoint_poll_seconds
        while True:
            if self.stopping.is_set():
                raise asyncio.CancelledError
            left = time_left(requested_at, grace, self.clock())
            try:
                annotations = await asyncio.wait_for(
                    self._call(self.evictor.annotations, uid), left if left > 0 else poll
                )
            except TimeoutError:
                return WaitEnd("timed_out", self.clock())
            except Exception as error:  # the API server away: the grace runs out all the same
                if not waits(error):
                    raise
                outage.failed(error)
                now = self.clock()
                if time_left(requested_at, grace, now) <= 0:
                    return WaitEnd("timed_out", now)
            else:
                outage.back()
                now = self.clock()
                end = wait_end(annotations, requested_at, grace, now)
                if end is not None:
                    return end
            await self._sleep(max(0.0, min(poll, time_left(requested_at, grace, now))))

    async def _send(
        self, event_id: str, ending: str, event_type: EventType, data: Ending, time: datetime
    ) -> None:
        """A decision's end on the podgroups topic; its id the decision's and ``.ending``, so
        a repeat is applied once."""
        await self.publish(
            new_event(
                str(event_type), data, time=time, source=ABANDON_SOURCE, id=f"{event_id}.{ending}"
            )
        )

    async def _abandon(
        self, event_id: str, decision: RequeueCommittedData, error: BaseException
    ) -> None:
        reason = abandon_reason(error)
        abandoned = RequeueAbandonedData(
            uid=decision.uid,
            decision=event_id,
            reason=reason,
            nominated_by=decision.nominated_by,
            requeue_not_before=decision.requeue_not_before,
            decided_at=decision.decided_at,
            deadline=self.deadline(decision),
            message=one_line(error),
        )
        await self._send(
            event_id, "abandoned", EventType.REQUEUE_ABANDONED, abandoned, self.clock()
        )
        self.metrics.abandoned(reason)
        _say(event_id, decision, "abandoned (%s): %s", reason, one_line(error))


async def consume(
    settings: Settings,
    evictor: Evictor,
    stop: threading.Event,
    metrics: EvictorMetrics | None = None,
    clock: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> None:
    """Read decisions and carry each committed one out in its podgroup's lane; commit each
    partition's offset up to the first decision not yet at an end."""
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    metrics = metrics or EvictorMetrics(CollectorRegistry())
    access = kafka_access(settings)
    consumer = AIOKafkaConsumer(
        settings.topic_requeue_decisions,
        **access.client_kwargs(),
        group_id=settings.evictor_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    producer = AIOKafkaProducer(**access.client_kwargs(), enable_idempotence=True)
    stopping = asyncio.Event()
    loop = asyncio.get_running_loop()
    threading.Thread(
        target=lambda: (stop.wait(), loop.call_soon_threadsafe(stopping.set)), daemon=True
    ).start()

    async def publish(event: Event) -> None:
        await retry_async(
            lambda: producer.send_and_wait(
                settings.topic_podgroups, encode_event(event), key=event.subject.encode()
            ),
            what=f"Kafka at {settings.kafka_bootstrap}",
            stop=stopping,
            logger=log,
            cap=settings.kube_backoff_max_seconds,
        )

    offsets: Offsets[Any] = Offsets()
    lanes = Lanes()
    executor = concurrent.futures.ThreadPoolExecutor(
        settings.evictor_concurrency, thread_name_prefix="evictor"
    )
    runner = DecisionRunner(
        settings, evictor, publish, stopping, metrics, clock=clock, executor=executor
    )

    def job(partition: Any, offset: int, event_id: str, decision: RequeueCommittedData) -> Any:
        async def carry_out() -> None:
            try:
                await runner.run(event_id, decision)
            except InterruptedError:
                return  # stopped while publishing: stays open
            offsets.finish(partition, offset)

        return carry_out

    async def commit() -> None:
        moved = offsets.committable()
        if moved:
            await consumer.commit(
                {TopicPartition(p.topic, p.partition): o for p, o in moved.items()}
            )

    try:
        with contextlib.suppress(InterruptedError):  # stopped before Kafka was reached
            for client in (consumer, producer):
                await retry_async(
                    client.start,
                    what=f"Kafka at {settings.kafka_bootstrap}",
                    stop=stop,
                    logger=log,
                    cap=settings.kube_backoff_max_seconds,
                )
        while not stop.is_set():
            if lanes.failure is not None:
                raise lanes.failure  # a bug in carrying a decision out: the evictor fails
            if offsets.open_count < settings.evictor_max_open:
                batches = await consumer.getmany(timeout_ms=200, max_records=500)
            else:  # enough read and not done: let the lanes catch up first
                batches = {}
                await asyncio.sleep(0.2)
            for partition, records in batches.items():
                for record in records:
                    offsets.read(partition, record.offset)
                    decision = _decision(record.value)
                    if decision is None:
                        offsets.finish(partition, record.offset)
                    else:
                        event_id, data = decision
                        lanes.add(data.uid, job(partition, record.offset, event_id, data))
            metrics.open.set(offsets.open_count)
            await commit()
    finally:
        stopping.set()
        await lanes.close()
        executor.shutdown(wait=True, cancel_futures=True)
        with contextlib.suppress(Exception):
            await commit()
        await consumer.stop()
        await producer.stop()


def _say(event_id: str, decision: RequeueCommittedData, message: str, *args: object) -> None:
    """One line about a decision, its id and PodGroup first."""
    log.warning("decision %s for %s: " + message, event_id, decision.uid, *args)


def _decision(value: bytes | None) -> tuple[str, RequeueCommittedData] | None:
    try:
        event = decode_event(value)
    except EventRejected as error:
        log.warning("ignored a record that is not a decision event: %s", error)
        return None
    if not isinstance(event.data, RequeueCommittedData):
        return None
    return event.id, event.data


def run_evictor(settings: Settings) -> None:
    """`minruntime kube evictor`: run until SIGINT/SIGTERM."""
    stop = threading.Event()
    evictor = Evictor(api_client(settings))
    metrics = EvictorMetrics(REGISTRY)
    health.serve_metrics(
        settings.metrics_host,
        settings.kube_evictor_metrics_port,
        "KUBE_EVICTOR_METRICS_PORT",
        "kube-evictor",
    )

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        await consume(settings, evictor, stop, metrics)
        log.warning("stopped; decisions not yet at an end are read again at the next start")

    asyncio.run(main())
