"""Queues and the immutable queue tree they form (SEMANTICS.md §2).

A queue may belong to one node pool: KAI runs one scheduler per node pool (a shard), and a
shard sees only the queues of its pool (docs/kubernetes.md, "Node pools are KAI's shards").
A queue of no pool is in every pool's tree. ``QueueTree.for_pool`` is the tree one pool's
scheduler sees; every resolution for a pool is made in it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from types import MappingProxyType

from minruntime.core.config import DEFAULT_NODE_POOL
from minruntime.core.errors import (
    DuplicateQueueError,
    InvalidQueueError,
    NegativeDurationError,
    QueueCycleError,
)
from minruntime.core.queue_quota import QueueResources


@dataclass(frozen=True, kw_only=True, slots=True)
class Queue:
    """One queue: unset (None) minimum runtimes inherit from the parent, 0 stops the walk."""

    name: str
    parent: str | None = None
    preempt_min_runtime: timedelta | None = None
    reclaim_min_runtime: timedelta | None = None
    # KAI's spec.priority (None: KAI's default 100) and spec.resources (None: not set); they
    # only matter to the requeue planner's share rules (core.proportion).
    priority: int | None = None
    resources: QueueResources | None = None
    # The node pool whose scheduler sees this queue; None: every pool's (KAI's shards).
    node_pool: str | None = None
    # Its disruption overrides, (annotation name, value) in name order (core.disruption's
    # QUEUE_DISRUPTION_ANNOTATIONS; the planner ignores an invalid value, counted).
    disruption: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidQueueError("a queue needs a non-empty name")
        for label, named in (("parent", self.parent), ("node pool", self.node_pool)):
            if named is not None and (not isinstance(named, str) or not named):
                what = "queue name" if label == "parent" else "name"
                raise InvalidQueueError(
                    f"queue {self.name!r}: {label} must be a non-empty {what} or absent"
                )
        for label, value in (
            ("preemptMinRuntime", self.preempt_min_runtime),
            ("reclaimMinRuntime", self.reclaim_min_runtime),
        ):
            if value is None:
                continue
            if not isinstance(value, timedelta):
                raise InvalidQueueError(f"queue {self.name!r}: {label} must be a duration")
            if value < timedelta(0):
                raise NegativeDurationError(f"queue {self.name!r}: {label} must not be negative")
        if self.priority is not None and (
            isinstance(self.priority, bool) or not isinstance(self.priority, int)
        ):
            raise InvalidQueueError(f"queue {self.name!r}: priority must be an integer")
        if self.resources is not None and not isinstance(self.resources, QueueResources):
            raise InvalidQueueError(f"queue {self.name!r}: resources must be QueueResources")


@dataclass(frozen=True, slots=True)
class _Shape:
    """The derived, precomputed structure of a tree; rebuilt only where a change reaches."""

    queues: Mapping[str, Queue]
    paths: Mapping[str, tuple[str, ...]]
    # Keyed by the parent NAME as written on the child, known or not, so a queue that
    # appears later finds the children that were waiting for it.
    children: Mapping[str, tuple[str, ...]] = field(default_factory=dict)


class QueueTree:
    """An immutable forest of queues with every queue's root-to-queue path precomputed.

    A queue whose parent is absent or not (yet) in the tree is a root; when the parent is
    added later the queue attaches under it. Parent cycles are refused across node pools
    too, so the tree of every pool (``for_pool``) is a forest.
    """

    # The shape, and what is derived from it on first use: the hash, the node pools the
    # queues name, the roots, and the tree of each pool (a tree is immutable, so none can go stale).
    __slots__ = ("_by_pool", "_hash", "_pools", "_roots", "_shape")

    def __init__(self, queues: Iterable[Queue] = ()) -> None:
        by_name: dict[str, Queue] = {}
        for queue in queues:
            if queue.name in by_name:
                raise DuplicateQueueError(queue.name)
            by_name[queue.name] = queue
        self._set_shape(
            _Shape(queues=by_name, paths=_compute_paths(by_name), children=_children_of(by_name))
        )

    def _set_shape(self, shape: _Shape) -> None:
        self._shape = shape
        self._hash: int | None = None
        self._pools: frozenset[str] | None = None
        self._roots: tuple[str, ...] | None = None
        self._by_pool: dict[str | None, QueueTree] = {}

    @classmethod
    def _from_shape(cls, shape: _Shape) -> QueueTree:
        tree = cls.__new__(cls)
        tree._set_shape(shape)
        return tree

    def __contains__(self, name: object) -> bool:
        return name in self._shape.queues

    def __len__(self) -> int:
        return len(self._shape.queues)

    def __iter__(self) -> Iterator[Queue]:
        return iter(self._shape.queues.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, QueueTree):
            return NotImplemented
        return dict(self._shape.queues) == dict(other._shape.queues)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._shape.queues.values()))
        return self._hash

    def __repr__(self) -> str:
        return f"QueueTree({list(self._shape.queues.values())!r})"

    def get(self, name: str) -> Queue | None:
        """Return the queue called ``name``, or None if the tree has no such queue."""
        return self._shape.queues.get(name)

    def path(self, name: str) -> tuple[str, ...]:
        """Return the queue names from the root down to ``name``; KeyError if unknown."""
        return self._shape.paths[name]

    def paths(self) -> Mapping[str, tuple[str, ...]]:
        """Return a read-only view of every queue's root-to-queue path."""
        return MappingProxyType(self._shape.paths)

    def parent_of(self, name: str) -> str | None:
        """Return the effective parent of ``name`` (None for a root); KeyError if unknown."""
        path = self._shape.paths[name]
        return path[-2] if len(path) > 1 else None

    def children_of(self, name: str) -> tuple[str, ...]:
        """Return the names of the queues attached directly under ``name``."""
        return self._shape.children.get(name, ()) if name in self else ()

    def roots(self) -> tuple[str, ...]:
        """Return the names of the top-level queues."""
        if self._roots is None:
            self._roots = tuple(name for name, path in self._shape.paths.items() if len(path) == 1)
        return self._roots

    def node_pools(self) -> frozenset[str]:
        """Return the node pools some queue of the tree belongs to."""
        if self._pools is None:
            self._pools = frozenset(q.node_pool for q in self if q.node_pool is not None)
        return self._pools

    def for_pool(self, node_pool: str | None) -> QueueTree:
        """Return the tree the scheduler of ``node_pool`` sees (None or "": ``default``).

        It holds the queues of that pool and the queues of no pool; a queue whose parent is
        not among them is a root there (an unknown parent, §2). A tree whose queues name no
        pool is every pool's tree: it is returned itself.
        """
        pools = self.node_pools()
        if not pools:
            return self
        pool = node_pool or DEFAULT_NODE_POOL
        # Every pool no queue names sees the same tree: one entry for all of them.
        return self._pool_tree(pool if pool in pools else None)

    def shared(self) -> QueueTree:
        """Return the queues of no node pool: the tree of every pool that no queue names."""
        return self._pool_tree(None) if self.node_pools() else self

    def _pool_tree(self, pool: str | None) -> QueueTree:
        found = self._by_pool.get(pool)
        if found is None:
            found = QueueTree(q for q in self if q.node_pool is None or q.node_pool == pool)
            found._by_pool[pool] = found  # a pool's tree is its own tree for that pool
            self._by_pool[pool] = found
        return found

    def with_queue(self, queue: Queue) -> QueueTree:
        """Return a new tree with ``queue`` added or replaced; QueueCycleError leaves self as is."""
        shape = self._shape
        cycle = _cycle_closed_by(queue, shape.queues)
        if cycle is not None:
            raise QueueCycleError(cycle)
        queues = dict(shape.queues)
        old = queues.get(queue.name)
        queues[queue.name] = queue
        children = dict(shape.children)
        if old is not None and old.parent is not None:
            _unlink(children, old.parent, queue.name)
        if queue.parent is not None:
            children[queue.parent] = (*children.get(queue.parent, ()), queue.name)
        paths = dict(shape.paths)
        parent_path = paths[queue.parent] if queue.parent in queues else ()
        _repath_subtree(queue.name, parent_path, queues, children, paths)
        return QueueTree._from_shape(_Shape(queues=queues, paths=paths, children=children))

    def without_queue(self, name: str) -> QueueTree:
        """Return a new tree without ``name``; its children become roots (no-op if unknown)."""
        shape = self._shape
        removed = shape.queues.get(name)
        if removed is None:
            return self
        queues = dict(shape.queues)
        del queues[name]
        children = dict(shape.children)
        if removed.parent is not None:
            _unlink(children, removed.parent, name)
        paths = dict(shape.paths)
        del paths[name]
        # The children keep naming the removed parent, as the Kubernetes objects do, so
        # they re-attach if a queue of that name comes back.
        for child in children.get(name, ()):
            _repath_subtree(child, (), queues, children, paths)
        return QueueTree._from_shape(_Shape(queues=queues, paths=paths, children=children))


