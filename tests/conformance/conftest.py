"""The conformance suite's fixtures: the real KAI-Scheduler on a private API server, and a
scene per test module (the service's pipeline and bridge, a namespace, KAI with one config).

Without a KAI build in the cache every test here is skipped with the reason (see kai.py)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conformance.kai import (
    LAST_EVICTION,
    LAST_START,
    ApiServer,
    Kai,
    KaiBuild,
    Kubelet,
    Program,
    gpu_resources,
    kai_binder,
    kai_build,
    missing_reason,
    rfc3339,
    running_kai,
    scheduler_config,
    unique,
    wait_until,
)
from tests.conftest import run_cli
from tests.e2e.harness import Pipeline
from tests.e2e.kubeloop import KubeProcess

HERE = Path(__file__).resolve().parent
SCHEDULER_CONFIG = "kai-scheduler/kai-scheduler-config"
# Priority classes (KAI: below 100 preemptible, 100 and above not).
LOW, MID, HIGH, BUILD = "kai-low", "kai-mid", "kai-high", "kai-build"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without KAI's build, skip every test of this directory, saying why and how to enable it
    (`-ra` prints the reason in the summary)."""
    del config
    reason = missing_reason()
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.kai)
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@dataclass
class KaiCluster:
    """The private API server with KAI's CRDs, the binder and the stand-in kubelet."""

    build: KaiBuild
    apiserver: ApiServer
    kai: Kai
    kubelet: Kubelet
    binder: Program
    workdir: Path

    @property
    def kubeconfig(self) -> Path:
        return self.apiserver.kubeconfig


@pytest.fixture(scope="session")
def kai_cluster(
    stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KaiCluster]:
    build = kai_build()
    assert build is not None, missing_reason()
    workdir = tmp_path_factory.mktemp("kai")
    apiserver = ApiServer(settings, workdir / "stack")
    binder: Program | None = None
    kubelet: Kubelet | None = None
    try:
        apiserver.start(build.crds)
        kai = Kai(apiserver.kubeconfig)
        for name in ("kai-scheduler", "minruntime"):
            kai.namespace(name)
        for name, value in ((LOW, 40), (MID, 60), (HIGH, 80), (BUILD, 100), ("kai-probe", 50)):
            kai.priority_class(name, value)
        kai.node("cpu-probe", 0)  # where the readiness probe's pod (no GPU) is bound
        binder = kai_binder(build, apiserver.kubeconfig, workdir / "kai-binder.log").start()
        kubelet = Kubelet(Kai(apiserver.kubeconfig))
        kubelet.namespaces.add("kai-probe")
        kubelet.start()
        yield KaiCluster(build, apiserver, kai, kubelet, binder, workdir)
    finally:
        if kubelet is not None:
            kubelet.stop()
        if binder is not None:
            binder.stop()
        apiserver.stop()


