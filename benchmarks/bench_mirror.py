"""The bridge's own logic at a cluster's size, without the API server: CPU and memory per pod.

Feeds a ClusterMirror what the API server would send (pods of about 2.4 KB of JSON each, in
PodGroups of 4, one Queue, nodes of 8 GPUs): the JSON of each list page is parsed, reduced to
the kept fields and folded, as `kube bridge` does; every event is encoded as it would be sent.
Then measures one pod change and one PodGroup change at that size.

    .venv/bin/python benchmarks/bench_mirror.py                 # 1k, 5k, 20k pods
    .venv/bin/python benchmarks/bench_mirror.py --pods 1000 50000

Prints, per size: listing CPU per pod, events, the memory the mirror holds per pod (tracemalloc,
after the listing), and the CPU of one change (median of 200), with the ratios to the smallest
size: flat per-pod figures mean linear in the cluster's size.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
import tracemalloc
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

from minruntime.cluster.bridge import long_lived_listing
from minruntime.cluster.mirror import (
    MODIFIED,
    ClusterMirror,
    Kind,
    MirrorOptions,
    kept,
)
from minruntime.events import encode_event

NOW = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
OPTIONS = MirrorOptions()
PAGE = 500


def clock() -> datetime:
    return NOW


def pod(index: int, node: str) -> dict[str, Any]:
    """A bound, running pod of KAI's scheduler, about 2.4 KB of JSON (as the issue measured)."""
    group = f"job-{index // 4:06d}"
    name = f"{group}-worker-{index % 4}"
    return {
        "metadata": {
            "name": name,
            "namespace": "team-a",
            "uid": f"00000000-0000-4000-8000-{index:012d}",
            "resourceVersion": str(1000 + index),
            "creationTimestamp": "2026-11-26T10:00:00Z",
            "labels": {
                "app": group,
                "kai.scheduler/queue": "research",
                "training.kubeflow.org/job-name": group,
                "training.kubeflow.org/replica-type": "worker",
                "training.kubeflow.org/replica-index": str(index % 4),
            },
            "annotations": {
                "pod-group-name": group,
                "kubectl.kubernetes.io/default-container": "main",
                "prometheus.io/scrape": "true",
            },
            "ownerReferences": [
                {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "name": group,
                 "uid": f"11111111-0000-4000-8000-{index // 4:012d}", "controller": True}
            ],
            "managedFields": [
                {"manager": "kai-scheduler", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-26T10:00:05Z", "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:spec": {"f:nodeName": {}}}},
                {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                 "time": "2026-11-26T10:00:09Z", "fieldsType": "FieldsV1", "subresource": "status",
                 "fieldsV1": {"f:status": {"f:phase": {}, "f:startTime": {}}}},
            ],
        },
        "spec": {
            "schedulerName": "kai-scheduler",
            "nodeName": node,
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "main",
                    "image": "nvcr.io/nvidia/pytorch:24.10-py3",
                    "command": ["torchrun", "--nproc-per-node=2", "train.py"],
                    "env": [{"name": f"VAR_{k}", "value": f"value-{k}-{index}"} for k in range(12)],
                    "resources": {"limits": {"nvidia.com/gpu": "2", "cpu": "8", "memory": "64Gi"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                }
            ],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "datasets"}}],
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
        },
        "status": {
            "phase": "Running",
            "startTime": "2026-11-26T10:00:09Z",
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": "2026-11-26T10:00:05Z"}
                for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
            ],
            "containerStatuses": [{"name": "main", "ready": True, "restartCount": 0,
                                   "state": {"running": {"startedAt": "2026-11-26T10:00:09Z"}}}],
            "hostIP": "10.0.0.1",
            "podIP": f"10.1.{index // 250}.{index % 250}",
        },
    }  # fmt: skip


def podgroup(index: int) -> dict[str, Any]:
    group = f"job-{index:06d}"
    return {
        "metadata": {
            "name": group,
            "namespace": "team-a",
            "uid": f"22222222-0000-4000-8000-{index:012d}",
            "resourceVersion": str(500 + index),
            "creationTimestamp": "2026-11-26T09:59:59Z",
            "annotations": {"kai.scheduler/last-start-timestamp": "2026-11-26T10:00:05Z"},
            "labels": {"kai.scheduler/node-pool": "default"},
        },
        "spec": {"queue": "research", "minMember": 4, "priorityClassName": "train"},
    }


def pages(objects: list[dict[str, Any]]) -> list[bytes]:
    """List pages as the API server sends them (JSON bodies of PAGE items)."""
    return [
        json.dumps({"metadata": {"resourceVersion": "1"}, "items": objects[i : i + PAGE]}).encode()
        for i in range(0, len(objects), PAGE)
    ]


