"""The real KAI-Scheduler, run for the conformance suite: its build in the cache, a private API
server with KAI's CRDs, the scheduler and the binder as processes, a stand-in kubelet and a
stand-in job controller.

Nothing of KAI's is in this repository: `scripts/kai-build.sh SRC` builds kai-scheduler and
kai-binder from a KAI-Scheduler checkout into ``~/.cache/kai/<commit>/`` (with KAI's CRDs) and
points ``~/.cache/kai/current`` at it; this module only reads that directory. Without it the
whole suite is skipped, with `MISSING` as the reason.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from minruntime.cluster.api import KAI_GROUP, read_json
from minruntime.settings import Settings
from minruntime_dev.stack.apiserver import KubeNode
from minruntime_dev.stack.crds import apply_crds, read_crds
from tests.e2e.harness import Subprocess, wait_for

KAI_CACHE = Path(os.environ.get("KAI_CACHE") or Path.home() / ".cache" / "kai")
ENABLE = (
    "git clone https://github.com/kai-scheduler/KAI-Scheduler ../kai "
    "&& bash scripts/kai-build.sh ../kai"
)
SCHEDULER_NAME = "kai-scheduler"
# KAI's PodGroup annotation that ties a pod to it, and its own annotations (constants.go).
POD_GROUP_ANNOTATION = "pod-group-name"
LAST_START = "kai.scheduler/last-start-timestamp"
LAST_EVICTION = "kai.scheduler/last-eviction-timestamp"
HTTP_NOT_FOUND = 404
HTTP_CONFLICT = 409

# The plugins of KAI's default scheduler config (pkg/scheduler/conf_util/scheduler_conf.go,
# defaultSchedulerConf); `--scheduler-conf` replaces the whole tier list, so the suite writes
# it out with the minruntime plugin's arguments.
DEFAULT_ACTIONS = "allocate, consolidation, reclaim, preempt, stalegangeviction"
_DEFAULT_PLUGINS = [
    "predicates",
    "proportion",
    "priority",
    "elastic",
    "kubeflow",
    "ray",
    "nodeavailability",
    "gpusharingorder",
    "gpupack",
    "resourcetype",
    "subgrouporder",
    "taskorder",
    "nominatednode",
    "dynamicresources",
]
_LATE_PLUGINS = ["topology", "snapshot", "sg-nodelocalgreedy", "sg-multinodegang"]


@dataclass(frozen=True)
class KaiBuild:
    """One build of KAI in the cache: ``bin/kai-scheduler``, ``bin/kai-binder``, ``crds/``."""

    root: Path

    @property
    def scheduler(self) -> Path:
        return self.root / "bin" / "kai-scheduler"

    @property
    def binder(self) -> Path:
        return self.root / "bin" / "kai-binder"

    @property
    def crds(self) -> Path:
        return self.root / "crds"

    @property
    def commit(self) -> str:
        return (self.root / "COMMIT").read_text().strip()


def kai_build() -> KaiBuild | None:
    """The cache's current KAI build, or None when it is missing or incomplete."""
    build = KaiBuild((KAI_CACHE / "current").resolve())
    complete = (
        os.access(build.scheduler, os.X_OK)
        and os.access(build.binder, os.X_OK)
        and (build.root / "COMMIT").is_file()
        and any(build.crds.glob("*.yaml"))
    )
    return build if complete else None


def missing_reason() -> str | None:
    """Why the suite cannot run here (None: it can)."""
    if kai_build() is not None:
        return None
    return (
        f"the real KAI-Scheduler is not built on this machine (no complete build in "
        f"{KAI_CACHE}/current: bin/kai-scheduler, bin/kai-binder, crds/, COMMIT); "
        f"to run this suite: {ENABLE}"
    )


def scheduler_config(
    preempt: str = "0s", reclaim: str = "0s", method: str = "lca", actions: str = DEFAULT_ACTIONS
) -> str:
    """KAI's scheduler config (the `--scheduler-conf` file and the ConfigMap's config.yaml)
    with the minruntime plugin's arguments."""
    plugins: list[dict[str, Any]] = [{"name": name} for name in _DEFAULT_PLUGINS]
    plugins.append({"name": "nodeplacement", "arguments": {"cpu": "binpack", "gpu": "binpack"}})
    plugins.append(
        {
            "name": "minruntime",
            "arguments": {
                "defaultPreemptMinRuntime": preempt,
                "defaultReclaimMinRuntime": reclaim,
                "reclaimResolveMethod": method,
            },
        }
    )
    plugins.extend({"name": name} for name in _LATE_PLUGINS)
    return yaml.safe_dump({"actions": actions, "tiers": [{"plugins": plugins}]}, sort_keys=False)