def _cycle_closed_by(queue: Queue, queues: Mapping[str, Queue]) -> tuple[str, ...] | None:
    """The parent cycle that upserting ``queue`` would close, if any.

    Walks the DECLARED parents up from the new parent, not the computed paths: a queue may
    wait under a parent that does not exist yet (it is a root until then), and upserting that
    parent beneath it closes a cycle that no computed path shows.
    """
    chain = [queue.name]
    current = queue.parent
    seen: set[str] = set()
    while current is not None:
        chain.append(current)
        if current == queue.name:
            return tuple(chain)
        if current in seen or current not in queues:
            return None
        seen.add(current)
        current = queues[current].parent
    return None


def _children_of(queues: Mapping[str, Queue]) -> dict[str, tuple[str, ...]]:
    children: dict[str, list[str]] = {}
    for queue in queues.values():
        if queue.parent is not None:
            children.setdefault(queue.parent, []).append(queue.name)
    return {parent: tuple(names) for parent, names in children.items()}


def _unlink(children: dict[str, tuple[str, ...]], parent: str, child: str) -> None:
    remaining = tuple(name for name in children.get(parent, ()) if name != child)
    if remaining:
        children[parent] = remaining
    else:
        children.pop(parent, None)


def _compute_paths(queues: Mapping[str, Queue]) -> dict[str, tuple[str, ...]]:
    """Compute every root-to-queue path iteratively (deep trees must not hit recursion limits)."""
    paths: dict[str, tuple[str, ...]] = {}
    for start in queues:
        if start in paths:
            continue
        # Climb until a queue with a known path or a root, remembering the way up.
        chain: list[str] = []
        on_chain: set[str] = set()
        current: str | None = start
        base: tuple[str, ...] = ()
        while current is not None and current in queues:
            if current in paths:
                base = paths[current]
                break
            if current in on_chain:
                cycle = chain[chain.index(current) :]
                raise QueueCycleError((*cycle, current))
            chain.append(current)
            on_chain.add(current)
            current = queues[current].parent
        for name in reversed(chain):
            base = (*base, name)
            paths[name] = base
    return paths


def _repath_subtree(
    top: str,
    parent_path: tuple[str, ...],
    queues: Mapping[str, Queue],
    children: Mapping[str, tuple[str, ...]],
    paths: dict[str, tuple[str, ...]],
) -> None:
    # Explicit stack instead of recursion: a 200-deep subtree must not hit the limit.
    stack = [(top, parent_path)]
    while stack:
        name, above = stack.pop()
        path = (*above, name)
        paths[name] = path
        stack.extend((child, path) for child in children.get(name, ()) if child in queues)