def cpu() -> float:
    return time.process_time()


def list_into(mirror: ClusterMirror, bodies_of: list[tuple[Kind, list[bytes]]]) -> int:
    """A first listing as the bridge makes it (each page parsed and kept as it is reached);
    returns the bytes of events it sends."""

    def kept_objects(kind: Kind, bodies: list[bytes]) -> Iterator[Mapping[str, Any]]:
        for body in bodies:
            for item in json.loads(body)["items"]:
                yield kept(kind, item, OPTIONS)

    listing = {kind: kept_objects(kind, bodies) for kind, bodies in bodies_of}
    sent = sum(len(encode_event(emission.event)) for emission in mirror.list_all(listing))
    mirror.take_changes()
    return sent


def measure(count: int) -> dict[str, float]:
    nodes = max(count // 4, 1)
    pod_pages = pages([pod(i, f"node-{i // 4 % nodes}") for i in range(count)])
    group_pages = pages([podgroup(i) for i in range(count // 4)])
    classes = [{"metadata": {"name": "train", "uid": "pc-1", "resourceVersion": "1"}, "value": 50}]
    queue = [{"metadata": {"name": "research", "uid": "q-1", "generation": 1}, "spec": {}}]
    bodies_of = [
        (Kind.PRIORITY_CLASS, pages(classes)),
        (Kind.QUEUE, pages(queue)),
        (Kind.POD_GROUP, group_pages),
        (Kind.POD, pod_pages),
    ]
    # Memory: what a mirror holds after the listing (a first run, traced).
    gc.collect()
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    traced = ClusterMirror(OPTIONS, clock)
    list_into(traced, bodies_of)
    gc.collect()
    held = tracemalloc.get_traced_memory()[0] - base
    tracemalloc.stop()
    del traced
    gc.collect()
    # CPU: a second run, untraced.
    started = cpu()
    mirror = ClusterMirror(OPTIONS, clock)
    with long_lived_listing():  # as the bridge lists
        sent = list_into(mirror, bodies_of)
    listing = cpu() - started

    def change_cost(make: Any, kind: Kind) -> float:
        costs = []
        for step in range(200):
            obj = kept(kind, make(step), OPTIONS)
            began = cpu()
            for emission in mirror.observe(kind, MODIFIED, obj):
                encode_event(emission.event)
            mirror.take_changes()
            costs.append(cpu() - began)
        return statistics.median(costs)

    def finished_pod(step: int) -> dict[str, Any]:
        index = (step * 7919) % count
        body = json.loads(pod_pages[index // PAGE])["items"][index % PAGE]
        body["status"]["phase"] = "Succeeded"
        body["metadata"]["resourceVersion"] = str(10**7 + step)
        return dict(body)

    def annotated_group(step: int) -> dict[str, Any]:
        body = podgroup((step * 7919) % max(count // 4, 1))
        body["metadata"]["annotations"]["kai.scheduler/expected-runtime"] = f"{step + 1}m"
        body["metadata"]["resourceVersion"] = str(10**7 + step)
        return body

    pod_change = change_cost(finished_pod, Kind.POD)
    group_change = change_cost(annotated_group, Kind.POD_GROUP)

    return {
        "pods": count,
        "listing_s": listing,
        "us_per_pod": listing / count * 1e6,
        "bytes_per_pod": held / count,
        "events_mb": sent / 1e6,
        "pod_change_ms": pod_change * 1e3,
        "group_change_ms": group_change * 1e3,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 5000, 20000])
    args = parser.parse_args()
    rows = []
    measure(min(args.pods))  # warm-up (imports, caches, the allocator), not reported
    gc.unfreeze()
    gc.collect()
    for count in args.pods:
        rows.append(measure(count))
        gc.unfreeze()  # the listing froze its mirror, gone now: collect it before the next size
        gc.collect()
    first = rows[0]
    print(
        f"{'pods':>7} {'listing CPU':>12} {'us/pod':>8} {'ratio':>6} {'kept B/pod':>11} "
        f"{'ratio':>6} {'events MB':>10} {'pod change':>11} {'pg change':>10}"
    )
    for row in rows:
        print(
            f"{row['pods']:>7.0f} {row['listing_s']:>11.2f}s {row['us_per_pod']:>8.1f} "
            f"{row['us_per_pod'] / first['us_per_pod']:>6.2f} {row['bytes_per_pod']:>11.0f} "
            f"{row['bytes_per_pod'] / first['bytes_per_pod']:>6.2f} {row['events_mb']:>10.1f} "
            f"{row['pod_change_ms']:>9.3f}ms {row['group_change_ms']:>8.3f}ms"
        )


if __name__ == "__main__":
    main()
