"""Policy simulation: the recorded timeline judged twice, as recorded and under a change.

The simulation never invents events. Every run, eviction and requeue decision is the log's,
at the log's instant; only the rules they are judged by differ (``core.policy_worlds``). So
some figures are **exact re-judgements** — the same question the service asked, with the
changed rules — and some are **estimates** of what the scheduler or the worker would have
done next, which the log cannot say (``CONFIDENCE`` names each figure's kind and why).

Figures, per queue of the run or the requeued podgroup (``QueueFigures``):

- violations: runs an eviction ended, judged by ``run_verdict`` in both worlds; a *new*
  violation is judged none as recorded and definite/possible under the change (counted by
  the new verdict), an *avoided* one the other way round (counted by the recorded verdict);
  the GPU-seconds those runs had done (work lost inside protection) before and after;
- decision flips: a recorded ``committed`` decision that the change would have stopped —
  its victim protected against every recorded beneficiary (rolled back, ``protected``), in
  a cooldown the changed delay makes longer or over a changed cap (skipped, ``cooldown`` /
  ``requeue_limit``) — exact; a recorded rollback or skip that the change would have let
  through (committed) — an estimate, as the planner's placement is not re-run;
  the GPU-seconds of work those requeues cost or would have cost (the victim's GPUs times
  its run so far: the log records no checkpoint, so from the run's start), and the wait
  added to the beneficiaries of a requeue that would not have happened (from the decision to
  the beneficiary's recorded start, or the window's end);
- protection time: each run's time inside its windows within the window of the simulation,
  fully (every rule: the shortest window) and partly (some rule: the longest), in GPU-seconds,
  and how many runs would have been protected longer or shorter.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from datetime import datetime, timedelta
from decimal import Decimal
from enum import StrEnum
from typing import Final, NamedTuple

from minruntime.core.annotations import REQUEUE_DELAY_ANNOTATION
from minruntime.core.cooldown import requeue_delay
from minruntime.core.policy_worlds import World, Worlds
from minruntime.core.protection import window_end
from minruntime.core.requeue_cap import requeue_cap
from minruntime.core.runs import EndedRun
from minruntime.core.timestamps import require_aware
from minruntime.core.violation import RuleSet, Verdict, run_verdict

NO_QUEUE: Final = "-"
"""The figures' key for runs of placeholders (podgroups never submitted)."""

COMMITTED: Final = "committed"
ROLLED_BACK: Final = "rolled_back"
SKIPPED: Final = "skipped"


class Confidence(StrEnum):
    """How far a figure can be trusted."""

    EXACT = "exact"
    ESTIMATE = "estimate"


CONFIDENCE: Final[Mapping[str, tuple[Confidence, str]]] = {
    "violations": (
        Confidence.EXACT,
        "each eviction the log records, re-judged at its recorded instant under the changed "
        "windows; it does not say whether the scheduler would have picked another victim",
    ),
    "gpu_hours_lost": (
        Confidence.EXACT,
        "the recorded work of the runs judged violations (GPUs held at the end times the time run)",
    ),
    "flips_from_committed": (
        Confidence.EXACT,
        "the worker's own checks (protection against the recorded beneficiaries, cooldown, "
        "cap) re-run at the decision's instant under the change",
    ),
    "flips_to_committed": (
        Confidence.ESTIMATE,
        "the blocking check no longer blocks under the change; whether a contender would "
        "have been placed is not re-planned",
    ),
    "requeue_gpu_hours": (
        Confidence.ESTIMATE,
        "the victim's GPUs times its run up to the decision; the log records no checkpoint, "
        "so all of it counts as lost",
    ),
    "wait": (
        Confidence.ESTIMATE,
        "from a requeue that would not have happened to the beneficiary's recorded start "
        "(or the window's end); a rollback names no beneficiary, so no wait saved is "
        "estimated for requeues that would have happened",
    ),
    "protection": (
        Confidence.EXACT,
        "the windows of every run in the window, resolved under both rule sets, over the "
        "recorded run times",
    ),
}
"""Each figure group, its confidence and why (the output and docs/audit.md print these)."""

_ZERO = timedelta(0)


