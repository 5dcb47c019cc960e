"""Riding out an outage of PostgreSQL or Kafka: which errors pass, capped backoff, one status line.

The processor and the worker never exit because a dependency is away, however long: they
retry with exponential backoff capped at `MAX_BACKOFF_SECONDS`, report not-ready meanwhile,
and say so in ONE line, repeated at most every `STATUS_EVERY_SECONDS` (never a traceback).
An error that will not pass by waiting (a schema not migrated, a bad setting) still stops
the process with its one-line message.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Final, TypeVar

import psycopg
from sqlalchemy.exc import DBAPIError, OperationalError

from minruntime.health.checks import Condition, one_line
from minruntime.retry import MAX_BACKOFF_SECONDS
from minruntime.retry import Backoff as Backoff  # its home is stdlib-only, shared with cluster/
from minruntime.store.failures import is_permanent

log = logging.getLogger("minruntime.outage")

T = TypeVar("T")

STATUS_EVERY_SECONDS: Final = 5.0


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


class StatusLine:
    """One line about an outage, logged at most every `every` seconds, and one when it ends.

    With `grace`, an outage shorter than that is not reported at all (a rebalance, a broker
    electing a coordinator: normal moments, not outages).
    """

    def __init__(
        self,
        what: str,
        every: float = STATUS_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        grace: float = 0.0,
    ) -> None:
        self._what, self._every, self._clock, self._grace = what, every, clock, grace
        self._since: float | None = None
        self._last: float | None = None

    def waiting(self, reason: BaseException | str) -> None:
        """Still away: say so, unless the last line is younger than `every`."""
        now = self._clock()
        if self._since is None:
            self._since = now
        if now - self._since < self._grace:
            return
        if self._last is not None and now - self._last < self._every:
            return
        self._last = now
        log.warning(
            "waiting for %s (%.0fs so far, retrying): %s",
            self._what,
            now - self._since,
            one_line(reason),
        )

    def back(self) -> None:
        """The outage is over (says so only if it was reported)."""
        if self._since is not None and self._last is not None:
            log.warning("%s is back after %.0fs", self._what, self._clock() - self._since)
        self._since = self._last = None


@contextlib.contextmanager
def quiet_kafka_client() -> Iterator[None]:
    """Silence aiokafka's own per-attempt error lines while we report the outage ourselves."""
    logger = logging.getLogger("aiokafka")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def wait_until_available(
    what: str,
    attempt: Callable[[], T],
    *,
    transient: Callable[[BaseException], bool] = storage_transient,
    condition: Condition | None = None,
    stop: threading.Event | None = None,
    backoff: Backoff | None = None,
) -> T:
    """Call `attempt` until it does not raise a `transient` error; return what it returns.

    While it fails: one status line at most every few seconds, `condition` failing with the
    reason. Anything else it raises propagates (a user error stays a user error). With
    `stop`, waiting ends early by raising `InterruptedError` once it is set.
    """
    delays = backoff or Backoff()
    status = StatusLine(what)
    stop = stop or threading.Event()
    while True:
        try:
            with quiet_kafka_client():
                result = attempt()
        except Exception as error:
            if not transient(error):
                raise
            if condition is not None:
                condition.fail(f"{what} unavailable: {one_line(error)}")
            status.waiting(error)
            if stop.wait(delays.next()):
                raise InterruptedError(f"stopped while waiting for {what}") from None
            continue
        status.back()
        if condition is not None:
            condition.ok()
        return result


async def keep_running(what: str, run: Callable[[], Awaitable[None]]) -> None:
    """Run a background coroutine for ever: after a failure, restart it with capped backoff.

    For a task (the outbox relay) whose start or loop fails while Kafka or PostgreSQL is away:
    without this, one failure would end the task silently and its work would stop for good.
    """
    delays = Backoff()
    status = StatusLine(what)
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
            status.waiting(error)
            await asyncio.sleep(delays.next())


class RepeatFilter(logging.Filter):
    """Lets each distinct message template through at most once every `every` seconds.

    aiokafka logs every failed attempt while the broker is away (~40 lines a second); the
    first of each kind stays visible, and our own status line tells how long it lasts.
    """

    def __init__(self, every: float = 60.0, clock: Callable[[], float] = time.monotonic) -> None:
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


def quiet_kafka_client_repeats(every: float = 60.0) -> None:
    """Put a `RepeatFilter` on every aiokafka logger (a filter does not reach child loggers)."""
    repeat = RepeatFilter(every)
    names = [n for n in logging.Logger.manager.loggerDict if n.split(".")[0] == "aiokafka"]
    for name in {"aiokafka", *names}:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RepeatFilter) for f in logger.filters):
            logger.addFilter(repeat)
