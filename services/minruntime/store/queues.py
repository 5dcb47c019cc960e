"""The queue tree as stored: its one loader (cached per connection by version) and writer.

Tree changes are rare; the projection (``ingest.queues``) re-resolves every queue with the
core on each change and writes only the rows that differ. A queue's row holds it as its node
pool sees it (a queue of no pool: as the pools that no queue names see it); a queue of no pool
that another pool sees differently (one of the pool's queues above it) has a row of
``queue_nodes_in_pool`` for that pool too (docs/storage.md). The tree is cached per database
connection and schema, keyed by a random version token the writer replaces on every change: a
rolled-back change leaves a token nobody else can ever write, so a stale cache is reloaded.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from minruntime.core import InvalidQueueError, Queue, QueueTree
from minruntime.core.queue_quota import QueueResources, ResourceQuota
from minruntime.store.schema import StateTables

_CACHE_KEY: Final = "minruntime.queue_tree"


class QueueRow(NamedTuple):
    """A queue_nodes row: its columns, in this order."""

    name: str
    parent: str | None
    preempt_min_runtime: timedelta | None
    reclaim_min_runtime: timedelta | None
    path: tuple[str, ...]
    preempt_resolved: timedelta | None
    preempt_source: str | None
    reclaim_resolved: timedelta | None
    reclaim_source: str | None
    priority: int | None
    resources: dict[str, dict[str, float]] | None
    node_pool: str | None
    disruption: dict[str, str] | None


class PoolRow(NamedTuple):
    """A queue_nodes_in_pool row: its columns, in this order."""

    node_pool: str
    name: str
    path: tuple[str, ...]
    preempt_resolved: timedelta | None
    preempt_source: str | None
    reclaim_resolved: timedelta | None
    reclaim_source: str | None


_COLUMNS: Final = QueueRow._fields
_POOL_COLUMNS: Final = PoolRow._fields
# A resources column: resource -> its three settings, by their wire (Kubernetes) names.
_RESOURCES: Final = ("gpu", "cpu", "memory")
_SETTINGS: Final = (
    ("quota", "quota"),
    ("limit", "limit"),
    ("over_quota_weight", "overQuotaWeight"),
)


def _placeholder(column: str) -> str:
    if column in ("resources", "disruption"):
        return f"CAST(:{column} AS jsonb)"
    return f":{column}"


def _upsert(table: str, columns: tuple[str, ...], keys: int, also: str = "") -> str:
    """Insert a row of ``columns`` into ``table``, or update all but its first ``keys``."""
    return (
        f"INSERT INTO minruntime_state.{table} ({', '.join(columns)})"
        f" VALUES ({', '.join(_placeholder(column) for column in columns)})"
        f" ON CONFLICT ({', '.join(columns[:keys])}) DO UPDATE SET "
        + ", ".join(f"{column} = excluded.{column}" for column in columns[keys:])
        + also
    )


_LOCK_VERSION: Final = (
    "SELECT version FROM minruntime_state.queue_tree_version WHERE singleton FOR UPDATE"
)
_READ_VERSION: Final = "SELECT version FROM minruntime_state.queue_tree_version WHERE singleton"
_LOAD: Final = f"SELECT {', '.join(_COLUMNS)} FROM minruntime_state.queue_nodes"
_UPSERT: Final = _upsert("queue_nodes", _COLUMNS, 1, ", updated_at = now()")
_DELETE: Final = "DELETE FROM minruntime_state.queue_nodes WHERE name = ANY(:names)"
_LOAD_POOLS: Final = f"SELECT {', '.join(_POOL_COLUMNS)} FROM minruntime_state.queue_nodes_in_pool"
_UPSERT_POOLS: Final = _upsert("queue_nodes_in_pool", _POOL_COLUMNS, 2)
_DELETE_POOLS: Final = (
    "DELETE FROM minruntime_state.queue_nodes_in_pool"
    " WHERE (node_pool, name) IN (SELECT * FROM unnest(CAST(:pools AS text[]),"
    " CAST(:names AS text[])))"
)
_SET_VERSION: Final = (
    "INSERT INTO minruntime_state.queue_tree_version (singleton, version) VALUES (true, :v)"
    " ON CONFLICT (singleton) DO UPDATE SET version = excluded.version"
)


# Orders the live tree's changes with the runs that end (docs/storage.md, "Runs"): a batch that
# changes the tree or a node pool's configuration takes it exclusively, a batch that ends a run
# takes it shared before it reads them, both until commit. So a run's windows come from
# exactly the changes logged before its end, as a replay of the log (in its order) finds them.
TREE_LOCK_KEY: Final = int.from_bytes(b"minrttre", "big", signed=True)
_LOCK_TREE: Final = {
    True: f"SELECT pg_advisory_xact_lock({TREE_LOCK_KEY})",
    False: f"SELECT pg_advisory_xact_lock_shared({TREE_LOCK_KEY})",
}


def lock_tree(conn: Connection, tables: StateTables, *, change: bool) -> None:
    """Live tables only: take the tree lock until commit, exclusively to ``change`` the tree or
    a configuration, shared to read them for the runs a batch ends (a shadow: nothing)."""
    if tables.is_live:
        conn.exec_driver_sql(_LOCK_TREE[change])


def _cache_key(tables: StateTables) -> tuple[str, str]:
    # Per state schema: a shadow schema's tree never answers for the live one.
    return (_CACHE_KEY, tables.schema)


@dataclass(frozen=True)
class StoredTree:
    """The queue tree as stored: its version token, the tree, every queue's row, and the rows
    of the queues of no pool that a pool sees differently, by (pool, name)."""

    version: uuid.UUID
    tree: QueueTree
    rows: dict[str, QueueRow]
    pool_rows: dict[tuple[str, str], PoolRow] = field(default_factory=dict)

    def path_in(self, node_pool: str, name: str) -> tuple[str, ...] | None:
        """The stored path of queue ``name`` in ``node_pool``'s tree (None: not in it)."""
        row = self.rows.get(name)
        if row is None or row.node_pool not in (None, node_pool):
            return None
        seen = self.pool_rows.get((node_pool, name))
        return row.path if seen is None else seen.path


