"""The start of a run is KAI's `last-start-timestamp`, to the second, as an instant: with KAI in
a time zone of +05:30, before and after KAI preempted the run at the service's
`protected_until` and placed its recreated pod again (when KAI overwrites the annotation with
the process's local offset). `kube diff` finds nothing to repair at either point."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tests.conformance.conftest import (
    HIGH,
    LOW,
    SECOND,
    Eviction,
    Scene,
    assert_attributed,
    kai_eviction,
    module_scene,
)
from tests.conformance.kai import LAST_START, wait_until

WINDOW = timedelta(seconds=15)
EVICTIONS: list[Eviction] = []


scene = module_scene("start", tz="Asia/Kolkata")


def test_start_time_is_kais_annotation_before_and_after_an_eviction_and_restart(
    scene: Scene,
) -> None:
    queue = scene.queue("team", preemptMinRuntime=f"{WINDOW.seconds}s")
    node = scene.node(4)
    victim, uid = scene.gang("train", queue, LOW, keep=True)
    scene.wait_bound(victim, 1)

    # At once a higher-priority gang of the same queue: KAI may preempt only once the
    # window is over.
    preemptor, _ = scene.gang("urgent", queue, HIGH)
    submitted = datetime.now(UTC)

    written, start = scene.last_start(victim)
    assert written.endswith("Z")  # a new annotation is written in UTC
    row = scene.wait_service_running(uid, 1)
    assert row["start_time"] == start
    until, _ = scene.preempt_window(uid)
    assert until == start + WINDOW
    assert submitted < until
    wait_until(lambda: scene.kube_diff().returncode == 0, 30, "kube diff to find no drift")
    evicted_at = scene.last_eviction(victim, timeout=WINDOW.seconds + 20)
    assert evicted_at >= until, "KAI evicted before the service's protected_until"
    # KAI's own time of the eviction (whole seconds); the pod is deleted then.
    assert evicted_at <= until + 5 * SECOND, "KAI did not evict within a few periods"
    assert scene.removal(f"{victim}-0").node is not None
    annotations = kai_eviction(scene, victim)
    assert annotations["evictor-action-type"] == "preempt"
    EVICTIONS.append(Eviction(uid, "preempt", f"{scene.namespace}/{preemptor}", queue))
    assert scene.wait_bound(preemptor, 1) == {f"{preemptor}-0": node}

    # The preemptor finishes; the victim's recreated pod runs again: a new run, whose start
    # KAI writes over the old annotation in its local time (+05:30).
    scene.kai.delete_gang(scene.namespace, preemptor)
    scene.wait_bound(victim, 1, timeout=30)
    rewritten = wait_until(
        lambda: (
            (text := scene.kai.annotation(scene.namespace, victim, LAST_START)) != written and text
        ),
        20,
        "KAI to write the new run's start",
    )
    assert rewritten.endswith("+05:30"), rewritten
    restart = scene.last_start(victim)[1]
    assert restart > evicted_at
    row = wait_until(
        lambda: (r := scene.row(uid)) and r["start_time"] == restart and r,
        30,
        f"the service's start to be KAI's {rewritten}",
    )
    assert row["status"] == "running"
    wait_until(lambda: scene.kube_diff().returncode == 0, 30, "kube diff to find no drift")


def test_the_eviction_is_an_attributed_evicted_run(scene: Scene) -> None:
    assert_attributed(scene, EVICTIONS)
