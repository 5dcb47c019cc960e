"""Protection violations: runs an eviction ended while a window still protected them.

Read from the read surface only — ``minruntime.runs`` (the projection of every run that
ended, with the rule windows in force at its end) and ``minruntime.event_log`` (where in the
log each run ended) — in one read-only transaction: no shadow, no write, nothing about the
live cluster. So it answers on a replica, as the reader role, or on a replayed database
(``replay --into S``: a unit on ``State.named("S")``) exactly as on the live one.

The verdict and the length cut short are the stored ones (the core judged the run when it
ended); the rules are the stored windows judged again by the core (``core.judge``), so each
row says which rules protected the run, their windows, and by how much each was cut short.

A run whose eviction the scheduler attributed (``minruntime.runs.eviction_source``) carries
who evicted it; when the attribution names the rule that applied, its exact verdict
(``violated`` / ``honoured`` / ``unguarded``) replaces definite / possible, and its one rule is
judged again by the core at the eviction's instant (``core.judge_exact``). The report lists
the runs an eviction ended inside some window (as before) and the attributed ones whose rule
was broken; honoured and unguarded ones are listed as such, never counted as violations.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Final, NamedTuple

from minruntime.core import (
    Attribution,
    ExactJudgement,
    ExactVerdict,
    Inexact,
    ProtectionRule,
    Reclaimers,
    RuleVerdict,
    RuleWindow,
    Verdict,
    format_duration,
    format_rfc3339,
    inexact,
    judge,
    judge_exact,
)
from minruntime.errors import UserError
from minruntime.ingest.runs import window_json, windows_of
from minruntime.store.unit import ReadUnit, State, Units


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
    # Who evicted it, as the scheduler said (None: not attributed).
    attribution: Attribution | None = None
    # The verdict under the one rule that applied (None: no attribution names one).
    exact: ExactJudgement | None = None
    # The run's last checkpoint and the GPU-seconds since it (None: no checkpoint known).
    last_checkpoint: datetime | None = None
    gpu_seconds_since_checkpoint: Decimal | None = None

    @property
    def gpu_seconds_lost(self) -> Decimal | None:
        """The work the eviction lost: since the last checkpoint when one is known, else the
        whole run's GPU-seconds."""
        since = self.gpu_seconds_since_checkpoint
        return self.gpu_seconds if since is None else since

    @property
    def inexact(self) -> Inexact | None:
        """Why its attribution names no rule (None: not attributed, or it names one)."""
        return None if self.attribution is None else inexact(self.attribution)

    @property
    def shown_verdict(self) -> str:
        """The exact verdict when there is one, else definite / possible."""
        return self.verdict.value if self.exact is None else self.exact.verdict.value

    @property
    def is_violation(self) -> bool:
        """A broken promise: definite / possible without an exact verdict, or violated."""
        return self.exact is None or self.exact.verdict is ExactVerdict.VIOLATED

    @property
    def ran(self) -> timedelta:
        return max(self.run_end - self.run_start, timedelta(0))

    @property
    def protecting(self) -> tuple[RuleVerdict, ...]:
        """The rules that still protected it when it ended."""
        return tuple(rule for rule in self.rules if rule.protected)


class AbandonedRequeue(NamedTuple):
    """A committed requeue the evictor could not carry out by its deadline."""

    at: datetime
    uid: str
    queue: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class ViolationReport:
    """Every violation in the range asked for, and what they are out of."""

    since: datetime | None
    queue: str | None
    # Runs an eviction ended in the same range (violations or not).
    evicted_runs: int
    violations: tuple[Violation, ...]
    # Requeues the evictor gave up in the same range (requeue.abandoned), oldest first.
    abandoned: tuple[AbandonedRequeue, ...] = ()

    def count(self, verdict: Verdict | ExactVerdict) -> int:
        """How many rows have ``verdict`` (an exact verdict replaces definite / possible)."""
        if isinstance(verdict, ExactVerdict):
            return sum(
                row.exact is not None and row.exact.verdict is verdict for row in self.violations
            )
        return sum(row.exact is None and row.verdict is verdict for row in self.violations)

    @property
    def violation_count(self) -> int:
        """The rows that are violations (honoured and unguarded evictions are not)."""
        return sum(row.is_violation for row in self.violations)

    @property
    def attributed(self) -> bool:
        """Some row has an exact verdict (the report then counts them too)."""
        return any(row.exact is not None for row in self.violations)


def violations_in(
    units: Units, *, since: datetime | None, queue: str | None, schema: str
) -> ViolationReport:
    """`minruntime violations`: the report of the read surface named ``schema`` (the live
    one, or a shadow kept by ``replay --into``), read in one READ ONLY transaction."""
    state = State.named(schema)
    with units.read(state, only=True) as unit:
        return find_violations(unit, since=since, queue=queue)


