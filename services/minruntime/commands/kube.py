"""`minruntime kube bridge | evictor`: the two services that speak to the cluster.

The bridge turns Kubernetes objects into events; the evictor carries out the worker's
decisions (docs/kubernetes.md). `kube diff` is in `commands.kube_diff`; the bridge's periodic
drift check reads the service as it does (``audit.service_side``).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import TYPE_CHECKING

from minruntime.commands.common import LogLevel, current_settings, service_logging
from minruntime.settings import Settings

if TYPE_CHECKING:
    from minruntime.cluster.drift import ServicePodGroup


def bridge_command(loglevel: LogLevel = "warning") -> None:
    """Watch Queues, PodGroups, Pods, Nodes and the scheduler config; send the events; while
    active, export the drift between the cluster and the service (as `kube diff`)."""
    from minruntime.cluster.bridge import run_bridge

    service_logging(loglevel)
    settings = current_settings()
    run_bridge(settings, functools.partial(_read_service, settings))


def _read_service(settings: Settings, uids: Sequence[str]) -> list[ServicePodGroup]:
    """The drift check's read of the service (as `kube diff`'s). Its modules (the store's,
    SQLAlchemy's, psycopg's: a quarter of a second) are imported at the first check, not
    before the bridge's first listing."""
    from minruntime.audit.service_side import read_podgroups
    from minruntime.cluster.drift import service_podgroup

    return read_podgroups(settings, None, uids, with_pods=False, row=service_podgroup)


def evictor_command(loglevel: LogLevel = "warning") -> None:
    """Carry out requeue.committed: evict the podgroup's pods, mark its PodGroup."""
    from minruntime.cluster.evictor import run_evictor

    service_logging(loglevel)
    run_evictor(current_settings())
