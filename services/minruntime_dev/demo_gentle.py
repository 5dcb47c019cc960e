"""`minruntime demo --kube`, its second part: evictions that cost the workload less (issue 28).

Three stories at once, in a node pool of their own (``gentle``) so that the first part's
objects take no part in them, with the same four processes:

- **A blocked gang holds back nobody.** ``blocked`` sits behind a PodDisruptionBudget that
  never allows an eviction; ``free`` is requeued beside it. The evictor carries ``free`` out at
  once (one lane per podgroup) and abandons ``blocked`` at its deadline (``requeue.abandoned``,
  reason ``pdb``: the cooldown it wrote is cleared).
- **A checkpoint before the eviction.** ``ckpt`` declares
  ``minruntime.kai.scheduler/checkpoint-grace``; the evictor asks (``checkpoint-requested-at``),
  the demo plays the workload and answers with `minruntime checkpoint ack`, and only then is it
  evicted: ``minruntime.runs`` counts the work lost since that checkpoint, not the whole run.
- **A disruption budget.** Queue ``demo-budget`` allows one eviction per hour (its
  annotations); of its two over-running gangs one is requeued, the other skipped
  ``disruption_budget``, and `minruntime explain` says until when.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, TypeVar

import sqlalchemy as sa
from rich.console import Console
from rich.table import Table

from minruntime.core.checkpoint import (
    CHECKPOINT_GRACE_ANNOTATION,
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
)
from minruntime_dev.demo_process import run_cli_as_user
from minruntime_dev.demo_queries import GENTLE_DECISIONS as DECISIONS
from minruntime_dev.demo_queries import GENTLE_OUTCOME as OUTCOME
from minruntime_dev.demo_queries import GENTLE_RUN_LOST as RUN_LOST
from minruntime_dev.demo_queries import ask
from minruntime_dev.standin import Cluster

T = TypeVar("T")
Until = Callable[[Callable[[], T | None], str], T]

POOL = "gentle"
# The evictor's deadline the demo runs it with (MINRUNTIME_EVICTOR_DEADLINE_SECONDS): long
# enough for every other eviction, short enough to watch the blocked one be abandoned.
DEADLINE_SECONDS = 12
_SAVING_SECONDS = 2.0

# Unlimited resources (KAI schedules nothing in a Queue without them), no preempt window.
_SPEC = """spec:
  preemptMinRuntime: "0s"
  resources:
    gpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    cpu: {{quota: -1, limit: -1, overQuotaWeight: 1}}
    memory: {{quota: -1, limit: -1, overQuotaWeight: 1}}
"""
_QUEUES = (
    """apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: demo-gentle-{run}
  # Seen by the scheduler of the pool: a Queue without the label is the default pool's.
  labels: {{kai.scheduler/node-pool: gentle}}
"""
    + _SPEC
    + """---
apiVersion: scheduling.run.ai/v2
kind: Queue
metadata:
  name: demo-budget-{run}
  labels: {{kai.scheduler/node-pool: gentle}}
  annotations:
    minruntime.kai.scheduler/max-evictions-per-window: "1"
    minruntime.kai.scheduler/eviction-window: "1h"
