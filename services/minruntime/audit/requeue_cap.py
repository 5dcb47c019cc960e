"""What ``minruntime explain`` shows of the requeue cap (SEMANTICS.md §10): pure, no I/O.

The cap in force (the node pool's, or the podgroup's lower annotation), where it comes from,
the committed requeues it counts at the instant explained and when the oldest of them leaves
the window. ``minruntime.audit.explain`` reads the pieces from the same shadow as the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from minruntime.core import (
    CapSource,
    MinRuntimeConfig,
    annotated_max_requeues,
    requeue_cap,
)


@dataclass(frozen=True, slots=True)
class RequeueCapFacts:
    """The requeue cap in force for a podgroup at one instant, and what it counts."""

    # None: unlimited (no cap from the node pool and no valid annotation).
    limit: int | None
    # None: no window, every committed requeue counts.
    window: timedelta | None
    # "node_pool" or "annotation" (None: unlimited).
    source: str | None
    # The node pool whose configuration is in force (None: the built-in defaults).
    config_node_pool: str | None
    # Why the podgroup's max-requeues annotation is ignored (None: absent, or used).
    annotation_problem: str | None
    # The committed requeues the cap counts at the instant, oldest first.
    requeues: tuple[datetime, ...]
    reached: bool
    # When the oldest counted requeue leaves the window (None: none counted, or no window).
    oldest_leaves_at: datetime | None
    # When the podgroup may be requeued again as far as the cap goes (None: now, or never).
    frees_at: datetime | None


def requeue_cap_facts(
    config: MinRuntimeConfig,
    config_pool: str | None,
    annotations: Mapping[str, str],
    committed: Iterable[datetime],
    at: datetime,
) -> RequeueCapFacts:
    """The cap in force under ``config`` and ``annotations``; ``committed`` counted at ``at``."""
    problem = annotated_max_requeues(annotations).problem
    cap = requeue_cap(config, annotations)
    if cap is None:
        return RequeueCapFacts(None, None, None, config_pool, problem, (), False, None, None)
    counted = cap.counted((moment for moment in committed if moment <= at), at)
    oldest = counted[0] + cap.window if counted and cap.window is not None else None
    return RequeueCapFacts(
        limit=cap.limit,
        window=cap.window,
        source=str(cap.source),
        config_node_pool=config_pool,
        annotation_problem=problem,
        requeues=counted,
        reached=cap.reached(counted, at),
        oldest_leaves_at=oldest,
        frees_at=cap.frees_at(counted, at),
    )


def cap_origin(facts: RequeueCapFacts, node_pool: str) -> str:
    """Where the cap comes from, in words."""
    if facts.source == CapSource.ANNOTATION:
        return "the podgroup's annotation minruntime.kai.scheduler/max-requeues"
    owner = facts.config_node_pool
    if owner is None:
        return "the built-in defaults"
    if owner == node_pool:
        return f"node pool {owner}'s maxRequeues"
    return f"the {owner} pool's maxRequeues (node pool {node_pool} has no config of its own)"