@dataclass
class Scene:
    """One test module's world: KAI with one config, the service (processor, bridge, and on
    request the requeue worker and the evictor) on a private database and topics, and a
    namespace. Cluster-scoped objects it makes are deleted with it."""

    cluster: KaiCluster
    pipeline: Pipeline
    namespace: str
    scheduler: Program
    bridge: KubeProcess
    extra: list[Any] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)
    queues: list[str] = field(default_factory=list)

    @property
    def kai(self) -> Kai:
        return self.cluster.kai

    @property
    def kube_env(self) -> dict[str, str]:
        return {
            "KUBECONFIG": str(self.cluster.kubeconfig),
            "MINRUNTIME_KUBE_NAMESPACE": "minruntime",
            "MINRUNTIME_KUBE_LEASE_NAME": f"bridge-{self.pipeline.suffix}",
            "MINRUNTIME_KUBE_LEASE_SECONDS": "3",
            "MINRUNTIME_KUBE_SCHEDULER_CONFIG": SCHEDULER_CONFIG,
            "MINRUNTIME_EVICTOR_GROUP": f"evictor-{self.pipeline.suffix}",
        }

    # -- cluster objects ------------------------------------------------------------------
    def node(self, gpus: int = 4) -> str:
        name = self.kai.node(unique("gpu"), gpus)
        self.nodes.append(name)
        return name

    def queue(self, base: str, parent: str | None = None, **spec: Any) -> str:
        """A Queue (default resources: no quota, no limit; `resources=None`: none at all)."""
        spec.setdefault("resources", gpu_resources(0))
        if spec["resources"] is None:
            del spec["resources"]
        name = self.kai.queue(unique(base), parent, **spec)
        self.queues.append(name)
        return name

    def gang(
        self,
        base: str,
        queue: str,
        priority_class: str,
        pods: int = 1,
        gpus: int = 4,
        min_member: int | None = None,
        keep: bool = False,
        annotations: dict[str, str] | None = None,
        **spec: Any,
    ) -> tuple[str, str]:
        """A PodGroup of `pods` pods with `gpus` GPUs each; (name, uid). With `keep` the
        stand-in job controller creates evicted pods again."""
        name = unique(base)
        uid = self.kai.podgroup(
            self.namespace, name, queue, priority_class,
            min_member=pods if min_member is None else min_member,
            annotations=annotations, **spec,
        )  # fmt: skip
        for index in range(pods):
            body = Kai.pod_body(f"{name}-{index}", name, queue, gpus)
            if keep:
                self.cluster.kubelet.keep(self.namespace, body)
            else:
                self.kai.create_pod(self.namespace, body)
        return name, uid

    def bound(self, podgroup: str) -> dict[str, str]:
        """The podgroup's pods that KAI bound and that are not being deleted: name -> node."""
        return {
            name: pod["spec"]["nodeName"]
            for name, pod in self.kai.pods(self.namespace).items()
            if name.startswith(f"{podgroup}-")
            and pod["spec"].get("nodeName")
            and not pod["metadata"].get("deletionTimestamp")
        }

    def wait_bound(self, podgroup: str, count: int, timeout: float = 30) -> dict[str, str]:
        """Wait until KAI bound exactly `count` pods of the podgroup; name -> node."""
        try:
            return dict(
                wait_until(
                    lambda: len(found := self.bound(podgroup)) == count and found,
                    timeout,
                    f"KAI to bind {count} pods of {podgroup}",
                )
            )
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}; pods: {sorted(self.kai.pods(self.namespace))}; kubelet errors: "
                f"{self.cluster.kubelet.errors[-3:]}\n{self.scheduler.log_tail(8)}"
            ) from exc

    def last_start(self, podgroup: str, timeout: float = 15) -> tuple[str, datetime]:
        """KAI's `last-start-timestamp` of the podgroup: (as written, as an instant)."""
        text = wait_until(
            lambda: self.kai.annotation(self.namespace, podgroup, LAST_START),
            timeout,
            f"KAI to write {LAST_START} on {podgroup}",
        )
        return text, rfc3339(text)

    def last_eviction(self, podgroup: str, timeout: float = 15) -> datetime:
        text = wait_until(
            lambda: self.kai.annotation(self.namespace, podgroup, LAST_EVICTION),
            timeout,
            f"KAI to write {LAST_EVICTION} on {podgroup}",
        )
        return rfc3339(text)

    def removals(self, pod: str) -> list[Any]:
        """Each time the stand-in kubelet saw the pod being deleted (a Removal)."""
        return self.cluster.kubelet.removals.get(f"{self.namespace}/{pod}", [])

    def removal(self, pod: str, timeout: float = 15) -> Any:
        """The first removal of the pod (waits for it)."""
        return wait_until(lambda: self.removals(pod), timeout, f"{pod} to be deleted")[0]

    # -- the service ------------------------------------------------------------------------
    def row(self, uid: str) -> dict[str, Any] | None:
        rows = self.pipeline.query(
            "SELECT status, start_time, running_pods FROM minruntime.podgroups WHERE uid = %s",
            (uid,),
        )
        if not rows:
            return None
        status, start, running = rows[0]
        return {"status": status, "start_time": start, "running_pods": running}

    def wait_service_running(self, uid: str, pods: int, timeout: float = 60) -> dict[str, Any]:
        try:
            return dict(
                wait_until(
                    lambda: (r := self.row(uid)) and r["status"] == "running"
                    and r["running_pods"] == pods and r,
                    timeout,
                    f"the service to hold {uid} running with {pods} pods",
                )
            )  # fmt: skip
        except AssertionError as exc:
            raise AssertionError(
                f"{exc}: {self.row(uid)}\n{self.bridge.log_tail(10)}\n{self.pipeline.log_tail(5)}"
            ) from exc

    def preempt_window(self, uid: str) -> tuple[datetime, int]:
        """(protected_until, evictable_pods) of the running podgroup, for a preemptor of its
        own queue (minruntime.preempt_protection)."""
        [(until, evictable)] = self.pipeline.query(
            "SELECT protected_until, evictable_pods FROM minruntime.preempt_protection"
            " WHERE uid = %s",
            (uid,),
        )
        return until, evictable

    def reclaim_window(self, uid: str, reclaimer_queue: str) -> datetime:
        [(until,)] = self.pipeline.query(
            "SELECT protected_until FROM minruntime.reclaim_protection(%s) WHERE uid = %s",
            (reclaimer_queue, uid),
        )
        return until

    def kube_diff(self) -> Any:
        return run_cli(
            "kube", "diff", "-n", self.namespace, env={**self.pipeline.env, **self.kube_env}
        )

    def start_service(self, command: str, **env: str) -> Any:
        """`minruntime requeue-worker` or `minruntime kube evictor` on the scene."""
        if command == "requeue-worker":
            worker = self.pipeline.start_worker(env={**self.kube_env, **env})
            self.extra.append(worker)
            return worker
        process = KubeProcess(self.pipeline, command, self.cluster.kubeconfig,
                              {**self.kube_env, **env}).start()  # fmt: skip
        self.extra.append(process)
        return process


