"""Retrying with capped backoff and one status line per outage, for every part of the service.

A dependency that is away (an API server, Kafka, PostgreSQL, a disruption budget saying "not
now") is waited for, not reported once per attempt: ONE line when an outage starts, a reminder
at most every `every` seconds, and one line when it ends (`Outage`). `retry`/`retry_async`
are the one loop around an attempt, and the only place that says "retrying". Which errors
are waited for is the caller's `transient` (the cluster side's: `cluster.transient`); any
other error propagates at once: a bug is not an outage.

The loops that keep their own `Backoff`, each for what `retry` cannot do (this list is read
by tests/unit/test_backoff_uses.py: a new one is named here, with its reason, or fails it):
- `cluster/bridge.py` `Bridge._list_everything`: a generator that yields what it lists as it
  goes; a failed listing starts its kind over in the mirror before the next attempt.
- `health/outage.py` `keep_running`: restarts a background task for ever; a run that lasted
  longer than the cap starts the backoff afresh, and a restarted run never says "back".
- `requeue/expiry.py` `ExpiryEmitter.run`: a leader's loop: waits for leadership, announces
  until it is lost, backs off through failures; never returns.
- `requeue/worker.py` `RequeueWorker.run`: the worker's leader loop: stands by, leads for
  hours, backs off through a database outage with readiness failing; never returns.
- `stream/consumer.py` `BatchedConsumer._fetch`: fetches for ever; a failed fetch waits, the
  next one goes on (pausing and resuming partitions between them).
- `stream/relay.py` `OutboxRelay.run`: publishes for ever; a failed batch waits its backoff,
  an idle one its poll (or a wake-up).

Every first delay, cap and status cadence of the service is named here, once.

Standard library only, and not in `health/` (e.g. `health/backoff.py`) on purpose: importing
any module of `health/` runs `health/__init__`, which loads the HTTP server and
prometheus_client, and `health/outage.py` (the processor's waiting) needs psycopg, SQLAlchemy
and `store.failures`, which the layers contract forbids `cluster/`. Here `cluster/`,
`stream/`, `requeue/` and `health/` share it without pulling in any of that.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

T = TypeVar("T")

FIRST_BACKOFF_SECONDS: Final = 0.5
MAX_BACKOFF_SECONDS: Final = 10.0
# A batch holds its whole lane while it waits for PostgreSQL: its first retry comes sooner.
BATCH_FIRST_BACKOFF_SECONDS: Final = 0.2
# The protection-expiry emitter only announces (the requeue cycle has its own 10 s cap).
EXPIRY_MAX_BACKOFF_SECONDS: Final = 30.0

# A long outage of the cluster side or of the outbox: a reminder a minute.
STATUS_EVERY_SECONDS: Final = 60.0
# The processor and the worker waiting for PostgreSQL or Kafka (at start, or a batch that
# waits): an operator watches that log while bringing the stack up, so it speaks more often.
WAITING_STATUS_EVERY_SECONDS: Final = 5.0
# aiokafka's own lines while a broker is away (~40 a second): each kind once a minute.
CLIENT_REPEAT_EVERY_SECONDS: Final = 60.0
# The processor's consumer is "not fetching" for a moment at every rebalance or coordinator
# election: normal moments, not outages, so shorter ones are not reported.
KAFKA_GRACE_SECONDS: Final = 10.0

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
        self._next = self._first


@dataclass(frozen=True)
class Wording:
    """The three lines of an outage (%-templates of `what`, `reason`, `seconds`, `attempts`)."""

    started: str
    reminder: str
    back: str


# The cluster side and the outbox: what is retried, and how many attempts it took.
RETRYING: Final = Wording(
    started="%(what)s: %(reason)s; retrying with backoff",
    reminder="%(what)s: %(reason)s; still retrying after %(seconds).0fs (%(attempts)d attempts)",
    back="%(what)s is back after %(seconds).0fs (%(attempts)d attempts)",
)
# The processor and the worker: what they wait for (docs/pipeline.md shows these lines).
WAITING: Final = Wording(
    started="waiting for %(what)s (%(seconds).0fs so far, retrying): %(reason)s",
    reminder="waiting for %(what)s (%(seconds).0fs so far, retrying): %(reason)s",
    back="%(what)s is back after %(seconds).0fs",
)


class Outage:
    """The status line of one outage: a line when it starts, a reminder, a line when it ends.

    With `grace`, an outage shorter than that is not reported at all (not even its end).
    """

    def __init__(
        self,
        what: str,
        logger: logging.Logger = log,
        every: float = STATUS_EVERY_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        *,
        grace: float = 0.0,
        wording: Wording = RETRYING,
    ) -> None:
        self._what, self._log, self._every, self._clock = what, logger, every, clock
        self._grace, self._wording = grace, wording
        self._since: float | None = None
        self._last: float | None = None  # when the last line was said
        self._failures = 0

    def failed(self, error: BaseException | str) -> None:
        """An attempt failed: say so if the outage starts, or if the last line is old."""
        now = self._clock()
        self._failures += 1
        if self._since is None:
            self._since = now
        if now - self._since < self._grace:
            return
        if self._last is not None and now - self._last < self._every:
            return
        template = self._wording.started if self._last is None else self._wording.reminder
        self._last = now
        self._say(template, now, self._failures, one_line(error))

    def back(self) -> None:
        """An attempt succeeded: say the outage is over, if it was reported."""
        if self._since is not None and self._last is not None:
            self._say(self._wording.back, self._clock(), self._failures + 1, "")
        self._since, self._last, self._failures = None, None, 0

    def _say(self, template: str, now: float, attempts: int, reason: str) -> None:
        assert self._since is not None
        seconds = now - self._since
        said = {"what": self._what, "reason": reason, "seconds": seconds, "attempts": attempts}
        self._log.warning(template, said)


def retry(
    attempt: Callable[[], T],
    *,
    what: str,
    stop: threading.Event | None = None,
    transient: Callable[[Exception], bool] = lambda error: True,
    backoff: Backoff | None = None,
    logger: logging.Logger | None = None,
    first: float | None = None,
    cap: float | None = None,
    outage: Outage | None = None,
    on_failure: Callable[[Exception], object] | None = None,
    reason: Callable[[Exception], str] | None = None,
    sleep: Callable[[float], object] | None = None,
) -> T:
    """Call `attempt` until it returns, and return what it returns (blocking).

    An error that is not `transient` propagates at once. After a transient one: `on_failure`
    (e.g. to fail a readiness condition), the status line (`outage`, saying `reason(error)`),
    then a wait on `stop`, or `sleep(delay)` when given. `InterruptedError` once `stop` is set
    (also before the first attempt). `first` and `cap` are the default backoff's first delay
    and bound.
    """
    delays = backoff or _backoff(first, cap)
    status = outage or Outage(what, logger or log)
    while stop is None or not stop.is_set():
        try:
            result = attempt()
        except Exception as error:
            if not transient(error):
                raise
            if on_failure is not None:
                on_failure(error)
            status.failed(error if reason is None else reason(error))
            if sleep is not None:
                sleep(delays.next())
            elif stop is not None:
                stop.wait(delays.next())
            else:
                time.sleep(delays.next())
            continue
        status.back()
        return result
    raise InterruptedError(f"stopped while retrying {what}")


async def retry_async(
    attempt: Callable[[], Awaitable[T]],
    *,
    what: str,
    stop: threading.Event | asyncio.Event | None = None,
    transient: Callable[[Exception], bool] = lambda error: True,
    backoff: Backoff | None = None,
    logger: logging.Logger | None = None,
    cap: float | None = None,
    outage: Outage | None = None,
    sleep: Callable[[float], Awaitable[object]] | None = None,
) -> T:
    """`retry` for a coroutine function; a `threading.Event` is waited on in a thread."""
    delays = backoff or _backoff(None, cap)
    status = outage or Outage(what, logger or log)
    while stop is None or not stop.is_set():
        try:
            result = await attempt()
        except Exception as error:
            if not transient(error):
                raise
            status.failed(error)
            if sleep is not None:
                await sleep(delays.next())
            else:
                await _wait(stop, delays.next())
            continue
        status.back()
        return result
    raise InterruptedError(f"stopped while retrying {what}")


def _backoff(first: float | None, cap: float | None) -> Backoff:
    return Backoff(
        FIRST_BACKOFF_SECONDS if first is None else first,
        MAX_BACKOFF_SECONDS if cap is None else cap,
    )


async def _wait(stop: threading.Event | asyncio.Event | None, delay: float) -> None:
    if stop is None:
        await asyncio.sleep(delay)
    elif isinstance(stop, threading.Event):
        await asyncio.to_thread(stop.wait, delay)
    else:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
