"""Units of work: one transaction, the copy of the state it reads, typed readers and writers.

The shape is cosmicpython's unit of work: the code that asks (``audit/``, ``requeue/``, the
commands through ``commands.common``) is handed a unit and never sees a connection, a schema
name or a driver. ``Units`` opens them on one engine:

- ``Units.read(state)``: a ``ReadUnit``, one REPEATABLE READ transaction that is always rolled
  back, reading ``state`` (``LIVE`` or a named shadow, ``shadows.State``);
- ``Units.write()``: a ``WriteUnit``, one transaction on the live state, committed when the
  block ends without an error and rolled back otherwise.

A reader's answers are the read surface's (``store.read_surface``) on the unit's state, so one
answer never mixes two states. ``StateReader`` is the part of a read unit ``explain`` needs: a
unit test hands it a fake unit and needs no PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Connection, Engine

from minruntime.core import NodePoolConfigs, PodGroupState
from minruntime.core.topic_life import StoredOffset
from minruntime.store import read_surface, snapshots
from minruntime.store.engine import Replication, reached_server, replication_of
from minruntime.store.offsets import lock_topic, rebaseline, stored_offsets
from minruntime.store.outbox import retry_set_aside, set_aside_rows
from minruntime.store.podgroups import load_podgroups
from minruntime.store.queues import StoredTree
from minruntime.store.read_surface import ProtectionRow
from minruntime.store.read_transactions import database_now, read_only, repeatable_read
from minruntime.store.requeue import disruption_rows
from minruntime.store.shadows import LIVE, State
from minruntime.store.snapshots import Pruned, Snapshot

__all__ = [
    "LIVE",
    "EvictedRun",
    "Handshake",
    "ProtectionRow",
    "ReadUnit",
    "State",
    "StateReader",
    "Units",
    "WriteUnit",
]


class EvictedRun(NamedTuple):
    """The last run of a podgroup that an eviction ended, as the runs view judged it."""

    run_start: datetime
    run_end: datetime
    ended_by: str
    protection: str
    eviction_source: str | None
    eviction_action: str | None
    evictor: str | None
    evictor_queue: str | None
    evicted_at: datetime | None
    exact_verdict: str | None
    applied_min_runtime: Any
    applied_cut_short: Any


class Handshake(NamedTuple):
    """A stored checkpoint handshake (``checkpoint_handshakes``)."""

    outcome: str
    requested_at: datetime
    grace: Any
    ended_at: datetime
    checkpointed_at: datetime | None
    decision_id: str


class StateReader(Protocol):
    """What ``explain`` reads from one copy of the state, in one transaction."""

    @property
    def state(self) -> State: ...

    def now(self) -> datetime: ...

    def queue_tree(self) -> StoredTree: ...

    def node_pool_configs(self) -> NodePoolConfigs: ...

    def protection_rows(
        self, at: datetime, reclaimer_queue: str | None = None, uid: str | None = None
    ) -> tuple[ProtectionRow, ...]: ...

    def podgroup_facts(self, uid: str) -> Mapping[str, Any] | None: ...

    def podgroup_annotations(self, uid: str) -> Any: ...

    def podgroup_states(self, uids: Iterable[str]) -> Mapping[str, PodGroupState]: ...

    def min_runtime_rule(self, victim: str, preemptor: str, node_pool: str) -> str: ...

    def is_protected(self, uid: str, preemptor: str, at: datetime) -> bool: ...

    def committed_requeues(self, uid: str, at: datetime, most: int) -> list[datetime]: ...

    def newest_quota_shares(self, uid: str, at: datetime) -> dict[str, Any] | None: ...

    def newest_abandoned(
        self, uid: str, at: datetime
    ) -> tuple[datetime, str, datetime | None] | None: ...

    def newest_handshake(self, uid: str, at: datetime) -> Handshake | None: ...

    def last_eviction(self, uid: str, at: datetime) -> EvictedRun | None: ...

    def disruption_rows(self, since: datetime) -> list[tuple[Any, ...]]: ...


class ReadUnit:
    """One transaction reading one copy of the state (``StateReader`` and more)."""

    def __init__(self, connection: Connection, state: State = LIVE) -> None:
        self._conn = connection
        self._state = state

    @property
    def state(self) -> State:
        return self._state

    @property
    def connection(self) -> Connection:
        """The transaction's connection, for the store's functions not wrapped here yet."""
        return self._conn

    def on(self, state: State) -> ReadUnit:
        """This transaction reading ``state`` instead (a shadow made in it, or the live)."""
        return ReadUnit(self._conn, state)

    def read_only(self) -> None:
        read_only(self._conn)

    def now(self) -> datetime:
        """The database's now(): the start of the transaction."""
        return database_now(self._conn)

    # -- the queue tree, the configuration, the protection functions -----------------------

    def queue_tree(self) -> StoredTree:
        return read_surface.queue_tree(self._conn, self._state)

    def node_pool_configs(self) -> NodePoolConfigs:
        return read_surface.node_pool_configs(self._conn, self._state)

    def queue_exists(self, name: str) -> bool:
        return read_surface.queue_exists(self._conn, self._state, name)

    def queue_node_pool(self, name: str) -> str | None:
        return read_surface.queue_node_pool(self._conn, self._state, name)

    def protection_rows(
        self, at: datetime, reclaimer_queue: str | None = None, uid: str | None = None
    ) -> tuple[ProtectionRow, ...]:
        return read_surface.protection_rows(self._conn, self._state, at, reclaimer_queue, uid)

    def min_runtime_rule(self, victim: str, preemptor: str, node_pool: str) -> str:
        return read_surface.min_runtime_rule(self._conn, self._state, victim, preemptor, node_pool)

    def is_protected(self, uid: str, preemptor: str, at: datetime) -> bool:
        return read_surface.is_protected(self._conn, self._state, uid, preemptor, at)

    # -- one podgroup ----------------------------------------------------------------------

    def podgroup_facts(self, uid: str) -> Mapping[str, Any] | None:
        return read_surface.podgroup_facts(self._conn, self._state, uid)

    def podgroup_annotations(self, uid: str) -> Any:
        return read_surface.podgroup_annotations(self._conn, self._state, uid)

    def podgroup_states(self, uids: Iterable[str]) -> Mapping[str, PodGroupState]:
        """The stored state of each of ``uids`` that is known (no lock taken)."""
        return load_podgroups(self._conn, self._state.tables, uids, lock=False).states

    def committed_requeues(self, uid: str, at: datetime, most: int) -> list[datetime]:
        return read_surface.committed_requeues(self._conn, self._state, uid, at, most)

    def newest_quota_shares(self, uid: str, at: datetime) -> dict[str, Any] | None:
        return read_surface.newest_quota_shares(self._conn, self._state, uid, at)

    def newest_abandoned(
        self, uid: str, at: datetime
    ) -> tuple[datetime, str, datetime | None] | None:
        return read_surface.newest_abandoned(self._conn, self._state, uid, at)

    def newest_handshake(self, uid: str, at: datetime) -> Handshake | None:
        row = read_surface.newest_handshake(self._conn, self._state, uid, at)
        return None if row is None else Handshake._make(row)

    def last_eviction(self, uid: str, at: datetime) -> EvictedRun | None:
        """The live history's last evicted run of ``uid`` by ``at`` (runs never change)."""
        row = read_surface.last_eviction(self._conn, uid, at)
        return None if row is None else EvictedRun._make(row)

    def disruption_rows(self, since: datetime) -> list[tuple[Any, ...]]:
        return disruption_rows(self._conn, self._state.tables, since)

    # -- violations --------------------------------------------------------------------------

    def has_runs(self) -> bool:
        return read_surface.has_runs(self._conn, self._state.read_schema)

    def queue_known(self, queue: str) -> bool:
        return read_surface.queue_known(self._conn, self._state.read_schema, queue)

    def evicted_runs(self, since: datetime | None, queue: str | None) -> int:
        return read_surface.evicted_runs(self._conn, self._state.read_schema, since, queue)

    def violating_runs(self, since: datetime | None, queue: str | None) -> Sequence[Any]:
        return read_surface.violating_runs(self._conn, self._state.read_schema, since, queue)

    def abandoned_requeues(
        self, since: datetime | None, queue: str | None
    ) -> list[tuple[Any, ...]]:
        return read_surface.abandoned_requeues(self._conn, self._state.read_schema, since, queue)

    # -- bookkeeping ---------------------------------------------------------------------

    def stored_offsets(self, group: str) -> dict[str, list[StoredOffset]]:
        """The consumer offsets stored for ``group``: topic -> rows in partition order."""
        return stored_offsets(self._conn, self._state.tables, group)

    def set_aside_outbox(self) -> list[dict[str, Any]]:
        return set_aside_rows(self._conn)

    def snapshots(self) -> list[Snapshot]:
        """The stored projection snapshots, oldest first (none when the tables are not there
        yet)."""
        return snapshots.snapshots(self._conn) if snapshots.available(self._conn) else []

    def server(self) -> tuple[str, Replication]:
        """``host:port/database`` of the server reached, and what it says of its replication."""
        return reached_server(self._conn), replication_of(self._conn)


