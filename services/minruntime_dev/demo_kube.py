"""`minruntime demo --kube`: the Kubernetes loop in about a minute, on the local API server.

Everything real: the API server and etcd of `stack up --kube`, Kafka, PostgreSQL, and four
`minruntime` processes (processor, requeue worker, kube bridge, kube evictor). The demo makes
the cluster objects a KAI user has (Queues, PriorityClasses, a GPU Node, PodGroups and pods)
and plays only the parts that do not run here: KAI binding the pods, the kubelet setting them
Running and, after the eviction, deleting the pod (`minruntime_dev.standin`).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

from minruntime.cluster.api import api_client
from minruntime.cluster.mapping import REQUEUE_NOT_BEFORE_ANNOTATION
from minruntime.core import DEFAULT_NODE_POOL
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.store.migrate import upgrade
from minruntime_dev.demo_gentle import GENTLE_ENV, Until, run_gentle
from minruntime_dev.demo_gentle import nodes as gentle_nodes
from minruntime_dev.demo_process import DemoChild, wait_for
from minruntime_dev.demo_queries import KUBE_COMMITTED, KUBE_STATUS, ask, kube_podgroups
from minruntime_dev.standin import Cluster

T = TypeVar("T")

_QUEUES = """
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata: {{name: demo-{run}}}
spec:
  preemptMinRuntime: "0s"
  reclaimMinRuntime: "10m"
  # Without resources KAI gives the queue quota 0 and limit 0: it would schedule nothing.
  resources:
    gpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
