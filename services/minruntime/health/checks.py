"""Liveness and readiness of one long-running process (the processor, a worker replica).

- Liveness (`/healthz`): the process's event loop still runs callbacks. A supervisor restarts
  a process that is not alive; nothing else belongs here (an outage of PostgreSQL or Kafka is
  not a reason to restart: the process rides it out).
- Readiness (`/readyz`): every named check passes. A check is any `fn() -> str | None` that
  returns None when fine, else a one-line reason; parts of the service add their own with
  `add_check(name, fn)`. Checks are called from the HTTP server's thread, so they must be
  cheap and thread-safe: read a state the process keeps up to date (a `Condition`), never do
  I/O of their own.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

from minruntime.retry import one_line as one_line  # its home is stdlib-only, for cluster/

log = logging.getLogger(__name__)

Check = Callable[[], "str | None"]


class Readiness:
    """Named checks; ready when every one of them returns None."""

    def __init__(self) -> None:
        self._checks: dict[str, Check] = {}
        self._lock = threading.Lock()

    def add_check(self, name: str, check: Check) -> None:
        """Add (or replace) the check called `name`."""
        with self._lock:
            self._checks[name] = check

    def remove_check(self, name: str) -> None:
        """Forget the check called `name` (no error if there is none)."""
        with self._lock:
            self._checks.pop(name, None)

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._checks)

    def failures(self) -> dict[str, str]:
        """Name -> reason of every failing check (empty: ready)."""
        with self._lock:
            checks = list(self._checks.items())
        failing: dict[str, str] = {}
        for name, check in checks:
            try:
                reason = check()
            except Exception as error:  # a broken check must not break the endpoint
                reason = f"the check raised {one_line(error)}"
            if reason is not None:
                failing[name] = one_line(reason)
        return failing


class Condition:
    """A readiness check whose state the process sets as it learns it (thread-safe)."""

    def __init__(self, initial: str | None = "starting") -> None:
        self._reason = initial
        self._since = time.monotonic()
        self._lock = threading.Lock()

    def ok(self) -> None:
        """The condition holds."""
        with self._lock:
            if self._reason is not None:
                self._reason, self._since = None, time.monotonic()

    def fail(self, reason: str) -> None:
        """The condition does not hold, because of `reason` (one line)."""
        with self._lock:
            if self._reason is None:
                self._since = time.monotonic()
            self._reason = one_line(reason)

    @property
    def failing(self) -> bool:
        """True while the condition does not hold."""
        return self._reason is not None

    def __call__(self) -> str | None:
        with self._lock:
            if self._reason is None:
                return None
            return f"{self._reason} (for {time.monotonic() - self._since:.0f}s)"


class Liveness:
    """Answers whether the process's asyncio loop still runs callbacks."""

    def __init__(self, timeout: float = 5.0) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timeout = timeout

    def watch(self, loop: asyncio.AbstractEventLoop) -> None:
        """The loop to probe (before it is known, the process counts as alive: starting)."""
        self._loop = loop

    def __call__(self) -> str | None:
        loop = self._loop
        if loop is None:
            return None
        if loop.is_closed():
            return "the event loop is closed"
        answered = threading.Event()
        try:
            loop.call_soon_threadsafe(answered.set)
        except RuntimeError:
            return "the event loop is closed"
        if not answered.wait(self._timeout):
            return f"the event loop did not answer within {self._timeout:.0f}s"
        return None


# The process's own registry: a process runs one service, so one of each (like prometheus's
# default REGISTRY). Other parts of the service plug in with `health.add_check(name, fn)`.
READINESS = Readiness()
LIVENESS = Liveness()


def add_check(name: str, check: Check) -> None:
    """Add a readiness check to this process's `/readyz` (fn() -> None or a one-line reason)."""
    READINESS.add_check(name, check)


def remove_check(name: str) -> None:
    """Remove a readiness check from this process's `/readyz`."""
    READINESS.remove_check(name)