@contextlib.contextmanager
def kai_scene(
    cluster: KaiCluster,
    settings: Settings,
    workdir: Path,
    name: str,
    config: str,
    service_config: str | None = None,
    tz: str = "UTC",
) -> Iterator[Scene]:
    """A Scene: KAI started with `config`, the service given `service_config` (default: the
    same) through the scheduler ConfigMap the bridge watches."""
    kai = cluster.kai
    namespace = kai.namespace(unique(name))
    kai.config_map("kai-scheduler", "kai-scheduler-config", service_config or config)
    cluster.kubelet.namespaces.add(namespace)
    pipeline = Pipeline(settings, workdir, name).create(with_topics=True)
    scene: Scene | None = None
    try:
        pipeline.start()
        with running_kai(cluster.build, kai, cluster.kubeconfig, workdir, config, tz) as sched:
            scene = Scene(cluster, pipeline, namespace, sched, None)  # type: ignore[arg-type]
            scene.bridge = KubeProcess(
                pipeline, "bridge", cluster.kubeconfig, scene.kube_env
            ).start()
            # The scenarios' windows are seconds: start them once the bridge watches.
            wait_until(lambda: "watching" in scene.bridge.log_tail(50), 90, "the bridge to watch")
            try:
                yield scene
            finally:
                cluster.kubelet.forget(namespace)
                for process in [scene.bridge, *scene.extra]:
                    process.stop()
                kai.clear_namespace(namespace)
                for node in scene.nodes:
                    kai.delete_node(node)
                for queue in scene.queues:
                    kai.delete_queue(queue)
    finally:
        cluster.kubelet.namespaces.discard(namespace)
        # MINRUNTIME_CONFORMANCE_KEEP=1 keeps the database and topics to look at afterwards.
        pipeline.drop(keep=bool(os.environ.get("MINRUNTIME_CONFORMANCE_KEEP")))


def module_scene(name: str, start: Callable[[Scene], object] | None = None, **options: Any) -> Any:
    """A test module's ``scene`` fixture: one ``kai_scene`` named ``name`` (KAI and the service
    given ``scheduler_config()``; ``options``: kai_scene's) for the whole module, ``start``ed
    (services of its own) before its first test."""

    @pytest.fixture(scope="module")
    def scene(
        kai_cluster: KaiCluster, settings: Settings, tmp_path_factory: pytest.TempPathFactory
    ) -> Iterator[Scene]:
        workdir = tmp_path_factory.mktemp(f"kai-{name}")
        with kai_scene(kai_cluster, settings, workdir, name, scheduler_config(), **options) as made:
            if start is not None:
                start(made)
            yield made

    return scene


