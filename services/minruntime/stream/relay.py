"""The outbox relay: publishes rows written in the same transaction as the state they describe.

At least once, never lost: rows are claimed with `FOR UPDATE SKIP LOCKED` (several relays may
run), published with an idempotent producer and awaited, and only then marked published in
the same transaction. A crash between the publish and the mark re-publishes the same rows
with the same `id` (record header `id`, and inside the payload) so consumers de-duplicate.

One row never blocks the others (docs/events.md, "Outbox rows the broker refuses"): each row's
send is judged on its own. A row the broker refuses for a reason that will not change on retry
(too large, invalid topic, an invalid record) is set aside — `failed_at`, `failure`, logged
once, counted — and the rest of the batch is published and marked. A refusal that came back
for a whole produce batch is confirmed by sending that row alone first, so an innocent row
sharing a batch with a bad one is never set aside. Anything else (broker away, leader
moving, timeouts, authorization) is retriable: those rows stay pending and the relay backs
off (capped), nothing set aside.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from sqlalchemy import Engine

from minruntime.kafka_access import KafkaAccess
from minruntime.retry import MAX_BACKOFF_SECONDS, Backoff, Outage
from minruntime.store import outbox
from minruntime.store.outbox import OutboxRow
from minruntime.store.schema import LIVE
from minruntime.stream.outbox_metrics import OutboxMetrics, read_outbox_stats

log = logging.getLogger(__name__)

# How often the backlog gauges are refreshed from the table.
STATS_SECONDS: Final = 2.0


@dataclass
class PublishReport:
    """What one claim-send-mark round did with its rows."""

    published: list[str] = field(default_factory=list)
    # (row id, reason label, one-line failure) of the rows set aside.
    set_aside: list[tuple[str, str, str]] = field(default_factory=list)
    # Rows left pending after a retriable failure, and the first such failure.
    retry: list[str] = field(default_factory=list)
    retry_error: BaseException | None = None


def permanent_reason(error: BaseException) -> str | None:
    """The set-aside reason label of an error that will not change on retry; None: retriable."""
    from aiokafka import errors

    reasons: tuple[tuple[tuple[type[BaseException], ...], str], ...] = (
        (
            (
                errors.MessageSizeTooLargeError,
                errors.RecordListTooLargeError,
                errors.RecordTooLargeError,
            ),
            "too_large",
        ),
        ((errors.InvalidTopicError,), "invalid_topic"),
        (
            (
                errors.CorruptRecordException,
                errors.UnsupportedForMessageFormatError,
                errors.PolicyViolationError,
            ),
            "invalid_record",
        ),
        # Raised by send() itself for a key, value or header the client cannot encode.
        ((TypeError, ValueError), "unencodable"),
    )
    for kinds, reason in reasons:
        if isinstance(error, kinds):
            return reason
    return None


class OutboxRelay:
    """Publishes outbox rows to Kafka; wake it with `notify()` after a commit that added rows."""

    def __init__(
        self,
        engine: Engine,
        access: KafkaAccess,
        *,
        poll_seconds: float = 0.25,
        batch: int = 500,
        metrics: OutboxMetrics | None = None,
    ) -> None:
        self._engine = engine
        self._access = access
        self._poll = poll_seconds
        self._batch = batch
        self._metrics = metrics
        self._wake = asyncio.Event()
        self._stats_due = 0.0
        self.published = 0

    def notify(self) -> None:
        """Something was written to the outbox: publish without waiting for the next poll."""
        self._wake.set()

    async def run(self) -> None:
        """Publish forever (the processor's background task)."""
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**self._access.client_kwargs(), enable_idempotence=True)
        await producer.start()
        backoff = Backoff(self._poll, MAX_BACKOFF_SECONDS)
        outage = Outage("outbox publishing", log)
        try:
            while True:
                failure: BaseException | None = None
                try:
                    report = await self.publish_once(producer)
                except Exception as exc:
                    # Nothing was marked: the same rows (same ids) go out on the next try.
                    failure, report = exc, None
                await self._refresh_stats()
                if report is None or report.retry:
                    # One line when publishing stops, a reminder a minute, one when it resumes.
                    outage.failed(
                        (failure or "unknown error")
                        if report is None
                        else f"{len(report.retry)} row(s) not published: {report.retry_error!r}"
                    )
                    await asyncio.sleep(backoff.next())
                    continue
                outage.back()
                backoff.reset()
                if len(report.published) + len(report.set_aside) < self._batch:
                    self._wake.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._wake.wait(), self._poll)
        finally:
            await producer.stop()

    async def publish_once(self, producer: Any) -> PublishReport:
        """Claim, publish and mark one batch; set aside rows the broker refuses for good."""
        conn = await asyncio.to_thread(self._engine.connect)
        try:
            transaction = conn.begin()
            rows = await asyncio.to_thread(outbox.claim, conn, LIVE, self._batch)
            if not rows:
                transaction.rollback()
                return PublishReport()
            report = await send_rows(producer, rows)
            await asyncio.to_thread(outbox.mark_published, conn, LIVE, report.published)
            await asyncio.to_thread(
                outbox.record_failures,
                conn,
                LIVE,
                [(row_id, failure) for row_id, _, failure in report.set_aside],
                report.retry,
            )
            await asyncio.to_thread(transaction.commit)
        finally:
            await asyncio.to_thread(conn.close)
        self.published += len(report.published)
        for row_id, reason, failure in report.set_aside:
            # Logged once: a set-aside row is not claimed again until an operator retries it.
            log.error("outbox row %s set aside (%s): %s", row_id, reason, failure)
        if self._metrics is not None:
            self._metrics.observe(report)
        return report

    async def _refresh_stats(self) -> None:
        if self._metrics is None:
            return
        now = asyncio.get_running_loop().time()
        if now < self._stats_due:
            return
        self._stats_due = now + STATS_SECONDS
        try:
            stats = await asyncio.to_thread(read_outbox_stats, self._engine)
        except Exception as exc:  # the database is away: the gauges keep their last values
            log.debug("outbox stats not read: %r", exc)
            return
        self._metrics.set_stats(stats)


