"""The protection windows of a run, and which of them end in a time range (SEMANTICS.md §4–§5).

A running podgroup is protected against preemption until ``start + preempt min runtime`` and
against reclaim until ``start + reclaim min runtime``, where the reclaim value may depend on
the reclaimer. ``ProtectionWindows`` lists every distinct window of a run, so that each one
can be announced when it ends (the requeue worker's ``protection.expired`` events):

- preempt: one window, the victim's preempt resolution;
- reclaim, method ``queue``: one window, the walk from the victim's queue;
- reclaim, method ``lca``: the walk starts at the *step-down queue* — the queue one below the
  lowest common ancestor on the victim's side, the victim's root for a reclaimer under another
  root, the victim's own queue when it is the LCA. Every queue on the victim's path is the
  step-down queue of some reclaimers, so the reclaim windows are the walks from each of them,
  grouped by resolution (minimum runtime and the queue that supplied it); each window names
  its step-down queues;
- a placeholder (queue not known yet) or a queue not in the tree: the node-pool defaults, one
  window per rule (KAI falls back to the defaults for an unknown queue).

Every window of a run is resolved in the tree of its node pool (``QueueTree.for_pool``): a
queue of another pool is not in it, as KAI's scheduler of the pool does not see it.

Only windows with a positive minimum runtime protect anything; the others are left out. A
reclaimer whose own queue is unknown resolves to the default reclaim value (§4), which is a
window only when the default happens to be one of the resolutions above.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final

from minruntime.core.config import DEFAULT_NODE_POOL, NodePoolConfigs, ReclaimResolveMethod
from minruntime.core.durations import format_duration
from minruntime.core.protection import protected_until
from minruntime.core.queue_tree import QueueTree
from minruntime.core.resolution import PoolResolvers, Resolution, Resolver
from minruntime.core.timestamps import format_rfc3339, require_aware

# Window ids are UUIDv5 in this namespace: the same window always gets the same id.
WINDOW_NAMESPACE: Final = uuid.UUID("3b0f4f0e-8f8a-4d55-9a53-52c1f0a7e6d2")


class ProtectionRule(StrEnum):
    """Which protection a window is: against preemptors (same queue) or reclaimers."""

    PREEMPT = "preempt"
    RECLAIM = "reclaim"


@dataclass(frozen=True, slots=True)
class ProtectedRun:
    """One run of a running podgroup: what its protection windows depend on."""

    uid: str
    start_time: datetime
    # None for a placeholder whose submission has not arrived: it resolves to the defaults.
    queue: str | None = None
    node_pool: str = DEFAULT_NODE_POOL


@dataclass(frozen=True, slots=True)
class ProtectionWindow:
    """One window that protects a run: ``[run start, protected_until)``."""

    run: ProtectedRun
    rule: ProtectionRule
    min_runtime: timedelta
    # The queue whose value applied; None: the node-pool default.
    resolved_from: str | None
    # Reclaim windows only: the method in force, and (lca, queue in the tree) the step-down
    # queues this window applies to, root first; None = every reclaimer.
    reclaim_method: ReclaimResolveMethod | None = None
    step_down_queues: tuple[str, ...] | None = None

    @property
    def protected_until(self) -> datetime:
        """The first instant at which the run is no longer protected by this window (UTC)."""
        require_aware(self.run.start_time, "start time")
        # In UTC: aware arithmetic is wall-clock time within the tzinfo, so 13:00 Berlin plus
        # one day would be 23 hours later across a daylight-saving change.
        until = protected_until(self.run.start_time.astimezone(UTC), self.min_runtime)
        assert until is not None  # a run always has a start time
        return until

    @property
    def id(self) -> str:
        """A stable id (UUIDv5) of this window of this run: the same on every replica."""
        identity = [
            self.run.uid,
            format_rfc3339(self.run.start_time),
            self.rule.value,
            format_duration(self.min_runtime),
            self.resolved_from,
        ]
        return str(uuid.uuid5(WINDOW_NAMESPACE, json.dumps(identity)))


class ProtectionWindows:
    """The protection windows of runs under one queue tree and one set of node-pool configs."""

    __slots__ = ("_configs", "_resolvers", "_tree")

    def __init__(self, tree: QueueTree, configs: NodePoolConfigs) -> None:
        self._tree = tree
        self._configs = configs
        # One resolver per (node pool's tree, configuration), made on first use.
        self._resolvers = PoolResolvers(tree, configs)

    @property
    def tree(self) -> QueueTree:
        """The queue tree the windows are resolved in."""
        return self._tree

    @property
    def configs(self) -> NodePoolConfigs:
        """The node-pool configurations the windows are resolved with."""
        return self._configs

    def of(self, run: ProtectedRun) -> tuple[ProtectionWindow, ...]:
        """Every window that protects ``run`` (positive minimum runtime): preempt first."""
        resolver = self._resolvers(run.node_pool)
        config = resolver.config
        method = ReclaimResolveMethod(config.reclaim_resolve_method)
        path = None if run.queue is None else resolver.tree.paths().get(run.queue)
        preempt_rule, reclaim_rule = ProtectionRule.PREEMPT, ProtectionRule.RECLAIM
        if run.queue is None or path is None:
            windows = [
                ProtectionWindow(run, preempt_rule, config.default_preempt_min_runtime, None),
                ProtectionWindow(
                    run, reclaim_rule, config.default_reclaim_min_runtime, None, method
                ),
            ]
        else:
            preempt = resolver.preempt_min_runtime(run.queue)
            windows = [ProtectionWindow(run, preempt_rule, preempt.min_runtime, preempt.source)]
            if method is ReclaimResolveMethod.LCA:
                windows += _lca_reclaim_windows(run, path, resolver)
            else:
                # reclaimer == victim queue: the walk starts at the victim's queue (§4).
                reclaim = resolver.reclaim_min_runtime(run.queue, run.queue)
                windows.append(
                    ProtectionWindow(run, reclaim_rule, reclaim.min_runtime, reclaim.source, method)
                )
        return tuple(window for window in windows if window.min_runtime > timedelta(0))

    def ending_between(
        self, runs: Iterable[ProtectedRun], after: datetime, until: datetime
    ) -> list[ProtectionWindow]:
        """The windows of ``runs`` that end in ``(after, until]``, earliest first."""
        ending = [
            window
            for run in runs
            for window in self.of(run)
            if after < window.protected_until <= until
        ]
        return sorted(ending, key=lambda w: (w.protected_until, w.run.uid, w.rule, w.id))

    def spans(self) -> frozenset[timedelta]:
        """Every positive minimum runtime a window of any run can have (a superset)."""
        tree, configs = self._tree, self._configs
        pools = {*configs, *tree.node_pools(), DEFAULT_NODE_POOL}
        seen = {(tree.for_pool(pool), configs.for_pool(pool)) for pool in pools}
        # A pool named by no configuration and no queue: the shared tree, the default config.
        seen.add((tree.shared(), configs.for_pool(None)))
        spans: set[timedelta] = set()
        for pool_tree, config in seen:
            resolver = self._resolvers.resolver(pool_tree, config)
            spans.update((config.default_preempt_min_runtime, config.default_reclaim_min_runtime))
            for name in pool_tree.paths():
                spans.add(resolver.preempt_min_runtime(name).min_runtime)
                spans.add(resolver.reclaim_min_runtime(name, name).min_runtime)
        spans.discard(timedelta(0))
        return frozenset(spans)


def _lca_reclaim_windows(
    run: ProtectedRun, path: tuple[str, ...], resolver: Resolver
) -> list[ProtectionWindow]:
    # The walk from each queue of the path, grouped by resolution, step-downs root first.
    groups: dict[tuple[timedelta, str | None], list[str]] = {}
    for step_down in path:
        walk: Resolution = resolver.reclaim_min_runtime(step_down, step_down)
        groups.setdefault((walk.min_runtime, walk.source), []).append(step_down)
    return [
        ProtectionWindow(
            run,
            ProtectionRule.RECLAIM,
            min_runtime,
            source,
            ReclaimResolveMethod.LCA,
            tuple(step_downs),
        )
        for (min_runtime, source), step_downs in groups.items()
    ]
