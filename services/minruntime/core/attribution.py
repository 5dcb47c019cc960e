"""The exact verdict on a run whose eviction the scheduler attributed (SEMANTICS.md §10).

Without an attribution a run's verdict weighs every possible preemptor (``core.violation``:
definite / possible). With one — KAI's ``Evict`` Event names the action and the evicting
podgroup, hence its queue — the one rule that applied is known, and so is the verdict. What
KAI does (KAI-Scheduler at commit d5bc503a):

- **preempt**: the preempt action takes victims from the preemptor's own queue only
  (``pkg/scheduler/actions/preempt/preempt.go``, ``buildFilterFuncForPreempt``), and the
  minruntime plugin's preempt filter asks the victim's preempt window alone
  (``pkg/scheduler/plugins/minruntime/minruntime.go``, ``isPreemptMinRuntimeProtected``
  ignores the preemptor): the rule is the preempt window of the run's queue;
- **reclaim**: victims in other queues only (``pkg/scheduler/actions/reclaim/reclaim.go``,
  ``getReclaimVictimCandidates``); the window is resolved for the reclaimer's queue and the
  victim's under the node pool's method (``isReclaimMinRuntimeProtected``), a queue KAI does
  not know giving the pool's default (``resolver.go``, ``getReclaimMinRuntime``: a nil queue);
  here ``RunRules.reclaim_window``, the one ``Resolver``;
- **consolidation**, **stalegangeviction**: the plugin registers only preempt and reclaim
  victim filters and scenario validators (``OnSessionOpen``); consolidation validates its
  scenarios by ``allPodsReallocated`` alone (``actions/consolidation/consolidation.go``) and
  stale-gang eviction evicts a gang stale for longer than its grace period
  (``actions/stalegangeviction/stalegangeviction.go``): no minimum runtime guards them, so
  their evictions are **unguarded**, never violations.

The verdict: **violated** when the rule's window still protected the run at the instant of
the eviction (strict, §5), or when the run still held a semi-preemptible core (§10: never
evictable by a preempt or a reclaim); **honoured** otherwise; **unguarded** for the actions
above. The instant is the scheduler's own time of the eviction when it lies within the run
(KAI decided then, on the clock its start time came from), else the run's end.

An attribution that does not name the rule gives no exact verdict (``inexact``): no action
(an annotation or a condition: a time only), an action KAI does not have, or a reclaim whose
evictor's queue is not known. The run keeps the verdict over every possible preemptor.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final, NamedTuple

from minruntime.core.evictions import Attribution, EvictionAction
from minruntime.core.runs import EndedRun
from minruntime.core.violation import RuleVerdict, RuleWindow, RunRules, judge

GUARDED_ACTIONS: Final = frozenset({EvictionAction.PREEMPT, EvictionAction.RECLAIM})
UNGUARDED_ACTIONS: Final = frozenset(
    {EvictionAction.CONSOLIDATION, EvictionAction.STALE_GANG_EVICTION}
)


class ExactVerdict(StrEnum):
    """The verdict on a run under the one rule that applied."""

    VIOLATED = "violated"
    HONOURED = "honoured"
    UNGUARDED = "unguarded"


class Inexact(StrEnum):
    """Why an attribution names no rule."""

    # An annotation or a condition (or an Event without its action): a time only.
    NO_ACTION = "no-action"
    # An action KAI does not have (another scheduler's word).
    UNKNOWN_ACTION = "unknown-action"
    # A reclaim whose evictor's queue is not known.
    NO_EVICTOR_QUEUE = "no-evictor-queue"


class ExactJudgement(NamedTuple):
    """The one rule that applied, judged at the eviction's instant."""

    verdict: ExactVerdict
    # When it was judged: the scheduler's time of the eviction, or the run's end.
    instant: datetime
    # The rule's window at that instant (None: unguarded).
    rule: RuleVerdict | None

    @property
    def cut_short(self) -> timedelta | None:
        """What was left of the rule's window (None: it no longer protected the run)."""
        return self.rule.cut_short if self.rule is not None and self.rule.protected else None


def inexact(attribution: Attribution) -> Inexact | None:
    """Why ``attribution`` names no rule (None: it names one, or an unguarded action)."""
    action = attribution.action
    if not action:
        return Inexact.NO_ACTION
    if action not in GUARDED_ACTIONS and action not in UNGUARDED_ACTIONS:
        return Inexact.UNKNOWN_ACTION
    if action == EvictionAction.RECLAIM and not attribution.evictor_queue:
        return Inexact.NO_EVICTOR_QUEUE
    return None


def eviction_instant(start: datetime, end: datetime, attribution: Attribution | None) -> datetime:
    """The instant a run's eviction is judged at: the scheduler's time when it lies within the
    run (from ``start`` to ``end``), else the run's end."""
    at = None if attribution is None else attribution.at
    return at if at is not None and start <= at <= end else end


def applied_window(rules: RunRules, run: EndedRun) -> RuleWindow | None:
    """The window of the one rule the attributed eviction of ``run`` met (None: no attribution,
    an unguarded action, or one that names no rule)."""
    attribution = run.attribution
    if attribution is None or inexact(attribution) is not None:
        return None
    if attribution.action == EvictionAction.PREEMPT:
        return rules.rules(run.queue, run.node_pool).preempt
    if attribution.action == EvictionAction.RECLAIM:
        assert attribution.evictor_queue  # inexact() said so
        return rules.reclaim_window(attribution.evictor_queue, run.queue, run.node_pool)
    return None


def judge_exact(
    window: RuleWindow | None,
    start: datetime,
    end: datetime,
    attribution: Attribution | None,
    core: int = 0,
) -> ExactJudgement:
    """The verdict on a run from ``start`` to ``end`` evicted under ``window`` (None: an
    unguarded action), holding ``core`` pods of a semi-preemptible core."""
    instant = eviction_instant(start, end, attribution)
    if window is None:
        return ExactJudgement(ExactVerdict.UNGUARDED, instant, None)
    rule = judge(start, instant, (window,)).rules[0]
    verdict = ExactVerdict.VIOLATED if rule.protected or core > 0 else ExactVerdict.HONOURED
    return ExactJudgement(verdict, instant, rule)


def exact_judgement(rules: RunRules, run: EndedRun) -> ExactJudgement | None:
    """The exact verdict on ``run`` under ``rules`` (None: no attribution, or one that names
    no rule: the verdict over every possible preemptor stands)."""
    attribution = run.attribution
    if attribution is None or not run.eviction or inexact(attribution) is not None:
        return None
    window = applied_window(rules, run)
    return judge_exact(window, run.start, run.end, attribution, run.core)
