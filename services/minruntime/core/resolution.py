"""Resolving which minimum runtime applies, and where it came from (SEMANTICS.md §4)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from enum import StrEnum
from operator import attrgetter

from minruntime.core.config import MinRuntimeConfig, NodePoolConfigs, ReclaimResolveMethod
from minruntime.core.queue_tree import Queue, QueueTree


class ResolutionKind(StrEnum):
    """Which rule produced a resolution."""

    PREEMPT = "preempt"
    RECLAIM_QUEUE = "reclaim-queue"
    RECLAIM_LCA = "reclaim-lca"


@dataclass(frozen=True, slots=True)
class Resolution:
    """A resolved minimum runtime and the queue that supplied it (None: the default)."""

    min_runtime: timedelta
    source: str | None
    # The queue where the upward walk began (None when a queue was unknown): for the lca
    # method this is the LCA's child on the victim's side, or the victim's root.
    start: str | None = None


@dataclass(frozen=True, slots=True)
class ResolutionTrace:
    """Everything needed to explain a resolution to a person."""

    kind: ResolutionKind
    resolution: Resolution
    victim_queue: str
    reclaimer_queue: str | None
    victim_path: tuple[str, ...] | None
    reclaimer_path: tuple[str, ...] | None
    # None when there is no common ancestor (different roots, unknown queues, preempt).
    lca: str | None
    # The queues looked at, from the walk's start upwards, ending at the source if any.
    walked: tuple[str, ...]
    reason: str


_Field = Callable[[Queue], timedelta | None]
_preempt_field: _Field = attrgetter("preempt_min_runtime")
_reclaim_field: _Field = attrgetter("reclaim_min_runtime")


class Resolver:
    """Resolves minimum runtimes for one immutable tree and one config.

    Per queue, the first value set on the way up is computed once, lazily, and kept. Trees
    and configs are immutable and a resolver is bound to exactly one of each, so the cache
    can never go stale: a changed tree or config means a new Resolver.
    """

    __slots__ = (
        "_by_name",
        "_config",
        "_lca",
        "_paths",
        "_preempt",
        "_preempt_unknown",
        "_reclaim",
        "_reclaim_unknown",
        "_tree",
    )

    def __init__(self, tree: QueueTree, config: MinRuntimeConfig) -> None:
        self._tree = tree
        self._config = config
        self._paths = tree.paths()
        self._by_name = {queue.name: queue for queue in tree}
        self._lca = config.reclaim_resolve_method == ReclaimResolveMethod.LCA
        self._preempt: dict[str, Resolution] = {}
        self._reclaim: dict[str, Resolution] = {}
        self._preempt_unknown = Resolution(config.default_preempt_min_runtime, None, None)
        self._reclaim_unknown = Resolution(config.default_reclaim_min_runtime, None, None)

    @property
    def tree(self) -> QueueTree:
        """The queue tree this resolver answers for."""
        return self._tree

    @property
    def config(self) -> MinRuntimeConfig:
        """The configuration this resolver answers for."""
        return self._config

    def preempt_min_runtime(self, victim_queue: str) -> Resolution:
        """Resolve the preempt minimum runtime of a victim in ``victim_queue``."""
        cached = self._preempt.get(victim_queue)
        if cached is not None:
            return cached
        path = self._paths.get(victim_queue)
        if path is None:
            return self._preempt_unknown
        return self._fill(path, self._preempt, _preempt_field, self._preempt_unknown)

    def reclaim_min_runtime(self, reclaimer_queue: str, victim_queue: str) -> Resolution:
        """Resolve the reclaim minimum runtime of a victim in ``victim_queue``."""
        paths = self._paths
        victim_path = paths.get(victim_queue)
        reclaimer_path = paths.get(reclaimer_queue)
        if victim_path is None or reclaimer_path is None:
            # KAI gets a nil queue here and falls back to the plugin default.
            return self._reclaim_unknown
        if self._lca and reclaimer_queue != victim_queue:
            start = _lca_walk_start(reclaimer_path, victim_path)
        else:
            start = victim_queue
        cached = self._reclaim.get(start)
        if cached is not None:
            return cached
        return self._fill(paths[start], self._reclaim, _reclaim_field, self._reclaim_unknown)

    def resolve_for(self, victim_queue: str, preemptor_queue: str) -> Resolution:
        """Apply the preempt rule when both are in the same queue, the reclaim rule otherwise."""
        if victim_queue == preemptor_queue:
            return self.preempt_min_runtime(victim_queue)
        return self.reclaim_min_runtime(preemptor_queue, victim_queue)

    def _fill(
        self,
        path: tuple[str, ...],
        cache: dict[str, Resolution],
        field: _Field,
        default: Resolution,
    ) -> Resolution:
        # Root to leaf, so each queue's answer is its own value or its parent's answer;
        # queues already cached on the way are reused, so every queue is computed once.
        above: Resolution | None = None
        for name in path:
            known = cache.get(name)
            if known is None:
                own = field(self._by_name[name])
                if own is not None:
                    known = Resolution(own, name, name)
                elif above is not None:
                    known = Resolution(above.min_runtime, above.source, name)
                else:
                    known = Resolution(default.min_runtime, None, name)
                cache[name] = known
            above = known
        assert above is not None  # paths are never empty
        return above

    def trace_preempt(self, victim_queue: str) -> ResolutionTrace:
        """Explain the preempt resolution for ``victim_queue`` step by step."""
        resolution = self.preempt_min_runtime(victim_queue)
        path = self._paths.get(victim_queue)
        if path is None:
            walked: tuple[str, ...] = ()
            reason = f"queue {victim_queue!r} is unknown: the node-pool default applies"
        else:
            walked = _walk_up(path, resolution.source)
            reason = _walk_reason("preemptMinRuntime", victim_queue, resolution)
        return ResolutionTrace(
            ResolutionKind.PREEMPT, resolution, victim_queue, None, path, None, None, walked, reason
        )

    def trace_reclaim(self, reclaimer_queue: str, victim_queue: str) -> ResolutionTrace:
        """Explain the reclaim resolution for the (reclaimer, victim) pair step by step."""
        resolution = self.reclaim_min_runtime(reclaimer_queue, victim_queue)
        kind = ResolutionKind.RECLAIM_LCA if self._lca else ResolutionKind.RECLAIM_QUEUE
        victim_path = self._paths.get(victim_queue)
        reclaimer_path = self._paths.get(reclaimer_queue)
        lca: str | None = None
        if victim_path is None or reclaimer_path is None:
            unknown = victim_queue if victim_path is None else reclaimer_queue
            walked: tuple[str, ...] = ()
            reason = f"queue {unknown!r} is unknown: the node-pool default applies"
        else:
            start = resolution.start
            assert start is not None  # both queues are known
            walked = _walk_up(victim_path[: victim_path.index(start) + 1], resolution.source)
            if not self._lca:
                reason = _walk_reason("reclaimMinRuntime", start, resolution)
            elif reclaimer_path[0] != victim_path[0]:
                reason = f"different roots: only the victim's root {start!r} counts; " + (
                    _walk_reason("reclaimMinRuntime", start, resolution)
                )
            else:
                common = common_prefix_length(reclaimer_path, victim_path)
                lca = victim_path[common - 1]
                where = "the victim's queue is the LCA" if start == lca else "LCA's child"
                reason = (
                    f"lowest common ancestor {lca!r}; walk starts at {start!r} ({where}); "
                    + _walk_reason("reclaimMinRuntime", start, resolution)
                )
        return ResolutionTrace(
            kind,
            resolution,
            victim_queue,
            reclaimer_queue,
            victim_path,
            reclaimer_path,
            lca,
            walked,
            reason,
        )


class PoolResolvers:
    """The resolver of each node pool: the pool's tree (``QueueTree.for_pool``, the queues its
    scheduler sees) and the pool's configuration.

    One ``Resolver`` per (tree, configuration), made on first use and kept: pools that see the
    same tree under the same configuration share one, and its caches.
    """

    __slots__ = ("_by_pool", "_configs", "_resolvers", "_tree")

    def __init__(self, tree: QueueTree, configs: NodePoolConfigs) -> None:
        self._tree = tree
        self._configs = configs
        self._resolvers: dict[tuple[QueueTree, MinRuntimeConfig], Resolver] = {}
        # By node pool name in front: a cheaper key than (tree, configuration).
        self._by_pool: dict[str | None, Resolver] = {}

    def __call__(self, node_pool: str | None) -> Resolver:
        """The resolver of ``node_pool`` (None or "": ``default``)."""
        found = self._by_pool.get(node_pool)
        if found is None:
            found = self.resolver(self._tree.for_pool(node_pool), self._configs.for_pool(node_pool))
            self._by_pool[node_pool] = found
        return found

    def resolver(self, tree: QueueTree, config: MinRuntimeConfig) -> Resolver:
        """The one resolver of (``tree``, ``config``)."""
        key = (tree, config)
        found = self._resolvers.get(key)
        if found is None:
            found = self._resolvers[key] = Resolver(tree, config)
        return found


def common_prefix_length(first: tuple[str, ...], second: tuple[str, ...]) -> int:
    """How many queues two root-to-queue paths share from the root."""
    shortest = min(len(first), len(second))
    index = 0
    while index < shortest and first[index] == second[index]:
        index += 1
    return index


def _lca_walk_start(reclaimer_path: tuple[str, ...], victim_path: tuple[str, ...]) -> str:
    """Return the queue where the lca method's upward walk begins."""
    if reclaimer_path[0] != victim_path[0]:
        # KAI's implicit shadow parent: one step below the virtual common root is the
        # victim's root, and a root has nothing above it to inherit from.
        return victim_path[0]
    common = common_prefix_length(reclaimer_path, victim_path)
    # One step down from the LCA toward the victim; the victim itself when it is the LCA.
    return victim_path[common] if common < len(victim_path) else victim_path[-1]


def _walk_up(path: tuple[str, ...], source: str | None) -> tuple[str, ...]:
    """The queues from the end of ``path`` upwards, up to ``source`` if it is on it."""
    upwards = path[::-1]
    return upwards[: upwards.index(source) + 1] if source in upwards else upwards


def _walk_reason(field: str, start: str, resolution: Resolution) -> str:
    if resolution.source is None:
        return f"no queue from {start!r} up sets {field}: the node-pool default applies"
    if resolution.source == start:
        return f"{start!r} sets {field}"
    return f"{field} inherited by {start!r} from {resolution.source!r}"
