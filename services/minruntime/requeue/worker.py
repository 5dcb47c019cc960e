"""The requeue worker loop: leadership by advisory lock, cycles on a timer and on nominations.

Several replicas may run; exactly one is active. The active one holds a session-level
PostgreSQL advisory lock on its own connection and runs every cycle on that same
connection, so a replica that lost its connection (and with it the lock) cannot commit a
cycle: leadership and writes are fenced together. When the active replica dies, PostgreSQL
ends its session, the lock is released, and a standby polling ``pg_try_advisory_lock``
takes over within one poll interval.

A cycle runs every ``interval`` seconds, and sooner when the processor commits nominations
(it sends ``NOTIFY minruntime_nominations`` in the same transaction; the worker LISTENs on
its connection). PostgreSQL lets any role NOTIFY any channel (it cannot be revoked), so a
notification wakes the worker only when its sender's backend (the pid it carries) belongs to
the worker's own role — the processor's; others are counted and ignored.

A serialization conflict with the processor (a victim or beneficiary row
changed since the cycle read its inputs) retries the cycle at once on fresh state.

This module is synchronous and runs in a thread; the composition root runs the outbox relay
next to it and passes ``on_recorded`` to wake the relay after a commit, and runs the
protection-expiry emitter (``expiry.py``) in another thread while ``leading`` is set.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Final, NamedTuple

import psycopg
from psycopg import errors as pg_errors
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError

from minruntime.core import Exclusion, ExclusionReason
from minruntime.health import Condition, one_line
from minruntime.health.outage import waiting_status
from minruntime.requeue.cycle import CycleReport, run_cycle
from minruntime.requeue.metrics import RequeueMetrics
from minruntime.retry import Backoff
from minruntime.store.requeue import listen_for_nominations, own_role_senders, try_leader_lock

log = logging.getLogger(__name__)

# pg_try_advisory_lock key of the worker role: "minrtrqw" as a big-endian int64.
LEADER_LOCK_KEY: Final = int.from_bytes(b"minrtrqw", "big", signed=True)
_CONFLICTS: Final = (pg_errors.SerializationFailure, pg_errors.DeadlockDetected)


class WorkerOptions(NamedTuple):
    """How the worker runs (from Settings)."""

    topic: str
    interval_seconds: float = 10.0
    standby_poll_seconds: float = 1.0
    # After a nomination wakes the worker, wait this long for more before the cycle.
    settle_seconds: float = 0.2
    conflict_retries: int = 5
    # Test hook: exit the process right after a cycle that committed a requeue, before the
    # outbox relay is told (simulates a crash between the database commit and the publish).
    exit_after_commit: bool = False


class RequeueWorker:
    """One replica: standby until it holds the leader lock, then the active cycle loop."""

    def __init__(
        self,
        engine: Engine,
        options: WorkerOptions,
        metrics: RequeueMetrics,
        *,
        on_recorded: Callable[[], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        database: Condition | None = None,
    ) -> None:
        self._engine = engine
        self._options = options
        self._metrics = metrics
        self._on_recorded = on_recorded
        self._clock = clock
        self.stop = threading.Event()
        # Set while this replica holds the leader lock (the expiry emitter runs only then).
        self.leading = threading.Event()
        self.cycles = 0
        # Readiness: the database as this loop last found it, and when the loop last moved.
        self.database = database or Condition(initial=None)
        self._beat: float | None = None

    def run(self) -> None:
        """Until ``stop`` is set: wait for leadership, then run cycles while it holds.

        A database outage of any length is ridden out: back to standby (whatever we held went
        with the session), retry with backoff capped at ~10 s, one status line at most every
        few seconds, readiness failing meanwhile.
        """
        backoff = Backoff(self._options.standby_poll_seconds)
        status = waiting_status("PostgreSQL (requeue worker)")
        while not self.stop.is_set():
            self._beat = time.monotonic()
            try:
                with self._engine.connect() as conn:
                    acquired = try_leader_lock(conn, LEADER_LOCK_KEY)
                    conn.commit()
                    self.database.ok()
                    status.back()
                    backoff.reset()
                    if not acquired:
                        self.stop.wait(self._options.standby_poll_seconds)
                        continue
                    self._lead(conn)
            except (DBAPIError, psycopg.Error) as error:
                # Another replica may take over meanwhile.
                self._metrics.active.set(0)
                self.database.fail(f"PostgreSQL unreachable: {one_line(error)}")
                status.failed(error)
                self.stop.wait(backoff.next())
        self._metrics.active.set(0)

    def loop_problem(self) -> str | None:
        """Readiness of the leader loop: None while it runs (active or standby)."""
        beat = self._beat
        if beat is None:
            return "the leader loop has not started"
        if self.stop.is_set():
            return "stopping"
        quiet = time.monotonic() - beat
        # A cycle may be slow on a big cluster; only a loop silent for much longer is stuck.
        if quiet > max(3 * self._options.interval_seconds, 60.0):
            return f"the leader loop has not moved for {quiet:.0f}s"
        return None

    def _lead(self, conn: Connection) -> None:
        listen_for_nominations(conn)
        conn.commit()
        self._metrics.active.set(1)
        self.leading.set()
        log.warning("requeue worker is active (pid %d)", os.getpid())
        conn = conn.execution_options(isolation_level="REPEATABLE READ")
        try:
            while not self.stop.is_set():
                self._beat = time.monotonic()
                self.cycle(conn)
                self._wait_for_trigger(conn)
        finally:
            self.leading.clear()
            self._metrics.active.set(0)
            # The leadership is this session's advisory lock (and its LISTEN): closed, not
            # returned to the pool, so a stopped worker in a process that goes on (an embedding,
            # a test) does not keep the lock from the next replica.
            conn.invalidate()

    def cycle(self, conn: Connection) -> CycleReport | None:
        """Run one cycle (retrying conflicts); None if every retry conflicted."""
        options = self._options
        for _ in range(options.conflict_retries + 1):
            started = time.perf_counter()
            try:
                with conn.begin():
                    report = run_cycle(
                        conn, now=self._clock(), topic=options.topic, clock=self._clock
                    )
            except DBAPIError as error:
                if isinstance(error.orig, _CONFLICTS):
                    self._metrics.cycles.labels("conflict").inc()
                    log.info("requeue cycle conflicted with the processor; running it again")
                    continue
                if _connection_lost(error):
                    self._metrics.cycles.labels("failed").inc()
                    raise
                self._failed(error)
                return None
            except pg_errors.OperationalError:
                self._metrics.cycles.labels("failed").inc()
                raise
            except Exception as error:
                self._failed(error)
                return None
            self.cycles += 1
            self._metrics.cycles.labels("ok").inc()
            self._metrics.cycle_seconds.observe(time.perf_counter() - started)
            self._metrics.observe(report)
            if report.committed:
                log.warning(
                    "requeue committed: %s",
                    ", ".join(f"{d.uid} for {'+'.join(d.beneficiaries)}" for d in report.committed),
                )
                if options.exit_after_commit:
                    log.error("exit_after_commit: exiting before the publish (test hook)")
                    os._exit(70)
            if report.recorded and self._on_recorded is not None:
                self._on_recorded()
            return report
        log.warning("requeue cycle gave up after %d conflicts", options.conflict_retries + 1)
        return None

    def _failed(self, error: Exception) -> None:
        """A cycle that raised for what the database holds: logged, counted, tried again.

        The cycle's inputs exclude every unusable value it knows of; this is the last line, so
        that nothing stored can stop the active replica (and then the standby, forever).
        The transaction was rolled back; the next cycle runs on schedule.
        """
        self._metrics.cycles.labels("failed").inc()
        self._metrics.observe_excluded(
            [Exclusion("cycle", "requeue", ExclusionReason.PLANNER_ERROR, one_line(error))]
        )
        log.error("requeue cycle failed, decided nothing: %s", one_line(error))

    def _wait_for_trigger(self, conn: Connection) -> None:
        """Sleep until the next cycle is due, a nomination arrives, or we are stopped."""
        driver = conn.connection.driver_connection
        assert driver is not None
        due = time.monotonic() + self._options.interval_seconds
        while not self.stop.is_set():
            self._beat = time.monotonic()
            remaining = due - time.monotonic()
            if remaining <= 0:
                return
            # Short slices keep stop() responsive; a notification of our role starts a cycle.
            senders = [n.pid for n in driver.notifies(timeout=min(remaining, 0.5), stop_after=1)]
            if senders:
                settle = self._options.settle_seconds
                # Drain the burst: one cycle serves every nomination that arrived together.
                senders.extend(n.pid for n in driver.notifies(timeout=settle))
                if self._from_own_role(conn, senders):
                    return

    def _from_own_role(self, conn: Connection, senders: list[int]) -> bool:
        """True when one of ``senders`` is a backend of this worker's role; count the others."""
        pids = sorted(set(senders))
        # A fresh transaction: pg_stat_activity is a snapshot per transaction.
        # A sender that already disconnected is not found: its notification is ignored.
        own = own_role_senders(conn, pids)
        conn.rollback()
        if own:
            return True
        self._metrics.notifications_ignored.inc(len(senders))
        log.info("ignored %d notification(s) from other roles' backends %s", len(senders), pids)
        return False


def _connection_lost(error: DBAPIError) -> bool:
    return error.connection_invalidated or isinstance(error, OperationalError | InterfaceError)