def rfc3339(text: str) -> datetime:
    """An RFC3339 timestamp with any offset, as an aware instant."""
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def free_ports(count: int) -> int:
    from tests.conftest import free_ports as pick

    return pick(count)


class ApiServer:
    """A private etcd + kube-apiserver (the stack's own machinery, in a temporary directory
    on free ports), with KAI's CRDs applied and Established."""

    def __init__(self, base: Settings, home: Path) -> None:
        port = free_ports(3)  # API server, etcd client, etcd peer
        self.settings = base.model_copy(
            update={"stack_dir": home, "kube_apiserver_port": port, "kube_etcd_port": port + 1}
        )
        self.node = KubeNode(self.settings)

    @property
    def kubeconfig(self) -> Path:
        return self.settings.kube_kubeconfig

    def start(self, crds: Path) -> ApiServer:
        self.node.start(lambda line: print(line), timeout=120)
        apply_crds(self.kubeconfig, read_crds(crds), timeout=120)
        return self

    def stop(self) -> None:
        self.node.stop()


class Program(Subprocess):
    """One KAI binary as a process (in its own session): its log, a clean stop."""

    def __init__(self, command: list[str], log: Path, env: Mapping[str, str]) -> None:
        self.command = command
        self.log_path = log
        self.env = dict(env)
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> Program:
        with self.log_path.open("ab") as out:
            self.process = subprocess.Popen(
                self.command,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env={**os.environ, **self.env},
                start_new_session=True,
            )
        return self

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


def kai_scheduler(build: KaiBuild, kubeconfig: Path, conf: Path, log: Path, tz: str) -> Program:
    """kai-scheduler as KAI's operator would run it, with a 1 s scheduling period.

    No `--kubeconfig` flag: it reads `KUBECONFIG`. `TZ` sets its local zone, which it uses
    when it overwrites `last-start-timestamp`."""
    command = [
        str(build.scheduler),
        f"--scheduler-conf={conf}",
        "--schedule-period=1s",
        "--listen-address=127.0.0.1:0",
        "--plugin-server-port=0",
        "--v=3",
    ]
    return Program(command, log, {"KUBECONFIG": str(kubeconfig), "TZ": tz})


def kai_binder(build: KaiBuild, kubeconfig: Path, log: Path) -> Program:
    command = [
        str(build.binder),
        f"--kubeconfig={kubeconfig}",
        "--metrics-bind-address=0",
        "--health-probe-bind-address=0",
    ]
    return Program(command, log, {"KUBECONFIG": str(kubeconfig)})


# -- the objects KAI reads ------------------------------------------------------------------


def gpu_resources(quota: float, limit: float = -1, weight: float = 1) -> dict[str, Any]:
    """A Queue's `spec.resources`: `quota` GPUs deserved, up to `limit` (-1: no limit); no
    CPU or memory deserved, none limited. (A Queue without `resources` gets limit 0 from KAI:
    nothing can be allocated in it.)"""
    unlimited = {"quota": 0, "limit": -1, "overQuotaWeight": 1}
    return {
        "gpu": {"quota": quota, "limit": limit, "overQuotaWeight": weight},
        "cpu": unlimited,
        "memory": unlimited,
    }


