"""The bridge's memory is sized from one value, the cluster's pod count (issue 30, part 7).

The bridge keeps about 2 KiB per pod of KAI's scheduler, its drift check about 4 KiB more
while it runs: the chart's ``bridge.clusterPods`` gives its memory request (100 Mi + 4 Ki x
pods) and limit (1.5 x that); a memory set under
``bridge.resources`` wins; a count below one is refused at render time. (That the default
renders as deploy/kubernetes/bridge.yaml is tests/e2e/test_helm_chart.py's comparison.)
"""

from __future__ import annotations

from typing import Any

import pytest

from minruntime.settings import Settings
from tests.e2e.helmchart import CHART, Helm, by_kind

pytestmark = pytest.mark.stack


@pytest.fixture(scope="module")
def helm(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Helm:
    return Helm.build(settings, tmp_path_factory.mktemp("helm"))


def _bridge_resources(objects: list[dict[str, Any]]) -> dict[str, Any]:
    bridge = by_kind(objects, "Deployment")["minruntime-kube-bridge"]
    container: dict[str, Any] = bridge["spec"]["template"]["spec"]["containers"][0]
    return dict(container["resources"])


def test_the_bridges_memory_follows_the_clusters_pod_count(helm: Helm) -> None:
    assert _bridge_resources(helm.template()) == {
        "requests": {"cpu": "100m", "memory": "295Mi"},
        "limits": {"memory": "442Mi"},
    }
    # 100,000 pods, the size measured in docs/benchmarks.md: a 283 MiB peak RSS, and a drift
    # check's listing on top of it, fit.
    assert _bridge_resources(helm.template("--set", "bridge.clusterPods=100000")) == {
        "requests": {"cpu": "100m", "memory": "490Mi"},
        "limits": {"memory": "735Mi"},
    }


def test_an_explicit_memory_wins_and_a_count_below_one_is_refused(helm: Helm) -> None:
    explicit = helm.template(
        "--set", "bridge.clusterPods=100000", "--set", "bridge.resources.limits.memory=2Gi"
    )
    assert _bridge_resources(explicit)["limits"] == {"memory": "2Gi"}
    assert _bridge_resources(explicit)["requests"]["memory"] == "490Mi"
    refused = helm.run("template", "minruntime", CHART, "--set", "bridge.clusterPods=0")
    assert refused.returncode != 0
    assert "clusterPods" in refused.stderr
