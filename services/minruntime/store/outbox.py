"""The outbox: its one writer (``enqueue``) and what the relays and operators do with its rows.

Every message the service publishes is written here in the transaction of the state it
describes (dead letters, requeue decisions, protection-expiry wake-ups); the relays claim,
publish and mark rows (``stream.relay``). A row's ``id`` is its de-duplication key: writing
the same id twice keeps the first row, so a retried batch or a second emitter is harmless.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from typing import Any, Final, NamedTuple

import sqlalchemy as sa
from sqlalchemy import Connection
from sqlalchemy.dialects.postgresql import insert

from minruntime.events import Event
from minruntime.store.schema import StateTables


class OutboxMessage(NamedTuple):
    """One message to publish: ``id`` is also its Kafka header ``id``."""

    id: uuid.UUID | str
    topic: str
    key: bytes | None
    payload: bytes
    headers: Mapping[str, Any]


def event_message(event: Event, topic: str, payload: bytes) -> OutboxMessage:
    """The message that publishes ``event`` (encoded as ``payload``), keyed by its subject."""
    return OutboxMessage(
        id=event.id,
        topic=topic,
        key=event.subject.encode(),
        payload=payload,
        headers={"id": event.id, "type": event.type},
    )


class OutboxRow(NamedTuple):
    """One message waiting to be published."""

    id: str
    topic: str
    key: bytes | None
    value: bytes


class OutboxStats(NamedTuple):
    """The outbox as the table has it now."""

    backlog: int
    oldest_age_seconds: float
    set_aside: int


_STATS: Final = (
    "SELECT count(*) FILTER (WHERE failed_at IS NULL),"
    " coalesce(extract(epoch FROM now() - min(created_at) FILTER (WHERE failed_at IS NULL)), 0),"
    " count(*) FILTER (WHERE failed_at IS NOT NULL)"
    " FROM minruntime_state.outbox WHERE published_at IS NULL"
)
# The contract's view (docs/sql.md), read by operators.
_SET_ASIDE: Final = sa.text(
    "SELECT id, topic, payload_bytes, failed_at, failure, attempts"
    " FROM minruntime.outbox_set_aside ORDER BY created_at, id"
)


def enqueue(conn: Connection, tables: StateTables, messages: Sequence[OutboxMessage]) -> set[str]:
    """Write ``messages`` for the relays; an id already there is kept. Returns the ids written."""
    if not messages:
        return set()
    table = tables.outbox
    rows = conn.execute(
        insert(table).on_conflict_do_nothing(index_elements=[table.c.id]).returning(table.c.id),
        [
            {
                "id": message.id,
                "topic": message.topic,
                "key": message.key,
                "payload": message.payload,
                "headers": dict(message.headers),
            }
            for message in messages
        ],
    )
    return {str(row_id) for row_id in rows.scalars()}


def claim(conn: Connection, tables: StateTables, limit: int) -> list[OutboxRow]:
    """Lock up to `limit` pending rows, oldest first, skipping rows another relay holds."""
    table = tables.outbox
    rows = conn.execute(
        sa.select(table.c.id, table.c.topic, table.c.key, table.c.payload)
        .where(table.c.published_at.is_(None), table.c.failed_at.is_(None))
        .order_by(table.c.created_at, table.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    # Both columns are bytea: psycopg returns bytes (bytes() also accepts a memoryview).
    return [
        OutboxRow(str(r.id), r.topic, None if r.key is None else bytes(r.key), bytes(r.payload))
        for r in rows
    ]


def mark_published(conn: Connection, tables: StateTables, ids: Sequence[str]) -> None:
    if ids:
        table = tables.outbox
        conn.execute(
            sa.update(table).where(table.c.id.in_(list(ids))).values(published_at=sa.func.now())
        )


def record_failures(
    conn: Connection,
    tables: StateTables,
    set_aside: Sequence[tuple[str, str]],
    retry: Sequence[str],
) -> None:
    """Set aside the rows refused for good ((id, failure)); count an attempt on ``retry``."""
    table = tables.outbox
    for row_id, failure in set_aside:
        conn.execute(
            sa.update(table)
            .where(table.c.id == row_id)
            .values(failed_at=sa.func.now(), failure=failure, attempts=table.c.attempts + 1)
        )
    if retry:
        conn.execute(
            sa.update(table)
            .where(table.c.id.in_(list(retry)))
            .values(attempts=table.c.attempts + 1)
        )


def retry_set_aside(conn: Connection, tables: StateTables, ids: Sequence[str] | None = None) -> int:
    """Put set-aside rows (these ids, or all with None) back in the queue; return how many."""
    table = tables.outbox
    statement = sa.update(table).where(
        table.c.published_at.is_(None), table.c.failed_at.is_not(None)
    )
    if ids is not None:
        statement = statement.where(table.c.id.in_(list(ids)))
    result = conn.execute(statement.values(failed_at=None))
    return int(result.rowcount)


def outbox_stats(conn: Connection, tables: StateTables) -> OutboxStats:
    """Pending rows, the age of the oldest one, and rows set aside."""
    backlog, age, set_aside = conn.execute(tables.text(_STATS)).one()
    return OutboxStats(int(backlog), float(age), int(set_aside))


def set_aside_rows(conn: Connection) -> list[dict[str, Any]]:
    """The rows the relay set aside, as the contract's view ``outbox_set_aside`` shows them."""
    rows = [dict(row._mapping) for row in conn.execute(_SET_ASIDE)]
    for row in rows:
        row["id"] = str(row["id"])
    return rows
