"""Benchmark the cluster bridge at scale: cold start, annotation churn, restart.

Measured through the bridge's process boundary only (its log, ``/proc/<pid>``, the Kafka
topics it writes and the SQL the processor makes of them), so the same script measures any
version of ``minruntime kube bridge``. For each ``--pods`` N (default 1,000 and 5,000), on a
fresh private pipeline (scratch database, private topics, ``minruntime processor``
subprocess, as the e2e tests run it) and a fresh namespace of the local API server:

1. **setup** (the bridge not running yet): a Queue, a PriorityClass, N/8 Nodes of 8 GPUs, then
   N/4 PodGroups of 4 pods, by a pool of ``--threads`` client threads (the kubernetes client,
   raw JSON: ``_preload_content=False``). Per gang, as KAI and the kubelet would
   (``minruntime_dev.standin``): create the PodGroup and its 4 pods (scheduler
   ``kai-scheduler``, annotation ``pod-group-name``, one ``nvidia.com/gpu``, a few labels and
   env vars: 2,493 bytes of JSON per pod as read back, bound and Running), write the PodGroup's
   ``kai.scheduler/last-start-timestamp``, bind each pod (``binding`` subresource) and set it
   Running (``status`` subresource). Reports the creation rate.
2. **cold start**: ``minruntime kube bridge`` is spawned; times from the spawn to its log
   saying "watching" and to all N pods being in SQL (``minruntime.podgroups`` of the
   namespace: N/4 rows ``running``, ``running_pods`` summing to N), the bridge's CPU seconds
   (``/proc/<pid>/stat``) at both moments and at its log's "active" (lease taken: the CPU from
   there to "watching" is the listing's, without the interpreter's start), its peak RSS
   (``VmHWM``), the records it wrote to the input topics (committed records, read back as the
   processor reads them: a transaction's commit marker is no record; the time the end offsets
   last moved, to ±0.5 s) and to its ledger topic (``<podgroups topic>.bridge``), if any.
3. **churn** (``--churn-seconds``, default 60): merge-patches of two annotations
   (``bench/churn: <counter>``, ``kai.scheduler/expected-runtime``) on 10 % of the gangs per
   minute, evenly spread (round robin over the gangs); latency = from the patch's response to
   the new counter being visible in ``minruntime.podgroups.annotations`` (polled every
   20 ms); p50/p99/max. ``--max-rate`` then steps the rate (``--rate-steps``, default 1, 2, 5,
   10, 20, 50, 100, 200 changes/s, ``--step-seconds`` 20 each) and reports the highest rate
   with every change seen and p99 <= 1 s (up to the first step that misses it).
4. **restart**: once the pipeline is quiet, ``kill -9`` of the bridge and a new one with the
   same environment and identity (as a container restarted in its pod: it takes its own lease
   back at once): time to "watching", to the end of its re-sending (input topics' end offsets
   and the processor's stored offsets still for 3 s, every partition read), its CPU, the
   records re-sent (committed records between the input topics' end offsets before the kill
   and after), how many of those were new to the event log (the rest: duplicates the
   processor skipped), ledger records, and dead letters written (rows of
   ``minruntime.dead_letters`` by kind, and records of the dead-letter topic).

Then a table per N, and per pod listed (N + the pods the cluster held already) the ratios to
the smallest N (1.0 = linear) and the marginal CPU per extra pod. ``--bridge-src DIR`` runs
the bridge from another checkout's ``services/`` (e.g. ``git archive <commit> services | tar
-x -C DIR``), the processor staying this checkout's: before/after figures on one machine.
``--compare-src DIR`` measures two bridges on the same cluster objects, one setup for both:
first DIR's ("before"), then this checkout's ("after"), each on a fresh pipeline and lease,
side by side in one table. ``--quick-setup`` makes each pod bound at creation (``spec.nodeName``)
and each PodGroup with its start annotation: 5 API calls per gang instead of 14, the pods
padded with env vars to about the same JSON size (what the bridge reads of them is the same).
Everything
is cleaned up: the bridge and the processor stopped, the namespace's pods (grace 0) and
podgroups, the nodes, queue, priority class and lease deleted, the pipeline dropped
(``--keep``: the last N's objects and pipeline are kept). The bridge lists the whole cluster:
objects of other namespaces are listed and sent too (counted at the start).

    .venv/bin/python benchmarks/bench_bridge.py [--pods 1000 5000] [--churn-seconds 60]
        [--max-rate] [--skip-churn] [--skip-restart] [--keep] [--json FILE]
        [--bridge-src DIR] [--compare-src DIR] [--quick-setup] [--threads 24]
        [--py-spy DIR] [--prioritise]

Needs the local stack with the API server (``minruntime stack up --kube``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchkit import add_prioritise, prioritised
from pipeline import INPUT_ROLES, ROOT, BenchPipeline, percentile
from proc_cpu import process_cpu

sys.path.insert(0, str(ROOT))  # the e2e tests' harness (pipeline.py does the same)

from tests.conftest import free_ports
from tests.e2e.harness import probe
from tests.e2e.kubeloop import KubeProcess

KAI_GROUP = "scheduling.run.ai"
POD_GROUP_ANNOTATION = "pod-group-name"
LAST_START_ANNOTATION = "kai.scheduler/last-start-timestamp"
EXPECTED_RUNTIME_ANNOTATION = "kai.scheduler/expected-runtime"
NODE_POOL_LABEL = "kai.scheduler/node-pool"
CHURN_ANNOTATION = "bench/churn"
RUN_LABEL = "bench.minruntime/run"
GANG = 4
GPUS_PER_NODE = 8
RETRY_STATUSES = frozenset({0, 429, 500, 502, 503, 504})
POLL_SECONDS = 0.02
LATENCY_BOUND = 1.0  # seconds: the p99 a sustained churn rate must keep
QUICK_PAD_VARS = 2  # --quick-setup: env vars standing for the bytes of the kubelet's status


def rfc3339(moment: datetime) -> str:
    """Whole-second RFC3339 in UTC, as the API server writes timestamps."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def memory_kib(pid: int, field_name: str) -> int:
    """A ``Vm*`` line of /proc/<pid>/status, in KiB (0 when the process is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(f"{field_name}:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def cpu_or_nan(pid: int | None) -> float:
    """CPU seconds of a live process; NaN when it is gone."""
    if pid is None:
        return math.nan
    try:
        return process_cpu(pid)
    except (OSError, ValueError):
        return math.nan


# -- the API server ------------------------------------------------------------------------------


class Api:
    """The admin's kubernetes client, raw JSON in and out, shared by many threads."""

    def __init__(self, kubeconfig: Path, threads: int) -> None:
        from kubernetes import client, config

        configuration = client.Configuration()
        config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
        configuration.connection_pool_maxsize = threads + 8
        self.client = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.client)
        self.custom = client.CustomObjectsApi(self.client)
        self.scheduling = client.SchedulingV1Api(self.client)
        self.coordination = client.CoordinationV1Api(self.client)
        self.calls = 0
        self._count = threading.Lock()

    def call(self, method: Callable[..., Any], *args: Any, accept: Iterable[int] = ()) -> Any:
        """One call; its JSON body (None for an accepted error status).

        Retried with backoff on 429, 5xx and connection errors (a busy API server); any other
        error status raises, except those in `accept` (e.g. 409 on a create retried after a
        lost reply).
        """
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError

        delay = 0.1
        for attempt in range(10):
            with self._count:
                self.calls += 1
            try:
                response = method(*args, _preload_content=False)
                try:
                    body = response.data
                finally:
                    response.release_conn()
                return json.loads(body) if body else None
            except ApiException as error:
                if error.status in accept:
                    return None
                if error.status not in RETRY_STATUSES or attempt == 9:
                    raise
            except (HTTPError, OSError):
                if attempt == 9:
                    raise
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        raise AssertionError("unreachable")

    def count(self, method: Callable[..., Any], *args: Any) -> int:
        """How many objects a list call would return (one item fetched, the rest counted)."""
        from kubernetes.client.exceptions import ApiException

        try:
            response = method(*args, limit=1, _preload_content=False)
            body = json.loads(response.data)
        except ApiException:
            return 0
        return len(body.get("items") or []) + int(
            (body.get("metadata") or {}).get("remainingItemCount") or 0
        )

    def close(self) -> None:
        self.client.close()


