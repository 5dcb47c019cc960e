"""The queue tree projection: the core's QueueTree in memory, maintained rows in PostgreSQL.

Tree changes are rare, so each change re-resolves every queue with the core (a few ms for
thousands of queues) and ``store.queues`` writes only the rows that differ.
"""

from __future__ import annotations

from sqlalchemy import Connection

from minruntime.core import MinRuntimeConfig, Queue, QueueTree, Resolver
from minruntime.store.queues import QueueRow, resources_json, stored_tree, write_tree
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
        rows = resolved_rows(self.tree)
        old = self._base.rows
        changed = [row for name, row in rows.items() if old.get(name) != row]
        removed = [name for name in old if name not in rows]
        write_tree(self._conn, self._tables, self.tree, rows, changed, removed)


def resolved_rows(tree: QueueTree) -> dict[str, QueueRow]:
    """Every queue's maintained row: its path and where each upward walk starting there ends."""
    # The defaults are irrelevant: a walk that finds no value is stored as (NULL, NULL) and
    # the SQL substitutes the node-pool default at query time.
    resolver = Resolver(tree, MinRuntimeConfig())
    rows: dict[str, QueueRow] = {}
    for queue in tree:
        preempt = resolver.preempt_min_runtime(queue.name)
        # Reclaimer == victim: both methods start the walk at the victim's own queue.
        reclaim = resolver.reclaim_min_runtime(queue.name, queue.name)
        rows[queue.name] = (
            queue.name,
            queue.parent,
            queue.preempt_min_runtime,
            queue.reclaim_min_runtime,
            tree.path(queue.name),
            preempt.min_runtime if preempt.source is not None else None,
            preempt.source,
            reclaim.min_runtime if reclaim.source is not None else None,
            reclaim.source,
            queue.priority,
            resources_json(queue.resources),
        )
    return rows
