"""`minruntime kube bridge | evictor`: the two services that speak to the cluster.

The bridge turns Kubernetes objects into events; the evictor carries out the worker's
decisions (docs/kubernetes.md). `kube diff` is in `commands.kube_diff`; the bridge's periodic
drift check reads the service with its `read_service`.
"""

from __future__ import annotations

import functools

from minruntime.commands.common import current_settings
from minruntime.commands.service import LogLevel, service_logging


def bridge_command(loglevel: LogLevel = "warning") -> None:
    """Watch Queues, PodGroups, Pods, Nodes and the scheduler config; send the events; while
    active, export the drift between the cluster and the service (as `kube diff`)."""
    from minruntime.cluster.bridge import run_bridge
    from minruntime.commands.kube_diff import read_service

    service_logging(loglevel)
    settings = current_settings()
    run_bridge(settings, functools.partial(read_service, settings, None, with_pods=False))


def evictor_command(loglevel: LogLevel = "warning") -> None:
    """Carry out requeue.committed: evict the podgroup's pods, mark its PodGroup."""
    from minruntime.cluster.evictor import run_evictor

    service_logging(loglevel)
    run_evictor(current_settings())
