"""Protection violations: runs an eviction ended while a window still protected them.

Read from the read surface only — ``minruntime.runs`` (the projection of every run that
ended, with the rule windows in force at its end) and ``minruntime.event_log`` (where in the
log each run ended) — in one read-only transaction: no shadow, no write, nothing about the
live cluster. So it answers on a replica, as the reader role, or on a replayed database
(``replay --into S``: ``schema="S"``) exactly as on the live one.

The verdict and the length cut short are the stored ones (the core judged the run when it
ended); the rules are the stored windows judged again by the core (``core.judge``), so each
row says which rules protected the run, their windows, and by how much each was cut short.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final, NamedTuple

from sqlalchemy import Connection

from minruntime.core import (
    ProtectionRule,
    Reclaimers,
    RuleVerdict,
    RuleWindow,
    Verdict,
    format_duration,
    format_rfc3339,
    judge,
)
from minruntime.errors import UserError
from minruntime.ingest.runs import window_json, windows_of
from minruntime.store import read_surface
from minruntime.store.state_schema import check_schema_name
from minruntime.store.tables import READ_SCHEMA


class Violation(NamedTuple):
    """One run an eviction ended inside a protection window (a named tuple: a report of a
    long log makes tens of thousands)."""

    uid: str
    queue: str | None
    node_pool: str
    preemptibility: str
    run_start: datetime
    run_end: datetime
    ended_by: str
    gpus: Decimal | None
    gpu_seconds: Decimal | None
    verdict: Verdict
    # What was left of the longest window still protecting it.
    cut_short: timedelta | None
    # Every rule at the end, protecting or not.
    rules: tuple[RuleVerdict, ...]
    # The event-log entry that ended it (None: not in this database's log).
    seq: int | None

    @property
    def ran(self) -> timedelta:
        """How long it ran."""
        return max(self.run_end - self.run_start, timedelta(0))

    @property
    def protecting(self) -> tuple[RuleVerdict, ...]:
        """The rules that still protected it when it ended."""
        return tuple(rule for rule in self.rules if rule.protected)


@dataclass(frozen=True, slots=True)
class ViolationReport:
    """Every violation in the range asked for, and what they are out of."""

    since: datetime | None
    queue: str | None
    # Runs an eviction ended in the same range (violations or not).
    evicted_runs: int
    violations: tuple[Violation, ...]

    def count(self, verdict: Verdict) -> int:
        """How many violations have ``verdict``."""
        return sum(violation.verdict is verdict for violation in self.violations)


def find_violations(
    conn: Connection,
    *,
    since: datetime | None = None,
    queue: str | None = None,
    schema: str = READ_SCHEMA,
) -> ViolationReport:
    """The violations of runs that ended at or after ``since``, in ``queue`` (None: all), read
    from the read surface ``schema`` (a shadow's, for a replayed database)."""
    if schema != READ_SCHEMA:
        check_schema_name(schema)
    if not read_surface.has_runs(conn, schema):
        if schema == READ_SCHEMA:
            raise UserError("the database has no minruntime.runs: run `minruntime migrate`")
        raise UserError(
            f"--schema {schema}: no read surface of that name with runs "
            "(keep one with `minruntime replay --until T --into NAME`)"
        )
    if queue is not None:
        if not queue:
            raise UserError("--queue '': name a queue")
        if not read_surface.queue_known(conn, schema, queue):
            raise UserError(f"--queue {queue!r}: no queue of that name, now or in any run")
    evicted = read_surface.evicted_runs(conn, schema, since, queue)
    rows = read_surface.violating_runs(conn, schema, since, queue)
    read: dict[str, tuple[RuleWindow, ...]] = {}
    violations = []
    # Plain tuples, columns in Violation's order but for the last four: a long log has tens
    # of thousands.
    for row in rows:
        protection, cut_short, text, seq = row[_PROTECTION:]
        windows = read.get(text)
        if windows is None:
            windows = read[text] = _readable(text)
        rules = judge(row[_START], row[_END], windows).rules
        violations.append(
            Violation._make((*row[:_PROTECTION], Verdict(protection), cut_short, rules, seq))
        )
    return ViolationReport(since, queue, int(evicted), tuple(violations))


# Where run_start, run_end and protection are in a row of read_surface.violating_runs.
_START, _END, _PROTECTION = 4, 5, 9


def _readable(text: str) -> tuple[RuleWindow, ...]:
    """The stored windows this version can read (a row written otherwise shows no rules)."""
    stored = json.loads(text)
    if not isinstance(stored, Sequence):
        return ()
    windows: list[RuleWindow] = []
    for item in stored:
        try:
            windows.extend(windows_of([item]))
        except (KeyError, TypeError, ValueError, ArithmeticError):
            continue
    return tuple(windows)


def describe_rule(window: RuleWindow) -> str:
    """Who the rule is for and its window, in a few words: ``reclaim via LCA B: 10m (queue B)``."""
    return f"{whose(window)}: {format_duration(window.min_runtime)} ({_source(window)})"


def whose(window: RuleWindow) -> str:
    """The possible preemptors a rule window is for."""
    if window.rule is ProtectionRule.PREEMPT:
        return "preempt"
    if window.reclaimers is Reclaimers.BELOW:
        return f"reclaim via LCA {window.lca}"
    return _RECLAIMERS[window.reclaimers]


_RECLAIMERS: Final[Mapping[Reclaimers, str]] = {
    Reclaimers.OTHER_ROOTS: "reclaim from another root",
    Reclaimers.ANY: "reclaim from any queue",
    Reclaimers.UNKNOWN: "reclaim from an unknown queue",
}


def _source(window: RuleWindow) -> str:
    return f"queue {window.resolved_from}" if window.resolved_from else "pool default"


class ViolationJson:
    """Violations as JSON-ready data (``violations --json``): times RFC3339, durations and GPU
    amounts as numbers of seconds and GPUs. What runs share (a rule window's fields) is
    converted once per report."""

    def __init__(self) -> None:
        # By identity: the runs of one queue share their parsed windows (``find_violations``).
        self._windows: dict[int, dict[str, Any]] = {}

    def of(self, violation: Violation) -> dict[str, Any]:
        """One violation."""
        return {
            "uid": violation.uid,
            "queue": violation.queue,
            "node_pool": violation.node_pool,
            "preemptibility": violation.preemptibility,
            "run_start": format_rfc3339(violation.run_start),
            "run_end": format_rfc3339(violation.run_end),
            "ran": violation.ran.total_seconds(),
            "ended_by": violation.ended_by,
            "verdict": violation.verdict.value,
            "cut_short": _seconds(violation.cut_short),
            "gpus": _number(violation.gpus),
            "gpu_seconds": _number(violation.gpu_seconds),
            "seq": violation.seq,
            "rules": [
                # The window's end is run_start + min_runtime: not written out per rule
                # (a report of a long log has hundreds of thousands of rules).
                {
                    **self._window(rule.window),
                    "protected": rule.protected,
                    "cut_short": rule.cut_short.total_seconds(),
                }
                for rule in violation.rules
            ],
        }

    def _window(self, window: RuleWindow) -> dict[str, Any]:
        found = self._windows.get(id(window))
        if found is None:
            found = self._windows[id(window)] = window_json(window)
        return found


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(value)