"""
    + _SPEC
)


# What the four processes run with for this part.
GENTLE_ENV = {"MINRUNTIME_EVICTOR_DEADLINE_SECONDS": str(DEADLINE_SECONDS)}


def nodes(run: str) -> list[str]:
    """The part's Nodes (deleted after the demo, as the first part's)."""
    return [f"demo-{POOL}-{i}-{run}" for i in range(5)]


def run_gentle(
    console: Console, engine: sa.Engine, cluster: Cluster, run: str, until: Until[Any]
) -> None:
    """The three stories (see the module docstring), each shown by what the service says."""
    console.rule("[bold]Gentle evictions — a blocked gang, a checkpoint, a budget")
    low, high, lowest = f"demo-low-{run}", f"demo-high-{run}", f"demo-lowest-{run}"
    cluster.priority_class(lowest, 30)
    cluster.apply_queues(_QUEUES.format(run=run))
    gentle, budget = f"demo-gentle-{run}", f"demo-budget-{run}"
    over = {"kai.scheduler/expected-runtime": "5s"}
    gangs = {
        "blocked": cluster.podgroup("blocked", gentle, low, node_pool=POOL, annotations=over),
        "free": cluster.podgroup("free", gentle, low, node_pool=POOL, annotations=over),
        "ckpt": cluster.podgroup(
            "ckpt",
            gentle,
            low,
            node_pool=POOL,
            annotations={**over, CHECKPOINT_GRACE_ANNOTATION: "30s"},
        ),
        "budget-1": cluster.podgroup("budget-1", budget, lowest, node_pool=POOL, annotations=over),
        "budget-2": cluster.podgroup("budget-2", budget, lowest, node_pool=POOL, annotations=over),
    }
    for i in range(4):
        cluster.podgroup(f"need-{i}", gentle, high, node_pool=POOL)
    for name in gangs:
        cluster.pod(f"{name}-0", name, 4)
    for i in range(4):
        cluster.pod(f"need-{i}-0", f"need-{i}", 4)
    cluster.disruption_budget("never", "blocked")
    start = datetime.now(UTC).replace(microsecond=0)
    for node, name in zip(nodes(run), gangs, strict=True):
        cluster.node(node, POOL, 4)
        cluster.start(name, [f"{name}-0"], node, start, start)
    console.print(
        f"Node pool [bold]{POOL}[/]: five 4-GPU nodes, each running one 4-GPU gang past its "
        "expected 5s — [bold]blocked[/] (behind a PodDisruptionBudget that allows no "
        "eviction), [bold]free[/], [bold]ckpt[/] (checkpoint-grace: 30s) in queue "
        f"{gentle}, [bold]budget-1[/] and [bold]budget-2[/] in queue {budget} "
        "(max-evictions-per-window: 1, eviction-window: 1h) — and four pending 4-GPU gangs "
        f"of priority 90. The evictor's deadline here: {DEADLINE_SECONDS}s."
    )
    _checkpoint_story(console, cluster, until)
    for name in ("free", "ckpt"):
        until(functools.partial(cluster.evicting_pod, f"{name}-0"), f"the evictor to evict {name}")
        cluster.finish_eviction(f"{name}-0")
    until(lambda: "abandoned" in _outcomes(engine, gangs["blocked"]), "blocked's abandonment")
    table = Table(
        "podgroup", "outcome", "reason", "decided_at", title="minruntime.requeue_decisions"
    )
    for row in ask(engine, DECISIONS, uids=list(gangs.values())):
        table.add_row(*(str(value) for value in row))
    console.print(table)
    console.print(
        "free was evicted within seconds although blocked's eviction was refused (429) the "
        f"whole time: blocked was abandoned at its deadline ({DEADLINE_SECONDS}s after the "
        "decision), its cooldown cleared.",
        soft_wrap=True,
    )
    lost = until(lambda: ask(engine, RUN_LOST, uid=gangs["ckpt"]), "ckpt's run to end")[0]
    console.print(
        f"ckpt's run in minruntime.runs: {float(lost[0]):.0f} GPU-seconds run, "
        f"last checkpoint {lost[2]}, work lost since it: {float(lost[1] or 0):.0f} GPU-seconds "
        "(what the restart redoes; without the handshake it would have been the whole run)."
    )
    skipped = until(
        lambda: next(
            (
                name
                for name in ("budget-1", "budget-2")
                if "skipped" in _outcomes(engine, gangs[name])
            ),
            None,
        ),
        "a budget skip",
    )
    explained = json.loads(run_cli_as_user("explain", gangs[skipped], "--json"))
    disruption = explained.get("disruption") or {}
    console.print(
        f"{skipped} was skipped (disruption_budget): its queue used its one eviction of the "
        f"hour; `minruntime explain` says the budget frees up at {disruption.get('frees_at')}.",
        soft_wrap=True,
    )


def _checkpoint_story(console: Console, cluster: Cluster, until: Until[Any]) -> None:
    """Play the workload of ``ckpt``: answer the evictor's request after saving."""
    requested = until(
        lambda: cluster.podgroup_annotations("ckpt").get(CHECKPOINT_REQUESTED_AT_ANNOTATION),
        "the evictor's checkpoint request",
    )
    console.print(
        f"The evictor asked ckpt for a checkpoint: {CHECKPOINT_REQUESTED_AT_ANNOTATION}="
        f"{requested}. The workload saves ({_SAVING_SECONDS:.0f}s) and answers:"
    )
    time.sleep(_SAVING_SECONDS)
    target = f"{cluster.namespace}/ckpt"
    console.print(f"[bold]$ minruntime checkpoint ack --podgroup {target}[/]")
    answer = run_cli_as_user("checkpoint", "ack", "--podgroup", target)
    console.print(answer.rstrip(), markup=False, highlight=False, soft_wrap=True)


def _outcomes(engine: sa.Engine, uid: str) -> list[str]:
    return [str(row[0]) for row in ask(engine, OUTCOME, uid=uid)]
