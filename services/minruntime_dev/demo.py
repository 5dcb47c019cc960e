"""`minruntime demo`: the README's guided run.

Part 1 runs the rule engine on the design document's example tree (SEMANTICS.md §4). Part 2
(`run_pipeline_demo`) drives the real pipeline: events to Kafka, the processor, and the SQL
a user would type against PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from rich.console import Console
from rich.table import Table

from minruntime.core import (
    MinRuntimeConfig,
    QueueTree,
    Resolution,
    Resolver,
    format_duration,
    is_protected,
    parse_duration,
    protected_until,
)
from minruntime.events.inputs import QueueUpsertedData

# The design document's tree as `queue.upserted` data (part 2 sends it as it is).
# Reclaim values: A → B(600s) → {C(unset) → {leaf1(0s), leaf2(180s)}, D(60s) → {leaf3}}.
# Preempt values: B(600s), leaf1(300s).
DESIGN_QUEUES: Final = (
    {"name": "A"},
    {"name": "B", "parentQueue": "A", "preemptMinRuntime": "600s", "reclaimMinRuntime": "600s"},
    {"name": "C", "parentQueue": "B"},
    {"name": "D", "parentQueue": "B", "reclaimMinRuntime": "60s"},
    {"name": "leaf1", "parentQueue": "C", "preemptMinRuntime": "300s", "reclaimMinRuntime": "0s"},
    {"name": "leaf2", "parentQueue": "C", "reclaimMinRuntime": "180s"},
    {"name": "leaf3", "parentQueue": "D"},
)
# A second top-level queue, for the different-roots rule (part 1 only).
SECOND_ROOT: Final = (
    {"name": "research", "reclaimMinRuntime": "45s"},
    {"name": "vision", "parentQueue": "research", "reclaimMinRuntime": "15s"},
)


def design_tree() -> QueueTree:
    """The design document's tree, with a second top-level queue for the different-roots rule."""
    queues = (*DESIGN_QUEUES, *SECOND_ROOT)
    return QueueTree([QueueUpsertedData.model_validate(data).to_queue() for data in queues])


# (reclaimer, victim, what it shows)
RECLAIM_CASES: tuple[tuple[str, str, str], ...] = (
    ("leaf1", "leaf3", "design example 1: cousins → the LCA's child on the victim's side (D)"),
    ("leaf1", "leaf2", "design example 2: siblings honour the victim leaf's value"),
    ("leaf3", "leaf1", "design example 3: leaf1's 0s is ignored, C inherits B's 10m"),
    ("leaf2", "leaf2", "same queue: lca equals the queue method"),
    ("B", "leaf3", "reclaimer is an ancestor of the victim"),
    ("leaf3", "D", "victim's queue is the LCA itself: stay there"),
    ("leaf1", "vision", "different roots: the victim's ROOT (research), not vision's 15s"),
    ("leaf1", "nowhere", "unknown victim queue → the node-pool default"),
)


def _value(resolution: Resolution) -> str:
    return format_duration(resolution.min_runtime)


def _source(resolution: Resolution) -> str:
    return resolution.source if resolution.source is not None else "[dim]default[/]"


def _set(value: timedelta | None) -> str:
    return format_duration(value) if value is not None else "[dim]unset[/]"


def run_demo(console: Console) -> None:
    """Part 1: the resolved preempt and reclaim minimum runtimes for the example tree."""
    tree = design_tree()
    config = MinRuntimeConfig()
    lca = Resolver(tree, config)
    by_queue = Resolver(tree, MinRuntimeConfig(reclaim_resolve_method="queue"))

    console.rule("[bold]minruntime demo — the rule engine on the design document's tree")
    console.print(
        "Node-pool defaults: defaultPreemptMinRuntime="
        f"{format_duration(config.default_preempt_min_runtime)}, defaultReclaimMinRuntime="
        f"{format_duration(config.default_reclaim_min_runtime)}, reclaimResolveMethod=lca\n"
    )

    queues = Table(title="Queues and preempt resolution (preemptor in the victim's own queue)")
    for column in ("queue", "path", "preemptMinRuntime", "reclaimMinRuntime"):
        queues.add_column(column)
    queues.add_column("preempt → min runtime", justify="right")
    queues.add_column("supplied by")
    for queue in sorted(tree, key=lambda q: tree.path(q.name)):
        resolution = lca.preempt_min_runtime(queue.name)
        queues.add_row(
            queue.name,
            " → ".join(tree.path(queue.name)),
            _set(queue.preempt_min_runtime),
            _set(queue.reclaim_min_runtime),
            _value(resolution),
            _source(resolution),
        )
    console.print(queues)

    reclaims = Table(title="Reclaim resolution: reclaimer's queue vs victim's queue")
    for column in ("reclaimer", "victim"):
        reclaims.add_column(column)
    reclaims.add_column("lca", justify="right")
    reclaims.add_column("from")
    reclaims.add_column("queue method", justify="right")
    reclaims.add_column("from")
    reclaims.add_column("what it shows")
    for reclaimer, victim, note in RECLAIM_CASES:
        by_lca = lca.reclaim_min_runtime(reclaimer, victim)
        by_victim = by_queue.reclaim_min_runtime(reclaimer, victim)
        reclaims.add_row(
            reclaimer,
            victim,
            _value(by_lca),
            _source(by_lca),
            _value(by_victim),
            _source(by_victim),
            note,
        )
    console.print(reclaims)

    start = datetime(2026, 11, 21, 9, 0, tzinfo=UTC)
    resolution = lca.reclaim_min_runtime("leaf1", "leaf3")
    until = protected_until(start, resolution.min_runtime)
    console.print(
        f"\nA job in leaf3 started at {start:%H:%M:%S}; a reclaimer in leaf1 gets min runtime "
        f"{_value(resolution)} from {resolution.source}: protected until {until:%H:%M:%S} "
        "(strict: at exactly that instant it is no longer protected)."
    )
    window = Table("now", "protected?")
    for offset in ("30s", "59.999999s", "60s", "90s"):
        now = start + parse_duration(offset)
        verdict = is_protected(start, resolution.min_runtime, now)
        window.add_row(
            f"start + {offset}", "[green]protected[/]" if verdict else "[red]reclaimable[/]"
        )
    console.print(window)