@dataclass
class QueueFigures:
    """The differences of one queue (or the total)."""

    evicted_runs: int = 0
    violations_before_definite: int = 0
    violations_before_possible: int = 0
    violations_after_definite: int = 0
    violations_after_possible: int = 0
    new_definite: int = 0
    new_possible: int = 0
    avoided_definite: int = 0
    avoided_possible: int = 0
    gpu_seconds_lost_before: float = 0.0
    gpu_seconds_lost_after: float = 0.0
    decisions: int = 0
    flips_to_rolled_back: int = 0
    flips_to_skipped: int = 0
    flips_to_committed: int = 0
    requeue_gpu_seconds_saved: float = 0.0
    requeue_gpu_seconds_added: float = 0.0
    wait_added_seconds: float = 0.0
    runs: int = 0
    runs_protected_longer: int = 0
    runs_protected_shorter: int = 0
    protected_gpu_seconds_before: float = 0.0
    protected_gpu_seconds_after: float = 0.0
    fully_protected_gpu_seconds_before: float = 0.0
    fully_protected_gpu_seconds_after: float = 0.0

    def add(self, other: QueueFigures) -> None:
        """Add ``other``'s figures to these."""
        for item in fields(self):
            self.bump(item.name, getattr(other, item.name))

    def bump(self, name: str, amount: float) -> None:
        """Add ``amount`` to the figure ``name``."""
        setattr(self, name, getattr(self, name) + amount)

    @property
    def differs(self) -> bool:
        """True when some difference is not zero."""
        changes = ("new_", "avoided_", "flips_", "runs_protected_")
        return any(
            getattr(self, item.name) for item in fields(self) if item.name.startswith(changes)
        )


class Beneficiary(NamedTuple):
    """A podgroup a committed requeue promised capacity to: its queue, and the start of its
    first run at or after the decision (None: none by the end of the log read)."""

    uid: str
    queue: str | None
    started: datetime | None = None


class RecordedDecision(NamedTuple):
    """A requeue decision of the log, with the facts the fold knew at its instant."""

    uid: str
    outcome: str
    reason: str | None
    decided_at: datetime
    run_start: datetime | None
    queue: str | None
    node_pool: str
    gpus: Decimal | None
    beneficiaries: tuple[Beneficiary, ...] = ()
    annotations: Mapping[str, str] = {}


class Flip(NamedTuple):
    """A decision the change would have turned around."""

    at: datetime
    uid: str
    queue: str
    before: str
    before_reason: str | None
    after: str
    after_reason: str | None
    confidence: Confidence
    # The requeue's work: saved (a commit that would not have happened) or added.
    gpu_seconds: float | None
    beneficiaries: tuple[str, ...] = ()


@dataclass
class SimulationResult:
    """Every difference in the window, per queue and in total."""

    since: datetime
    until: datetime
    queues: dict[str, QueueFigures] = field(default_factory=dict)
    flips: list[Flip] = field(default_factory=list)
    # Beneficiaries of a flipped commit that had not started by the window's end.
    waiting_at_end: int = 0
    # Whether the rules differed when anything of the window was judged (False: the change
    # does nothing there).
    rules_differ: bool = False

    def absorb(self, other: SimulationResult) -> None:
        """Add ``other``'s figures, flips and notes (another part of the same window)."""
        for name, figures in other.queues.items():
            self.queues.setdefault(name, QueueFigures()).add(figures)
        self.flips.extend(other.flips)
        self.flips.sort(key=lambda flip: (flip.at, flip.uid))
        self.waiting_at_end += other.waiting_at_end
        self.rules_differ = self.rules_differ or other.rules_differ

    @property
    def total(self) -> QueueFigures:
        """The sum over every queue."""
        total = QueueFigures()
        for figures in self.queues.values():
            total.add(figures)
        return total


