"""The queue tree projection: the core's QueueTree in memory, maintained rows in PostgreSQL.

Tree changes are rare, so each change re-resolves every queue with the core (a few ms for
thousands of queues), in the tree of its node pool (``QueueTree.for_pool``), and
``store.queues`` writes only the rows that differ.
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import Connection

from minruntime.core import (
    MinRuntimeConfig,
    NodePoolConfigs,
    PoolResolvers,
    Queue,
    QueueTree,
    Resolver,
)
from minruntime.store.queues import PoolRow, QueueRow, resources_json, stored_tree, write_tree
from minruntime.store.schema import StateTables


class QueueProjection:
    """The queue tree of one batch: loaded once, changed in memory, written once."""

    def __init__(self, conn: Connection, tables: StateTables) -> None:
        self._conn = conn
        self._tables = tables
        self._base = stored_tree(conn, self._tables, lock=True)
        self.tree = self._base.tree

    def upsert(self, queue: Queue) -> None:
        """Add or replace a queue; a cycle raises QueueCycleError and keeps the tree."""
        self.tree = self.tree.with_queue(queue)

    def delete(self, name: str) -> None:
        """Remove a queue (its children become roots); unknown names are a no-op."""
        self.tree = self.tree.without_queue(name)

    def flush(self) -> None:
        """Write the rows that changed and a new version token; nothing when nothing changed."""
        if self.tree is self._base.tree:
            return
        rows, pool_rows = resolved_rows(self.tree)
        write_tree(self._conn, self._tables, self._base, self.tree, rows, pool_rows)


_Walks = tuple[tuple[str, ...], timedelta | None, str | None, timedelta | None, str | None]


def resolved_rows(tree: QueueTree) -> tuple[dict[str, QueueRow], dict[tuple[str, str], PoolRow]]:
    """Every queue's maintained row: its path and where each upward walk starting there ends,
    in its node pool's tree (a queue of no pool: in the tree of the queues of no pool); and the
    rows of the queues of no pool in each pool's tree where those differ."""
    # The defaults are irrelevant: a walk that finds no value is stored as (NULL, NULL) and
    # the SQL substitutes the node-pool default at query time.
    resolvers = PoolResolvers(tree, NodePoolConfigs())
    config = MinRuntimeConfig()
    shared = resolvers.resolver(tree.shared(), config)
    rows: dict[str, QueueRow] = {}
    for queue in tree:
        pool = queue.node_pool
        resolver = shared if pool is None else resolvers(pool)
        rows[queue.name] = QueueRow(
            queue.name,
            queue.parent,
            queue.preempt_min_runtime,
            queue.reclaim_min_runtime,
            *_walks(resolver, queue.name),
            queue.priority,
            resources_json(queue.resources),
            pool,
            dict(queue.disruption) or None,
        )
    pool_rows: dict[tuple[str, str], PoolRow] = {}
    for pool in sorted(tree.node_pools()):
        resolver = resolvers(pool)
        for queue in resolver.tree:
            if queue.node_pool is None:
                walks = _walks(resolver, queue.name)
                if walks != rows[queue.name][4:9]:
                    pool_rows[(pool, queue.name)] = PoolRow(pool, queue.name, *walks)
    return rows, pool_rows


def _walks(resolver: Resolver, name: str) -> _Walks:
    preempt = resolver.preempt_min_runtime(name)
    # Reclaimer == victim: both methods start the walk at the victim's own queue.
    reclaim = resolver.reclaim_min_runtime(name, name)
    return (
        resolver.tree.path(name),
        preempt.min_runtime if preempt.source is not None else None,
        preempt.source,
        reclaim.min_runtime if reclaim.source is not None else None,
        reclaim.source,
    )
