"""Was a run still protected when it ended, against which preemptors? (SEMANTICS.md §10)

A run ended at instant T faced, at T, one rule per kind of possible preemptor:

- the **preempt** rule: a preemptor in the run's own queue (§4, preempt);
- the **reclaim** rule from every other queue of the tree, under the node pool's method:
  with ``lca`` the walk starts one queue below the lowest common ancestor of the reclaimer's
  and the victim's queues, so the reclaimers fall into classes by that ancestor — the
  queues under another root, and for each queue ``X`` on the victim's path the queues whose
  lowest common ancestor with the victim is ``X`` (``X`` itself included; ``X`` the victim's
  own queue: the queues below it). With ``queue`` every other queue walks from the victim's
  queue: one class. A class is listed only when some queue of the tree is in it;
- the reclaim rule from a queue **not in the tree**: the node pool's default (§4).

A run in a queue the tree does not know (or a placeholder's) meets the defaults only: the
preempt default, and the reclaim default from any reclaimer.

"The tree" is the tree of the run's node pool (``QueueTree.for_pool``): the queues KAI's
scheduler of that pool sees. A queue of another pool is a queue the tree does not know.

Each class's window is resolved by the one ``Resolver`` (for one representative reclaimer of
the class), never by rules of its own. The verdict at T (strict, §5: protected iff
``T < start + min runtime``): **definite** when every window still protected the run,
**possible** when some did, **none** when none did. A run ended by an eviction with a verdict
other than none is a protection violation.

A run that still held the core of a semi-preemptible podgroup when it ended (§10) is
**definite** whatever its windows: the core is never evictable, by any preemptor, at any
instant (``run_verdict``). Its windows are kept and judged as for any run (``cut_short``
is theirs: none when no window still protected it).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import NamedTuple

from minruntime.core.config import NodePoolConfigs, ReclaimResolveMethod
from minruntime.core.protection import protected_until, window_end
from minruntime.core.protection_windows import ProtectionRule
from minruntime.core.queue_tree import QueueTree
from minruntime.core.resolution import PoolResolvers, Resolution, Resolver, common_prefix_length
from minruntime.core.runs import EndedRun
from minruntime.core.timestamps import require_aware

_ZERO = timedelta(0)


class Verdict(StrEnum):
    """How protected a run was when it ended."""

    DEFINITE = "definite"
    POSSIBLE = "possible"
    NONE = "none"


class Reclaimers(StrEnum):
    """Which possible preemptors a rule window is the rule of."""

    # The preempt rule: a preemptor in the run's own queue.
    OWN_QUEUE = "own-queue"
    # lca: reclaimers in another root's tree (the walk starts at the victim's root).
    OTHER_ROOTS = "other-roots"
    # lca: reclaimers whose lowest common ancestor with the victim is ``RuleWindow.lca``.
    BELOW = "below"
    # Every other queue: method ``queue``, or (defaults) a victim the tree does not know.
    ANY = "any"
    # A reclaimer in a queue the tree does not know: the node pool's default.
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class RuleWindow:
    """The window one class of possible preemptors had to respect."""

    rule: ProtectionRule
    reclaimers: Reclaimers
    min_runtime: timedelta
    # The queue whose value applied; None: the node pool's default.
    resolved_from: str | None
    # Reclaimers.BELOW: their lowest common ancestor with the victim.
    lca: str | None = None
    # Where the upward walk began (None for a default that no walk gave).
    walk_start: str | None = None


class RuleVerdict(NamedTuple):
    """One rule window at the run's end (a named tuple: a report makes one per rule and run)."""

    window: RuleWindow
    protected_until: datetime
    # Still protected at the end (strict): the run was cut short by ``cut_short``.
    protected: bool
    cut_short: timedelta


class Judgement(NamedTuple):
    """Every rule at the run's end, and the verdict."""

    verdict: Verdict
    rules: tuple[RuleVerdict, ...]

    @property
    def protecting(self) -> tuple[RuleVerdict, ...]:
        """The rules that still protected the run when it ended."""
        return tuple(rule for rule in self.rules if rule.protected)

    @property
    def cut_short(self) -> timedelta | None:
        """How much of the longest window still protecting it was left (None: none was)."""
        return max((rule.cut_short for rule in self.protecting), default=None)