async def send_rows(producer: Any, rows: Sequence[OutboxRow]) -> PublishReport:
    """Send every row, then await them all; judge each row by its own outcome."""
    outcomes: dict[str, BaseException | None] = {}
    # Rows whose error came from a produce batch (maybe another row's fault) vs. send() itself.
    batched: dict[str, Any] = {}
    for row in rows:
        try:
            batched[row.id] = await _enqueue(producer, row)
        except Exception as exc:
            outcomes[row.id] = exc
    gathered = await asyncio.gather(*batched.values(), return_exceptions=True)
    results = dict(zip(batched, gathered, strict=True))
    report = PublishReport()
    for row in rows:
        if row.id in outcomes:
            error = outcomes[row.id]
        else:
            result = results[row.id]
            error = result if isinstance(result, BaseException) else None
            if error is not None and permanent_reason(error) is not None:
                # Refused with its batch: only the row alone tells whose fault it was.
                error = await _send_alone(producer, row)
        _judge(report, row.id, error)
    return report


async def _enqueue(producer: Any, row: OutboxRow) -> Any:
    return await producer.send(row.topic, row.value, key=row.key, headers=[("id", row.id.encode())])


async def _send_alone(producer: Any, row: OutboxRow) -> BaseException | None:
    try:
        await (await _enqueue(producer, row))
    except Exception as exc:
        return exc
    return None


def _judge(report: PublishReport, row_id: str, error: BaseException | None) -> None:
    if error is None:
        report.published.append(row_id)
        return
    reason = permanent_reason(error)
    if reason is None:
        report.retry.append(row_id)
        if report.retry_error is None:
            report.retry_error = error
        return
    text = " ".join(f"{type(error).__name__}: {error}".split())[:500]
    report.set_aside.append((row_id, reason, text))
