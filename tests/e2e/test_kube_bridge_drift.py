"""The active bridge exports `minruntime_kube_drift_*` on its metrics port, as a chart install
runs it (no `kube diff` CronJob): a running gang agrees, then the cluster changes while the
service cannot apply it (the processor is stopped) and the drift shows; a standby replica
exports no drift at all. Real processes on the real API server, Kafka and PostgreSQL.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from minruntime.settings import Settings
from minruntime_dev.stack import StackStatus
from tests.conftest import free_ports
from tests.e2e.harness import probe, wait_for
from tests.e2e.kubeloop import KubeProcess, KubeScene, kube_scene

pytestmark = pytest.mark.stack

EXPECTED_RUNTIME = "kai.scheduler/expected-runtime"
CHECKED = "minruntime_kube_drift_checked_podgroups"
CHECKED_AT = "minruntime_kube_drift_checked_timestamp_seconds"


def samples(port: int) -> dict[str, float]:
    """The bridge's /metrics as {sample with labels: value} (empty when it does not answer)."""
    status, body = probe(port, "/metrics")
    if status != 200:
        return {}
    found: dict[str, float] = {}
    for line in body.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            found[name] = float(value)
    return found


@pytest.fixture
def scene(
    kube_stack: StackStatus, settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KubeScene]:
    with kube_scene(KubeScene, kube_stack, settings, tmp_path_factory, "kdrift", "drift") as found:
        yield found


def _bridge(scene: KubeScene, role: str, port: int) -> KubeProcess:
    """A bridge replica checking drift every two seconds, its metrics on `port`."""
    return scene.kube(
        "bridge",
        MINRUNTIME_KUBE_IDENTITY=f"{role}-{scene.suffix}",
        MINRUNTIME_KUBE_BRIDGE_METRICS_PORT=str(port),
        MINRUNTIME_KUBE_DRIFT_SECONDS="2",
    ).start()


def test_the_active_bridge_exports_drift_and_a_standby_exports_none(scene: KubeScene) -> None:
    active_port, standby_port = free_ports(), free_ports()
    active = _bridge(scene, "active", active_port)
    try:
        wait_for(lambda: "watching" in active.log_tail(), 90, "the bridge to list everything")
        standby = _bridge(scene, "standby", standby_port)
        try:
            _drift_shows(scene, active_port, standby_port)
            assert "standing by" in standby.log_tail()
        finally:
            standby.stop()
    finally:
        active.stop()


def _drift_shows(scene: KubeScene, active_port: int, standby_port: int) -> None:
    cluster, suffix = scene.cluster, scene.suffix
    queue, node = f"xq-{suffix}", f"xgpu-{suffix}"
    scene.apply_queue(queue)
    cluster.priority_class(f"xtrain-{suffix}", 50)
    cluster.node(node, f"xpool-{suffix}", 4)
    uid = cluster.podgroup("steady", queue, f"xtrain-{suffix}", node_pool=f"xpool-{suffix}")
    cluster.pod("steady-0", "steady", 2)
    start = datetime.now(UTC).replace(microsecond=0)
    cluster.start("steady", ["steady-0"], node, start, start)
    wait_for(
        lambda: scene.pipeline.query(
            "SELECT 1 FROM minruntime.podgroups WHERE uid = %s AND status = 'running'", (uid,)
        ),
        90,
        "the bridge to bring the gang into the service",
    )
    # A check after the gang arrived: it counts it among the podgroups compared.
    since = time.time()
    first = wait_for(
        lambda: (found := samples(active_port)).get(CHECKED_AT, 0) > since and found,
        60,
        "a drift check after the gang arrived",
    )
    assert first[CHECKED] >= 1
    assert f'minruntime_kube_drift_podgroups{{field="{EXPECTED_RUNTIME}"}}' in first
    assert "minruntime_kube_bridge_active" in first

    # The service stops applying; the cluster changes: the bridge sends it, nothing applies it.
    scene.pipeline.stop()
    cluster.annotate_podgroup("steady", {EXPECTED_RUNTIME: "2h"})
    drifted = wait_for(
        lambda: (
            (found := samples(active_port)).get(
                f'minruntime_kube_drift_podgroups{{field="{EXPECTED_RUNTIME}"}}', 0
            )
            >= 1
            and found
        ),
        60,
        "the drift to show on the active bridge's metrics port",
    )
    assert drifted[CHECKED_AT] > since

    standby = wait_for(lambda: samples(standby_port), 60, "the standby's metrics")
    assert standby["minruntime_kube_bridge_active"] == 0.0
    assert not [name for name in standby if name.startswith("minruntime_kube_drift_")]
