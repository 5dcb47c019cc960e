"""The requeue cap end to end (SEMANTICS.md §10): a config.updated with maxRequeues through
Kafka, a worker that committed one requeue of a job, and the job's next run skipped with
``requeue_limit`` while a contender waits — in SQL, on the decisions topic and in the metrics.

Shares the pipeline helpers of ``test_requeue_worker.py`` (its own pipeline and worker).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest

from minruntime.core import EXPECTED_RUNTIME_PLUGIN
from tests import cloudevents as ce
from tests.e2e.harness import wait_for
from tests.e2e.test_requeue_worker import (
    OVERRUN,
    RequeueStack,
    Scene,
    annotated,
    committed_for,
    decisions,
    published_of,
    rq,
    scenes,
    wait_decisions,
)

pytestmark = pytest.mark.stack
__all__ = ["rq", "scenes"]  # the module's fixtures, shared with test_requeue_worker.py

LIMIT_SKIPS = (
    "kai_requeue_skipped_total",
    {"nominated_by": EXPECTED_RUNTIME_PLUGIN, "reason": "requeue_limit"},
)


def cap(scene: Scene, limit: int, window: str) -> None:
    """The scene's node pool gets a requeue cap; wait until it is stored."""
    subject = f"config/{scene.pool}"
    data = {"nodePool": scene.pool, "maxRequeues": limit, "maxRequeuesWindow": window}
    scene.pipeline.produce_events(
        "queues", [ce.event("config.updated", subject, data, ce.stamp(datetime.now(UTC)))]
    )
    wait_for(
        lambda: (
            scene.pipeline.query(
                "SELECT max_requeues FROM minruntime.node_pool_configs WHERE node_pool = %s",
                (scene.pool,),
            )
            == [(limit,)]
        ),
        60,
        f"the cap of {scene.pool}\n{scene.pipeline.log_tail()}",
    )


def test_a_job_requeued_once_is_not_requeued_again_within_the_window(
    rq: RequeueStack, scenes: Callable[[str], Scene]
) -> None:
    s = scenes("cap1")
    cap(s, 1, "1h")
    s.prepare({"n1": 4})
    first = s.pend(s.job("hi", 4, priority=100, min_available=4))
    # A one-second cooldown: only the cap can hold the next run back.
    job = s.job("v", 4, priority=50, annotations={**OVERRUN, "kai.scheduler/requeue-delay": "1s"})
    victim = s.start(job, "n1")
    [committed] = wait_decisions(rq.pipeline, victim)
    assert committed == committed_for(first)
    skips_before = rq.metrics().get(LIMIT_SKIPS)

    # Evicted; the contender runs; the job runs again on a new node, over its runtime at once,
    # and a second contender would fit there if it were evicted.
    now = datetime.now(UTC)
    s.send(
        ce.released(victim, time=ce.stamp(now - timedelta(seconds=20)), reason="completed"),
        s.allocation(first, "n1", now - timedelta(seconds=19)),
    )
    s.wait_status(victim, "finished")
    s.add_nodes({"n2": 4})
    second = s.pend(s.job("hi2", 4, priority=100, min_available=4))
    s.send(
        annotated(victim, {"kai.scheduler/expected-runtime": "1s"}),
        s.allocation(victim, "n2", datetime.now(UTC) - timedelta(seconds=10)),
    )
    s.wait_status(victim, "running")

    found = wait_decisions(rq.pipeline, victim, 2)
    assert found[1] == ("skipped", "requeue_limit", [EXPECTED_RUNTIME_PLUGIN], [])
    rq.wait_cycles(3)
    # Recorded once, never committed, the contender still waits; every cycle counted.
    assert [d[:2] for d in decisions(rq.pipeline, victim)] == [
        ("committed", None),
        ("skipped", "requeue_limit"),
    ]
    assert s.row(second).status == "pending"
    assert rq.metrics().get(LIMIT_SKIPS) >= skips_before + 3
    wait_for(
        lambda: (
            [(p.event["type"], p.data.get("reason")) for p in published_of(rq.pipeline, victim)]
            == [("requeue.committed", None), ("requeue.skipped", "requeue_limit")]
        ),
        60,
        "the skip on the decisions topic",
    )