def stored_tree(conn: Connection, tables: StateTables, *, lock: bool = False) -> StoredTree:
    """The tree as stored, from this connection's cache when its version is still current.

    ``lock``: lock the version row until commit (a writer's view: no concurrent change).
    """
    query = _LOCK_VERSION if lock else _READ_VERSION
    version = conn.execute(tables.text(query)).scalar_one_or_none()
    cached = conn.info.get(_cache_key(tables))
    if isinstance(cached, StoredTree) and version is not None and cached.version == version:
        return cached
    rows = {row[0]: _row_of(row) for row in conn.execute(tables.text(_LOAD))}
    pool_rows = {
        (row[0], row[1]): _pool_row_of(row) for row in conn.execute(tables.text(_LOAD_POOLS))
    }
    tree = QueueTree(
        Queue(
            name=r.name,
            parent=r.parent,
            node_pool=r.node_pool,
            resources=resources_of(r.resources),
            preempt_min_runtime=r.preempt_min_runtime,
            reclaim_min_runtime=r.reclaim_min_runtime,
            disruption=disruption_of(r.disruption),
            priority=r.priority,
        )
        for r in rows.values()
    )
    return StoredTree(version or uuid.UUID(int=0), tree, rows, pool_rows)


def load_tree(conn: Connection, tables: StateTables) -> QueueTree:
    """The queue tree as stored (read only, no lock; cached per connection by version)."""
    current = stored_tree(conn, tables)
    if current.version.int:
        conn.info[_cache_key(tables)] = current
    return current.tree


def write_tree(
    conn: Connection,
    tables: StateTables,
    base: StoredTree,
    tree: QueueTree,
    rows: dict[str, QueueRow],
    pool_rows: dict[tuple[str, str], PoolRow],
) -> None:
    """Write the rows that differ from ``base``'s, delete the ones gone, and replace the
    version token."""
    removed = [name for name in base.rows if name not in rows]
    changed = [row for name, row in rows.items() if base.rows.get(name) != row]
    if removed:
        conn.execute(tables.text(_DELETE), {"names": removed})
    if changed:
        conn.execute(tables.text(_UPSERT), [_params(row) for row in changed])
    pools_removed = [key for key in base.pool_rows if key not in pool_rows]
    pools_changed = [row for key, row in pool_rows.items() if base.pool_rows.get(key) != row]
    if pools_removed:
        conn.execute(
            tables.text(_DELETE_POOLS),
            {"pools": [pool for pool, _ in pools_removed], "names": [n for _, n in pools_removed]},
        )
    if pools_changed:
        conn.execute(tables.text(_UPSERT_POOLS), [_pool_params(row) for row in pools_changed])
    version = uuid.uuid4()
    conn.execute(tables.text(_SET_VERSION), {"v": version})
    conn.info[_cache_key(tables)] = StoredTree(version, tree, rows, pool_rows)


def resources_json(resources: QueueResources | None) -> dict[str, dict[str, float]] | None:
    """The resources column of ``resources`` (None: unset)."""
    if resources is None:
        return None
    column: dict[str, dict[str, float]] = {}
    for name in _RESOURCES:
        quota = getattr(resources, name)
        if quota is not None:
            column[name] = {key: getattr(quota, field) for field, key in _SETTINGS}
    return column


def resources_of(column: object) -> QueueResources | None:
    """The core's resources from a stored column; InvalidQueueError if it is not one."""
    if column is None:
        return None
    if not isinstance(column, dict) or not set(column) <= set(_RESOURCES):
        raise InvalidQueueError(f"stored queue resources are not a resources map: {column!r}")
    quotas: dict[str, ResourceQuota] = {}
    for name, settings in column.items():
        if not isinstance(settings, dict) or set(settings) != {key for _, key in _SETTINGS}:
            raise InvalidQueueError(f"stored queue resources.{name} are malformed: {settings!r}")
        quotas[name] = ResourceQuota(**{field: settings[key] for field, key in _SETTINGS})
    return QueueResources(**quotas)


def disruption_of(column: object) -> tuple[tuple[str, str], ...]:
    """A queue's disruption overrides from a stored column (NULL: none); InvalidQueueError
    if it is not a map of strings."""
    if column is None:
        return ()
    if not isinstance(column, dict) or not all(
        isinstance(key, str) and isinstance(value, str) for key, value in column.items()
    ):
        raise InvalidQueueError(f"stored queue disruption overrides are not a map: {column!r}")
    return tuple(sorted(column.items()))


def _row_of(row: Any) -> QueueRow:
    # The path comes back as a list.
    return QueueRow._make((*row[:4], tuple(row[4]), *row[5:]))


def _pool_row_of(row: Any) -> PoolRow:
    return PoolRow._make((row[0], row[1], tuple(row[2]), *row[3:]))


def _pool_params(row: PoolRow) -> dict[str, Any]:
    return {**row._asdict(), "path": list(row.path)}


def _params(row: QueueRow) -> dict[str, Any]:
    params = row._asdict()
    params["path"] = list(row.path)
    params["resources"] = (
        None if row.resources is None else json.dumps(row.resources, sort_keys=True)
    )
    params["disruption"] = (
        None if row.disruption is None else json.dumps(row.disruption, sort_keys=True)
    )
    return params
