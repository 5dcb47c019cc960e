"""KAI reclaims exactly when `minruntime.reclaim_protection()` says, between siblings and across
roots, under both of the plugin's `reclaimResolveMethod`s.

The trees (values are `reclaimMinRuntime`; GPU quotas make the reclaimer's queue deserve the
node and the victim's queue deserve nothing, so KAI's proportion plugin lets it reclaim):
`top` (16s, quota 4) → {`victims` (8s), `sibling` (quota 4)}, and `top` (16s) → `victims` (8s)
beside `other` (quota 4) → `rival` (quota 4).
A sibling's reclaim honours the victim leaf's 8s under both methods; across roots `lca` takes
the victim's root's 16s (KAI's implicit shadow parent), `queue` the victim leaf's 8s."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from minruntime.settings import Settings
from tests.conformance.conftest import (
    LOW,
    MID,
    SECOND,
    Eviction,
    KaiCluster,
    Scene,
    assert_attributed,
    kai_eviction,
    kai_scene,
    violations,
)
from tests.conformance.kai import gpu_resources, scheduler_config

EVICTIONS: dict[str, list[Eviction]] = {"lca": [], "queue": []}


@pytest.fixture(scope="module", params=["lca", "queue"])
def scene(
    request: pytest.FixtureRequest,
    kai_cluster: KaiCluster,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Scene]:
    method = str(request.param)
    with kai_scene(
        kai_cluster,
        settings,
        tmp_path_factory.mktemp(f"kai-reclaim-{method}"),
        f"reclaim-{method}",
        scheduler_config(method=method),
    ) as scene:
        scene.method = method
        yield scene


def reclaim_once(scene: Scene, reclaimer_queue: str, victim_queue: str, window: int) -> None:
    """A victim of `victim_queue` fills a node; a gang of `reclaimer_queue` waits for it. KAI
    must reclaim at the service's protected_until for that reclaimer (= start + `window`)."""
    node = scene.node(4)
    victim, uid = scene.gang("victim", victim_queue, LOW)
    scene.wait_bound(victim, 1)
    reclaimer, _ = scene.gang("reclaimer", reclaimer_queue, MID)
    submitted = datetime.now(UTC)
    start = scene.last_start(victim)[1]
    assert scene.wait_service_running(uid, 1)["start_time"] == start
    until = scene.reclaim_window(uid, reclaimer_queue)
    assert until == start + timedelta(seconds=window)
    assert submitted < until
    evicted_at = scene.last_eviction(victim, timeout=window + 20)
    assert evicted_at >= until, "KAI reclaimed before the service's protected_until"
    # KAI's own time of the eviction (whole seconds); the pod is deleted then.
    assert evicted_at <= until + 5 * SECOND, "KAI did not reclaim within a few periods"
    assert scene.removal(f"{victim}-0").node is not None
    assert kai_eviction(scene, victim)["evictor-action-type"] == "reclaim"
    EVICTIONS[scene.method].append(
        Eviction(uid, "reclaim", f"{scene.namespace}/{reclaimer}", reclaimer_queue)
    )
    assert scene.wait_bound(reclaimer, 1) == {f"{reclaimer}-0": node}
    scene.kai.delete_gang(scene.namespace, reclaimer)
    scene.kai.delete_gang(scene.namespace, victim)
    scene.kai.delete_node(node)


def victims_under(scene: Scene, top_quota: int) -> tuple[str, str]:
    """(top, victims): `top` (16s) → `victims` (8s, no quota)."""
    top = scene.queue("top", reclaimMinRuntime="16s", resources=gpu_resources(top_quota))
    victims = scene.queue("victims", top, reclaimMinRuntime="8s", resources=gpu_resources(0))
    return top, victims


def test_reclaim_between_siblings_at_the_victim_leafs_window(scene: Scene) -> None:
    # The top deserves the node and passes it to `sibling`: `victims` is over its share.
    top, victims = victims_under(scene, 4)
    sibling = scene.queue("sibling", top, resources=gpu_resources(4))
    reclaim_once(scene, sibling, victims, 8)


def test_reclaim_across_roots_at_the_methods_window(scene: Scene) -> None:
    # Another root deserves the node: the victims' whole tree is over its share.
    _, victims = victims_under(scene, 0)
    rival = scene.queue("rival", scene.queue("other", resources=gpu_resources(4)),
                        resources=gpu_resources(4))  # fmt: skip
    window = 16 if scene.method == "lca" else 8
    reclaim_once(scene, rival, victims, window)


def test_no_reclaim_is_listed_as_a_violation(scene: Scene) -> None:
    judged = {row["uid"]: row["verdict"] for row in violations(scene)}
    for eviction in EVICTIONS[scene.method]:
        assert judged.get(eviction.uid) not in ("definite", "violated"), judged


def test_every_reclaim_is_an_attributed_evicted_run(scene: Scene) -> None:
    assert_attributed(scene, EVICTIONS[scene.method])
