"""Riding out an outage of PostgreSQL or Kafka: which errors pass, capped backoff, one status line.

The processor and the worker never exit because a dependency is away, however long: they
retry with exponential backoff capped at `MAX_BACKOFF_SECONDS`, report not-ready meanwhile,
and say so in ONE line, repeated at most every `WAITING_STATUS_EVERY_SECONDS` (never a
traceback): `retry` and `Outage` of `minruntime.retry`, with the processor's wording.
An error that will not pass by waiting (a schema not migrated, a bad setting) still stops
the process with its one-line message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import psycopg
from sqlalchemy.exc import DBAPIError, OperationalError

from minruntime.health.checks import Condition, one_line
from minruntime.retry import (
    CLIENT_REPEAT_EVERY_SECONDS,
    MAX_BACKOFF_SECONDS,
    WAITING,
    WAITING_STATUS_EVERY_SECONDS,
    Backoff,
    Outage,
    retry,
)
from minruntime.store.failures import is_permanent

log = logging.getLogger("minruntime.outage")

T = TypeVar("T")


def storage_transient(error: BaseException) -> bool:
    """A PostgreSQL error that waiting can cure: the server is away, restarting or refusing.

    The one classification of failures that retrying cannot cure is `store.failures`; an
    error it calls permanent (e.g. SQLSTATE 54, which psycopg raises as OperationalError) is
    never waited for.
    """
    if is_permanent(error):
        return False
    if isinstance(error, OperationalError | psycopg.OperationalError):
        return True
    return isinstance(error, DBAPIError) and error.connection_invalidated


def waiting_status(what: str, *, grace: float = 0.0) -> Outage:
    """The status line of the processor or the worker waiting for `what` (every 5 s)."""
    return Outage(what, log, WAITING_STATUS_EVERY_SECONDS, grace=grace, wording=WAITING)


def wait_until_available(
    what: str,
    attempt: Callable[[], T],
    *,
    transient: Callable[[BaseException], bool] = storage_transient,
    condition: Condition | None = None,
    backoff: Backoff | None = None,
) -> T:
    """Call `attempt` until it does not raise a `transient` error; return what it returns.

    While it fails: one status line at most every few seconds, `condition` failing with the
    reason. Anything else it raises propagates (a user error stays a user error).
    """

    def quietly() -> T:
        # aiokafka's own per-attempt error lines are silenced: we report the outage ourselves.
        logger = logging.getLogger("aiokafka")
        level = logger.level
        logger.setLevel(logging.CRITICAL)
        try:
            return attempt()
        finally:
            logger.setLevel(level)

    def unavailable(error: Exception) -> None:
        if condition is not None:
            condition.fail(f"{what} unavailable: {one_line(error)}")

    result = retry(
        quietly,
        what=what,
        transient=transient,
        backoff=backoff,
        outage=waiting_status(what),
        on_failure=unavailable,
    )
    if condition is not None:
        condition.ok()
    return result


async def keep_running(what: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run a background coroutine for ever: after a failure, restart it with capped backoff.

    For a task (the outbox relay) whose start or loop fails while Kafka or PostgreSQL is away:
    without this, one failure would end the task silently and its work would stop for good.
    A restart loop, not `retry_async`: a run that lasted longer than the cap starts the
    backoff afresh, and nothing says "back" (a restarted run does not return).
    """
    delays = Backoff()
    status = waiting_status(what)
    while True:
        started = time.monotonic()
        try:
            await run()
            return
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if time.monotonic() - started > MAX_BACKOFF_SECONDS:
                delays.reset()
            status.failed(error)
            await asyncio.sleep(delays.next())


class RepeatFilter(logging.Filter):
    """Lets each distinct message template through at most once every `every` seconds.

    aiokafka logs every failed attempt while the broker is away (~40 lines a second); the
    first of each kind stays visible, and our own status line tells how long it lasts.
    """

    def __init__(
        self,
        every: float = CLIENT_REPEAT_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        self._every, self._clock = every, clock
        self._last: dict[tuple[str, object], float] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = self._clock()
        last = self._last.get(key)
        if last is not None and now - last < self._every:
            return False
        self._last[key] = now
        return True


def quiet_kafka_client_repeats(every: float = CLIENT_REPEAT_EVERY_SECONDS) -> None:
    """Put a `RepeatFilter` on every aiokafka logger (a filter does not reach child loggers)."""
    repeat = RepeatFilter(every)
    names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] == "aiokafka"]
    for name in {"aiokafka", *names}:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatFilter) for f in logger.filters):
            logger.addFilter(repeat)
