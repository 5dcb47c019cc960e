"""Protection-expiry wake-ups: ``protection.expired`` when a window of a running podgroup ends.

A scheduler with waiting work would otherwise have to poll to learn when a protected victim
becomes evictable. The active requeue-worker replica announces each window end instead
(docs/requeue-worker.md, "Protection-expiry wake-ups"):

- **What.** The windows of every running podgroup (``core.ProtectionWindows``: the preempt
  window and each distinct reclaim window) that end in ``(after, until]``; one event per run
  and window, id = the window's UUIDv5, time = ``protectedUntil``, key = the uid.
- **When.** A check reads the runs whose window may end in ``(after, until + max_sleep]``
  (one scan of the running podgroups, filtered in SQL by the minimum runtimes that exist),
  announces those that ended by ``until`` and sleeps until the next end, at most
  ``max_sleep`` — so new runs and queue or configuration changes are seen within that.
- **How.** In one transaction: ``INSERT … ON CONFLICT (id) DO NOTHING`` into the outbox; the
  relay is woken and publishes at once. A window announced before (by this replica or by a
  previous active one) is not written again, so a restart or a failover never publishes it
  twice, and a brief overlap of two emitters cannot either.
- **Failover.** A replica that becomes active starts at ``now - catch_up``: windows that ended
  while no replica was active are announced late, unless they ended longer ago than that.

The checks run in their own thread on their own connection while this replica holds the
leader lock (``RequeueWorker.leading``), so a long requeue cycle does not delay them.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Final, Literal, NamedTuple

from sqlalchemy import Connection, Engine
from sqlalchemy.exc import DBAPIError

from minruntime.core import (
    Exclusion,
    ExclusionReason,
    MinRuntimeError,
    ProtectedRun,
    ProtectionRule,
    ProtectionWindow,
    ProtectionWindows,
    ReclaimResolveMethod,
)
from minruntime.events import Event, EventType, ProtectionExpiredData, encode_event, new_event
from minruntime.health import one_line
from minruntime.requeue.cycle import WORKER_SOURCE
from minruntime.requeue.cycle_inputs import pool_unusable
from minruntime.requeue.metrics import RequeueMetrics
from minruntime.retry import EXPIRY_MAX_BACKOFF_SECONDS, Backoff, Outage
from minruntime.store.node_pools import read_node_pool_configs
from minruntime.store.outbox import enqueue, event_message
from minruntime.store.queues import load_tree
from minruntime.store.requeue import runs_ending_rows
from minruntime.store.schema import LIVE

log = logging.getLogger(__name__)

_RULES: Final[dict[ProtectionRule, Literal["preempt", "reclaim"]]] = {
    ProtectionRule.PREEMPT: "preempt",
    ProtectionRule.RECLAIM: "reclaim",
}
_METHODS: Final[dict[ReclaimResolveMethod, Literal["lca", "queue"]]] = {
    ReclaimResolveMethod.LCA: "lca",
    ReclaimResolveMethod.QUEUE: "queue",
}
# Woken a hair after a window's end, so the check never runs just before it.
_SLACK: Final = 0.001
# What computing or encoding one run's windows may raise on values at the edge of what
# Python or the wire contract can hold (pydantic's ValidationError is a ValueError).
_UNUSABLE: Final = (ValueError, ArithmeticError)


def _unusable_run(run: ProtectedRun, error: Exception) -> Exclusion:
    return Exclusion("podgroup", run.uid, ExclusionReason.PLANNER_ERROR, one_line(error))


def _reason(error: Exception) -> ExclusionReason:
    # Outside the per-run guard, the core only raises while building the tree or configs.
    if isinstance(error, MinRuntimeError):
        return ExclusionReason.INVALID_QUEUE_TREE
    return ExclusionReason.PLANNER_ERROR


class ExpiryOptions(NamedTuple):
    """How the protection-expiry emitter runs (from Settings)."""

    topic: str
    max_sleep_seconds: float = 0.5
    catch_up_seconds: float = 300.0


class ExpiryReport(NamedTuple):
    """One check: the range it covered, what ended in it, what was newly written."""

    after: datetime
    until: datetime
    # Windows that ended in (after, until], earliest first.
    expired: tuple[ProtectionWindow, ...]
    # Those of them written to the outbox now (the others were announced before).
    written: tuple[ProtectionWindow, ...]
    # The next window end after `until` within the look-ahead, if any.
    next_end: datetime | None
    # Runs or windows left out: their stored values are unusable (counted, logged).
    excluded: tuple[Exclusion, ...] = ()


def expiry_event(window: ProtectionWindow) -> Event:
    """The ``protection.expired`` event of a window (its id is the window's id)."""
    run = window.run
    data = ProtectionExpiredData(
        uid=run.uid,
        queue=run.queue,
        node_pool=run.node_pool,
        run_start=run.start_time,
        rule=_RULES[window.rule],
        reclaim_resolve_method=None
        if window.reclaim_method is None
        else _METHODS[window.reclaim_method],
        step_down_queues=window.step_down_queues,
        min_runtime=window.min_runtime,
        resolved_from=window.resolved_from,
        protected_until=window.protected_until,
    )
    return new_event(
        EventType.PROTECTION_EXPIRED,
        data,
        time=window.protected_until,
        source=WORKER_SOURCE,
        id=window.id,
    )


def write_expiries(
    conn: Connection, windows: Sequence[ProtectionWindow], *, topic: str, excluded: list[Exclusion]
) -> set[str]:
    """Queue the windows' events in the outbox; return the ids that were not there yet.

    A window whose event cannot be built (a value outside the wire contract) is left out and
    appended to ``excluded``; the others are written.
    """
    events: list[Event] = []
    for window in windows:
        try:
            events.append(expiry_event(window))
        except _UNUSABLE as error:
            excluded.append(_unusable_run(window.run, error))
    if not events:
        return set()
    return enqueue(conn, LIVE, [event_message(e, topic, encode_event(e)) for e in events])


def load_runs_ending(
    conn: Connection, spans: Iterable[timedelta], after: datetime, until: datetime
) -> list[ProtectedRun]:
    """Running podgroups with a start time such that start + a span is in (after, until]."""
    span_list = sorted(spans)
    if not span_list:
        return []
    rows = runs_ending_rows(conn, LIVE, span_list, after, until)
    return [
        ProtectedRun(uid=uid, start_time=start, queue=queue, node_pool=pool)
        for uid, queue, pool, start in rows
    ]


class ProtectionExpiry:
    """Which window ends have been announced, and when to look again (one active replica)."""

    def __init__(self, options: ExpiryOptions) -> None:
        self.options = options
        self._after: datetime | None = None
        self._due: datetime | None = None
        self._windows: ProtectionWindows | None = None
        self._spans: frozenset[timedelta] = frozenset()
        self._bad_pools: set[str] = set()

    def start(self, now: datetime) -> None:
        """Leadership begins: look back ``catch_up`` seconds for window ends nobody announced."""
        self._after = now - timedelta(seconds=self.options.catch_up_seconds)
        self._due = now

    def seconds_until_due(self, now: datetime) -> float:
        """How long to sleep before the next check (0: check now)."""
        if self._due is None:
            return 0.0
        return max(0.0, (self._due - now).total_seconds())

    def check(self, conn: Connection, now: datetime) -> ExpiryReport:
        """Announce the windows that ended in (last check, now] in the caller's transaction."""
        if self._after is None:
            self.start(now)
        assert self._after is not None
        after = min(self._after, now)
        horizon = now + timedelta(seconds=self.options.max_sleep_seconds)
        windows = self._current_windows(conn)
        runs = load_runs_ending(conn, self._spans, after, horizon)
        excluded: list[Exclusion] = []
        ending: list[ProtectionWindow] = []
        for run in runs:
            if pool_unusable(run.node_pool, self._bad_pools, windows.configs):
                excluded.append(
                    Exclusion("podgroup", run.uid, ExclusionReason.INVALID_CONFIG, run.node_pool)
                )
                continue
            try:
                ending.extend(windows.ending_between([run], after, horizon))
            except _UNUSABLE as error:
                # One run the arithmetic cannot handle must not stop every announcement.
                excluded.append(_unusable_run(run, error))
        ending.sort(key=lambda w: (w.protected_until, w.run.uid, w.rule, w.id))
        expired = tuple(window for window in ending if window.protected_until <= now)
        upcoming = [window.protected_until for window in ending if window.protected_until > now]
        written_ids = write_expiries(conn, expired, topic=self.options.topic, excluded=excluded)
        for exclusion in excluded:
            log.warning(
                "protection expiry leaves out %s (%s): %s",
                exclusion.name,
                exclusion.reason.value,
                exclusion.detail,
            )
        return ExpiryReport(
            after=after,
            until=now,
            expired=expired,
            written=tuple(window for window in expired if window.id in written_ids),
            next_end=min(upcoming, default=None),
            excluded=tuple(excluded),
        )

    def advance(self, report: ExpiryReport) -> None:
        """The check's transaction committed: the next one starts where it ended."""
        self._after = report.until
        latest = report.until + timedelta(seconds=self.options.max_sleep_seconds)
        self._due = latest if report.next_end is None else min(report.next_end, latest)

    def _current_windows(self, conn: Connection) -> ProtectionWindows:
        tree = load_tree(conn, LIVE)
        configs, self._bad_pools = read_node_pool_configs(conn, LIVE)
        cached = self._windows
        if cached is None or cached.tree is not tree or cached.configs != configs:
            cached = self._windows = ProtectionWindows(tree, configs)
            self._spans = cached.spans()
        return cached


class ExpiryEmitter:
    """Runs the checks on its own connection while this replica is the active one."""

    def __init__(
        self,
        engine: Engine,
        options: ExpiryOptions,
        metrics: RequeueMetrics,
        leading: threading.Event,
        *,
        on_written: Callable[[], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self._engine = engine
        self._metrics = metrics
        self._leading = leading
        self._on_written = on_written
        self._clock = clock
        self.expiry = ProtectionExpiry(options)
        self.stop = threading.Event()
        # A check that cannot run, or its connection lost: one line, a reminder a minute.
        self._outage = Outage("protection-expiry emitter", log)

    def run(self) -> None:
        """Until ``stop`` is set: wait for leadership, then announce window ends while it holds."""
        backoff = Backoff(self.expiry.options.max_sleep_seconds, cap=EXPIRY_MAX_BACKOFF_SECONDS)
        while not self.stop.is_set():
            if not self._leading.wait(0.2):
                continue
            try:
                with self._engine.connect() as conn:
                    self._announce_while_leading(conn)
                backoff.reset()
            except DBAPIError as error:
                self._outage.failed(f"lost its database connection: {one_line(error)}")
                self.stop.wait(backoff.next())
            except Exception as error:
                # Nothing the projections hold may stop the replica (issue 12): a check that
                # cannot run (an unusable queue tree, ...) is logged, counted and tried again;
                # it does not advance, so no window end is skipped once the state is fixed.
                self._metrics.observe_excluded(
                    [Exclusion("check", "protection-expiry", _reason(error), str(error))]
                )
                self._outage.failed(error)
                self.stop.wait(backoff.next())

    def _announce_while_leading(self, conn: Connection) -> None:
        self.expiry.start(self._clock())
        while not self.stop.is_set() and self._leading.is_set():
            wait = self.expiry.seconds_until_due(self._clock())
            if wait > 0:
                self.stop.wait(wait + _SLACK)
                continue
            self.check(conn)
            self._outage.back()

    def check(self, conn: Connection) -> ExpiryReport:
        """One check in its own transaction; wakes the relay when something was written."""
        with conn.begin():
            report = self.expiry.check(conn, self._clock())
        self.expiry.advance(report)
        self._metrics.observe_expiry(report.written, self._clock())
        self._metrics.observe_excluded(report.excluded)
        for window in report.written:
            log.info(
                "protection.expired %s %s %s (until %s)",
                window.run.uid,
                window.rule.value,
                window.min_runtime,
                window.protected_until.isoformat(),
            )
        if report.written and self._on_written is not None:
            self._on_written()
        return report