def whole(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


SECOND = timedelta(seconds=1)


# -- what other parts of issue 27 add (asserted here once they exist) ---------------------

# The columns of minruntime.runs that say who evicted a run (issue 27 part 1), by meaning;
# the first name of each tuple that the view has is used.
ATTRIBUTION_COLUMNS = {
    "action": ("eviction_action", "evictor_action", "action"),
    "evictor": ("evictor", "evicted_by", "evictor_podgroup"),
    "evictor_queue": ("evictor_queue",),
}


def attribution_columns(pipeline: Pipeline) -> dict[str, str] | None:
    """{meaning: column} of minruntime.runs' attribution, or None when the view has none."""
    present = {
        row[0]
        for row in pipeline.query(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'minruntime' AND table_name = 'runs'"
        )
    }
    found = {
        meaning: next((c for c in names if c in present), "")
        for meaning, names in ATTRIBUTION_COLUMNS.items()
    }
    return found if found["action"] and found["evictor"] else None


@dataclass(frozen=True)
class Eviction:
    """One eviction KAI made in a scenario, as KAI's Event says it: checked against
    minruntime.runs at the end of the module."""

    uid: str
    action: str  # evictor-action-type: preempt, reclaim, ...
    evictor: str  # namespace/name of the evicting PodGroup
    evictor_queue: str
    honoured: bool = True  # False: the service protected the run longer than KAI did


def assert_attributed(scene: Scene, evictions: list[Eviction]) -> None:
    """Every eviction is an `evicted` run with KAI's action and evictor (issue 27 part 1)."""
    assert evictions, "the scenarios recorded no eviction"
    columns = attribution_columns(scene.pipeline)
    if columns is None:
        pytest.skip(
            "minruntime.runs has no eviction attribution columns on this branch "
            "(issue 27 part 1: eviction_action / evictor / evictor_queue)"
        )
    present = {
        row[0]
        for row in scene.pipeline.query(
            "SELECT column_name FROM information_schema.columns"
            " WHERE table_schema = 'minruntime' AND table_name = 'runs'"
        )
    }
    queue_column = columns["evictor_queue"] or "NULL"
    verdict_column = "exact_verdict" if "exact_verdict" in present else "NULL"
    for eviction in evictions:
        rows = wait_until(
            lambda e=eviction: scene.pipeline.query(
                f"SELECT ended_by, {columns['action']}, {columns['evictor']}, {queue_column},"
                f" {verdict_column} FROM minruntime.runs WHERE uid = %s AND ended_by = 'evicted'"
                f" AND {columns['action']} IS NOT NULL ORDER BY run_end",
                (e.uid,),
            ),
            30,
            f"an attributed evicted run of {eviction}",
        )
        ended_by, action, evictor, queue, verdict = rows[0]
        assert (ended_by, action, evictor) == ("evicted", eviction.action, eviction.evictor)
        if columns["evictor_queue"]:
            assert queue == eviction.evictor_queue
        if verdict_column != "NULL":
            assert verdict == ("honoured" if eviction.honoured else "violated"), eviction


def violations(scene: Scene, *args: str) -> list[dict[str, Any]]:
    """`minruntime violations --json` of the scene's database."""
    import json

    result = run_cli("violations", "--json", *args, env=scene.pipeline.env)
    assert result.returncode == 0, result.stdout + result.stderr
    document = json.loads(result.stdout)
    return [dict(row) for row in document["rows"]]


def kai_eviction(scene: Scene, victim: str) -> dict[str, str]:
    """The annotations of KAI's `Evict` Event on the victim PodGroup (waits for it)."""
    event = wait_until(
        lambda: next(
            (e for e in scene.kai.evict_events(scene.namespace)
             if e["involvedObject"]["name"] == victim),
            None,
        ),
        15,
        f"KAI's Evict Event on {victim}",
    )  # fmt: skip
    return dict(event["metadata"].get("annotations") or {})