class Kai:
    """Admin calls on the private API server: what a user, KAI's podgrouper and a cluster's
    admin would create, and the reads the assertions need."""

    def __init__(self, kubeconfig: Path) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.scheduling = client.SchedulingV1Api(self.api)

    # -- cluster-scoped -------------------------------------------------------------------
    def namespace(self, name: str) -> str:
        with contextlib.suppress(Exception):
            self.core.create_namespace({"metadata": {"name": name}})
        return name

    def priority_class(self, name: str, value: int) -> str:
        body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": name}, "value": value}  # fmt: skip
        try:
            self.scheduling.create_priority_class(body)
        except Exception as exc:
            if getattr(exc, "status", None) != HTTP_CONFLICT:
                raise
        return name

    def node(self, name: str, gpus: int) -> str:
        """A Ready Node with `gpus` GPUs and no node-pool label (KAI's default shard)."""
        self.core.create_node({"metadata": {"name": name}})
        # The API server taints a new Node not-ready until a kubelet reports; none runs here.
        self.core.patch_node(name, {"spec": {"taints": None}})
        capacity = {"nvidia.com/gpu": str(gpus), "cpu": "64", "memory": "256Gi", "pods": "110"}
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        ready = {"type": "Ready", "status": "True", "reason": "KubeletReady",
                 "lastHeartbeatTime": now, "lastTransitionTime": now}  # fmt: skip
        self.core.patch_node_status(
            name,
            {"status": {"capacity": capacity, "allocatable": capacity, "conditions": [ready]}},
        )
        return name

    def delete_node(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.core.delete_node(name)

    def queue(self, name: str, parent: str | None = None, **spec: Any) -> str:
        body = {
            "apiVersion": f"{KAI_GROUP}/v2",
            "kind": "Queue",
            "metadata": {"name": name},
            "spec": {**({"parentQueue": parent} if parent else {}), **spec},
        }
        self.custom.create_cluster_custom_object(KAI_GROUP, "v2", "queues", body)
        return name

    def delete_queue(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.custom.delete_cluster_custom_object(KAI_GROUP, "v2", "queues", name)

    def config_map(self, namespace: str, name: str, config: str) -> None:
        body = {"metadata": {"name": name}, "data": {"config.yaml": config}}
        try:
            self.core.create_namespaced_config_map(namespace, body)
        except Exception as exc:
            if getattr(exc, "status", None) != HTTP_CONFLICT:
                raise
            self.core.replace_namespaced_config_map(name, namespace, body)

    # -- workloads --------------------------------------------------------------------------
    def podgroup(
        self,
        namespace: str,
        name: str,
        queue: str,
        priority_class: str,
        min_member: int = 1,
        annotations: Mapping[str, str] | None = None,
        **spec: Any,
    ) -> str:
        """A PodGroup as KAI's podgrouper makes it; returns its uid."""
        body = {
            "apiVersion": f"{KAI_GROUP}/v2alpha2",
            "kind": "PodGroup",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "annotations": dict(annotations or {}),
            },
            "spec": {
                "queue": queue,
                "minMember": min_member,
                "priorityClassName": priority_class,
                **spec,
            },
        }
        created = self.custom.create_namespaced_custom_object(
            KAI_GROUP, "v2alpha2", namespace, "podgroups", body
        )
        return str(created["metadata"]["uid"])

    def get_podgroup(self, namespace: str, name: str) -> dict[str, Any]:
        return dict(
            self.custom.get_namespaced_custom_object(
                KAI_GROUP, "v2alpha2", namespace, "podgroups", name
            )
        )

    def annotation(self, namespace: str, podgroup: str, key: str) -> str | None:
        annotations = self.get_podgroup(namespace, podgroup)["metadata"].get("annotations") or {}
        value = annotations.get(key)
        return None if value is None else str(value)

    @staticmethod
    def pod_body(name: str, podgroup: str, queue: str, gpus: int) -> dict[str, Any]:
        """A pod of a podgroup, as a workload's controller creates it for KAI."""
        return {
            "metadata": {
                "name": name,
                "annotations": {POD_GROUP_ANNOTATION: podgroup},
                "labels": {"app": podgroup, "kai.scheduler/queue": queue},
            },
            "spec": {
                "schedulerName": SCHEDULER_NAME,
                "terminationGracePeriodSeconds": 30,
                "containers": [
                    {
                        "name": "main",
                        "image": "busybox",
                        "resources": {
                            "limits": {"nvidia.com/gpu": str(gpus)},
                            "requests": {"nvidia.com/gpu": str(gpus)},
                        },
                    }
                ],
            },
        }

    def create_pod(self, namespace: str, body: Mapping[str, Any]) -> None:
        self.core.create_namespaced_pod(namespace, dict(body))

    def pods(self, namespace: str) -> dict[str, dict[str, Any]]:
        """Every pod of the namespace by name (raw JSON)."""
        listed = read_json(self.core.list_namespaced_pod(namespace, _preload_content=False))
        return {item["metadata"]["name"]: item for item in listed.get("items", [])}

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.pods(namespace).get(name)

    def evict_events(self, namespace: str) -> list[dict[str, Any]]:
        """KAI's `Evict` Events on the namespace's PodGroups."""
        listed = read_json(
            self.core.list_namespaced_event(
                namespace,
                field_selector="reason=Evict,involvedObject.kind=PodGroup",
                _preload_content=False,
            )
        )
        return list(listed.get("items", []))

    def delete_gang(self, namespace: str, podgroup: str) -> None:
        """A finished workload: its pods (grace 0) and its PodGroup deleted."""
        for name in self.pods(namespace):
            if name.startswith(f"{podgroup}-"):
                with contextlib.suppress(Exception):
                    self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        with contextlib.suppress(Exception):
            self.custom.delete_namespaced_custom_object(
                KAI_GROUP, "v2alpha2", namespace, "podgroups", podgroup
            )

    def clear_namespace(self, namespace: str) -> None:
        """Delete every pod (grace 0) and PodGroup of the namespace."""
        for name in self.pods(namespace):
            with contextlib.suppress(Exception):
                self.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
        listed = self.custom.list_namespaced_custom_object(
            KAI_GROUP, "v2alpha2", namespace, "podgroups"
        )
        for item in listed.get("items", []):
            with contextlib.suppress(Exception):
                self.custom.delete_namespaced_custom_object(
                    KAI_GROUP, "v2alpha2", namespace, "podgroups", item["metadata"]["name"]
                )


@dataclass
class Removal:
    """A pod the stand-in kubelet saw being deleted, and when (this machine's clock)."""

    uid: str
    seen_at: datetime
    node: str | None
    disruption_target: bool


@dataclass(eq=False)
class Kubelet(threading.Thread):
    """The stand-in kubelet and job controller, polling the API server every 0.2 s.

    Kubelet: a bound Pending pod is set Running (status subresource); a pod being deleted
    (KAI deletes with the pod's grace period: on 1.33 that only sets `deletionTimestamp`) is
    removed with grace 0, as a kubelet does once the containers exited. Garbage collector: a
    BindRequest whose owning pod is gone is deleted. Job controller: a pod
    registered with `keep` is created again `recreate_after` seconds after it is gone, as a
    Job's or a training operator's controller would (a new pod, a new uid)."""

    kai: Kai
    namespaces: set[str] = field(default_factory=set)
    recreate_after: float = 3.0
    removals: dict[str, list[Removal]] = field(default_factory=dict)  # "ns/name" -> removals
    templates: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    _gone_since: dict[tuple[str, str], float] = field(default_factory=dict)
    _halt: threading.Event = field(default_factory=threading.Event)
    errors: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        threading.Thread.__init__(self, name="stand-in-kubelet", daemon=True)

    def keep(self, namespace: str, body: Mapping[str, Any]) -> None:
        """Create the pod now and again whenever it is gone (until `forget`)."""
        key = (namespace, str(body["metadata"]["name"]))
        self.templates[key] = json.loads(json.dumps(body))
        self.kai.create_pod(namespace, body)

    def forget(self, namespace: str, name: str | None = None) -> None:
        for key in list(self.templates):
            if key[0] == namespace and (name is None or key[1] == name):
                del self.templates[key]

    def run(self) -> None:
        while not self._halt.is_set():
            try:
                self._tick()
            except Exception as exc:  # a restart of the API server, a conflict: next tick
                self.errors.append(repr(exc))
                del self.errors[:-20]
            self._halt.wait(0.2)

    def stop(self) -> None:
        self._halt.set()
        self.join(10)

    def _tick(self) -> None:
        for namespace in list(self.namespaces):
            pods = self.kai.pods(namespace)
            for name, pod in pods.items():
                self._kubelet(namespace, name, pod)
            self._controller(namespace, pods)
            self._collect_garbage(namespace, pods)

    def _kubelet(self, namespace: str, name: str, pod: Mapping[str, Any]) -> None:
        meta, spec, status = pod["metadata"], pod["spec"], pod.get("status") or {}
        if meta.get("deletionTimestamp"):
            conditions = {c.get("type") for c in status.get("conditions") or []}
            self.removals.setdefault(f"{namespace}/{name}", [])
            seen = self.removals[f"{namespace}/{name}"]
            if not seen or seen[-1].uid != meta["uid"]:
                seen.append(
                    Removal(
                        meta["uid"],
                        datetime.now(UTC),
                        spec.get("nodeName"),
                        "DisruptionTarget" in conditions,
                    )
                )
            with contextlib.suppress(Exception):
                self.kai.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
            return
        if spec.get("nodeName") and status.get("phase", "Pending") == "Pending":
            now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            running = {"running": {"startedAt": now}}
            body = {
                "status": {
                    "phase": "Running",
                    "startTime": now,
                    "conditions": [
                        *(status.get("conditions") or []),
                        {"type": "Ready", "status": "True", "lastTransitionTime": now},
                    ],
                    "containerStatuses": [
                        {
                            "name": "main",
                            "ready": True,
                            "restartCount": 0,
                            "image": "busybox",
                            "imageID": "",
                            "state": running,
                        }
                    ],
                }
            }
            self.kai.core.patch_namespaced_pod_status(name, namespace, body)

    def _collect_garbage(self, namespace: str, pods: Mapping[str, Any]) -> None:
        """The garbage collector's part: KAI's BindRequest is owned by its pod (same name);
        once the pod is gone it must go too, or KAI takes the pod's successor of the same name
        for one being bound and never schedules it."""
        uids = {pod["metadata"]["uid"] for pod in pods.values()}
        listed = self.kai.custom.list_namespaced_custom_object(
            KAI_GROUP, "v1alpha2", namespace, "bindrequests"
        )
        for item in listed.get("items", []):
            owners = {ref.get("uid") for ref in item["metadata"].get("ownerReferences") or []}
            if owners and not owners & uids:
                with contextlib.suppress(Exception):
                    self.kai.custom.delete_namespaced_custom_object(
                        KAI_GROUP, "v1alpha2", namespace, "bindrequests",
                        item["metadata"]["name"],
                    )  # fmt: skip

    def _controller(self, namespace: str, pods: Mapping[str, Any]) -> None:
        now = time.monotonic()
        for key, body in list(self.templates.items()):
            if key[0] != namespace:
                continue
            if key[1] in pods:
                self._gone_since.pop(key, None)
                continue
            since = self._gone_since.setdefault(key, now)
            if now - since >= self.recreate_after:
                try:
                    self.kai.create_pod(namespace, body)
                    self._gone_since.pop(key, None)
                except Exception as exc:
                    if getattr(exc, "status", None) != HTTP_CONFLICT:
                        raise


def wait_until(check: Callable[[], Any], timeout: float, what: str, every: float = 0.2) -> Any:
    """Poll until `check()` is truthy; fail naming `what` after `timeout` seconds."""
    return wait_for(check, timeout, what, every)


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:5]}"


