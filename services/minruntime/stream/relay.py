"""The outbox relay: publishes rows written in the same transaction as the state they describe.

At least once, never lost: rows are claimed with `FOR UPDATE SKIP LOCKED` (several relays may
run), published with an idempotent producer and awaited, and only then marked published in
the same transaction. A crash between the publish and the mark re-publishes the same rows
with the same `id` (record header `id`, and inside the payload) so consumers de-duplicate.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy import Connection, Engine

from minruntime.kafka_access import KafkaAccess
from minruntime.store.tables import outbox

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class OutboxRow:
    """One message waiting to be published."""

    id: str
    topic: str
    key: bytes | None
    value: bytes


def claim(conn: Connection, limit: int) -> list[OutboxRow]:
    """Lock up to `limit` unpublished rows, oldest first, skipping rows another relay holds."""
    rows = conn.execute(
        sa.select(outbox.c.id, outbox.c.topic, outbox.c.key, outbox.c.payload)
        .where(outbox.c.published_at.is_(None))
        .order_by(outbox.c.created_at, outbox.c.id)
        .limit(limit)
        .with_for_update(skip_locked=True)
    ).all()
    # Both columns are bytea: psycopg returns bytes (bytes() also accepts a memoryview).
    return [
        OutboxRow(str(r.id), r.topic, None if r.key is None else bytes(r.key), bytes(r.payload))
        for r in rows
    ]


def mark_published(conn: Connection, ids: Sequence[str]) -> None:
    """Record that these rows reached Kafka."""
    if ids:
        conn.execute(
            sa.update(outbox).where(outbox.c.id.in_(list(ids))).values(published_at=sa.func.now())
        )


class OutboxRelay:
    """Publishes outbox rows to Kafka; wake it with `notify()` after a commit that added rows."""

    def __init__(
        self, engine: Engine, access: KafkaAccess, *, poll_seconds: float = 0.25, batch: int = 500
    ) -> None:
        self._engine = engine
        self._access = access
        self._poll = poll_seconds
        self._batch = batch
        self._wake = asyncio.Event()
        self.published = 0

    def notify(self) -> None:
        """Something was written to the outbox: publish without waiting for the next poll."""
        self._wake.set()

    async def run(self) -> None:
        """Publish forever (the processor's background task)."""
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**self._access.client_kwargs(), enable_idempotence=True)
        await producer.start()
        backoff = self._poll
        try:
            while True:
                try:
                    sent = await self.publish_once(producer)
                except Exception as exc:
                    # Nothing was marked: the same rows (same ids) go out on the next try.
                    log.warning("outbox publish failed, retrying in %.1fs: %r", backoff, exc)
                    await asyncio.sleep(backoff)
                    backoff = min(backoff * 2, 10.0)
                    continue
                backoff = self._poll
                if sent < self._batch:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self._poll)
        finally:
            await producer.stop()

    async def publish_once(self, producer: Any) -> int:
        """Claim, publish and mark one batch; return how many rows were published."""
        conn = await asyncio.to_thread(self._engine.connect)
        try:
            transaction = conn.begin()
            rows = await asyncio.to_thread(claim, conn, self._batch)
            if not rows:
                transaction.rollback()
                return 0
            futures = [
                await producer.send(
                    row.topic, row.value, key=row.key, headers=[("id", row.id.encode())]
                )
                for row in rows
            ]
            await asyncio.gather(*futures)
            await asyncio.to_thread(mark_published, conn, [row.id for row in rows])
            await asyncio.to_thread(transaction.commit)
        finally:
            await asyncio.to_thread(conn.close)
        self.published += len(rows)
        return len(rows)
