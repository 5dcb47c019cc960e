"""Retrying with capped backoff and one status line per outage, for every part of the service.

A dependency that is away (an API server, Kafka, a disruption budget saying "not now") is
waited for, not reported once per attempt: ONE warning when an outage starts, a reminder at
most every `STATUS_EVERY_SECONDS` (longer than the backoff's cap, so a long outage is not a
line per attempt), and one line when it ends. Standard library only, so that `cluster/`,
which may not import the database drivers that `health` does, shares it with the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Final, TypeVar

T = TypeVar("T")

FIRST_BACKOFF_SECONDS: Final = 0.5
MAX_BACKOFF_SECONDS: Final = 10.0
STATUS_EVERY_SECONDS: Final = 60.0

log = logging.getLogger(__name__)


def one_line(error: BaseException | str, limit: int = 300) -> str:
    """An error (or any text) as one short line, for a status or a readiness reason."""
    if not isinstance(error, str):
        # A wrapper (SQLAlchemy's) keeps the driver's error in `orig`: that one says it all.
        error = getattr(error, "orig", None) or error
    if isinstance(error, str):
        text = error
    else:
        name, said = error.__class__.__name__, str(error)
        text = said if said.startswith(name) else f"{name}: {said}"
    return " ".join(str(text).split())[:limit]


class Backoff:
    """Exponential delays, doubling from `first` up to `cap`; `reset()` after a success."""

    def __init__(
        self, first: float = FIRST_BACKOFF_SECONDS, cap: float = MAX_BACKOFF_SECONDS
    ) -> None:
        self._first, self._cap = first, cap
        self._next = first

    def next(self) -> float:
        """The delay before the next attempt."""
        delay, self._next = self._next, min(self._next * 2, self._cap)
        return delay

    def reset(self) -> None:
        """Start again from the first delay."""
        self._next = self._first


class Outage:
    """The status line of one outage: a line when it starts, a reminder, a line when it ends."""

    def __init__(
        self,
        what: str,
        logger: logging.Logger = log,
        every: float = STATUS_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._what, self._log, self._every, self._clock = what, logger, every, clock
        self._since: float | None = None
        self._last = 0.0
        self._failures = 0

    def failed(self, error: BaseException | str) -> None:
        """An attempt failed: say so if the outage starts, or if the last line is old."""
        now = self._clock()
        self._failures += 1
        if self._since is None:
            self._since = self._last = now
            self._log.warning("%s: %s; retrying with backoff", self._what, one_line(error))
        elif now - self._last >= self._every:
            self._last = now
            self._log.warning(
                "%s: %s; still retrying after %.0fs (%d attempts)",
                self._what,
                one_line(error),
                now - self._since,
                self._failures,
            )

    def back(self) -> None:
        """An attempt succeeded: say the outage is over, if one was reported."""
        if self._since is not None:
            self._log.warning(
                "%s is back after %.0fs (%d attempts)",
                self._what,
                self._clock() - self._since,
                self._failures + 1,
            )
        self._since, self._failures = None, 0


def retry(
    attempt: Callable[[], T],
    *,
    what: str,
    stop: threading.Event,
    transient: Callable[[Exception], bool] = lambda error: True,
    backoff: Backoff | None = None,
    logger: logging.Logger | None = None,
    cap: float | None = None,
) -> T:
    """Call `attempt` until it returns, and return what it returns (blocking).

    An error that is not `transient` propagates at once. Between attempts it waits on `stop`;
    `InterruptedError` once `stop` is set (also before the first attempt). `cap` bounds the
    default backoff's delays.
    """
    delays = backoff or Backoff(cap=MAX_BACKOFF_SECONDS if cap is None else cap)
    outage = Outage(what, logger or log)
    while not stop.is_set():
        try:
            result = attempt()
        except Exception as error:
            if not transient(error):
                raise
            outage.failed(error)
            stop.wait(delays.next())
            continue
        outage.back()
        return result
    raise InterruptedError(f"stopped while retrying {what}")


async def retry_async(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    stop: threading.Event | asyncio.Event,
    transient: Callable[[Exception], bool] = lambda error: True,
    backoff: Backoff | None = None,
    logger: logging.Logger | None = None,
    cap: float | None = None,
) -> T:
    """`retry` for a coroutine function; a `threading.Event` is waited on in a thread."""
    delays = backoff or Backoff(cap=MAX_BACKOFF_SECONDS if cap is None else cap)
    outage = Outage(what, logger or log)
    while not stop.is_set():
        try:
            result = await attempt()
        except Exception as error:
            if not transient(error):
                raise
            outage.failed(error)
            await _wait(stop, delays.next())
            continue
        outage.back()
        return result
    raise InterruptedError(f"stopped while retrying {what}")


async def _wait(stop: threading.Event | asyncio.Event, delay: float) -> None:
    if isinstance(stop, threading.Event):
        await asyncio.to_thread(stop.wait, delay)
        return
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), delay)
