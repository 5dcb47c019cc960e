"""The relay judges each outbox row by its own outcome (fake producer: the logic only).

The real broker cases (a 2 MiB row refused, the rows after it published) are in
tests/e2e/test_bounded_outputs.py; here the cases a broker makes hard to stage: a whole
produce batch refused for one row, and a mix of permanent and retriable failures.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import errors

from minruntime.stream.relay import OutboxRow, PublishReport, permanent_reason, send_rows


class FakeProducer:
    """send() refuses or fails rows by name; `batch_refused` fail together the first time."""

    def __init__(self, *, too_large: set[str], broker_away: set[str], batch_refused: set[str]):
        self.too_large = too_large
        self.broker_away = broker_away
        self.batch_refused = batch_refused
        self.sent: list[str] = []

    async def send(self, topic: str, value: bytes, *, key: Any, headers: Any) -> Any:
        name = value.decode()
        if name in self.too_large:
            raise errors.MessageSizeTooLargeError("too large")
        self.sent.append(name)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if name in self.broker_away:
            future.set_exception(errors.KafkaConnectionError("broker away"))
        elif name in self.batch_refused:
            # The broker refused the batch this row was in; alone it would pass.
            self.batch_refused.discard(name)
            future.set_exception(errors.MessageSizeTooLargeError("batch too large"))
        else:
            future.set_result(None)
        return future


def rows(*names: str) -> list[OutboxRow]:
    return [OutboxRow(name, "t", None, name.encode()) for name in names]


def run(producer: FakeProducer, *names: str) -> PublishReport:
    return asyncio.run(send_rows(producer, rows(*names)))


def test_a_refused_row_is_set_aside_and_the_others_are_published() -> None:
    producer = FakeProducer(too_large={"big"}, broker_away=set(), batch_refused=set())
    report = run(producer, "a", "big", "b")
    assert report.published == ["a", "b"]
    assert [(row, reason) for row, reason, _ in report.set_aside] == [("big", "too_large")]
    assert (
        report.set_aside[0][2]
        == "MessageSizeTooLargeError: [Error 10] MessageSizeTooLargeError: too large"
    )
    assert report.retry == []


def test_an_innocent_row_of_a_refused_batch_is_sent_alone_and_published() -> None:
    producer = FakeProducer(too_large=set(), broker_away=set(), batch_refused={"innocent"})
    report = run(producer, "innocent", "c")
    assert report.published == ["innocent", "c"]
    assert report.set_aside == []
    assert producer.sent == ["innocent", "c", "innocent"]


def test_retriable_failures_are_left_pending_and_nothing_is_set_aside() -> None:
    producer = FakeProducer(too_large=set(), broker_away={"x"}, batch_refused=set())
    report = run(producer, "x", "y")
    assert (report.published, report.retry, report.set_aside) == (["y"], ["x"], [])
    assert isinstance(report.retry_error, errors.KafkaConnectionError)


def test_only_errors_that_cannot_change_are_permanent() -> None:
    assert permanent_reason(errors.MessageSizeTooLargeError()) == "too_large"
    assert permanent_reason(errors.RecordListTooLargeError()) == "too_large"
    assert permanent_reason(errors.InvalidTopicError()) == "invalid_topic"
    assert permanent_reason(errors.CorruptRecordException()) == "invalid_record"
    assert permanent_reason(TypeError("key must be bytes")) == "unencodable"
    for retriable in (
        errors.KafkaConnectionError(),
        errors.KafkaTimeoutError(),
        errors.NotLeaderForPartitionError(),
        errors.UnknownTopicOrPartitionError(),
        errors.TopicAuthorizationFailedError(),
    ):
        assert permanent_reason(retriable) is None