class WriteUnit(ReadUnit):
    """One transaction on the live state that its ``Units.write`` block commits."""

    def retry_set_aside(self, ids: Sequence[str] | None = None) -> int:
        """Put set-aside outbox rows (``ids``; None: all) back in line; how many."""
        return retry_set_aside(self._conn, self._state.tables, ids)

    def prune_snapshots(self, keep: int) -> Pruned:
        """Remove every projection snapshot but the newest ``keep``."""
        return snapshots.prune(self._conn, keep)

    def lock_topic(self, group: str, topic: str) -> list[StoredOffset]:
        return lock_topic(self._conn, self._state.tables, group, topic)

    def rebaseline(
        self, group: str, topic: str, topic_id: str, next_offsets: Mapping[int, int]
    ) -> None:
        """Replace the topic's stored offsets by ``next_offsets`` under ``topic_id``."""
        rebaseline(self._conn, self._state.tables, group, topic, topic_id, next_offsets)


class Units:
    """Opens units of work on one engine: the factory the commands are handed."""

    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    @property
    def engine(self) -> Engine:
        """The engine, for the code that still opens its own transactions."""
        return self._engine

    @contextmanager
    def read(self, state: State = LIVE, *, only: bool = False) -> Iterator[ReadUnit]:
        """A ``ReadUnit`` on ``state`` in a REPEATABLE READ transaction, always rolled back;
        ``only``: READ ONLY from its first statement."""
        with repeatable_read(self._engine) as conn:
            if only:
                read_only(conn)
            yield ReadUnit(conn, state)

    @contextmanager
    def connected(self) -> Iterator[ReadUnit]:
        """A ``ReadUnit`` on the live state in a plain (READ COMMITTED) transaction, rolled
        back at the end: one answer of one statement or two."""
        with self._engine.connect() as conn:
            yield ReadUnit(conn, LIVE)

    @contextmanager
    def write(self) -> Iterator[WriteUnit]:
        """A ``WriteUnit`` on the live state, committed at the end of the block."""
        with self._engine.begin() as conn:
            yield WriteUnit(conn, LIVE)

    def dispose(self) -> None:
        self._engine.dispose()
