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
from datetime import UTC, datetime, timedelta
from typing import Any

from minruntime.cluster.api import read_json
from minruntime.cluster.mapping import parse_time

log = logging.getLogger(__name__)

HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409


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

    def try_acquire(self, now: datetime) -> bool:
        """Take or renew the lease; False when another replica holds it or won a race."""
        from kubernetes.client.exceptions import ApiException

        try:
            lease = read_json(
                self._api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            )
        except ApiException as error:
            if error.status != HTTP_NOT_FOUND:
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
            self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                return False
            raise
        return True

    def release(self) -> None:
        """Give the lease up at a clean stop, so a standby takes over at once."""
        from kubernetes.client.exceptions import ApiException

        try:
            lease = read_json(
                self._api.read_namespaced_lease(self.name, self.namespace, _preload_content=False)
            )
            if lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            lease["spec"]["holderIdentity"] = None
            lease["spec"]["renewTime"] = None
            self._api.replace_namespaced_lease(self.name, self.namespace, lease)
        except ApiException as error:
            log.warning("could not release the lease: %s", error)

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
            self._api.create_namespaced_lease(self.namespace, body)
        except ApiException as error:
            if error.status == HTTP_CONFLICT:
                return False
            raise
        return True
