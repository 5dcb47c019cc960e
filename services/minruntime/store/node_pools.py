"""Node pools and nodes: their one writer and the one loader of the node-pool configs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import fields
from typing import Any, Final

from sqlalchemy import Connection

from minruntime.core import MinRuntimeConfig, MinRuntimeError, NodePoolConfigs
from minruntime.store.engine import driver_cursor
from minruntime.store.schema import StateTables

_UPSERT_CONFIG: Final = (
    "INSERT INTO minruntime_state.node_pool_configs (node_pool, default_preempt_min_runtime,"
    " default_reclaim_min_runtime, reclaim_resolve_method, default_requeue_delay,"
    " max_requeues, max_requeues_window, max_evictions_per_window, eviction_window,"
    " min_eviction_gap)"
    " VALUES (:node_pool, :preempt, :reclaim, :method, :delay, :max_requeues,"
    " :max_requeues_window, :max_evictions, :eviction_window, :min_eviction_gap)"
    " ON CONFLICT (node_pool)"
    " DO UPDATE SET default_preempt_min_runtime = excluded.default_preempt_min_runtime,"
    " default_reclaim_min_runtime = excluded.default_reclaim_min_runtime,"
    " reclaim_resolve_method = excluded.reclaim_resolve_method,"
    " default_requeue_delay = excluded.default_requeue_delay,"
    " max_requeues = excluded.max_requeues,"
    " max_requeues_window = excluded.max_requeues_window,"
    " max_evictions_per_window = excluded.max_evictions_per_window,"
    " eviction_window = excluded.eviction_window,"
    " min_eviction_gap = excluded.min_eviction_gap, updated_at = now()"
)
_UPSERT_NODE: Final = (
    "INSERT INTO minruntime_state.node_state (name, node_pool, gpu) VALUES (:name, :pool, :gpu)"
    " ON CONFLICT (name) DO UPDATE SET node_pool = excluded.node_pool, gpu = excluded.gpu,"
    " updated_at = now()"
)
_DELETE_NODES: Final = "DELETE FROM minruntime_state.node_state WHERE name = ANY(:names)"
# Durations a timedelta can hold (the core's are at most ~292 years): a stored interval
# outside that range cannot be read, and its node pool is left out instead.
_CONFIG_OK: Final = " AND ".join(
    f"coalesce({column} BETWEEN interval '0' AND interval '290 years', true)"
    for column in (
        "default_preempt_min_runtime",
        "default_reclaim_min_runtime",
        "default_requeue_delay",
        "max_requeues_window",
        "eviction_window",
        "min_eviction_gap",
    )
)
# A config's columns are named as MinRuntimeConfig's fields.
_CONFIG_FIELDS: Final = tuple(field.name for field in fields(MinRuntimeConfig))
_CONFIGS: Final = (
    f"SELECT node_pool, {', '.join(_CONFIG_FIELDS)}"
    f" FROM minruntime_state.node_pool_configs WHERE {_CONFIG_OK}"
)
_BAD_CONFIGS: Final = (
    f"SELECT node_pool FROM minruntime_state.node_pool_configs WHERE NOT ({_CONFIG_OK})"
)


def upsert_configs(
    conn: Connection, tables: StateTables, configs: Sequence[Mapping[str, Any]]
) -> None:
    """Write node-pool configs (node_pool, preempt, reclaim, method, delay, max_requeues,
    max_requeues_window, max_evictions, eviction_window, min_eviction_gap), last one wins."""
    if configs:
        conn.execute(tables.text(_UPSERT_CONFIG), list(configs))


def write_nodes(
    conn: Connection, tables: StateTables, nodes: Mapping[str, Mapping[str, Any] | None]
) -> None:
    """Node name -> its row (name, pool, gpu) to upsert, or None to delete it."""
    upserts = [dict(node) for node in nodes.values() if node is not None]
    if upserts:
        conn.execute(tables.text(_UPSERT_NODE), upserts)
    deleted = [name for name, node in nodes.items() if node is None]
    if deleted:
        conn.execute(tables.text(_DELETE_NODES), {"names": deleted})


def read_node_pool_configs(
    conn: Connection, tables: StateTables
) -> tuple[NodePoolConfigs, set[str]]:
    """The stored plugin arguments of every node pool, and the pools whose row is unusable."""
    with driver_cursor(conn) as cursor:
        return read_configs(cursor, tables)


def read_configs(cursor: Any, tables: StateTables) -> tuple[NodePoolConfigs, set[str]]:
    """``read_node_pool_configs`` on an open psycopg cursor (the cycle's reads share one)."""
    cursor.execute(tables.sql(_CONFIGS))
    configs: dict[str, MinRuntimeConfig] = {}
    bad_pools: set[str] = set()
    for pool, *values in cursor.fetchall():
        try:
            configs[pool] = MinRuntimeConfig(**dict(zip(_CONFIG_FIELDS, values, strict=True)))
        except MinRuntimeError:
            bad_pools.add(pool)
    cursor.execute(tables.sql(_BAD_CONFIGS))
    bad_pools.update(pool for (pool,) in cursor)
    return NodePoolConfigs(configs), bad_pools
