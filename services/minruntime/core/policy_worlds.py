"""The rules of two worlds over one recorded timeline: as recorded, and under a policy change.

A simulation (``core.simulation``) folds the recorded queue and configuration events into
both worlds. The change *pins* what it names for the whole log: a queue it upserts exists
with its fields throughout, a queue it deletes never exists, a node pool it configures has
that configuration throughout; recorded events about anything else apply to both worlds
alike, recorded events about a pinned queue or pool to the recorded world only. So the
changed world is "the log's history, had this policy held from the start".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

from minruntime.core.config import DEFAULT_NODE_POOL, MinRuntimeConfig, NodePoolConfigs
from minruntime.core.errors import MinRuntimeError
from minruntime.core.queue_tree import Queue, QueueTree
from minruntime.core.resolution import PoolResolvers
from minruntime.core.violation import RunRules


@dataclass(frozen=True)
class PolicyChange:
    """What a simulation pins: queues (None: deleted) and node pools' configurations."""

    queues: Mapping[str, Queue | None] = field(default_factory=dict)
    configs: Mapping[str, MinRuntimeConfig] = field(default_factory=dict)


class World:
    """One world's queue tree and node-pool configs, and its rules, made again on a change."""

    __slots__ = ("_resolvers", "_rules", "configs", "tree")

    def __init__(self, tree: QueueTree, configs: NodePoolConfigs) -> None:
        self.tree = tree
        self.configs = configs
        self._rules: RunRules | None = None
        self._resolvers = PoolResolvers(tree, configs)

    def set(self, tree: QueueTree, configs: NodePoolConfigs) -> None:
        """Replace the tree and the configs (the rules are made again when next asked)."""
        if tree is self.tree and configs is self.configs:
            return
        self.tree, self.configs = tree, configs
        self._rules = None
        self._resolvers = PoolResolvers(tree, configs)

    @property
    def rules(self) -> RunRules:
        """The rule windows of runs in this world as it is now."""
        if self._rules is None:
            self._rules = RunRules(self.tree, self.configs)
        return self._rules

    def min_runtime(
        self, node_pool: str | None, victim: str | None, contender: str | None
    ) -> timedelta:
        """The window a run of ``victim`` has against a contender of ``contender`` (the
        preempt rule in one queue, the reclaim rule across; defaults for unknown queues)."""
        config = self.configs.for_pool(node_pool)
        tree = self.tree
        if victim is None or contender is None or victim not in tree or contender not in tree:
            same = contender == victim
            return (
                config.default_preempt_min_runtime if same else config.default_reclaim_min_runtime
            )
        return self._resolvers.resolver(tree, config).resolve_for(victim, contender).min_runtime


class Worlds:
    """The recorded world and the changed one, fed the same recorded queue and config events."""

    def __init__(self, change: PolicyChange) -> None:
        self._change = change
        self._tree = QueueTree()
        self._configs: dict[str, MinRuntimeConfig] = {}
        self.recorded = World(QueueTree(), NodePoolConfigs())
        self.changed = World(QueueTree(), NodePoolConfigs())
        # Recorded queue events the changed tree could not take (they would close a cycle
        # with a pinned queue): the changed tree keeps its shape then.
        self.conflicts = 0
        # Whether the worlds differ now (``differ``): found when first asked after a change,
        # not at every recorded queue event (a log opens with its whole queue tree, each
        # event a comparison of both trees).
        self._differ: bool | None = None
        self._changed_tree = self._pinned(QueueTree(), initial=True)
        self._sync()

    @property
    def differ(self) -> bool:
        """Whether the worlds differ now (the simulation notes it whenever it judges)."""
        if self._differ is None:
            recorded, changed = self.recorded.configs, self.changed.configs
            pools = {DEFAULT_NODE_POOL, *recorded.by_pool, *changed.by_pool}
            self._differ = self._tree != self._changed_tree or any(
                recorded.for_pool(pool) != changed.for_pool(pool) for pool in pools
            )
        return self._differ

    def queue_upserted(self, queue: Queue) -> None:
        """A recorded queue.upserted (QueueCycleError propagates: the recorded world keeps
        its tree, as the processor would)."""
        self._tree = self._tree.with_queue(queue)
        if queue.name not in self._change.queues:
            try:
                self._changed_tree = self._changed_tree.with_queue(queue)
            except MinRuntimeError:
                self.conflicts += 1
        self._sync()

    def queue_deleted(self, name: str) -> None:
        """A recorded queue.deleted."""
        self._tree = self._tree.without_queue(name)
        if name not in self._change.queues:
            self._changed_tree = self._changed_tree.without_queue(name)
        self._sync()

    def config_updated(self, node_pool: str, config: MinRuntimeConfig) -> None:
        """A recorded config.updated."""
        self._configs[node_pool] = config
        self._sync()

    def _pinned(self, tree: QueueTree, *, initial: bool = False) -> QueueTree:
        for name, queue in self._change.queues.items():
            if queue is None:
                if name in tree:
                    tree = tree.without_queue(name)
            elif initial:
                # A cycle among the pinned queues themselves is the change's mistake.
                tree = tree.with_queue(queue)
        return tree

    def _sync(self) -> None:
        recorded = NodePoolConfigs(self._configs)
        changed = NodePoolConfigs({**self._configs, **self._change.configs})
        self.recorded.set(self._tree, recorded)
        self.changed.set(self._changed_tree, changed)
        self._differ = None
