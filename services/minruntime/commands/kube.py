"""`minruntime kube bridge | evictor`: the two services that speak to the cluster.

The bridge turns Kubernetes objects into events; the evictor carries out the worker's
decisions (docs/kubernetes.md). `kube diff` is in `commands.kube_diff`; the bridge's periodic
drift check reads the service as it does (``audit.service_side``).
"""

from __future__ import annotations

import functools

from minruntime.audit.service_side import read_podgroups
from minruntime.cluster.bridge import run_bridge
from minruntime.cluster.drift import service_podgroup
from minruntime.cluster.evictor import run_evictor
from minruntime.commands.common import LogLevel, current_settings, service_logging


def bridge_command(loglevel: LogLevel = "warning") -> None:
    """Watch Queues, PodGroups, Pods, Nodes and the scheduler config; send the events; while
    active, export the drift between the cluster and the service (as `kube diff`)."""
    service_logging(loglevel)
    settings = current_settings()
    read = functools.partial(read_podgroups, settings, None, with_pods=False, row=service_podgroup)
    run_bridge(settings, read)


def evictor_command(loglevel: LogLevel = "warning") -> None:
    """Carry out requeue.committed: evict the podgroup's pods, mark its PodGroup."""
    service_logging(loglevel)
    run_evictor(current_settings())
