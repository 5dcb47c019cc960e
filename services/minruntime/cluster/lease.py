"""One active bridge replica, elected by a coordination.k8s.io/v1 Lease.

The holder renews `spec.renewTime` every third of the lease duration; another replica takes
the lease over once `renewTime + leaseDurationSeconds` has passed. Every write carries the
resourceVersion it read, so two replicas racing for an expired lease cannot both win (the API
server answers 409 to the second). Clocks: the expiry is judged by the reader's clock against
the holder's renewTime, so replicas' clocks should agree within a fraction of the duration.
"""

from __future__ import annotations

import logging
import math
import os
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from http import HTTPStatus
from typing import Any

from minruntime.cluster.api import read_json
from minruntime.cluster.mapping import parse_time
from minruntime.cluster.transient import transient
from minruntime.retry import Outage

log = logging.getLogger(__name__)


def default_identity() -> str:
    """hostname-pid: unique per replica (set MINRUNTIME_KUBE_IDENTITY to the pod name)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def micro_time(moment: datetime) -> str:
    """A MicroTime as the API server writes it (six fraction digits, always)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class Lease:
    """The bridge's Lease: try to take it, keep it, know whether it is still ours."""

    def __init__(
        self, client: Any, namespace: str, name: str, identity: str, seconds: float
    ) -> None:
        from kubernetes import client as k8s

        self._api = k8s.CoordinationV1Api(client)
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.seconds = seconds
        # A renewal that takes longer than a third of the lease is as good as failed: the
        # holder must know within the lease whether it still holds it.
        self._timeout = max(seconds / 3, 0.5)

    def try_acquire(self, now: datetime) -> bool:
        """Take or renew the lease; False when another replica holds it or won a race."""
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self._read()
        except ApiException as error:
            if error.status != HTTPStatus.NOT_FOUND:
                raise
            return self._create(now)
        spec = lease.setdefault("spec", {})
        holder = spec.get("holderIdentity")
        renewed = parse_time(spec.get("renewTime"))
        duration = float(spec.get("leaseDurationSeconds") or self.seconds)
        expired = renewed is None or renewed + timedelta(seconds=duration) < now
        if holder and holder != self.identity and not expired:
            return False
        if holder != self.identity:
            spec["acquireTime"] = micro_time(now)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + 1
            log.info("taking the lease %s/%s over from %r", self.namespace, self.name, holder)
        spec.update(
            holderIdentity=self.identity,
            renewTime=micro_time(now),
            leaseDurationSeconds=math.ceil(self.seconds),
        )
        try:
            self._replace(lease)
        except ApiException as error:
            if error.status == HTTPStatus.CONFLICT:
                return False
            raise
        return True

    def release(self) -> None:
        """Give the lease up at a clean stop, so a standby takes over at once."""
        from kubernetes.client.exceptions import ApiException

        try:
            lease = self._read()
            if lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = None
            lease["spec"]["renewTime"] = None
            self._replace(lease)
        except ApiException as error:
            log.warning("could not release the lease: %s", error)

    def _read(self) -> Any:
        return read_json(
            self._api.read_namespaced_lease(
                self.name, self.namespace, _preload_content=False, _request_timeout=self._timeout
            )
        )

    def _replace(self, lease: Any) -> None:
        self._api.replace_namespaced_lease(
            self.name, self.namespace, lease, _request_timeout=self._timeout
        )

    def _create(self, now: datetime) -> bool:
        from kubernetes.client.exceptions import ApiException

        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": math.ceil(self.seconds),
                "acquireTime": micro_time(now),
                "renewTime": micro_time(now),
                "leaseTransitions": 0,
            },
        }
        try:
            self._api.create_namespaced_lease(self.namespace, body, _request_timeout=self._timeout)
        except ApiException as error:
            if error.status == HTTPStatus.CONFLICT:
                return False
            raise
        return True


class LeaseKeeper:
    """Renews a held Lease on a thread of its own and says, at any moment, whether the
    holder may still act.

    client-go's leader election, in Python: the renewal never waits behind the bridge's work
    (listing, mapping and sending run elsewhere), and the answer to ``holds()`` is a deadline,
    not the renewal thread's word: a renewal that succeeded at ``t`` (taken when the request
    was sent) proves the Lease until ``t + duration`` in every replica's eyes; the holder acts
    only until ``t + duration - interval`` (``interval`` = a third of the duration, how often
    it renews), so a renewal that hangs or fails stops it one interval before anyone else may
    take the Lease over. A renewal that finds another holder ends the term at once; so does
    an error that is not an outage (``cluster.transient``), kept in ``failure``.
    """

    def __init__(
        self,
        lease: Lease,
        acquired_at: float,
        clock: Callable[[], datetime],
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.lease = lease
        self.interval = lease.seconds / 3
        self._clock = clock
        self._monotonic = monotonic
        self._until = acquired_at + lease.seconds - self.interval
        self.ended = threading.Event()
        # The error that ended the term when it is not an outage (`transient`): the bridge
        # raises it once the term is over.
        self.failure: Exception | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="lease")

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def holds(self) -> bool:
        """True while the holder can prove it still holds the Lease (see the class doc)."""
        return not self.ended.is_set() and self._monotonic() < self._until

    def end(self) -> None:
        """Stop renewing (the term is over)."""
        self.ended.set()

    def _run(self) -> None:
        outage = Outage(f"renewal of the lease {self.lease.name}", log)
        while not self.ended.wait(self.interval):
            sent = self._monotonic()
            try:
                held = self.lease.try_acquire(self._clock())
            except Exception as error:
                if not transient(error):  # a bug, or an answer that will not change: end
                    self.failure = error
                    self.ended.set()
                    return
                outage.failed(error)
                if not self.holds():
                    log.warning(
                        "cannot prove the lease %s is still ours: stopping", self.lease.name
                    )
                    self.ended.set()
                continue
            if not held:
                log.warning("lost the lease %s to another replica", self.lease.name)
                self.ended.set()
                return
            outage.back()
            self._until = sent + self.lease.seconds - self.interval
