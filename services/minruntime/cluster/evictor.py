"""`minruntime kube evictor`: carries out `requeue.committed` decisions in the cluster.

For each decision read from the decisions topic: find the PodGroup by uid, evict every pod of
it through the Eviction API (policy/v1; a PodDisruptionBudget's 429 is retried with backoff),
then write `kai.scheduler/requeue-not-before` and the decision id on the PodGroup, and only
then commit the consumer offset. Idempotent by decision id: a PodGroup that already carries
the decision's id is done; a pod already being deleted (deletionTimestamp) is not evicted
again; a pod created after the decision belongs to a later run and is left alone. So a
redelivered decision, or an evictor restarted mid-way, evicts nothing twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import signal
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from minruntime.cluster import mapping
from minruntime.cluster.api import (
    KAI_GROUP,
    PODGROUP_VERSION,
    Source,
    api_client,
    list_all,
)
from minruntime.cluster.mirror import Kind
from minruntime.core import format_rfc3339
from minruntime.events import EventRejected, RequeueCommittedData, decode_event
from minruntime.kafka_access import kafka_access
from minruntime.retry import retry, retry_async
from minruntime.settings import Settings

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
LIST_PAGE_SIZE = 500
HTTP_TOO_MANY_REQUESTS = 429


class EvictionRefusedError(Exception):
    """The Eviction API's 429: a PodDisruptionBudget allows no disruption now (it passes)."""


@dataclass(frozen=True)
class Outcome:
    """What carrying out one decision did (for the log and the tests)."""

    decision: str
    evicted: tuple[str, ...] = ()
    skipped: str | None = None


class Evictor:
    """Carries out decisions against the API server (blocking; run it in a thread)."""

    def __init__(self, client: Any, backoff_max: float, stop: threading.Event) -> None:
        from kubernetes import client as k8s

        self.core = k8s.CoreV1Api(client)
        self.custom = k8s.CustomObjectsApi(client)
        self.backoff_max = backoff_max
        self.stop = stop

    def carry_out(self, decision_id: str, decision: RequeueCommittedData) -> Outcome:
        """Evict the podgroup's pods and mark the PodGroup (see the module docstring)."""
        podgroup = self._podgroup(decision.uid)
        if podgroup is None:
            return Outcome(decision_id, skipped="podgroup_gone")
        annotations = mapping.metadata(podgroup).get("annotations") or {}
        if annotations.get(mapping.REQUEUE_DECISION_ANNOTATION) == decision_id:
            return Outcome(decision_id, skipped="already_done")
        namespace, name = mapping.namespace_of(podgroup), mapping.name_of(podgroup)
        evicted = tuple(
            mapping.name_of(pod)
            for pod in self._pods(namespace, name)
            if _of_this_run(pod, decision.decided_at) and self._evict(pod)
        )
        self.custom.patch_namespaced_custom_object(
            KAI_GROUP,
            PODGROUP_VERSION,
            namespace,
            "podgroups",
            name,
            {
                "metadata": {
                    "annotations": {
                        mapping.REQUEUE_NOT_BEFORE_ANNOTATION: format_rfc3339(
                            decision.requeue_not_before
                        ),
                        mapping.REQUEUE_DECISION_ANNOTATION: decision_id,
                    }
                }
            },
        )
        return Outcome(decision_id, evicted)

    def _podgroup(self, uid: str) -> Mapping[str, Any] | None:
        # A custom resource cannot be selected by uid: list them, page by page, and pick it.
        listing = functools.partial(
            self.custom.list_cluster_custom_object, KAI_GROUP, PODGROUP_VERSION, "podgroups"
        )
        for podgroup in list_all(Source(Kind.POD_GROUP, listing), LIST_PAGE_SIZE)[0]:
            if mapping.metadata(podgroup).get("uid") == uid:
                return podgroup
        return None

    def _pods(self, namespace: str, podgroup: str) -> list[Mapping[str, Any]]:
        listing = functools.partial(self.core.list_namespaced_pod, namespace)
        return [
            pod
            for pod in list_all(Source(Kind.POD, listing), LIST_PAGE_SIZE)[0]
            if mapping.pod_group_name(pod) == podgroup
        ]

    def _evict(self, pod: Mapping[str, Any]) -> bool:
        """Evict one pod; False when it is already going or gone. Retries a PDB's 429."""
        from kubernetes.client.exceptions import ApiException

        if mapping.deleted_at(pod) is not None:
            return False  # evicted before (a redelivered decision) or being deleted anyway
        namespace, name = mapping.namespace_of(pod), mapping.name_of(pod)
        body = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": name, "namespace": namespace},
        }

        def attempt() -> bool:
            try:
                self.core.create_namespaced_pod_eviction(name, namespace, body)
            except ApiException as error:
                if error.status == HTTP_NOT_FOUND:
                    return False
                if error.status == HTTP_TOO_MANY_REQUESTS:
                    raise EvictionRefusedError("refused by a disruption budget (429)") from error
                raise
            log.info("evicted pod %s/%s", namespace, name)
            return True

        # Until the budget allows it or the evictor stops (InterruptedError: done again later).
        return retry(
            attempt,
            what=f"eviction of pod {namespace}/{name}",
            stop=self.stop,
            transient=lambda error: isinstance(error, EvictionRefusedError),
            logger=log,
            cap=self.backoff_max,
        )


