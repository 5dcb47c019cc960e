"""`minruntime kube diff`: the cluster, listed with the bridge's own calls, against the service;
and the repair that makes the two agree.

The service's side comes from the caller's ``read_service`` (``cluster/`` never reads the
database; the command passes ``audit.service_side.read_podgroups``). The comparison is
``drift``'s, the repair ``repair``'s; this module lists and runs them in order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from minruntime.cluster.api import api_client, mirror_options
from minruntime.cluster.drift import (
    ClusterPodGroup,
    Drift,
    ServicePodGroup,
    cluster_podgroups,
    compare,
    confirmed,
)
from minruntime.cluster.listing import list_cluster
from minruntime.cluster.mirror import Kind
from minruntime.cluster.repair import Repair, mirrored, repair
from minruntime.settings import Settings

# The service's podgroups of these uids (with ``with_pods``: and the pods each holds).
ServiceRead = Callable[[Sequence[str], bool], list[ServicePodGroup]]


@dataclass(frozen=True)
class Compared:
    """One comparison: what differs, and the two sides it was made from."""

    drift: Drift
    cluster: dict[str, ClusterPodGroup]
    service: list[ServicePodGroup]
    client: Any


@dataclass(frozen=True)
class RepairPlan:
    """What a repair would send, and how many differences changed while comparing (in
    flight: not repaired)."""

    plan: Repair
    moved: int


def compare_cluster(
    settings: Settings, namespace: str | None, read_service: ServiceRead, *, with_pods: bool
) -> Compared:
    """The cluster's podgroups (of ``namespace``, or all) against the service's."""
    client = api_client(settings)
    listing = list_cluster(client, settings, [Kind.POD_GROUP, Kind.POD], namespace)
    cluster = cluster_podgroups(listing[Kind.POD_GROUP], listing[Kind.POD], namespace)
    service = read_service(list(cluster), with_pods)
    return Compared(compare(cluster, service, namespace), cluster, service, client)


def plan_repair(
    settings: Settings, compared: Compared, namespace: str | None, now: datetime
) -> RepairPlan:
    """The events that make the service agree, for the differences a second listing
    confirms."""
    kinds = [Kind.PRIORITY_CLASS, Kind.POD_GROUP, Kind.POD]
    listing = list_cluster(compared.client, settings, kinds, namespace)
    cluster = cluster_podgroups(listing[Kind.POD_GROUP], listing[Kind.POD], namespace)
    drift, service = compared.drift, compared.service
    sure = confirmed(drift, compare(cluster, service, namespace))
    differing = [cluster[uid] for uid in sure.uids if uid in cluster]
    fed = {
        Kind.PRIORITY_CLASS: listing[Kind.PRIORITY_CLASS],
        Kind.POD_GROUP: [side.podgroup for side in differing],
        Kind.POD: [pod for side in differing for pod in side.pods],
    }
    events = mirrored(fed, mirror_options(settings), lambda: now)
    moved = len(drift.differences) - len(sure.differences)
    return RepairPlan(repair(sure, cluster, service, events, now), moved)