class Simulation:
    """The difference fold: fed runs, decisions and starts in log order, by the orchestrator."""

    def __init__(
        self, worlds: Worlds, since: datetime, until: datetime, *, queue: str | None = None
    ) -> None:
        require_aware(since, "since")
        require_aware(until, "until")
        if until <= since:
            raise ValueError("the window must end after it starts")
        self.worlds = worlds
        self._since = since
        self._until = until
        self._queue = queue
        self._result = SimulationResult(since, until)
        # Committed requeue times per podgroup in each world (cooldown and cap).
        self._commits: tuple[dict[str, list[datetime]], dict[str, list[datetime]]] = ({}, {})

    def _in_window(self, at: datetime) -> bool:
        inside = self._since <= at <= self._until
        if inside and self.worlds.differ:
            # The rules of the two worlds differed when something in the window was judged.
            self._result.rules_differ = True
        return inside

    def _figures(self, queue: str | None) -> QueueFigures | None:
        key = queue or NO_QUEUE
        if self._queue is not None and key != self._queue:
            return None
        return self._result.queues.setdefault(key, QueueFigures())

    # -- runs --------------------------------------------------------------------------------

    def run_ended(self, run: EndedRun) -> None:
        """A run the log ended (at ``run.end``): its protection time and, for an eviction,
        its verdict in both worlds."""
        if not self._in_window(run.end):
            return
        figures = self._figures(run.queue)
        if figures is None:
            return
        before = self.worlds.recorded.rules.rules(run.queue, run.node_pool)
        after = self.worlds.changed.rules.rules(run.queue, run.node_pool)
        self._protection(figures, run.start, run.end, run.gpus, before, after)
        if not run.eviction:
            return
        figures.evicted_runs += 1
        was, _ = run_verdict(before, run)
        now, _ = run_verdict(after, run)
        gpu_seconds = float(run.gpu_seconds or 0)
        for side, verdict in (("before", was), ("after", now)):
            if verdict is not Verdict.NONE:
                figures.bump(f"gpu_seconds_lost_{side}", gpu_seconds)
                figures.bump(f"violations_{side}_{verdict}", 1)
        if (was is Verdict.NONE) != (now is Verdict.NONE):
            figures.bump(f"new_{now}" if was is Verdict.NONE else f"avoided_{was}", 1)

    def run_open(
        self, queue: str | None, node_pool: str, start: datetime, gpus: Decimal | None
    ) -> None:
        """A run still going at the window's end: its protection time up to then."""
        if start >= self._until:
            return
        if self.worlds.differ:
            self._result.rules_differ = True
        figures = self._figures(queue)
        if figures is None:
            return
        before = self.worlds.recorded.rules.rules(queue, node_pool)
        after = self.worlds.changed.rules.rules(queue, node_pool)
        self._protection(figures, start, self._until, gpus, before, after)

    def _protection(
        self,
        figures: QueueFigures,
        start: datetime,
        end: datetime,
        gpus: Decimal | None,
        before: RuleSet,
        after: RuleSet,
    ) -> None:
        figures.runs += 1
        full_before = self._protected(start, end, before.shortest)
        full_after = self._protected(start, end, after.shortest)
        some_before = self._protected(start, end, before.longest)
        some_after = self._protected(start, end, after.longest)
        if (full_after, some_after) != (full_before, some_before):
            if full_after >= full_before and some_after >= some_before:
                figures.runs_protected_longer += 1
            elif full_after <= full_before and some_after <= some_before:
                figures.runs_protected_shorter += 1
        if gpus is not None:
            held = float(gpus)
            figures.fully_protected_gpu_seconds_before += held * full_before
            figures.fully_protected_gpu_seconds_after += held * full_after
            figures.protected_gpu_seconds_before += held * some_before
            figures.protected_gpu_seconds_after += held * some_after

    def _protected(self, start: datetime, end: datetime, window: timedelta) -> float:
        """Seconds of [start, min(end, start + window)) inside the simulation's window."""
        until = min(end, window_end(start, window))
        low = max(start, self._since)
        high = min(until, self._until)
        return max((high - low).total_seconds(), 0.0)

    # -- decisions ---------------------------------------------------------------------------

    def decision(self, decision: RecordedDecision) -> None:
        """A recorded decision: what the change would have decided at its instant."""
        after, reason, confidence = self._changed_outcome(decision)
        recorded, changed = self._commits
        if decision.outcome == COMMITTED:
            recorded.setdefault(decision.uid, []).append(decision.decided_at)
        if after == COMMITTED:
            changed.setdefault(decision.uid, []).append(decision.decided_at)
        if not self._in_window(decision.decided_at):
            return
        figures = self._figures(decision.queue)
        if figures is None:
            return
        figures.decisions += 1
        if (after == COMMITTED) == (decision.outcome == COMMITTED):
            return
        work = self._work(decision)
        if after == COMMITTED:
            figures.flips_to_committed += 1
            figures.requeue_gpu_seconds_added += work or 0.0
        else:
            if after == ROLLED_BACK:
                figures.flips_to_rolled_back += 1
            else:
                figures.flips_to_skipped += 1
            figures.requeue_gpu_seconds_saved += work or 0.0
            for beneficiary in decision.beneficiaries:
                # The wait the requeue saved it: to its recorded start, or the window's end.
                started = beneficiary.started
                if started is None or started > self._until:
                    started = self._until
                    self._result.waiting_at_end += 1
                if started > decision.decided_at:
                    figures.wait_added_seconds += (started - decision.decided_at).total_seconds()
        self._result.flips.append(
            Flip(
                decision.decided_at,
                decision.uid,
                decision.queue or NO_QUEUE,
                decision.outcome,
                decision.reason,
                after,
                reason,
                confidence,
                work,
                tuple(beneficiary.uid for beneficiary in decision.beneficiaries),
            )
        )

    def _changed_outcome(self, decision: RecordedDecision) -> tuple[str, str | None, Confidence]:
        """The outcome under the change, its reason and how sure it is."""
        changed = self.worlds.changed
        at = decision.decided_at
        blocked = self._blocked_by_cooldown_or_cap(decision, changed)
        if decision.outcome == COMMITTED:
            if blocked is not None:
                return SKIPPED, blocked, Confidence.EXACT
            if self._protected_against_every_beneficiary(decision):
                return ROLLED_BACK, "protected", Confidence.EXACT
            return COMMITTED, None, Confidence.EXACT
        unchanged = decision.outcome, decision.reason, Confidence.EXACT
        if blocked is not None:
            return unchanged
        start = decision.run_start
        if decision.reason == "protected" and start is not None:
            # Unprotected against every preemptor under the change, protected as recorded.
            pair = (decision.queue, decision.node_pool)
            if not _before(at, start, changed.rules.rules(*pair).longest) and _before(
                at, start, self.worlds.recorded.rules.rules(*pair).longest
            ):
                return COMMITTED, None, Confidence.ESTIMATE
            return unchanged
        if decision.reason in ("cooldown", "requeue_limit"):
            # The check that blocked it passes under the change.
            return COMMITTED, None, Confidence.ESTIMATE
        return unchanged

    def _blocked_by_cooldown_or_cap(self, decision: RecordedDecision, world: World) -> str | None:
        commits = self._commits[1].get(decision.uid, ())
        if not commits:
            return None
        config = world.configs.for_pool(decision.node_pool)
        delay, _ = requeue_delay(
            decision.annotations.get(REQUEUE_DELAY_ANNOTATION), config.default_requeue_delay
        )
        if decision.decided_at < commits[-1] + delay:
            return "cooldown"
        cap = requeue_cap(config, decision.annotations)
        if cap is not None and cap.reached(commits, decision.decided_at):
            return "requeue_limit"
        return None

    def _protected_against_every_beneficiary(self, decision: RecordedDecision) -> bool:
        """True when the changed windows protect the victim against every beneficiary and the
        recorded ones protected it against none of those (the planner then let it go: an
        elastic victim, which the change would not stop either)."""
        start = decision.run_start
        if start is None or not decision.beneficiaries:
            return False
        worlds = self.worlds
        for beneficiary in decision.beneficiaries:
            args = (decision.node_pool, decision.queue, beneficiary.queue)
            if _before(decision.decided_at, start, worlds.recorded.min_runtime(*args)):
                return False
            if not _before(decision.decided_at, start, worlds.changed.min_runtime(*args)):
                return False
        return True

    @staticmethod
    def _work(decision: RecordedDecision) -> float | None:
        if decision.gpus is None or decision.run_start is None:
            return None
        ran = max(decision.decided_at - decision.run_start, _ZERO)
        return float(decision.gpus) * ran.total_seconds()

    def result(
        self, open_runs: Iterable[tuple[str | None, str, datetime, Decimal | None]] = ()
    ) -> SimulationResult:
        """The figures, after the runs still going at the window's end."""
        for queue, node_pool, start, gpus in open_runs:
            self.run_open(queue, node_pool, start, gpus)
        result = self._result
        result.flips.sort(key=lambda flip: (flip.at, flip.uid))
        return result


def _before(at: datetime, start: datetime, window: timedelta) -> bool:
    """Strict protection (§5): ``at < start + window``."""
    return at < window_end(start, window)
