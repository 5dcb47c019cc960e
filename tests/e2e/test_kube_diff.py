"""`minruntime kube diff [--repair]` against the real API server and a real pipeline.

A processor and a bridge bring a running gang into the service; the bridge is then stopped
and the cluster changes behind its back (a pod deleted with grace 0, an annotation added, a
whole PodGroup deleted). `kube diff` names the fields and exits 1, writes its metric;
`--repair` sends the events; once the processor applied them `kube diff` exits 0.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from minruntime.cluster.api import KAI_GROUP, PODGROUP_VERSION
from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conftest import run_cli
from tests.e2e.harness import wait_for
from tests.e2e.kubeloop import KubeProcess, KubeScene, kube_scene

pytestmark = pytest.mark.stack

EXPECTED_RUNTIME = "kai.scheduler/expected-runtime"


@dataclass
class Service(KubeScene):
    """A pipeline and the bridge that feeds it, on a namespace of its own."""

    bridge: KubeProcess = field(init=False)

    @property
    def env(self) -> dict[str, str]:
        return {**self.pipeline.env, "KUBECONFIG": str(self.kubeconfig), **self.kube_env}

    def diff(self, *args: str) -> tuple[int, str, str]:
        done = run_cli("kube", "diff", "--namespace", self.cluster.namespace, *args, env=self.env)
        return done.returncode, done.stdout, done.stderr

    def row(self, uid: str) -> tuple[object, ...] | None:
        rows = self.pipeline.query(
            "SELECT status, running_pods, annotations FROM minruntime.podgroups WHERE uid = %s",
            (uid,),
        )
        return tuple(rows[0]) if rows else None


@pytest.fixture(scope="module")
def service(
    kube_stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Service]:
    with kube_scene(Service, kube_stack, settings, tmp_path_factory, "kdiff", "diff") as found:
        found.bridge = found.kube("bridge").start()
        try:
            yield found
        finally:
            found.bridge.stop()


def test_diff_names_the_drift_and_repair_makes_the_service_agree(
    service: Service, tmp_path: Path
) -> None:
    cluster, suffix = service.cluster, service.suffix
    queue, node = f"dq-{suffix}", f"dgpu-{suffix}"
    service.apply_queue(queue)
    cluster.priority_class(f"dtrain-{suffix}", 50)
    cluster.node(node, f"dpool-{suffix}", 8)
    steady = cluster.podgroup("steady", queue, f"dtrain-{suffix}")
    cluster.pod("steady-0", "steady", 2)
    cluster.pod("steady-1", "steady", 2)
    short = cluster.podgroup("short", queue, f"dtrain-{suffix}")
    cluster.pod("short-0", "short", 1)
    start = datetime.now(UTC).replace(microsecond=0)
    cluster.start("steady", ["steady-0", "steady-1"], node, start, start)
    cluster.start("short", ["short-0"], node, start, start)
    wait_for(
        lambda: (
            (a := service.row(steady)) and a[:2] == ("running", 2)
            and (b := service.row(short)) and b[:2] == ("running", 1)
        ),
        90,
        "the bridge to report both gangs running",
    )  # fmt: skip
    code, out, err = service.diff()
    assert (code, err) == (0, ""), out
    assert "no differences: 2 podgroups compared" in out

    # Behind the (stopped) bridge's back: a pod goes, an annotation comes, a PodGroup goes.
    service.bridge.stop()
    cluster.core.delete_namespaced_pod("steady-1", cluster.namespace, grace_period_seconds=0)
    cluster.annotate_podgroup("steady", {EXPECTED_RUNTIME: "2h"})
    cluster.core.delete_namespaced_pod("short-0", cluster.namespace, grace_period_seconds=0)
    cluster.custom.delete_namespaced_custom_object(
        KAI_GROUP, PODGROUP_VERSION, cluster.namespace, "podgroups", "short"
    )

    metrics = tmp_path / "drift.prom"
    code, out, err = service.diff("--metrics-file", str(metrics))
    assert code == 1, out + err
    assert "2 podgroups differ (2 podgroups compared)" in out
    lines = {line.split()[2]: line.split()[3:] for line in out.splitlines() if steady in line}
    assert lines == {"running_pods": ["1", "2"], EXPECTED_RUNTIME: ["2h", "-"]}
    assert [line.split()[2:] for line in out.splitlines() if short in line] == [
        ["present", "missing", "running"]
    ]
    text = metrics.read_text()
    assert 'minruntime_kube_drift_podgroups{field="running_pods"} 1.0' in text
    assert 'minruntime_kube_drift_podgroups{field="present"} 1.0' in text
    assert 'minruntime_kube_drift_podgroups{field="queue"} 0.0' in text
    assert "minruntime_kube_drift_checked_podgroups 2.0" in text

    code, out, err = service.diff("--repair")
    assert code == 1, out + err  # what it found; the next run shows the effect
    assert "sent 3 event(s)" in out, out + err
    assert f"podgroup.annotated {steady}: annotations {{{EXPECTED_RUNTIME}: 2h}}" in out
    assert f"podgroup.released {steady}: pods [steady-1], reason deleted" in out
    assert f"podgroup.deleted {short}" in out

    wait_for(
        lambda: (
            (a := service.row(steady)) and a[:2] == ("running", 1)
            and a[2].get(EXPECTED_RUNTIME) == "2h"  # type: ignore[union-attr]
            and (b := service.row(short)) and b[0] == "deleted"
        ),
        60,
        "the processor to apply the repair",
    )  # fmt: skip
    code, out, err = service.diff()
    assert code == 0, out + err
    assert "no differences: 1 podgroup compared" in out
    sources = service.pipeline.query(
        "SELECT DISTINCT payload->>'source' FROM minruntime.event_log"
        " WHERE subject IN (%s, %s) AND type IN ('podgroup.annotated', 'podgroup.deleted')",
        (steady, short),
    )
    assert sources == [("minruntime/kube-diff",)]
