"""The queue tree as stored: its one loader (cached per connection by version) and writer.

Tree changes are rare; the projection (``ingest.queues``) re-resolves every queue with the
core on each change and writes only the rows that differ. The tree is cached per database
connection and schema, keyed by a random version token the writer replaces on every change: a
rolled-back change leaves a token nobody else can ever write, so a stale cache is reloaded.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final, cast

from sqlalchemy import Connection

from minruntime.core import InvalidQueueError, Queue, QueueTree
from minruntime.core.queue_quota import QueueResources, ResourceQuota
from minruntime.store.schema import StateTables

_CACHE_KEY: Final = "minruntime.queue_tree"

# A queue_nodes row: its columns, in this order.
_COLUMNS: Final = (
    "name",
    "parent",
    "preempt_min_runtime",
    "reclaim_min_runtime",
    "path",
    "preempt_resolved",
    "preempt_source",
    "reclaim_resolved",
    "reclaim_source",
    "priority",
    "resources",
)
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
    int | None,
    dict[str, dict[str, float]] | None,
]
# A resources column: resource -> its three settings, by their wire (Kubernetes) names.
_RESOURCES: Final = ("gpu", "cpu", "memory")
_SETTINGS: Final = (
    ("quota", "quota"),
    ("limit", "limit"),
    ("over_quota_weight", "overQuotaWeight"),
)


def _placeholder(column: str) -> str:
    return "CAST(:resources AS jsonb)" if column == "resources" else f":{column}"


_LOCK_VERSION: Final = (
    "SELECT version FROM minruntime_state.queue_tree_version WHERE singleton FOR UPDATE"
)
_READ_VERSION: Final = "SELECT version FROM minruntime_state.queue_tree_version WHERE singleton"
_LOAD: Final = f"SELECT {', '.join(_COLUMNS)} FROM minruntime_state.queue_nodes"
_UPSERT: Final = (
    f"INSERT INTO minruntime_state.queue_nodes ({', '.join(_COLUMNS)})"
    f" VALUES ({', '.join(_placeholder(column) for column in _COLUMNS)})"
    " ON CONFLICT (name) DO UPDATE SET "
    + ", ".join(f"{column} = excluded.{column}" for column in _COLUMNS[1:])
    + ", updated_at = now()"
)
_DELETE: Final = "DELETE FROM minruntime_state.queue_nodes WHERE name = ANY(:names)"
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
    """The queue tree as stored: its version token, the tree, and every queue's row."""

    version: uuid.UUID
    tree: QueueTree
    rows: dict[str, QueueRow]


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
    tree = QueueTree(
        Queue(
            name=r[0],
            parent=r[1],
            preempt_min_runtime=r[2],
            reclaim_min_runtime=r[3],
            priority=r[9],
            resources=resources_of(r[10]),
        )
        for r in rows.values()
    )
    return StoredTree(version or uuid.UUID(int=0), tree, rows)


def load_tree(conn: Connection, tables: StateTables) -> QueueTree:
    """The queue tree as stored (read only, no lock; cached per connection by version)."""
    current = stored_tree(conn, tables)
    if current.version.int:
        conn.info[_cache_key(tables)] = current
    return current.tree


def write_tree(
    conn: Connection,
    tables: StateTables,
    tree: QueueTree,
    rows: dict[str, QueueRow],
    changed: Sequence[QueueRow],
    removed: Sequence[str],
) -> None:
    """Write the changed rows, delete the removed queues, and replace the version token."""
    if removed:
        conn.execute(tables.text(_DELETE), {"names": list(removed)})
    if changed:
        conn.execute(tables.text(_UPSERT), [_params(row) for row in changed])
    version = uuid.uuid4()
    conn.execute(tables.text(_SET_VERSION), {"v": version})
    conn.info[_cache_key(tables)] = StoredTree(version, tree, rows)


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


def _row_of(row: Any) -> QueueRow:
    # The path comes back as a list.
    return cast(QueueRow, (*row[:4], tuple(row[4]), *row[5:]))


def _params(row: QueueRow) -> dict[str, Any]:
    params: dict[str, Any] = dict(zip(_COLUMNS, row, strict=True))
    params["path"] = list(row[4])
    params["resources"] = None if row[10] is None else json.dumps(row[10], sort_keys=True)
    return params
