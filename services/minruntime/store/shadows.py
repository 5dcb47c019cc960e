"""Shadow schemas: a copy of the state tables and of the read surface under other names.

A shadow named ``S`` is two schemas, like the live pair ``minruntime`` / ``minruntime_state``:

- ``S_state``: the state tables, created from the same SQLAlchemy metadata as the live ones;
- ``S``: the read surface (views and functions of CONTRACT.md §2), copied from the live
  ``minruntime`` schema in the catalog with every schema name rewritten, so a shadow answers
  the same SQL the live service answers (``S.preempt_protection(T)``,
  ``S.reclaim_protection('q', T)``, ``S.is_protected(...)``, ``S.min_runtime_for(...)``).

Replays, as-of answers and what-ifs fill a shadow with the projection code of
``minruntime.ingest``, handing it the shadow's bound tables (``Shadow.tables``). A shadow made
inside a transaction that is rolled back leaves nothing behind; ``--into S`` commits it.
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Final

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.schema import CreateIndex, CreateTable

from minruntime.errors import SchemaNameError
from minruntime.store.schema import StateTables, state_tables
from minruntime.store.snapshots import continue_numbering
from minruntime.store.state_schema import check_schema_name
from minruntime.store.tables import READ_SCHEMA, SNAPSHOT_TABLES, STATE_SCHEMA, metadata

READER: Final = "minruntime_reader"
STATE_SUFFIX: Final = "_state"

# The tables a replay rebuilds from the event log, with their keys. The others are the log
# itself (event_log), bookkeeping (consumer_offsets, outbox, queue_tree_version: a random
# token) and records of rejected input (dead_letter_log) that never reach the event log.
PROJECTIONS: Final[dict[str, tuple[str, ...]]] = {
    "queue_nodes": ("name",),
    "queue_nodes_in_pool": ("node_pool", "name"),
    "node_pool_configs": ("node_pool",),
    "node_state": ("name",),
    "podgroup_state": ("uid",),
    "subgroup_state": ("uid", "name"),
    "pod_state": ("uid", "name"),
    "nominations": ("uid", "nominated_by"),
    "requeue_decision_log": ("decision_id",),
    "requeue_promises": ("decision_id", "beneficiary", "node"),
    "checkpoint_handshakes": ("decision_id",),
    "run_log": ("uid", "end_source", "end_event_id"),
}
# Projections that are history, not state: every run that ended. Snapshots leave them out (no
# as-of answer reads them, and a copy would grow with the whole history); replays rebuild them
# and ``replay --verify`` compares them like the others.
HISTORY: Final = frozenset({"run_log"})
# The projections a snapshot holds (``minruntime snapshot``).
SNAPSHOTTED: Final[dict[str, tuple[str, ...]]] = {
    table: keys for table, keys in PROJECTIONS.items() if table not in HISTORY
}
# Columns that say when a row was written (wall clock) or number rows in write order: they
# differ between two correct replays, so they are not part of a projection's content.
BOOKKEEPING_COLUMNS: Final = frozenset({"updated_at", "seq"})
# The tables a shadow has: all but the snapshots of the live projections.
SHADOW_TABLES: Final = [
    table for table in metadata.sorted_tables if table.name not in SNAPSHOT_TABLES
]
# The indexes a shadow made for one answer (``create_shadow(..., answer=True)``) goes without:
# the live service's lookups that no answer makes in a shadow. The running podgroups by queue
# (the protection functions read every running podgroup; its upkeep was a third of copying
# the snapshot's active block in), and the reads of the log, the dead letters, the outbox and
# the violations (an answer reads the live ones). The keys and unique constraints stay (the
# replay's upserts and lookups), and so do the decisions' lookups by podgroup (explain).
UNUSED_BY_ANSWERS: Final = frozenset(
    {
        "ix_podgroup_state_running_queue",
        "ix_event_log_subject",
        "ix_dead_letter_log_kind",
        "ix_outbox_unpublished",
        "ix_outbox_pending",
        "ix_run_log_violations",
    }
)

_VIEWS = sa.text(
    "SELECT c.relname, pg_get_viewdef(c.oid) FROM pg_class c"
    " JOIN pg_namespace n ON n.oid = c.relnamespace"
    " WHERE n.nspname = :schema AND c.relkind = 'v' ORDER BY c.relname"
)
_FUNCTIONS = sa.text(
    "SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid) FROM pg_proc p"
    " JOIN pg_namespace n ON n.oid = p.pronamespace"
    " WHERE n.nspname = :schema AND p.prokind = 'f' ORDER BY p.proname, p.oid"
)


@dataclass(frozen=True)
class State:
    """Which copy of the state: the live one (``LIVE``) or a named shadow.

    The one handle every reader and writer is given: its read surface (``read_schema``) and
    its state tables (``tables``) are derived from it, never passed beside it.
    """

    name: str

    @classmethod
    def named(cls, name: str) -> State:
        """The copy called ``name`` (the live schema's name, or a shadow's; SchemaNameError,
        one line, for a name no shadow may take)."""
        return LIVE if name == READ_SCHEMA else cls(check_schema_name(name))

    @property
    def is_live(self) -> bool:
        return self.name == READ_SCHEMA

    @property
    def read_schema(self) -> str:
        return self.name

    @property
    def state_schema(self) -> str:
        return f"{self.name}{STATE_SUFFIX}"

    @property
    def tables(self) -> StateTables:
        """Its state tables, bound (what the projection code is handed to fill the shadow)."""
        return state_tables(self.state_schema)


Shadow = State
"""A state that is not the live one (the name its makers use)."""

LIVE: Final = State(READ_SCHEMA)
"""The live schemas (``minruntime`` / ``minruntime_state``), for code that reads either."""


def temporary_name(prefix: str = "minruntime_asof") -> str:
    """A fresh shadow name for a shadow that is rolled back (never committed)."""
    return f"{prefix}_{secrets.token_hex(4)}"


def create_shadow(conn: Connection, name: str, *, answer: bool = False) -> Shadow:
    """Create shadow ``name`` (empty state tables + read surface) in ``conn``'s transaction.

    ``answer``: a shadow filled and read for one answer and rolled back, without the indexes
    no answer uses (``UNUSED_BY_ANSWERS``): the same rows and answers, less to build and keep.
    SchemaNameError (one line) when the name is not allowed or already exists.
    """
    shadow = Shadow(check_schema_name(name))
    check_schema_name(shadow.state_schema)
    taken = _existing_schemas(conn, shadow)
    if taken:
        raise SchemaNameError(
            f"schema {taken[0]} already exists; choose another name or drop it "
            f"(minruntime replay --drop {shadow.name})"
        )
    conn.execute(sa.text(f"CREATE SCHEMA {shadow.state_schema}"))
    conn.execute(sa.text(f"CREATE SCHEMA {shadow.read_schema}"))
    bound = shadow.tables.metadata.tables
    tables = [bound[f"{shadow.state_schema}.{table.name}"] for table in SHADOW_TABLES]
    if answer:
        for table in tables:
            conn.execute(CreateTable(table))
            for index in sorted(table.indexes, key=lambda index: str(index.name)):
                if index.name not in UNUSED_BY_ANSWERS:
                    conn.execute(CreateIndex(index))
    else:
        shadow.tables.metadata.create_all(conn, tables=tables, checkfirst=False)
    _copy_read_surface(conn, shadow)
    return shadow


@contextmanager
def scratch_state(conn: Connection, tables: Iterable[str]) -> Iterator[StateTables]:
    """A temporary state schema with (empty) ``tables`` in ``conn``'s transaction, dropped
    at the end (to restore a snapshot into, beside a replay)."""
    name = temporary_name("minruntime_scratch") + STATE_SUFFIX
    conn.exec_driver_sql(f"CREATE SCHEMA {name}")
    try:
        bound = state_tables(name)
        bound.metadata.create_all(
            conn, tables=[bound.metadata.tables[f"{name}.{table}"] for table in tables]
        )
        yield bound
    finally:
        conn.exec_driver_sql(f"DROP SCHEMA {name} CASCADE")


def empty(conn: Connection, tables: StateTables, names: Iterable[str]) -> None:
    """Remove every row of the tables ``names`` of a shadow or scratch schema."""
    if tables.is_live:
        raise RuntimeError("the live state is never emptied")
    conn.exec_driver_sql(f"TRUNCATE {', '.join(f'{tables.schema}.{name}' for name in names)}")


def drop_shadow(conn: Connection, name: str) -> bool:
    """Drop shadow ``name`` (both schemas) if it exists; True when something was dropped."""
    shadow = Shadow(check_schema_name(name))
    found = _existing_schemas(conn, shadow)
    conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {shadow.read_schema} CASCADE"))
    conn.execute(sa.text(f"DROP SCHEMA IF EXISTS {shadow.state_schema} CASCADE"))
    return bool(found)


def _existing_schemas(conn: Connection, shadow: Shadow) -> list[str]:
    """The schemas of ``shadow`` that exist, by name."""
    existing = conn.execute(
        sa.text("SELECT nspname FROM pg_namespace WHERE nspname = ANY(:names)"),
        {"names": [shadow.read_schema, shadow.state_schema]},
    ).scalars()
    return sorted(existing)


def copy_live_state(conn: Connection, shadow: Shadow) -> None:
    """Fill the shadow's (empty) state tables with the live state, in the caller's snapshot."""
    for table in SHADOW_TABLES:
        if table.name in ("event_log", "dead_letter_log", "outbox", "consumer_offsets"):
            continue
        if table.name in HISTORY:  # a what-if asks about the state, not the history
            continue
        columns = ", ".join(f'"{column.name}"' for column in table.columns)
        conn.execute(
            sa.text(
                f"INSERT INTO {shadow.state_schema}.{table.name} ({columns})"
                f" OVERRIDING SYSTEM VALUE SELECT {columns} FROM {STATE_SCHEMA}.{table.name}"
            )
        )
        continue_numbering(conn, shadow.tables, table.name)


def _copy_read_surface(conn: Connection, shadow: Shadow) -> None:
    # Fully qualified definitions: with only pg_catalog on the path, pg_get_viewdef names
    # every relation with its schema.
    conn.execute(sa.text("SET LOCAL search_path = pg_catalog"))
    try:
        functions = [
            *conn.execute(_FUNCTIONS, {"schema": STATE_SCHEMA}),
            *conn.execute(_FUNCTIONS, {"schema": READ_SCHEMA}),
        ]
        views = list(conn.execute(_VIEWS, {"schema": READ_SCHEMA}))
        for _, definition in functions:
            conn.execute(
                sa.text(_renamed(definition, shadow)).execution_options(no_parameters=True)
            )
        for view, definition in views:
            conn.execute(
                sa.text(
                    f"CREATE VIEW {shadow.read_schema}.{view} AS {_renamed(definition, shadow)}"
                ).execution_options(no_parameters=True)
            )
    finally:
        conn.execute(sa.text("SET LOCAL search_path = DEFAULT"))
    _grant_reader(conn, shadow, [signature for signature, _ in functions], [v for v, _ in views])


def _renamed(definition: str, shadow: Shadow) -> str:
    # "minruntime_state." first: "minruntime." is not a substring of it ("_" vs ".").
    return definition.replace(f"{STATE_SCHEMA}.", f"{shadow.state_schema}.").replace(
        f"{READ_SCHEMA}.", f"{shadow.read_schema}."
    )


def _grant_reader(conn: Connection, shadow: Shadow, functions: list[str], views: list[str]) -> None:
    """The reader role reads a shadow exactly as it reads the live surface."""
    if conn.execute(sa.text(f"SELECT 1 FROM pg_roles WHERE rolname = '{READER}'")).first() is None:
        return
    public, internal = (
        [_renamed(signature, shadow) for signature in functions if signature.startswith(schema)]
        for schema in (f"{READ_SCHEMA}.", f"{STATE_SCHEMA}.")
    )
    conn.execute(sa.text(f"GRANT USAGE ON SCHEMA {shadow.read_schema} TO {READER}"))
    if views:
        names = ", ".join(f"{shadow.read_schema}.{view}" for view in views)
        conn.execute(sa.text(f"GRANT SELECT ON {names} TO {READER}"))
    if public or internal:
        conn.execute(sa.text(f"REVOKE ALL ON FUNCTION {', '.join(public + internal)} FROM PUBLIC"))
    if public:
        conn.execute(sa.text(f"GRANT EXECUTE ON FUNCTION {', '.join(public)} TO {READER}"))