def judge(start: datetime, end: datetime, windows: Iterable[RuleWindow]) -> Judgement:
    """The verdict on a run from ``start`` to ``end`` under ``windows`` (strict, §5)."""
    require_aware(end, "run end")
    require_aware(start, "run start")
    start = start.astimezone(UTC)
    rules = []
    for window in windows:
        # protected_until's rule, without its checks per window (a report judges every rule
        # of tens of thousands of runs).
        until = window_end(start, window.min_runtime)
        protected = end < until
        rules.append(RuleVerdict(window, until, protected, until - end if protected else _ZERO))
    protecting = sum(rule.protected for rule in rules)
    if protecting and protecting == len(rules):
        verdict = Verdict.DEFINITE
    elif protecting:
        verdict = Verdict.POSSIBLE
    else:
        verdict = Verdict.NONE
    return Judgement(verdict, tuple(rules))


def run_verdict(rules: RuleSet, run: EndedRun) -> tuple[Verdict, timedelta | None]:
    """The verdict on ``run`` under ``rules`` and the length cut short: ``rules.verdict``,
    but definite for a run that still held a semi-preemptible core."""
    verdict, cut_short = rules.verdict(run.start, run.end)
    return (Verdict.DEFINITE if run.core else verdict), cut_short


@dataclass(frozen=True, slots=True, eq=False)
class RuleSet:
    """The rule windows a run of one queue in one node pool meets, and their extremes.

    Made once per (node pool's tree and configuration, queue) by ``RunRules`` and shared:
    compared by identity.
    """

    windows: tuple[RuleWindow, ...]
    shortest: timedelta
    longest: timedelta
    # Of the reclaim rules alone (there is always one: the unknown queue's or any queue's).
    shortest_reclaim: timedelta
    longest_reclaim: timedelta

    @property
    def preempt(self) -> RuleWindow:
        """The preempt rule's window (always the first)."""
        return self.windows[0]

    def verdict(self, start: datetime, end: datetime) -> tuple[Verdict, timedelta | None]:
        """What ``judge(start, end, windows)`` says — the verdict and ``cut_short`` — from the
        extremes alone (a window's end grows with its minimum runtime)."""
        require_aware(end, "run end")
        start = start.astimezone(UTC)
        longest = protected_until(start, self.longest)
        assert longest is not None  # a run has a start
        if not end < longest:
            return Verdict.NONE, None
        shortest = protected_until(start, self.shortest)
        assert shortest is not None
        return (Verdict.DEFINITE if end < shortest else Verdict.POSSIBLE), longest - end