@contextlib.contextmanager
def running_kai(
    build: KaiBuild,
    kai: Kai,
    kubeconfig: Path,
    workdir: Path,
    config: str,
    tz: str = "UTC",
) -> Iterator[Program]:
    """kai-scheduler with `config`, proven ready: it binds a probe pod (a missing CRD or an
    unreachable API server makes it hang silently in its cache sync)."""
    conf = workdir / f"scheduler-{uuid.uuid4().hex[:6]}.yaml"
    conf.write_text(config)
    scheduler = kai_scheduler(build, kubeconfig, conf, workdir / "kai-scheduler.log", tz)
    scheduler.start()
    try:
        probe_ns = kai.namespace("kai-probe")
        queue = kai.queue(unique("probe"), resources=gpu_resources(0))
        name = unique("probe")
        kai.podgroup(probe_ns, name, queue, "kai-probe")
        body = Kai.pod_body(name, name, queue, 0)
        body["spec"]["containers"][0]["resources"] = {}
        kai.create_pod(probe_ns, body)
        try:
            wait_until(
                lambda: (
                    scheduler.alive()
                    and ((kai.pod(probe_ns, name) or {}).get("spec") or {}).get("nodeName")
                ),
                90,
                "kai-scheduler to bind a probe pod",
            )
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{scheduler.log_tail(40)}") from exc
        finally:
            kai.clear_namespace(probe_ns)
            kai.delete_queue(queue)
        yield scheduler
    finally:
        scheduler.stop()