@dataclass
class Gang:
    """One PodGroup of the benchmark."""

    name: str
    uid: str
    pods: list[str]


@dataclass
class Cluster:
    """The benchmark's objects on the API server: one namespace, queue, priority class, pool."""

    api: Api
    suffix: str
    pods: int
    quick: bool = False  # pods made bound (spec.nodeName), no status write: 1 call per pod
    namespace: str = ""
    queue: str = ""
    priority_class: str = ""
    pool: str = ""
    nodes: list[str] = field(default_factory=list)
    gangs: list[Gang] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.namespace = f"bench-bridge-{self.suffix}"
        self.queue = self.priority_class = self.pool = f"bench-{self.suffix}"

    # -- bodies ---------------------------------------------------------------------------------
    def pod_body(self, gang: str, name: str, rank: int, node: str | None = None) -> dict[str, Any]:
        """A training pod of a gang, about 2.4 KB of JSON once stored, bound and Running
        (made bound on ``node``: as many bytes, in env vars, as the kubelet's status adds)."""
        env = {"RANK": str(rank), "WORLD_SIZE": str(GANG)}
        if node is not None:
            env.update({f"PAD_{k}": f"{name}-{k:02d}-padding" for k in range(QUICK_PAD_VARS)})
        body: dict[str, Any] = {
            "metadata": {
                "name": name,
                "labels": {"app": gang, "kai.scheduler/queue": self.queue, RUN_LABEL: self.suffix},
                "annotations": {POD_GROUP_ANNOTATION: gang},
            },
            "spec": {
                "schedulerName": "kai-scheduler",
                "containers": [
                    {
                        "name": "trainer",
                        "image": "registry.example.com/ml/trainer:2026.11.1",
                        "env": [{"name": k, "value": v} for k, v in env.items()],
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                ],
            },
        }
        if node is not None:
            body["spec"]["nodeName"] = node
        return body

    # -- setup ----------------------------------------------------------------------------------
    def create_base(self) -> None:
        """Namespace, Queue, PriorityClass (cluster objects named after the run)."""
        api = self.api
        api.call(api.core.create_namespace, {"metadata": {"name": self.namespace}})
        queue = {
            "apiVersion": f"{KAI_GROUP}/v2",
            "kind": "Queue",
            "metadata": {"name": self.queue, "labels": {RUN_LABEL: self.suffix}},
            "spec": {
                "preemptMinRuntime": "10m",
                "reclaimMinRuntime": "5m",
                # Without resources KAI gives a queue quota 0 and limit 0 (nothing scheduled).
                "resources": {
                    name: {"quota": -1, "limit": -1, "overQuotaWeight": 1}
                    for name in ("gpu", "cpu", "memory")
                },
            },
        }
        api.call(api.custom.create_cluster_custom_object, KAI_GROUP, "v2", "queues", queue)
        priority = {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": self.priority_class, "labels": {RUN_LABEL: self.suffix}},
            "value": 50,
        }
        api.call(api.scheduling.create_priority_class, priority)

    def create_node(self, name: str) -> None:
        api = self.api
        labels = {NODE_POOL_LABEL: self.pool, RUN_LABEL: self.suffix}
        api.call(api.core.create_node, {"metadata": {"name": name, "labels": labels}}, accept=[409])
        capacity = {"nvidia.com/gpu": str(GPUS_PER_NODE), "cpu": "64", "pods": "110"}
        status = {"status": {"capacity": capacity, "allocatable": capacity}}
        api.call(api.core.patch_node_status, name, status)

    def create_gang(self, index: int) -> Gang:
        """A PodGroup and its pods, started as KAI and the kubelet would (standin.Cluster)."""
        api, ns = self.api, self.namespace
        name = f"pg-{index:05d}"
        body = {
            "apiVersion": f"{KAI_GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": ns,
                "labels": {NODE_POOL_LABEL: self.pool, RUN_LABEL: self.suffix},
                "annotations": {EXPECTED_RUNTIME_ANNOTATION: "4h"},
            },
            "spec": {
                "queue": self.queue,
                "minMember": GANG,
                "priorityClassName": self.priority_class,
            },
        }
        args = (KAI_GROUP, "v2alpha2", ns, "podgroups")
        started = datetime.now(UTC)
        start = {LAST_START_ANNOTATION: rfc3339(started)}
        if self.quick:  # KAI's start written with the PodGroup
            body["metadata"]["annotations"].update(start)
        created = api.call(api.custom.create_namespaced_custom_object, *args, body, accept=[409])
        if created is None:  # created by a try whose reply was lost
            created = api.call(api.custom.get_namespaced_custom_object, *args, name)
        pods = [f"{name}-{rank}" for rank in range(GANG)]
        node = self.nodes[index * GANG // GPUS_PER_NODE]
        if self.quick:
            for rank, pod in enumerate(pods):
                body = self.pod_body(name, pod, rank, node)
                api.call(api.core.create_namespaced_pod, ns, body, accept=[409])
            return Gang(name, str(created["metadata"]["uid"]), pods)
        for rank, pod in enumerate(pods):
            api.call(
                api.core.create_namespaced_pod, ns, self.pod_body(name, pod, rank), accept=[409]
            )
        started = datetime.now(UTC)
        annotation = {"metadata": {"annotations": {LAST_START_ANNOTATION: rfc3339(started)}}}
        api.call(api.custom.patch_namespaced_custom_object, *args, name, annotation)
        for pod in pods:
            binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": pod},
                       "target": {"apiVersion": "v1", "kind": "Node", "name": node}}  # fmt: skip
            api.call(api.core.create_namespaced_pod_binding, pod, ns, binding, accept=[409])
            running = {"status": {"phase": "Running", "startTime": rfc3339(started)}}
            api.call(api.core.patch_namespaced_pod_status, pod, ns, running)
        return Gang(name, str(created["metadata"]["uid"]), pods)

    def create(self, threads: int) -> dict[str, float]:
        """Everything, concurrently; the figures of the setup."""
        started, calls = time.monotonic(), self.api.calls
        self.create_base()
        count = math.ceil(self.pods * 1 / GPUS_PER_NODE)
        self.nodes = [f"bench-{self.suffix}-n{i:05d}" for i in range(count)]
        gangs = math.ceil(self.pods / GANG)
        with ThreadPoolExecutor(threads) as pool:
            list(pool.map(self.create_node, self.nodes))
            nodes_done = time.monotonic()
            for done, gang in enumerate(pool.map(self.create_gang, range(gangs)), 1):
                self.gangs.append(gang)
                if done % max(1, gangs // 10) == 0:
                    elapsed = time.monotonic() - nodes_done
                    print(f"    created {done * GANG:,} pods ({elapsed:.1f} s)", flush=True)
        ended = time.monotonic()
        sample = self.api.call(
            self.api.core.read_namespaced_pod, self.gangs[0].pods[0], self.namespace
        )
        return {
            "setup s": ended - started,
            "nodes s": nodes_done - started,
            "pods s": ended - nodes_done,
            "pods/s": gangs * GANG / (ended - nodes_done),
            "API calls": self.api.calls - calls,
            "API calls/s": (self.api.calls - calls) / (ended - started),
            "pod JSON bytes": len(json.dumps(sample, separators=(",", ":"))),
        }

    # -- churn ----------------------------------------------------------------------------------
    def annotate(self, gang: Gang, counter: int) -> None:
        change = {
            CHURN_ANNOTATION: str(counter),
            EXPECTED_RUNTIME_ANNOTATION: f"{60 + counter % 600}m",
        }
        self.api.call(
            self.api.custom.patch_namespaced_custom_object,
            KAI_GROUP, "v2alpha2", self.namespace, "podgroups", gang.name,
            {"metadata": {"annotations": change}},
        )  # fmt: skip

    # -- cleanup --------------------------------------------------------------------------------
    def delete(self, leases: Sequence[str]) -> None:
        """Every object of the run; each step on its own (one failing does not stop the rest).

        A delete-collection of 20,000 pods outlasts the API server's request timeout (504,
        what it managed is deleted): it is repeated until none is left.
        """
        from kubernetes.client.exceptions import ApiException

        api, ns = self.api, self.namespace
        mine = {"label_selector": f"{RUN_LABEL}={self.suffix}"}
        podgroups = (KAI_GROUP, "v2alpha2", ns, "podgroups")
        collections: list[tuple[str, Callable[..., Any], Callable[..., Any], tuple[Any, ...]]] = [
            ("pods", api.core.delete_collection_namespaced_pod, api.core.list_namespaced_pod,
             (ns,)),
            ("podgroups", api.custom.delete_collection_namespaced_custom_object,
             api.custom.list_namespaced_custom_object, podgroups),
        ]  # fmt: skip
        for what, delete, listing, args in collections:
            for _ in range(20):
                try:
                    delete(*args, grace_period_seconds=0, _preload_content=False,
                           _request_timeout=300)  # fmt: skip
                except ApiException as error:
                    if error.status not in RETRY_STATUSES:
                        print(f"  cleanup: deleting the {what} failed: {error.status}")
                        break
                if not api.count(listing, *args):
                    break
            else:
                print(f"  cleanup: {api.count(listing, *args)} {what} left in {ns}")
        steps: list[tuple[str, Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = [
            ("nodes", api.core.delete_collection_node, (), mine),
            ("queue", api.custom.delete_cluster_custom_object,
             (KAI_GROUP, "v2", "queues", self.queue), {}),
            ("priority class", api.scheduling.delete_priority_class, (self.priority_class,), {}),
            *(("lease", api.coordination.delete_namespaced_lease, (lease, ns), {})
              for lease in leases),
            ("namespace", api.core.delete_namespace, (ns,), {}),
            # No namespace controller here: empty, it would stay Terminating. Finalize it.
            ("namespace's finalizers", api.core.replace_namespace_finalize,
             (ns, {"metadata": {"name": ns}, "spec": {"finalizers": []}}), {}),
        ]  # fmt: skip
        for what, method, args, kwargs in steps:
            try:
                method(*args, _preload_content=False, _request_timeout=300, **kwargs)
            except ApiException as error:
                if error.status != 404:
                    print(f"  cleanup: deleting the {what} failed: {error.status} {error.reason}")


# -- Kafka and SQL ---------------------------------------------------------------------------------


class Offsets:
    """End offsets of the pipeline's topics, read with one aiokafka consumer on its own loop.

    A topic that does not exist (yet) counts 0 records: the bridge's ledger topic, when it
    has one, appears once the bridge runs.
    """

    def __init__(self, pipeline: BenchPipeline, extra: dict[str, str]) -> None:
        self.loop = asyncio.new_event_loop()
        self.topics = {**pipeline.topics, **extra}
        self.partitions: dict[str, list[Any]] = {}
        self.consumer = self.loop.run_until_complete(self._start(pipeline))

    @staticmethod
    async def _start(pipeline: BenchPipeline) -> Any:
        from aiokafka import AIOKafkaConsumer

        from minruntime.kafka_access import start_client

        consumer = AIOKafkaConsumer(
            **pipeline.kafka.client_kwargs(),
            enable_auto_commit=False,
            isolation_level="read_committed",  # as the processor reads
        )
        await start_client(consumer, pipeline.kafka)
        return consumer

    async def _refresh(self) -> None:
        from aiokafka import TopicPartition

        cluster = await self.consumer._client.fetch_all_metadata()
        for role, topic in self.topics.items():
            numbers = cluster.partitions_for_topic(topic) or set()
            self.partitions[role] = [TopicPartition(topic, p) for p in sorted(numbers)]

    def partition_ends(self, roles: Iterable[str]) -> dict[tuple[str, int], int]:
        """End offset of each partition of the roles' topics, by (topic, partition)."""
        roles = list(roles)
        if any(not self.partitions.get(role) for role in roles):
            self.loop.run_until_complete(self._refresh())
        partitions = [partition for role in roles for partition in self.partitions.get(role, [])]
        ends = self.loop.run_until_complete(self.consumer.end_offsets(partitions))
        return {(tp.topic, tp.partition): int(offset) for tp, offset in ends.items()}

    def ends(self, roles: Iterable[str]) -> dict[str, int]:
        """Records per topic role: the sum of its partitions' end offsets."""
        roles = list(roles)
        by_topic = {topic: role for role, topic in self.topics.items()}
        totals = dict.fromkeys(roles, 0)
        for (topic, _), offset in self.partition_ends(roles).items():
            totals[by_topic[topic]] += offset
        return totals

    def records(
        self, since: dict[tuple[str, int], int], until: dict[tuple[str, int], int]
    ) -> dict[str, int]:
        """Committed records between two sets of offsets, per role (what the processor reads:
        a transaction's commit marker takes an offset but is no record)."""
        counts = self.loop.run_until_complete(self._records(since, until))
        by_topic = {topic: role for role, topic in self.topics.items()}
        totals = dict.fromkeys(sorted({by_topic[topic] for topic, _ in until}), 0)
        for topic, n in counts.items():
            totals[by_topic[topic]] += n
        return totals

    async def _records(
        self, since: dict[tuple[str, int], int], until: dict[tuple[str, int], int]
    ) -> dict[str, int]:
        from aiokafka import TopicPartition

        wanted = {
            TopicPartition(topic, part): end
            for (topic, part), end in until.items()
            if end > since.get((topic, part), 0)
        }
        counts: dict[str, int] = {}
        if not wanted:
            return counts
        self.consumer.assign(list(wanted))
        for tp in wanted:
            self.consumer.seek(tp, since.get((tp.topic, tp.partition), 0))
        deadline = time.monotonic() + 120
        remaining = set(wanted)
        while remaining:
            batch = await self.consumer.getmany(*remaining, timeout_ms=300)
            for tp, records in batch.items():
                inside = sum(1 for record in records if record.offset < wanted[tp])
                counts[tp.topic] = counts.get(tp.topic, 0) + inside
            for tp in list(remaining):
                position = await self.consumer.position(tp)
                # At the end, or one short of it (a commit marker) with nothing more to read.
                if position >= wanted[tp] or (position == wanted[tp] - 1 and tp not in batch):
                    remaining.discard(tp)
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read {sorted(map(str, remaining))} to the end")
        self.consumer.unsubscribe()
        return counts

    def close(self) -> None:
        self.loop.run_until_complete(self.consumer.stop())
        self.loop.close()


class Sql:
    """Autocommit connections to the pipeline's database (the service's role and the owner)."""

    def __init__(self, pipeline: BenchPipeline, namespace: str) -> None:
        self.pipeline = pipeline
        self.namespace = namespace
        self.conn = pipeline.connect()
        self.owner = pipeline.connect_as_owner()

    def progress(self) -> tuple[int, int, int]:
        """(podgroups, running podgroups, running pods) of the namespace."""
        row = self.conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE status = 'running'),"
            " coalesce(sum(running_pods), 0) FROM minruntime.podgroups WHERE namespace = %s",
            (self.namespace,),
        ).fetchone()
        assert row is not None
        return int(row[0]), int(row[1]), int(row[2])

    def dead_letter_kinds(self) -> dict[str, int]:
        rows = self.conn.execute(
            "SELECT kind, count(*) FROM minruntime.dead_letters GROUP BY kind ORDER BY kind"
        ).fetchall()
        return {str(kind): int(n) for kind, n in rows}

    def count(self, view: str) -> int:
        row = self.conn.execute(f"SELECT count(*) FROM minruntime.{view}").fetchone()
        return int(row[0]) if row else 0

    def stored_offsets(self) -> dict[tuple[str, int], int]:
        """The processor's stored offsets, by (topic, partition)."""
        rows = self.owner.execute(
            "SELECT topic, partition, next_offset FROM minruntime_state.consumer_offsets"
            " WHERE consumer_group = %s",
            (self.pipeline.group,),
        ).fetchall()
        return {(str(topic), int(part)): int(offset) for topic, part, offset in rows}

    def close(self) -> None:
        self.conn.close()
        self.owner.close()


# -- the bridge ---------------------------------------------------------------------------------


class Bridge:
    """One `minruntime kube bridge` subprocess and what its log said when."""

    def __init__(self, process: KubeProcess, patterns: dict[str, str]) -> None:
        self.process = process
        self.patterns = patterns
        self.seen: dict[str, tuple[float, float]] = {}  # pattern name -> (seconds, CPU s)
        self._read = 0
        self._partial = b""
        self.spawned = time.monotonic()
        process.start()
        assert process.process is not None
        self.pid: int = process.process.pid

    def scan(self) -> None:
        """Read the new whole lines of the log; note the first line matching each pattern."""
        try:
            with self.process.log_path.open("rb") as log:
                log.seek(self._read)
                chunk = log.read()
        except FileNotFoundError:
            return
        self._read += len(chunk)
        lines = (self._partial + chunk).split(b"\n")
        self._partial = lines.pop()
        for line in lines:
            text = line.decode(errors="replace").lower()
            for name, pattern in self.patterns.items():
                if name not in self.seen and pattern in text:
                    self.seen[name] = (time.monotonic() - self.spawned, cpu_or_nan(self.pid))

    def check_alive(self) -> None:
        process = self.process.process
        if process is None or process.poll() is not None:
            code = None if process is None else process.returncode
            raise RuntimeError(f"the bridge exited ({code}):\n{self.process.log_tail(40)}")

    def wait_for(self, name: str, timeout: float) -> tuple[float, float]:
        deadline = time.monotonic() + timeout
        while name not in self.seen:
            self.scan()
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {name!r} after {timeout:.0f}s:\n{self.process.log_tail()}")
            time.sleep(0.05)
        return self.seen[name]

    def cpu(self) -> float:
        return cpu_or_nan(self.pid)

    def peak_rss_mb(self) -> float:
        return memory_kib(self.pid, "VmHWM") / 1024

    def rss_mb(self) -> float:
        return memory_kib(self.pid, "VmRSS") / 1024


# -- one run ------------------------------------------------------------------------------------


@dataclass
class Run:
    """One N: its pipeline, cluster objects, bridge and figures."""

    args: argparse.Namespace
    pods: int
    kubeconfig: Path
    figures: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.suffix = uuid.uuid4().hex[:6]
        self.api = Api(self.kubeconfig, self.args.threads)
        self.cluster = Cluster(self.api, self.suffix, self.pods, self.args.quick_setup)
        self.bridge: Bridge | None = None
        self.offsets: Offsets | None = None
        self.sql: Sql | None = None
        self.next_gang = 0  # the churn's round robin over the gangs
        self.counter = 0  # the last `bench/churn` value written
        self.leases: list[str] = []

    def begin_variant(self, label: str, bridge_src: str | None) -> None:
        """A fresh pipeline (database, topics, processor) and lease for one bridge version."""
        self.metrics_port = free_ports()
        self.pipeline = BenchPipeline("bridge", processor_metrics_port=str(self.metrics_port))
        lease = f"bench-bridge-{self.suffix}{'-' + label if label else ''}"
        self.leases.append(lease)
        self.env = {
            "MINRUNTIME_KUBE_NAMESPACE": self.cluster.namespace,
            "MINRUNTIME_KUBE_LEASE_NAME": lease,
            "MINRUNTIME_KUBE_IDENTITY": lease,
            "MINRUNTIME_KUBE_SCHEDULER_CONFIG": f"{self.cluster.namespace}/scheduler-config",
        }
        if bridge_src:  # another version of the package, for the bridge only
            services = str(Path(bridge_src).resolve() / "services")
            self.env["PYTHONPATH"] = os.pathsep.join(
                p for p in (services, os.environ.get("PYTHONPATH")) if p
            )
        self.bridge = self.offsets = self.sql = None
        self.label = label
        self.spies: list[subprocess.Popen[bytes]] = []

    def spawn_bridge(self, phase: str) -> Bridge:
        process = KubeProcess(self.pipeline, "bridge", self.kubeconfig, self.env)
        bridge = Bridge(process, {"active": "active", "watching": self.args.ready_pattern.lower()})
        if self.args.py_spy:  # sampled from its spawn to its end (the kill, or the stop)
            out = Path(self.args.py_spy) / f"bridge-{self.pods}-{self.label or 'run'}-{phase}.txt"
            out.parent.mkdir(parents=True, exist_ok=True)
            self.spies.append(
                subprocess.Popen(
                    [
                        *("py-spy", "record", "-p", str(bridge.pid), "-r", "50", "--idle"),
                        *("--nonblocking", "--format", "raw", "-o", str(out)),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        return bridge

    def input_ends(self) -> dict[str, int]:
        assert self.offsets is not None
        return self.offsets.ends(INPUT_ROLES)

    def offsets_of(self, role: str) -> int:
        assert self.offsets is not None
        return self.offsets.ends([role])[role]

    # -- phases ---------------------------------------------------------------------------------
    def variants(self) -> list[tuple[str, str | None]]:
        """(label, bridge source) of each bridge version measured on this N's objects."""
        if self.args.compare_src:
            return [("before", self.args.compare_src), ("after", self.args.bridge_src)]
        return [("", self.args.bridge_src)]

    def run(self) -> dict[str, dict[str, Any]]:
        """Every version's figures, by label ("" without --compare-src)."""
        print(f"\n== N = {self.pods:,} pods ({self.pods // GANG:,} gangs), run {self.suffix}")
        others = {
            "pods": self.api.count(self.api.core.list_pod_for_all_namespaces),
            "podgroups": self.api.count(
                self.api.custom.list_cluster_custom_object, KAI_GROUP, "v2alpha2", "podgroups"
            ),
            "nodes": self.api.count(self.api.core.list_node),
        }
        print(f"  the cluster holds already: {others} (listed by the bridge too)")
        results: dict[str, dict[str, Any]] = {}
        setup: dict[str, float] | None = None
        try:
            for label, source in self.variants():
                priority = ExitStack()  # the variant's run and its database's backends
                self.figures = {"cluster before": others}
                if label:
                    print(f"  -- {label}: the bridge {bridge_version(source)}")
                self.begin_variant(label, source)
                try:
                    self.pipeline.create()
                    priority.enter_context(
                        prioritised(self.pipeline.database_url, self.args.prioritise)
                    )
                    print(
                        f"  pipeline: {self.pipeline.database_url.split('?')[0].rsplit('/', 1)[-1]}"
                        f", topics *.{self.pipeline.suffix}, work dir {self.pipeline.workdir}"
                    )
                    if setup is None:
                        setup = self.setup()
                    self.figures["setup"] = setup
                    self.start_processor()
                    self.cold_start()
                    if not self.args.skip_churn:
                        self.churn()
                    if self.args.max_rate:
                        self.max_rate()
                    if not self.args.skip_restart:
                        self.restart()
                finally:
                    self.end_variant()
                    priority.close()
                results[label] = self.figures
        finally:
            self.cleanup()
        return results

    def setup(self) -> dict[str, float]:
        print(f"  setup: creating {self.pods:,} pods with {self.args.threads} threads")
        setup = self.cluster.create(self.args.threads)
        print(
            f"  setup: {setup['setup s']:.1f} s ({setup['pods/s']:.0f} pods/s, "
            f"{setup['API calls/s']:.0f} API calls/s), pod {setup['pod JSON bytes']:,} bytes"
        )
        return setup

    def start_processor(self) -> None:
        self.pipeline.start()
        deadline = time.monotonic() + 120
        while probe(self.metrics_port, "/readyz")[0] != 200 and time.monotonic() < deadline:
            self.pipeline.check_alive()
            time.sleep(0.2)
        # The bridge's own compacted ledger, when it keeps one (the harness deletes it).
        ledger = f"{self.pipeline.topics['podgroups']}.bridge"
        self.offsets = Offsets(self.pipeline, {"ledger": ledger})
        self.sql = Sql(self.pipeline, self.cluster.namespace)

    def cold_start(self) -> None:
        assert self.sql is not None
        gangs = len(self.cluster.gangs)
        processor = self.pipeline.process.pid if self.pipeline.process else None
        processor_cpu = cpu_or_nan(processor)
        bridge = self.bridge = self.spawn_bridge("cold")
        deadline = bridge.spawned + self.args.timeout
        samples: list[tuple[float, int]] = []
        last_sample = 0.0
        while True:
            bridge.scan()
            bridge.check_alive()
            self.pipeline.check_alive()
            now = time.monotonic()
            if now - last_sample >= 0.5:
                samples.append((now - bridge.spawned, sum(self.input_ends().values())))
                last_sample = now
            rows, running, pods = self.sql.progress()
            if running == gangs and pods == self.pods:
                in_sql, cpu = time.monotonic() - bridge.spawned, bridge.cpu()
                break
            if now > deadline:
                raise RuntimeError(
                    f"after {self.args.timeout:.0f}s: {rows} podgroups, {running} running, "
                    f"{pods} pods in SQL:\n{bridge.process.log_tail()}"
                )
            time.sleep(0.2)
        bridge.scan()
        watching, watching_cpu = bridge.seen.get("watching", (math.nan, math.nan))
        active = bridge.seen.get("active", (math.nan, math.nan))
        assert self.offsets is not None
        end_offsets = self.offsets.partition_ends(INPUT_ROLES)
        written = next((t for t, n in samples if n >= sum(end_offsets.values())), in_sql)
        ends = self.offsets.records({}, end_offsets)
        total = sum(ends.values())
        listed = self.pods + int(self.figures["cluster before"]["pods"])
        self.figures["cold"] = {
            "pods listed": listed,
            "active s": active[0],
            "active CPU s": active[1],
            "watching s": watching,
            "watching CPU s": watching_cpu,
            "last record written s": written,
            "all in SQL s": in_sql,
            "all in SQL CPU s": cpu,
            "CPU ms per pod": cpu / self.pods * 1000,
            "listing CPU s": watching_cpu - active[1],
            "listing CPU us per pod": (watching_cpu - active[1]) / listed * 1e6,
            "peak RSS MB": bridge.peak_rss_mb(),
            "records written": ends,
            "records": total,
            "ledger records": self.offsets_of("ledger"),
            "dead letters": self.sql.count("dead_letters"),
            "dead letter kinds": self.sql.dead_letter_kinds(),
            "processor CPU s": cpu_or_nan(processor) - processor_cpu,
        }
        cold = self.figures["cold"]
        print(
            f"  cold start: watching after {watching:.1f} s (CPU {watching_cpu:.1f} s), all in "
            f"SQL after {in_sql:.1f} s (CPU {cpu:.1f} s), last record at ~{written:.1f} s, "
            f"peak RSS {cold['peak RSS MB']:.0f} MB, {total:,} records {ends}, "
            f"{cold['ledger records']:,} ledger records, dead letters "
            f"{cold['dead letter kinds'] or 0}"
        )

    def churn(self) -> None:
        rate = 0.10 * len(self.cluster.gangs) / 60
        print(f"  churn: {rate:.2f} changes/s for {self.args.churn_seconds:.0f} s")
        figures = self.changes(rate, self.args.churn_seconds)
        self.figures["churn"] = figures
        print("  churn: " + summary_line(figures))

    def max_rate(self) -> None:
        steps: list[dict[str, Any]] = []
        sustained = 0.0
        for rate in self.args.rate_steps:
            figures = self.changes(rate, self.args.step_seconds)
            steps.append(figures)
            print(f"  max rate: {rate:g}/s: " + summary_line(figures))
            if figures["unseen"] or figures["p99 s"] > LATENCY_BOUND:
                break
            if figures["achieved rate"] < 0.95 * rate:
                print(f"  max rate: the benchmark could not send {rate:g}/s: stopped")
                break
            sustained = rate
        self.figures["max rate"] = {"sustained changes/s": sustained, "steps": steps}
        print(f"  max rate: sustained {sustained:g} changes/s with p99 <= {LATENCY_BOUND} s")

    def changes(self, rate: float, seconds: float) -> dict[str, Any]:
        """Annotation changes at `rate` for `seconds`; latency to SQL of each."""
        assert self.bridge is not None
        count = max(1, round(rate * seconds))
        gangs = self.cluster.gangs
        start, base = self.next_gang, self.counter
        self.next_gang, self.counter = start + count, base + count
        pending: dict[str, tuple[int, float]] = {}  # uid -> (counter, monotonic at the reply)
        latencies: list[float] = []
        overtaken = 0  # changes patched over again before they were seen: count as lost
        lock = threading.Lock()
        sending = threading.Event()
        sending.set()

        def patch(number: int) -> None:
            gang = gangs[(start + number) % len(gangs)]
            counter = base + number + 1
            self.cluster.annotate(gang, counter)
            replied = time.monotonic()
            nonlocal overtaken
            with lock:
                overtaken += gang.uid in pending
                pending[gang.uid] = (counter, replied)

        def watch() -> None:
            conn = self.pipeline.connect()
            try:
                while sending.is_set() or pending:
                    with lock:
                        uids = list(pending)
                    asked = time.monotonic()
                    if uids:
                        rows = conn.execute(
                            "SELECT uid, annotations->>%s FROM minruntime.podgroups"
                            " WHERE uid = ANY(%s)",
                            (CHURN_ANNOTATION, uids),
                        ).fetchall()
                        with lock:
                            for uid, value in rows:
                                wanted = pending.get(uid)
                                if wanted and value is not None and int(value) >= wanted[0]:
                                    latencies.append(asked - wanted[1])
                                    del pending[uid]
                    time.sleep(POLL_SECONDS)
            finally:
                conn.close()

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        began = time.monotonic()
        with ThreadPoolExecutor(8) as pool:
            futures = []
            for number in range(count):
                due = began + number / rate
                time.sleep(max(0.0, due - time.monotonic()))
                futures.append(pool.submit(patch, number))
            for future in futures:
                future.result()
        sent_in = time.monotonic() - began
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            self.bridge.check_alive()
            time.sleep(0.1)
        sending.clear()
        watcher.join(10)
        with lock:
            unseen = len(pending) + overtaken
            pending.clear()
        ordered = sorted(latencies) + [math.inf] * unseen
        return {
            "rate": rate,
            "achieved rate": count / max(sent_in, count / rate),
            "changes": count,
            "unseen": unseen,
            "p50 s": percentile(ordered, 0.50),
            "p99 s": percentile(ordered, 0.99),
            "max s": ordered[-1],
            "mean s": statistics.fmean(latencies) if latencies else math.nan,
        }

    def settle(self, quiet: float, timeout: float) -> float:
        """Wait until the input topics and the processor's offsets are still for `quiet` s
        and the processor has read every partition to its end.

        "To its end" allows one offset per partition: a transactional producer's commit
        marker takes an offset that no record has, so the processor's next offset stops
        one short of the end. Returns the monotonic time the end offsets last changed.
        """
        assert self.offsets is not None
        assert self.sql is not None
        assert self.bridge is not None
        last = self.offsets.partition_ends(INPUT_ROLES)
        last_stored = self.sql.stored_offsets()
        changed = stored_changed = time.monotonic()
        deadline = changed + timeout
        while True:
            time.sleep(0.25)
            self.bridge.check_alive()
            self.pipeline.check_alive()
            ends = self.offsets.partition_ends(INPUT_ROLES)
            stored = self.sql.stored_offsets()
            now = time.monotonic()
            if ends != last:
                last, changed = ends, now
            if stored != last_stored:
                last_stored, stored_changed = stored, now
            behind = {tp: end - stored.get(tp, 0) for tp, end in ends.items()}
            read = all(gap <= 1 for gap in behind.values())
            if read and now - max(changed, stored_changed) >= quiet:
                return changed
            if now > deadline:
                lagging = {tp: gap for tp, gap in behind.items() if gap > 1}
                raise RuntimeError(f"not settled after {timeout:.0f}s: behind by {lagging}")

    def restart(self) -> None:
        assert self.sql is not None
        assert self.bridge is not None
        self.settle(quiet=2.0, timeout=self.args.timeout)
        assert self.offsets is not None
        records = self.offsets.partition_ends(INPUT_ROLES)
        dead_letter_records = self.offsets_of("dead_letter")
        ledger_records = self.offsets_of("ledger")
        dead_letters = self.sql.count("dead_letters")
        kinds_before = self.sql.dead_letter_kinds()
        event_log = self.sql.count("event_log")
        self.figures["bridge RSS MB before kill"] = self.bridge.rss_mb()
        self.figures["bridge peak RSS MB before kill"] = self.bridge.peak_rss_mb()
        self.bridge.process.kill()
        bridge = self.bridge = self.spawn_bridge("restart")
        watching, watching_cpu = bridge.wait_for("watching", self.args.timeout)
        last_change = self.settle(quiet=3.0, timeout=self.args.timeout)
        resent = self.offsets.records(records, self.offsets.partition_ends(INPUT_ROLES))
        new_rows = self.sql.count("event_log") - event_log
        _, running, pods = self.sql.progress()
        self.figures["restart"] = {
            "active s": bridge.seen.get("active", (math.nan, math.nan))[0],
            "watching s": watching,
            "watching CPU s": watching_cpu,
            "listing CPU s": watching_cpu - bridge.seen.get("active", (math.nan, math.nan))[1],
            "re-sent until s": max(watching, last_change - bridge.spawned),
            "CPU s (settled)": bridge.cpu(),
            "peak RSS MB": bridge.peak_rss_mb(),
            "records re-sent": resent,
            "re-sent": sum(resent.values()),
            "new event log rows": new_rows,
            "dead letters": self.sql.count("dead_letters") - dead_letters,
            "dead letter kinds": {
                kind: n - kinds_before.get(kind, 0)
                for kind, n in self.sql.dead_letter_kinds().items()
                if n != kinds_before.get(kind, 0)
            },
            "dead letter records": self.offsets_of("dead_letter") - dead_letter_records,
            "ledger records": self.offsets_of("ledger") - ledger_records,
            "still all running": running == len(self.cluster.gangs) and pods == self.pods,
        }
        r = self.figures["restart"]
        print(
            f"  restart: watching after {watching:.1f} s (CPU {watching_cpu:.1f} s), "
            f"re-sent {r['re-sent']:,} records {resent} until ~{r['re-sent until s']:.1f} s, "
            f"{new_rows} new event-log rows, {r['dead letters']} dead letters "
            f"{r['dead letter kinds'] or ''} ({r['dead letter records']} records), "
            f"{r['ledger records']:,} ledger records"
        )

    def keep(self) -> bool:
        return bool(self.args.keep_last and self.pods == self.args.pods[-1])

    def end_variant(self) -> None:
        """Stop this version's bridge and drop its pipeline (the cluster's objects stay)."""
        keep = self.keep()
        if self.bridge is not None:
            self.figures.setdefault("bridge peak RSS MB at the end", self.bridge.peak_rss_mb())
            self.bridge.process.stop()
        for spy in self.spies:  # each exits with its bridge, writing its samples
            with suppress(subprocess.TimeoutExpired):
                spy.wait(timeout=30)
        for closer in (self.offsets, self.sql):
            if closer is not None:
                with suppress(Exception):
                    closer.close()
        try:
            self.pipeline.drop(keep=keep)  # stops the processor first
        except Exception as error:
            print(f"  cleanup: dropping the pipeline failed: {error}")
            self.pipeline.stop()

    def cleanup(self) -> None:
        if self.keep():
            print(f"  kept namespace {self.cluster.namespace} and its cluster objects")
        else:
            started = time.monotonic()
            try:
                self.cluster.delete(self.leases)
                print(f"  cleanup: cluster objects deleted in {time.monotonic() - started:.1f} s")
            except Exception as error:
                print(f"  cleanup: deleting {self.cluster.namespace}'s objects failed: {error}")
        self.api.close()


# -- report ----------------------------------------------------------------------------------------


def summary_line(figures: dict[str, Any]) -> str:
    return (
        f"{figures['changes']} changes ({figures['achieved rate']:.2f}/s), p50 "
        f"{figures['p50 s'] * 1000:.0f} ms, p99 {figures['p99 s'] * 1000:.0f} ms, max "
        f"{figures['max s'] * 1000:.0f} ms, unseen {figures['unseen']}"
    )


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return "—" if math.isnan(value) else f"{value:,.{digits}f}"
    return str(value)


def dig(figures: dict[str, Any], path: str) -> Any:
    """`figures[section][key]` for a path "section: key" (None when missing)."""
    value: Any = figures
    for key in path.split(": "):
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


ROWS: Sequence[tuple[str, str, int]] = (
    ("setup: seconds", "setup: setup s", 1),
    ("setup: pods/s", "setup: pods/s", 0),
    ("setup: API calls/s", "setup: API calls/s", 0),
    ("setup: pod JSON bytes (bound, Running)", "setup: pod JSON bytes", 0),
    ("cold: lease taken, s", "cold: active s", 1),
    ("cold: watching, s", "cold: watching s", 1),
    ("cold: watching, bridge CPU s", "cold: watching CPU s", 2),
    ("cold: last record written, s (±0.5)", "cold: last record written s", 1),
    ("cold: all pods in SQL, s", "cold: all in SQL s", 1),
    ("cold: all in SQL, bridge CPU s", "cold: all in SQL CPU s", 2),
    ("cold: bridge CPU ms per pod", "cold: CPU ms per pod", 2),
    ("cold: pods listed (N + the cluster's others)", "cold: pods listed", 0),
    ("cold: bridge CPU from lease to watching, s", "cold: listing CPU s", 2),
    ("cold: the same, us per pod listed", "cold: listing CPU us per pod", 0),
    ("cold: bridge peak RSS MB", "cold: peak RSS MB", 0),
    ("cold: records written", "cold: records", 0),
    ("cold: ledger records written", "cold: ledger records", 0),
    ("cold: dead letters (rows)", "cold: dead letters", 0),
    ("cold: processor CPU s", "cold: processor CPU s", 1),
    ("churn: changes", "churn: changes", 0),
    ("churn: changes/s", "churn: achieved rate", 2),
    ("churn: p50 ms", "churn: p50 s", 3),
    ("churn: p99 ms", "churn: p99 s", 3),
    ("churn: max ms", "churn: max s", 3),
    ("churn: unseen", "churn: unseen", 0),
    ("max rate: sustained changes/s (p99 <= 1 s)", "max rate: sustained changes/s", 0),
    ("restart: lease taken, s", "restart: active s", 1),
    ("restart: watching, s", "restart: watching s", 1),
    ("restart: watching, bridge CPU s", "restart: watching CPU s", 2),
    ("restart: bridge CPU from lease to watching, s", "restart: listing CPU s", 2),
    ("restart: re-sending done, s (±0.25)", "restart: re-sent until s", 1),
    ("restart: bridge CPU s when settled", "restart: CPU s (settled)", 2),
    ("restart: records re-sent", "restart: re-sent", 0),
    ("restart: ledger records written", "restart: ledger records", 0),
    ("restart: new event-log rows", "restart: new event log rows", 0),
    ("restart: dead letters (rows)", "restart: dead letters", 0),
    ("restart: dead-letter topic records", "restart: dead letter records", 0),
    ("restart: all still running in SQL", "restart: still all running", 0),
    ("bridge peak RSS MB before the kill", "bridge peak RSS MB before kill", 0),
)


def report(results: dict[str, dict[str, Any]]) -> None:
    """A table with a column per run (N, and the bridge's version with --compare-src)."""
    columns = list(results)
    print("\n| figure | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    for label, path, digits in ROWS:
        values = [dig(results[column], path) for column in columns]
        if all(v is None for v in values):
            continue
        if label.endswith(" ms") and "churn" in label:
            values = [None if v is None else v * 1000 for v in values]
            digits = 0
        print(f"| {label} | " + " | ".join(fmt(v, digits) for v in values) + " |")
    if len(columns) < 2 or any(" " in column.removeprefix("N = ") for column in columns):
        return  # versions side by side: no ratios between sizes

    def listed(column: str) -> int:
        value = dig(results[column], "cold: pods listed")
        return int(value) if isinstance(value, int) else 1

    first = columns[0]
    print(f"\nPer pod listed (N + the cluster's other pods), as a ratio to {first}:")
    print("1.0 = linear; the first rows include the interpreter's start (~1-2 s of CPU).")
    print("\n| per pod listed | " + " | ".join(columns) + " |")
    print("|---|" + "---:|" * len(columns))
    ratios = (
        ("bridge CPU to all in SQL", "cold: all in SQL CPU s"),
        ("bridge CPU to watching", "cold: watching CPU s"),
        ("bridge CPU from lease to watching", "cold: listing CPU s"),
        ("time to all in SQL", "cold: all in SQL s"),
        ("time to watching", "cold: watching s"),
        ("restart: bridge CPU from lease to watching", "restart: listing CPU s"),
        ("restart: records re-sent", "restart: re-sent"),
    )
    for label, path in ratios:
        base = dig(results[first], path)
        if not isinstance(base, int | float) or not base or math.isnan(base):
            continue
        cells = []
        for column in columns:
            value = dig(results[column], path)
            ok = isinstance(value, int | float) and not math.isnan(value)
            ratio = (value / listed(column)) / (base / listed(first)) if ok else None
            cells.append(fmt(ratio, 2))
        print(f"| {label} | " + " | ".join(cells) + " |")
    cells = ["—"]
    for column in columns[1:]:
        now, then = (
            dig(results[column], "cold: watching CPU s"),
            dig(results[first], "cold: watching CPU s"),
        )
        extra = listed(column) - listed(first)
        ok = isinstance(now, float) and isinstance(then, float) and extra > 0
        cells.append(fmt((now - then) / extra * 1e6 if ok else None, 0))
    print("| marginal bridge CPU to watching per extra pod, us | " + " | ".join(cells) + " |")


def machine() -> str:
    model = next(
        (
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        ),
        "?",
    )
    return (
        f"{os.cpu_count()} CPUs, {model}, Python {platform.python_version()}, "
        f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )


def bridge_version(source: str | None) -> str:
    """Where the bridge's code comes from: a given directory, or this checkout's commit."""
    if source:
        return f"from {Path(source).resolve()}/services"
    import subprocess

    def git(*words: str) -> str:
        done = subprocess.run(["git", *words], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--", "services/minruntime/cluster")
    dirty = ", uncommitted changes in services/minruntime/cluster" if changed else ""
    return f"this checkout, commit {git('rev-parse', '--short', 'HEAD')}{dirty}"


def kubeconfig_path(given: str | None) -> Path:
    path = Path(given or os.environ.get("KUBECONFIG") or ROOT / ".stack" / "kube" / "kubeconfig")
    if not path.is_file():
        sys.exit(f"no kubeconfig at {path}: start the API server (`minruntime stack up --kube`)")
    return path


@contextmanager
def timed(what: str) -> Iterator[None]:
    started = time.monotonic()
    yield
    print(f"{what}: {time.monotonic() - started:.0f} s")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run each N, print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--churn-seconds", type=float, default=60.0)
    parser.add_argument("--skip-churn", action="store_true")
    parser.add_argument("--skip-restart", action="store_true")
    parser.add_argument(
        "--max-rate", action="store_true", help="step the churn rate up (see --rate-steps)"
    )
    parser.add_argument(
        "--rate-steps",
        type=lambda text: [float(x) for x in text.split(",")],
        default=[1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0],
        help="changes/s, comma-separated",
    )
    parser.add_argument("--step-seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=24, help="client threads for the setup")
    parser.add_argument("--timeout", type=float, default=1800.0, help="per phase, seconds")
    parser.add_argument("--ready-pattern", default="watching", help="the bridge's ready line")
    parser.add_argument("--kubeconfig", help="default: $KUBECONFIG, else the local stack's")
    parser.add_argument(
        "--bridge-src",
        help="run the bridge from this checkout's services/ (e.g. an older commit unpacked "
        "with `git archive`); default: this checkout",
    )
    parser.add_argument(
        "--compare-src",
        help="measure two bridges on the same cluster objects, each on a fresh pipeline: "
        "first the one from this checkout's services/ (e.g. main unpacked with `git archive`), "
        "then this checkout's (or --bridge-src's)",
    )
    parser.add_argument(
        "--quick-setup",
        action="store_true",
        help="make each pod bound at creation (spec.nodeName, the kubelet's status bytes as env "
        "vars) and each PodGroup with its start: 5 API calls per gang instead of 14",
    )
    parser.add_argument(
        "--keep",
        dest="keep_last",
        action="store_true",
        help="keep the last N's cluster objects, database and topics",
    )
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument(
        "--py-spy",
        metavar="DIR",
        help="sample each bridge with py-spy (50 Hz, every thread) from its spawn to its end into"
        " DIR/bridge-<N>-<before|after|run>-<cold|restart>.txt (raw; flame_svg.py draws them)",
    )
    add_prioritise(parser)
    args = parser.parse_args(argv)
    args.pods = sorted({max(GANG, n - n % GANG) for n in args.pods})
    kubeconfig = kubeconfig_path(args.kubeconfig)
    print(f"bench_bridge {datetime.now(UTC):%Y-%m-%d %H:%M} UTC; {machine()}")
    print(f"command: {' '.join([Path(sys.argv[0]).name, *(argv or sys.argv[1:])])}")
    print(f"bridge: {bridge_version(args.bridge_src)}")
    results: dict[str, dict[str, Any]] = {}
    with timed("whole run"):
        for n in args.pods:
            for label, figures in Run(args, n, kubeconfig).run().items():
                results[f"N = {n:,}{' ' + label if label else ''}"] = figures
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    report(results)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))


if __name__ == "__main__":
    main()
