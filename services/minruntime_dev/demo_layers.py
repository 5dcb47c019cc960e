"""Part 5 of `minruntime demo`: the anti-thrash layers beyond the seeds (SEMANTICS.md §10).

Four small stories, each on a node pool of its own so they do not compete, through the real
processor and requeue worker:

- **delay**: a higher-priority gang that would fit once an over-running one is gone, but set
  `preemptionDelay: 30m` a minute ago: the requeue is rolled back as `preemption_delay`, and the
  decision says when the window ends;
- **semi**: a semi-preemptible over-running gang: the nominator skips it (`semi_preemptible`),
  and only the pods above its core are evictable, as `requeue plan` and the protection view say;
- **cap**: a node pool that allows one requeue per hour: the first commit goes through; once
  the job runs again and another nominator names it, it is skipped as `requeue_limit`;
- **violation**: a job whose queue protects it for 4h, evicted after 30 minutes by a scheduler
  that ignored the rule (the demo sends the events such a scheduler would cause):
  `minruntime violations` finds it, definite, and by how much it was cut short.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from rich.console import Console

from minruntime.core import EXPECTED_RUNTIME_ANNOTATION, format_rfc3339
from minruntime.events import encode_event, new_event
from minruntime.produce import Outgoing, send
from minruntime.settings import Settings
from minruntime.store import engine_from
from minruntime.topic_admin import TopicRole, topic_names
from minruntime_dev.demo_pipeline import Story, show_query
from minruntime_dev.demo_process import DemoChild, free_port, show_commands, wait_for
from minruntime_dev.demo_queries import (
    LAYERS_EVICTION_APPLIED,
    LAYERS_FIRST_ROUND_APPLIED,
    LAYERS_REPEAT_COOLDOWN_OVER,
    LAYERS_REPEAT_RUNS_AGAIN,
    LAYERS_SKIPPED_AT_CAP,
    LAYERS_TWO_DECIDED,
    layers_decisions,
    layers_semi_preemptible,
    scalar,
)

NAMESPACE: Final = "demo-layers"
PREEMPTION_DELAY: Final = "30m"
# The capped pool: one committed requeue per hour, a cooldown short enough to see the cap.
CAPPED_CONFIG: Final = {
    "nodePool": "ly-capped",
    "maxRequeues": 1,
    "maxRequeuesWindow": "1h",
    "defaultRequeueDelay": "1s",
}
# The violated job's queue protects it against every preemptor for 4h, and so does its node
# pool's default (a reclaimer from a queue the tree does not know): a definite violation.
GUARDED_QUEUE: Final = {"name": "guarded", "preemptMinRuntime": "4h", "reclaimMinRuntime": "4h"}
GUARDED_CONFIG: Final = {
    "nodePool": "ly-guard",
    "defaultPreemptMinRuntime": "4h",
    "defaultReclaimMinRuntime": "4h",
}
BATCH_QUEUE: Final = {"name": "batch"}
VICTIM_PRIORITY, CONTENDER_PRIORITY = 50, 100
WORKER_ENV: Final = {"MINRUNTIME_REQUEUE_INTERVAL_SECONDS": "1"}
PROCESSOR_ENV: Final = {"MINRUNTIME_PROCESSOR_METRICS_PORT": "0"}


class _Story(Story):
    """The events of one run of part 5 (uids ``layers-<run>-<job>``)."""

    def __init__(self, run: str, now: datetime) -> None:
        super().__init__("layers", NAMESPACE, run, now)

    def first_round(self) -> list[tuple[TopicRole, Any]]:
        """Everything before the worker starts."""
        over = {EXPECTED_RUNTIME_ANNOTATION: "1h"}
        waiting_since = self.now - timedelta(minutes=1)
        events: list[tuple[TopicRole, Any]] = [
            (TopicRole.QUEUES, new_event("queue.upserted", BATCH_QUEUE, time=self.started)),
            (TopicRole.QUEUES, new_event("queue.upserted", GUARDED_QUEUE, time=self.started)),
            (TopicRole.QUEUES, new_event("config.updated", CAPPED_CONFIG, time=self.started)),
            (TopicRole.QUEUES, new_event("config.updated", GUARDED_CONFIG, time=self.started)),
        ]
        for pool in ("ly-delay", "ly-semi", "ly-capped", "ly-guard"):
            events.append(self.node(pool))
        # delay: hog over-runs; eager would fit once it is gone, but waits out its delay.
        hog = self.gang("hog", "ly-delay", 4, VICTIM_PRIORITY, annotations=over)
        events += self.running(hog, "ly-delay-node", self.started)
        eager = self.gang("eager", "ly-delay", 2, CONTENDER_PRIORITY)
        eager["preemptionDelay"] = PREEMPTION_DELAY
        events.append(self.submitted(eager, waiting_since))
        # semi: a semi-preemptible gang of 4 with a core of 2, over its expected runtime.
        semi = {"preemptibility": "semi-preemptible", "annotations": over}
        core = self.gang("core", "ly-semi", 4, VICTIM_PRIORITY, min_available=2, **semi)
        events += self.running(core, "ly-semi-node", self.started)
        waiting = self.gang("wants-core", "ly-semi", 4, CONTENDER_PRIORITY)
        events.append(self.submitted(waiting, waiting_since))
        # cap: repeat over-runs and first waits: the one requeue the hour allows.
        repeat = self.gang("repeat", "ly-capped", 4, VICTIM_PRIORITY, annotations=over)
        events += self.running(repeat, "ly-capped-node", self.started)
        first = self.gang("first", "ly-capped", 2, CONTENDER_PRIORITY)
        events.append(self.submitted(first, waiting_since))
        # violation: precious runs since 30 minutes in a queue that protects it for 4h.
        precious = self.gang("precious", "ly-guard", 1, VICTIM_PRIORITY, queue="guarded")
        events += self.running(precious, "ly-guard-node", self.now - timedelta(minutes=30))
        return events

    def second_round(self, at: datetime) -> list[tuple[TopicRole, Any]]:
        """What the cluster does next: the requeue carried out, repeat back, named again."""
        repeat, first = self.uid("repeat"), self.uid("first")
        node = "ly-capped-node"
        placed = {"uid": first, "pods": [{"name": f"first-{i}", "node": node} for i in range(2)]}
        back = {"uid": repeat, "pods": [{"name": f"repeat-{i}", "node": node} for i in range(4)]}
        second = self.gang("second", "ly-capped", 2, CONTENDER_PRIORITY)
        return [
            self.podgroup("released", {"uid": repeat, "reason": "requeued"}, at),
            self.podgroup("allocated", placed, at),
            self.podgroup("released", {"uid": first, "reason": "completed"}, at),
            self.podgroup("allocated", back, at),
            self.submitted(second, at),
            # A scheduler that ignores the minimum runtime evicts precious.
            self.podgroup("released", {"uid": self.uid("precious"), "reason": "evicted"}, at),
        ]

    def nomination(self, at: datetime) -> list[tuple[TopicRole, Any]]:
        """Another nominator (KAI's proportion plugin, say) names repeat again."""
        data = {"uid": self.uid("repeat"), "nominatedBy": "proportion", "reason": "fair share"}
        return [(TopicRole.NOMINATIONS, new_event("requeue.nominated", data, time=at))]


def run_layers_demo(console: Console, settings: Settings, timeout: float = 60.0) -> None:
    """Part 5: the processor and the worker on the four stories; the operator's commands."""
    console.rule("[bold]Part 5 — the anti-thrash layers: delay, semi-preemptible, cap, violations")
    now = datetime.now(UTC)
    story = _Story(uuid.uuid4().hex[:4], now)
    names = topic_names(settings)

    def produce(events: list[tuple[TopicRole, Any]]) -> None:
        outgoing = [
            Outgoing(names[role], event.subject.encode(), encode_event(event))
            for role, event in events
        ]
        asyncio.run(send(settings, outgoing))

    engine = engine_from(settings)
    pattern = f"layers-{story.run}-%"
    port = free_port(settings.metrics_host)
    worker_env = {**WORKER_ENV, "MINRUNTIME_WORKER_METRICS_PORT": str(port)}

    def until(query: str, children: tuple[DemoChild, ...], what: str) -> None:
        """Until ``query`` (one boolean, ``:pattern`` bound) is true."""
        wait_for(lambda: scalar(engine, query, pattern=pattern), children, timeout, what)

    try:
        with DemoChild.start("processor", PROCESSOR_ENV) as processor:
            console.print(f"Started `minruntime processor` (pid {processor.pid}).")
            produce(story.first_round())
            until(
                # Each topic is consumed on its own: wait for the tree, the pools' config and
                # the nodes too, or the first cycle could judge without them.
                LAYERS_FIRST_ROUND_APPLIED,
                (processor,),
                "the processor to apply part 5's first events",
            )
            with DemoChild.start("requeue-worker", worker_env) as worker:
                console.print(f"Started `minruntime requeue-worker` (pid {worker.pid}).")
                both = (processor, worker)
                until(LAYERS_TWO_DECIDED, both, "the worker to decide about hog and repeat")
                produce(story.second_round(datetime.now(UTC)))
                until(LAYERS_REPEAT_RUNS_AGAIN, both, "repeat to run again")
                until(LAYERS_REPEAT_COOLDOWN_OVER, both, "repeat's cooldown (1s) to end")
                # Named by another nominator once it runs again and its cooldown is over (a
                # nomination of a podgroup that is not running is skipped, not kept): only the
                # cap holds it back now.
                produce(story.nomination(datetime.now(UTC)))
                until(LAYERS_SKIPPED_AT_CAP, both, "the worker to skip repeat at its requeue cap")
                until(
                    LAYERS_EVICTION_APPLIED, both, "the processor to apply the eviction of precious"
                )
        console.print("The processor and the requeue worker are stopped.")
        with engine.connect() as conn:
            show_query(
                console,
                conn,
                "What did the worker decide? (delay_ends_at: when a preemption delay ends)",
                layers_decisions(pattern),
            )
            show_query(
                console,
                conn,
                "The semi-preemptible gang: only the pods above its core may go",
                layers_semi_preemptible(story.uid("core")),
            )
    finally:
        engine.dispose()
    since = format_rfc3339(now - timedelta(minutes=1))
    steps = (
        ("Why may eager not be a beneficiary yet?", ("explain", story.uid("eager"))),
        (
            "What would the worker do now in the semi-preemptible gang's pool? (a dry run)",
            ("requeue", "plan", "--node-pool", "ly-semi"),
        ),
        ("Why is repeat not requeued a second time?", ("explain", story.uid("repeat"))),
        (
            "Which runs were evicted while their minimum runtime still protected them?",
            ("violations", "--since", since, "--queue", "guarded"),
        ),
    )
    show_commands(console, steps)