"""


def run_kube_demo(console: Console, settings: Settings, timeout: float = 90.0) -> None:
    """Queue YAML, a running gang, a requeue carried out by the evictor, the release; then
    gentler evictions (a blocked gang, a checkpoint, a budget: ``demo_gentle``)."""
    console.rule("[bold]Kubernetes — the cluster's own objects in, an eviction out")
    client = api_client(settings)
    upgrade(settings)
    engine = engine_from(settings)
    run = uuid.uuid4().hex[:4]
    cluster = Cluster(client, f"demo-{run}")
    env = {
        "MINRUNTIME_REQUEUE_INTERVAL_SECONDS": "1",
        "MINRUNTIME_PROCESSOR_METRICS_PORT": "0",
        "MINRUNTIME_WORKER_METRICS_PORT": "0",
        "MINRUNTIME_KUBE_BRIDGE_METRICS_PORT": "0",
        "MINRUNTIME_KUBE_NAMESPACE": cluster.namespace,
        "MINRUNTIME_KUBE_LEASE_NAME": f"demo-bridge-{run}",
        "MINRUNTIME_KUBE_LEASE_SECONDS": "3",
        "MINRUNTIME_EVICTOR_GROUP": f"demo-evictor-{run}",
        **GENTLE_ENV,
    }
    children = [DemoChild.start(command, env) for command in ("processor", "requeue-worker")]
    children += [DemoChild.start(command, env) for command in ("kube bridge", "kube evictor")]
    try:
        console.print(
            "Started `minruntime processor`, `requeue-worker`, `kube bridge`, `kube evictor` "
            f"(pids {', '.join(str(child.pid) for child in children)})."
        )

        def until(check: Callable[[], T | None], what: str) -> T:
            return wait_for(check, children, timeout, what)

        _story(console, engine, cluster, run, until)
        run_gentle(console, engine, cluster, run, until)
    finally:
        _clean_up(cluster, [f"demo-gpu-{run}", *gentle_nodes(run)])
        for child in children:
            child.stop()
        engine.dispose()
    console.print("\nThe four processes are stopped.")


def _story(
    console: Console, engine: sa.Engine, cluster: Cluster, run: str, until: Until[Any]
) -> None:
    # The default node pool: no kai.scheduler/node-pool label, so a default KAI schedules them.
    queue, node = f"demo-{run}", f"demo-gpu-{run}"
    cluster.apply_queues(_QUEUES.format(run=run))
    cluster.priority_class(f"demo-low-{run}", 40)
    cluster.priority_class(f"demo-high-{run}", 90)
    cluster.node(node, DEFAULT_NODE_POOL, 4)
    urgent = cluster.podgroup("urgent", queue, f"demo-high-{run}")
    cluster.pod("urgent-0", "urgent", 4)
    long = cluster.podgroup(
        "long", queue, f"demo-low-{run}", annotations={"kai.scheduler/expected-runtime": "5s"}
    )
    cluster.pod("long-0", "long", 4)
    console.print(
        f"Created in the API server: Queue {queue} (preemptMinRuntime 0s), PriorityClasses "
        f"demo-low/high-{run} (40, 90), Node {node} with 4 nvidia.com/gpu in the default node "
        "pool (no node-pool label, as a default KAI schedules it), "
        f"PodGroup [bold]urgent[/] (priority 90, one 4-GPU pod, pending) and PodGroup "
        "[bold]long[/] (priority 40, one 4-GPU pod, kai.scheduler/expected-runtime: 5s)."
    )
    start = datetime.now(UTC).replace(microsecond=0)
    cluster.start("long", ["long-0"], node, start, start)
    console.print(
        f"KAI's part (played by the demo): bind long-0 to {node}, annotate "
        f"kai.scheduler/last-start-timestamp={start:%H:%M:%SZ}; the kubelet's: set it Running."
    )
    until(lambda: _status(engine, long) == "running", "long to run")
    show_query(console, engine, "The bridge's events, applied (minruntime.podgroups)", long, urgent)
    console.print("\nlong runs past its expected 5s while urgent waits: the worker requeues it…")
    committed = until(lambda: ask(engine, KUBE_COMMITTED, uid=long), "the requeue to be committed")
    decision = committed[0]
    pod: dict[str, Any] = until(
        lambda: cluster.evicting_pod("long-0"), "the evictor to evict long-0"
    )
    console.print(
        f"Committed (decision {decision[0]}); the evictor evicted long-0 through the Eviction "
        f"API: deletionTimestamp {pod['metadata']['deletionTimestamp']}, condition "
        "DisruptionTarget. There is no kubelet here, so the demo deletes the pod with grace 0, "
        "as the kubelet would once its containers stopped."
    )
    cluster.finish_eviction("long-0")
    # Evicted: pending again, waiting to be scheduled (as KAI requeues it).
    until(lambda: _status(engine, long) == "pending", "the release")
    annotations = cluster.podgroup_annotations("long")
    show_query(console, engine, "After the release", long, urgent)
    console.print(
        f"PodGroup long carries {REQUEUE_NOT_BEFORE_ANNOTATION}="
        f"{annotations.get(REQUEUE_NOT_BEFORE_ANNOTATION)} (the cooldown); urgent may now be "
        "placed on the freed GPUs."
    )


def _clean_up(cluster: Cluster, nodes: list[str]) -> None:
    """Delete the demo's Nodes, PodGroups, pods and disruption budget: a free node or a
    pending gang left behind would take part in the next run's (or anyone's) placement."""
    with contextlib.suppress(Exception):
        cluster.remove_everything()
    for node in nodes:
        with contextlib.suppress(Exception):
            cluster.core.delete_node(node)


def _status(engine: sa.Engine, uid: str) -> str | None:
    rows = ask(engine, KUBE_STATUS, uid=uid)
    return str(rows[0][0]) if rows else None


def show_query(console: Console, engine: sa.Engine, title: str, *uids: str) -> None:
    columns = ("name", "status", "start_time", "priority", "awaiting_release", "requeue_not_before")
    table = Table(*columns, title=title)
    for row in ask(engine, kube_podgroups(columns), uids=list(uids)):
        table.add_row(*("-" if value is None else str(value) for value in row))
    console.print(table)