def _of_this_run(pod: Mapping[str, Any], decided_at: datetime) -> bool:
    created = mapping.created_at(pod)
    return created is None or created <= decided_at


async def consume(settings: Settings, evictor: Evictor, stop: threading.Event) -> None:
    """Read decisions and carry out each committed one; commit each offset after it is done."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(
        settings.topic_requeue_decisions,
        **kafka_access(settings).client_kwargs(),
        group_id=settings.evictor_group,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    )
    try:
        with contextlib.suppress(InterruptedError):  # stopped before Kafka was reached
            await retry_async(
                consumer.start,
                what=f"Kafka at {settings.kafka_bootstrap}",
                stop=stop,
                logger=log,
                cap=settings.kube_backoff_max_seconds,
            )
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=500)
            for partition, records in batches.items():
                for record in records:
                    await _handle(evictor, record.value, stop, settings.kube_backoff_max_seconds)
                    await consumer.commit(
                        {TopicPartition(partition.topic, partition.partition): record.offset + 1}
                    )
    finally:
        await consumer.stop()


async def _handle(evictor: Evictor, value: bytes | None, stop: threading.Event, cap: float) -> None:
    try:
        event = decode_event(value)
    except EventRejected as error:
        log.warning("ignored a record that is not a decision event: %s", error)
        return
    if not isinstance(event.data, RequeueCommittedData):
        return
    decision = event.data
    try:
        outcome = await retry_async(
            lambda: asyncio.to_thread(evictor.carry_out, event.id, decision),
            what=f"decision {event.id}",
            stop=stop,
            transient=lambda error: not isinstance(error, InterruptedError),
            logger=log,
            cap=cap,
        )
    except InterruptedError:
        raise asyncio.CancelledError from None  # stopped before done: the offset stays uncommitted
    log.warning(
        "decision %s for %s: %s",
        event.id,
        decision.uid,
        outcome.skipped or f"evicted {', '.join(outcome.evicted) or 'no pod'}",
    )


def run_evictor(settings: Settings) -> None:
    """`minruntime kube evictor`: run until SIGINT/SIGTERM."""
    stop = threading.Event()
    evictor = Evictor(api_client(settings), settings.kube_backoff_max_seconds, stop)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, stop.set)
        try:
            await consume(settings, evictor, stop)
        except asyncio.CancelledError:
            log.warning("stopped with a decision not yet carried out (it is read again)")

    asyncio.run(main())