def find_violations(
    unit: ReadUnit, *, since: datetime | None = None, queue: str | None = None
) -> ViolationReport:
    """The violations of runs that ended at or after ``since``, in ``queue`` (None: all), read
    from the unit's state (a shadow's, for a replayed database)."""
    schema = unit.state.read_schema
    if not unit.has_runs():
        if unit.state.is_live:
            raise UserError("the database has no minruntime.runs: run `minruntime migrate`")
        raise UserError(
            f"--schema {schema}: no read surface of that name with runs "
            "(keep one with `minruntime replay --until T --into NAME`)"
        )
    if queue is not None:
        if not queue:
            raise UserError("--queue '': name a queue")
        if not unit.queue_known(queue):
            raise UserError(f"--queue {queue!r}: no queue of that name, now or in any run")
    evicted = unit.evicted_runs(since, queue)
    rows = unit.violating_runs(since, queue)
    read: dict[str, tuple[RuleWindow, ...]] = {}
    violations = []
    # Plain tuples, the first nine columns in Violation's order: a long log has tens of
    # thousands.
    for row in rows:
        protection, cut_short, text, seq = row[_PROTECTION:_CORE]
        windows = read.get(text)
        if windows is None:
            windows = read[text] = _readable(text)
        start, end = row[_START], row[_END]
        rules = judge(start, end, windows).rules
        attribution, exact = _attributed(start, end, row[_CORE:_CHECKPOINT])
        judged = (Verdict(protection), cut_short, rules, seq, attribution, exact)
        violations.append(Violation._make((*row[:_PROTECTION], *judged, *row[_CHECKPOINT:])))
    abandoned = tuple(
        AbandonedRequeue(row[0], row[1], row[2], str(row[3]))
        for row in unit.abandoned_requeues(since, queue)
    )
    return ViolationReport(since, queue, int(evicted), tuple(violations), abandoned)


# Where run_start, run_end, protection and core_pods are in a row of
# read_surface.violating_runs.
_START, _END, _PROTECTION, _CORE = 4, 5, 9, 13
# Where last_checkpoint and gpu_seconds_since_checkpoint start (after the attribution's eight).
_CHECKPOINT: Final = _CORE + 8


def _attributed(
    start: datetime, end: datetime, columns: Sequence[Any]
) -> tuple[Attribution | None, ExactJudgement | None]:
    """Who evicted and the exact verdict from a row's last columns (core_pods, eviction_source,
    eviction_action, evictor, evictor_queue, evicted_at, exact_verdict, applied_window): the
    stored window judged again by the core, the verdict the stored one."""
    core, source, action, evictor, evictor_queue, at, verdict, applied = columns
    if source is None:
        return None, None
    attribution = Attribution(source, action, evictor, evictor_queue, at)
    if verdict is None:
        return attribution, None
    window = None
    if applied is not None:
        # One window, stored as one item of ``windows``.
        readable = _readable(f"[{applied}]")
        if not readable:
            return attribution, None
        window = readable[0]
    judged = judge_exact(window, start, end, attribution, core)
    return attribution, judged._replace(verdict=ExactVerdict(verdict))


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


def who_evicted(
    action: str | None, evictor: str | None, evictor_queue: str | None, at: datetime | None
) -> str:
    """Who evicted, as the scheduler said it: ``by reclaim for ns/big (queue q) at T``."""
    who = f"by {action}" if action else "by the scheduler"
    if evictor:
        who += f" for {evictor}"
    if evictor_queue:
        who += f" (queue {evictor_queue})"
    if at is not None:
        who += f" at {format_rfc3339(at)}"
    return who


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
        return {
            "uid": violation.uid,
            "queue": violation.queue,
            "node_pool": violation.node_pool,
            "preemptibility": violation.preemptibility,
            "run_start": format_rfc3339(violation.run_start),
            "run_end": format_rfc3339(violation.run_end),
            "ran": violation.ran.total_seconds(),
            "ended_by": violation.ended_by,
            "verdict": violation.shown_verdict,
            "cut_short": _seconds(
                violation.cut_short if violation.exact is None else violation.exact.cut_short
            ),
            "gpus": _number(violation.gpus),
            "gpu_seconds": _number(violation.gpu_seconds),
            # The work lost: since the last checkpoint when one is known (docs/audit.md).
            "last_checkpoint": None
            if violation.last_checkpoint is None
            else format_rfc3339(violation.last_checkpoint),
            "gpu_seconds_since_checkpoint": _number(violation.gpu_seconds_since_checkpoint),
            "gpu_seconds_lost": _number(violation.gpu_seconds_lost),
            "seq": violation.seq,
            # The window's end is run_start + min_runtime: not written out per rule (a report
            # of a long log has hundreds of thousands of rules).
            "rules": [_rule_json(self._window(rule.window), rule) for rule in violation.rules],
            **_attribution_json(violation),
        }

    def _window(self, window: RuleWindow) -> dict[str, Any]:
        found = self._windows.get(id(window))
        if found is None:
            found = self._windows[id(window)] = window_json(window)
        return found


def _attribution_json(violation: Violation) -> dict[str, Any]:
    """Who evicted, and the one rule that applied: for attributed runs only (the rows of
    unattributed runs are as they were)."""
    attribution = violation.attribution
    if attribution is None:
        return {}
    exact = violation.exact
    rule = None if exact is None else exact.rule
    return {
        "eviction": {
            "source": attribution.source,
            "action": attribution.action,
            "evictor": attribution.evictor,
            "evictor_queue": attribution.evictor_queue,
            "at": None if attribution.at is None else format_rfc3339(attribution.at),
        },
        # Why no exact verdict (null: there is one): the verdict is then definite / possible.
        "inexact": None if violation.inexact is None else violation.inexact.value,
        "judged_at": None if exact is None else format_rfc3339(exact.instant),
        "applied_rule": None if rule is None else _rule_json(window_json(rule.window), rule),
        # Definite / possible over every possible preemptor, as for an unattributed run.
        "protection": violation.verdict.value,
    }


def _rule_json(window: dict[str, Any], rule: RuleVerdict) -> dict[str, Any]:
    return {**window, "protected": rule.protected, "cut_short": rule.cut_short.total_seconds()}


def _seconds(value: timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _number(value: Decimal | None) -> float | None:
    return None if value is None else float(value)