class RunRules:
    """The rule windows of runs under one queue tree and one set of node-pool configs.

    Computed once per (node pool's tree and config, queue) and kept: the tree and the configs
    are immutable, so a change means a new ``RunRules`` (as for ``Resolver``).
    """

    __slots__ = ("_by_pool", "_cache", "_resolvers", "_tree")

    def __init__(self, tree: QueueTree, configs: NodePoolConfigs) -> None:
        self._tree = tree
        # One resolver per (node pool's tree, configuration), made on first use.
        self._resolvers = PoolResolvers(tree, configs)
        # By (resolver, queue); and by (node pool, queue) in front, a cheaper key.
        self._cache: dict[tuple[Resolver, str | None], RuleSet] = {}
        self._by_pool: dict[tuple[str | None, str | None], RuleSet] = {}

    @property
    def tree(self) -> QueueTree:
        """The queue tree the rules are resolved in."""
        return self._tree

    def judge(
        self, queue: str | None, node_pool: str | None, start: datetime, end: datetime
    ) -> Judgement:
        """The verdict on a run of ``queue`` in ``node_pool`` from ``start`` to ``end``."""
        return judge(start, end, self.windows(queue, node_pool))

    def windows(self, queue: str | None, node_pool: str | None) -> tuple[RuleWindow, ...]:
        """Every rule window a run of ``queue`` (None: a placeholder) in ``node_pool`` meets:
        the preempt rule first, then the reclaim rules root first, the unknown queue last."""
        return self.rules(queue, node_pool).windows

    def rules(self, queue: str | None, node_pool: str | None) -> RuleSet:
        """``windows`` with their extremes, made once per (pool tree and configuration, queue)."""
        found = self._by_pool.get((node_pool, queue))
        if found is not None:
            return found
        resolver = self._resolvers(node_pool)
        key = (resolver, queue)
        found = self._cache.get(key)
        if found is None:
            windows = self._windows(resolver, queue)
            runtimes = [window.min_runtime for window in windows]
            reclaims = runtimes[1:]
            found = self._cache[key] = RuleSet(
                windows, min(runtimes), max(runtimes), min(reclaims), max(reclaims)
            )
        self._by_pool[(node_pool, queue)] = found
        return found

    def reclaim_window(
        self, reclaimer: str, victim: str | None, node_pool: str | None
    ) -> RuleWindow:
        """The reclaim window a reclaimer in queue ``reclaimer`` met for a run of ``victim``
        (None: a placeholder) in ``node_pool``: the ``Resolver``'s answer, in the class of
        possible preemptors ``windows`` lists it under (a queue not in the tree: the pool's
        default, as the unknown queue's class)."""
        resolver = self._resolvers(node_pool)
        config, tree = resolver.config, resolver.tree
        default = Resolution(config.default_reclaim_min_runtime, None)
        if victim is None or victim not in tree:
            return _window(Reclaimers.ANY, default)
        if reclaimer not in tree:
            return _window(Reclaimers.UNKNOWN, default)
        resolution = resolver.reclaim_min_runtime(reclaimer, victim)
        if config.reclaim_resolve_method == ReclaimResolveMethod.QUEUE:
            return _window(Reclaimers.ANY, resolution)
        path, theirs = tree.path(victim), tree.path(reclaimer)
        if path[0] != theirs[0]:
            return _window(Reclaimers.OTHER_ROOTS, resolution)
        lca = path[common_prefix_length(path, theirs) - 1]
        return _window(Reclaimers.BELOW, resolution, lca)

    @staticmethod
    def _windows(resolver: Resolver, victim: str | None) -> tuple[RuleWindow, ...]:
        config, tree = resolver.config, resolver.tree
        default = Resolution(config.default_reclaim_min_runtime, None)
        if victim is None or victim not in tree:
            return (
                _window(Reclaimers.OWN_QUEUE, Resolution(config.default_preempt_min_runtime, None)),
                _window(Reclaimers.ANY, default),
            )
        windows = [_window(Reclaimers.OWN_QUEUE, resolver.preempt_min_runtime(victim))]
        path = tree.path(victim)
        if config.reclaim_resolve_method == ReclaimResolveMethod.QUEUE:
            other = next((queue.name for queue in tree if queue.name != victim), None)
            if other is not None:
                resolution = resolver.reclaim_min_runtime(other, victim)
                windows.append(_window(Reclaimers.ANY, resolution))
        else:
            # One representative reclaimer per class: its resolution is the class's.
            other_root = next((root for root in tree.roots() if root != path[0]), None)
            if other_root is not None:
                resolution = resolver.reclaim_min_runtime(other_root, victim)
                windows.append(_window(Reclaimers.OTHER_ROOTS, resolution))
            # An ancestor of the victim is its own class's representative.
            for ancestor in path[:-1]:
                resolution = resolver.reclaim_min_runtime(ancestor, victim)
                windows.append(_window(Reclaimers.BELOW, resolution, ancestor))
            children = tree.children_of(victim)
            if children:
                resolution = resolver.reclaim_min_runtime(children[0], victim)
                windows.append(_window(Reclaimers.BELOW, resolution, victim))
        windows.append(_window(Reclaimers.UNKNOWN, default))
        return tuple(windows)


def _window(reclaimers: Reclaimers, resolution: Resolution, lca: str | None = None) -> RuleWindow:
    """The window of ``resolution`` for ``reclaimers``: the preempt rule for the run's own
    queue, the reclaim rule for any other class."""
    return RuleWindow(
        ProtectionRule.PREEMPT if reclaimers is Reclaimers.OWN_QUEUE else ProtectionRule.RECLAIM,
        reclaimers,
        resolution.min_runtime,
        resolution.source,
        lca,
        resolution.start,
    )
