"""The queue tree projection: the core's QueueTree in memory, maintained rows in PostgreSQL.

Tree changes are rare, so each change re-resolves every queue with the core (a few ms for
thousands of queues) and writes only the rows that differ. The tree is cached per database
connection, keyed by a random version token the writer replaces on every change: a
rolled-back change leaves a token nobody else can ever write, so a stale cache is reloaded.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.core import MinRuntimeConfig, Queue, QueueTree, Resolver
from minruntime.store.state_schema import state_schema, state_text

_CACHE_KEY: Final = "minruntime.queue_tree"

# name, parent, preempt, reclaim, path, preempt_resolved, preempt_source,
# reclaim_resolved, reclaim_source
QueueRow = tuple[
    str,
    str | None,
    timedelta | None,
    timedelta | None,
    tuple[str, ...],
    timedelta | None,
    str | None,
    timedelta | None,
    str | None,
]

_LOCK_VERSION: Final = (
    "SELECT version FROM minruntime_state.queue_tree_version WHERE singleton FOR UPDATE"
)
_READ_VERSION: Final = "SELECT version FROM minruntime_state.queue_tree_version WHERE singleton"
_LOAD: Final = (
    "SELECT name, parent, preempt_min_runtime, reclaim_min_runtime, path, preempt_resolved,"
    " preempt_source, reclaim_resolved, reclaim_source FROM minruntime_state.queue_nodes"
)
_UPSERT: Final = (
    "INSERT INTO minruntime_state.queue_nodes (name, parent, preempt_min_runtime,"
    " reclaim_min_runtime, path, preempt_resolved, preempt_source, reclaim_resolved,"
    " reclaim_source) VALUES (:name, :parent, :preempt, :reclaim, :path, :preempt_resolved,"
    " :preempt_source, :reclaim_resolved, :reclaim_source)"
    " ON CONFLICT (name) DO UPDATE SET parent = excluded.parent,"
    " preempt_min_runtime = excluded.preempt_min_runtime,"
    " reclaim_min_runtime = excluded.reclaim_min_runtime, path = excluded.path,"
    " preempt_resolved = excluded.preempt_resolved, preempt_source = excluded.preempt_source,"
    " reclaim_resolved = excluded.reclaim_resolved, reclaim_source = excluded.reclaim_source,"
    " updated_at = now()"
)
_DELETE: Final = "DELETE FROM minruntime_state.queue_nodes WHERE name = ANY(:names)"
_SET_VERSION: Final = (
    "INSERT INTO minruntime_state.queue_tree_version (singleton, version) VALUES (true, :v)"
    " ON CONFLICT (singleton) DO UPDATE SET version = excluded.version"
)


def _cache_key(conn: Connection) -> tuple[str, str]:
    # Per state schema: a shadow schema's tree never answers for the live one.
    return (_CACHE_KEY, state_schema(conn))


@dataclass(frozen=True)
class _Cached:
    version: uuid.UUID
    tree: QueueTree
    rows: dict[str, QueueRow]


def _current(conn: Connection, version_query: str) -> _Cached:
    """The tree as stored, from this connection's cache when its version is still current."""
    version = conn.execute(state_text(conn, version_query)).scalar_one_or_none()
    cached = conn.info.get(_cache_key(conn))
    if isinstance(cached, _Cached) and version is not None and cached.version == version:
        return cached
    rows = {row[0]: _row_of(row) for row in conn.execute(state_text(conn, _LOAD))}
    tree = QueueTree(
        Queue(name=r[0], parent=r[1], preempt_min_runtime=r[2], reclaim_min_runtime=r[3])
        for r in rows.values()
    )
    return _Cached(version or uuid.UUID(int=0), tree, rows)


def load_tree(conn: Connection) -> QueueTree:
    """The queue tree as stored (read only, no lock; cached per connection by version)."""
    current = _current(conn, _READ_VERSION)
    if current.version.int:
        conn.info[_cache_key(conn)] = current
    return current.tree


class QueueProjection:
    """The queue tree of one batch: loaded once, changed in memory, written once."""

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._base = _current(conn, _LOCK_VERSION)
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
        if removed:
            self._conn.execute(state_text(self._conn, _DELETE), {"names": removed})
        if changed:
            self._conn.execute(state_text(self._conn, _UPSERT), [_params(row) for row in changed])
        version = uuid.uuid4()
        self._conn.execute(state_text(self._conn, _SET_VERSION), {"v": version})
        self._conn.info[_cache_key(self._conn)] = _Cached(version, self.tree, rows)


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
        )
    return rows


def _row_of(row: Any) -> QueueRow:
    return (
        row[0],
        row[1],
        row[2],
        row[3],
        tuple(row[4]),
        row[5],
        row[6],
        row[7],
        row[8],
    )


def _params(row: QueueRow) -> dict[str, Any]:
    return {
        "name": row[0],
        "parent": row[1],
        "preempt": row[2],
        "reclaim": row[3],
        "path": list(row[4]),
        "preempt_resolved": row[5],
        "preempt_source": row[6],
        "reclaim_resolved": row[7],
        "reclaim_source": row[8],
    }
