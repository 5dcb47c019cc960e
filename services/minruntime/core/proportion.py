"""KAI's proportion rules for GPUs: deserved quota, fair share, limits, reclaim eligibility.

Pure and stdlib-only. ``fair_shares`` divides a node pool's GPUs over the queue tree as KAI's
proportion plugin does at the start of every scheduling session; ``QuotaJudge`` tells the
requeue planner whether KAI would refuse a beneficiary (its queue over a limit) or take its
GPUs back for the recreated victim (a reclaim). The rules, with the KAI files they come from,
are written down in docs/rule-engine.md ("Queue shares").
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from minruntime.core.queue_quota import DEFAULT_QUEUE_PRIORITY, UNLIMITED, UNMANAGED, ResourceQuota
from minruntime.core.queue_tree import Queue, QueueTree

# Float slack for "<=" between sums of GPU fractions (KAI compares exactly; sums of
# fractions here come from micro-GPU units, so anything below this is rounding).
_EPSILON: Final = 1e-9


def gpu_quota(queue: Queue | None) -> ResourceQuota:
    """The GPU settings KAI applies to ``queue``; a queue without them is unmanaged."""
    if queue is None or queue.resources is None or queue.resources.gpu is None:
        return UNMANAGED
    return queue.resources.gpu


def manages_gpus(queue: Queue | None) -> bool:
    """True if ``queue`` sets a GPU share (quota, limit or weight)."""
    return queue is not None and queue.resources is not None and queue.resources.gpu is not None


def _at_most(value: float, bound: float) -> bool:
    """``value <= bound``, with -1 as infinity (KAI's compareQuantities)."""
    return bound == UNLIMITED or value <= bound + _EPSILON


@dataclass(frozen=True, slots=True)
class QueueShare:
    """One queue's GPU share in a node pool, as KAI's proportion plugin computes it."""

    deserved: float
    limit: float
    fair_share: float
    allocated: float
    requested: float

    def allocatable(self) -> float:
        """KAI's GetAllocatableShare: max(deserved, fair share), capped by the limit."""
        if self.deserved == UNLIMITED:
            return self.limit
        share = max(self.deserved, self.fair_share)
        return share if self.limit == UNLIMITED else min(self.limit, share)


_NO_SHARE: Final = QueueShare(
    deserved=UNLIMITED, limit=UNLIMITED, fair_share=0.0, allocated=0.0, requested=0.0
)


class _Division:
    """The mutable per-queue state of one division (KAI's ResourceShare for one resource)."""

    __slots__ = ("deserved", "fair", "limit", "name", "priority", "request", "weight")

    def __init__(self, name: str, quota: ResourceQuota, priority: int, request: float) -> None:
        self.name = name
        self.deserved = quota.quota
        self.limit = quota.limit
        self.weight = quota.over_quota_weight
        self.priority = priority
        self.request = request
        self.fair = 0.0

    def requestable(self) -> float:
        return self.request if self.limit == UNLIMITED else min(self.limit, self.request)

    def remaining_request(self) -> float:
        return max(0.0, self.requestable() - self.fair)

    def satisfied(self) -> bool:
        return self.request <= self.fair or (self.limit != UNLIMITED and self.limit <= self.fair)


def _divide(total: float, level: list[_Division]) -> None:
    """Divide ``total`` among sibling queues: deserved first, then over-quota by priority."""
    remaining = total
    for queue in level:
        deserved = total if queue.deserved == UNLIMITED else queue.deserved
        amount = min(deserved, queue.requestable())
        queue.fair += amount
        remaining -= amount
    if remaining <= 0:
        return
    leftovers: list[dict[str, tuple[float, _Division]]] = []
    for priority in sorted({queue.priority for queue in level}, reverse=True):
        group = [queue for queue in level if queue.priority == priority]
        remaining, leftover = _up_to_fair_share(remaining, group)
        leftovers.append(leftover)
    for leftover in leftovers:
        # The fractions each round rounded down, one whole GPU (or what is left) at a time to
        # the largest remainder first (KAI: divideRemainingResource).
        for _, queue in sorted(leftover.values(), key=lambda item: (-item[0], item[1].name)):
            if remaining <= 0:
                break
            given = min(1.0, remaining)
            queue.fair += given
            remaining -= given


def _up_to_fair_share(
    remaining: float, group: list[_Division]
) -> tuple[float, dict[str, tuple[float, _Division]]]:
    """Over-quota rounds within one priority (KAI: divideUpToFairShare, usage taken as 0)."""
    leftover: dict[str, tuple[float, _Division]] = {}
    # Every round that asks for another satisfies at least one queue: bounded by the group.
    for _ in range(len(group) + 1):
        if not any(queue.remaining_request() > 0 for queue in group if queue.weight > 0):
            break
        unsatisfied = [queue for queue in group if not queue.satisfied()]
        weights = sum(queue.weight for queue in unsatisfied)
        if weights <= 0:
            break
        amount = remaining
        again = False
        for queue in unsatisfied:
            if remaining <= 0:
                break
            if queue.weight == 0:
                continue
            share = amount * queue.weight / weights
            wanted = queue.remaining_request()
            if wanted <= share:
                given = wanted
                leftover.pop(queue.name, None)
            else:
                # KAI gives whole GPUs in a round; the fraction waits for the last pass.
                given = float(math.floor(share))
                if share - given > 0:
                    leftover[queue.name] = (share - given, queue)
            if given == 0:
                continue
            queue.fair += given
            remaining -= given
            again = again or wanted < share
        if not again or remaining <= 0:
            break
    return remaining, leftover


def with_ancestors(tree: QueueTree, per_queue: Mapping[str, float]) -> dict[str, float]:
    """Add each queue's amount to it and every ancestor (KAI counts a job up the tree)."""
    return _added_up(tree, per_queue.items(), {})


def _added_up(
    tree: QueueTree, moves: Iterable[tuple[str, float]], totals: dict[str, float]
) -> dict[str, float]:
    """``totals`` with each (queue, amount) added to the queue and its ancestors (a queue not
    in ``tree`` counts nowhere)."""
    for name, amount in moves:
        if name in tree:
            for queue in tree.path(name):
                totals[queue] = totals.get(queue, 0.0) + amount
    return totals


def fair_shares(
    tree: QueueTree,
    total: float,
    allocated: Mapping[str, float],
    requested: Mapping[str, float],
) -> dict[str, QueueShare]:
    """Every queue's GPU share of ``total`` GPUs, KAI's way (hierarchical).

    ``allocated`` and ``requested`` are each queue's own GPUs (running; running plus
    pending), not yet summed up the tree.
    """
    allocated_up = with_ancestors(tree, allocated)
    requested_up = with_ancestors(tree, requested)
    divisions: dict[str, _Division] = {}
    for queue in tree:
        priority = DEFAULT_QUEUE_PRIORITY if queue.priority is None else queue.priority
        divisions[queue.name] = _Division(
            queue.name, gpu_quota(queue), priority, requested_up.get(queue.name, 0.0)
        )
    # Breadth first from the roots: a level divides its parent's fair share.
    levels: list[tuple[float, tuple[str, ...]]] = [(total, tuple(sorted(tree.roots())))]
    while levels:
        amount, names = levels.pop()
        level = [divisions[name] for name in names]
        _divide(amount, level)
        for division in level:
            children = tuple(sorted(tree.children_of(division.name)))
            if children:
                levels.append((division.fair, children))
    return {
        name: QueueShare(
            deserved=division.deserved,
            limit=division.limit,
            fair_share=division.fair,
            allocated=allocated_up.get(name, 0.0),
            requested=division.request,
        )
        for name, division in divisions.items()
    }


class QuotaRule(StrEnum):
    """Which of KAI's rules would undo (or refuse) a requeue's beneficiary."""

    # A queue on the beneficiary's path would hold more than its limit (KAI: OverLimit).
    LIMIT = "limit"
    # KAI's reclaim of the beneficiary for the recreated victim: its fair-share strategy.
    FAIR_SHARE = "fair_share"
    # KAI's reclaim, quota strategy: the victim's side within deserved, the other over it.
    DESERVED_QUOTA = "deserved_quota"


@dataclass(frozen=True, slots=True)
class ShareView:
    """One queue's GPU share around a requeue: what ``explain`` and ``requeue plan`` show."""

    queue: str
    deserved: float
    fair_share: float
    limit: float
    allocated_before: float
    allocated_after: float


@dataclass(frozen=True, slots=True)
class QuotaVerdict:
    """Why a beneficiary was refused: the rule, the queue it held at, and both sides' shares."""

    rule: QuotaRule
    # The queue where the rule held (the limited queue; the beneficiary's side of the reclaim).
    queue: str
    beneficiary: ShareView
    victim: ShareView


class QuotaJudge:
    """KAI's view of queue GPU shares in one node pool, across one requeue cycle.

    The fair shares depend on what queues request (running plus pending), which a requeue
    does not change: the victim is pending again, the beneficiary runs. So they are computed
    once; only the allocations move, with each commit.
    """

    __slots__ = ("_allocated", "_shares", "_tree")

    def __init__(self, tree: QueueTree, shares: Mapping[str, QueueShare]) -> None:
        self._tree = tree
        self._shares = dict(shares)
        self._allocated = {name: share.allocated for name, share in shares.items()}

    def applies(self, queues: Iterable[str]) -> bool:
        """True if a queue on the path of any of ``queues`` sets a GPU share."""
        tree = self._tree
        return any(
            manages_gpus(tree.get(name))
            for queue in queues
            if queue in tree
            for name in tree.path(queue)
        )

    def commit(self, moves: Iterable[tuple[str, float]]) -> None:
        """Apply allocation changes (queue, +/- GPUs) of a committed requeue."""
        self._allocated = self._after(moves)

    def judge(
        self,
        *,
        victim_queue: str,
        victim_gpus: float,
        victim_demand: float,
        beneficiary_queue: str,
        beneficiary_gpus: float,
        placed: Iterable[tuple[str, float]] = (),
    ) -> QuotaVerdict | None:
        """Would KAI refuse the beneficiary, or reclaim it back for the recreated victim?

        ``victim_gpus``: what the victim's running pods free; ``victim_demand``: the GPUs its
        recreated gang needs (KAI's reclaimer request); ``placed``: beneficiaries already
        placed for the same victim. None: KAI keeps the beneficiary where it is.
        """
        tree = self._tree
        if beneficiary_queue not in tree:
            return None
        after = self._after(
            ((victim_queue, -victim_gpus), *placed, (beneficiary_queue, beneficiary_gpus))
        )
        for name in reversed(tree.path(beneficiary_queue)):
            limit = gpu_quota(tree.get(name)).limit
            # KAI checks a limit only for a job that asks for the resource.
            if beneficiary_gpus > 0 and not _at_most(after.get(name, 0.0), limit):
                return self._verdict(QuotaRule.LIMIT, name, beneficiary_queue, victim_queue, after)
        if victim_queue not in tree:
            return None  # a queue KAI does not know has no share to reclaim with
        rule, where = self._reclaims_back(
            victim_queue, victim_demand, beneficiary_queue, beneficiary_gpus, after
        )
        if rule is None:
            return None
        return self._verdict(rule, where, beneficiary_queue, victim_queue, after)

    def _after(self, moves: Iterable[tuple[str, float]]) -> dict[str, float]:
        """The allocations with ``moves`` (queue, +/- GPUs) counted up each queue's path."""
        return _added_up(self._tree, moves, dict(self._allocated))

    def _reclaims_back(
        self,
        victim_queue: str,
        demand: float,
        beneficiary_queue: str,
        gpus: float,
        after: Mapping[str, float],
    ) -> tuple[QuotaRule | None, str]:
        leveled = _leveled(self._tree, victim_queue, beneficiary_queue)
        if leveled is None:
            # Same queue, or one is the other's ancestor: a preempt by priority, not a reclaim
            # across queues; the planner's priority order already rules it out.
            return None, beneficiary_queue
        reclaimer, reclaimee = leveled
        shares = self._shares
        # KAI's CanReclaimResources: the reclaimer's own queue within its fair share.
        if not _at_most(after.get(victim_queue, 0.0) + demand, shares[victim_queue].fair_share):
            return None, reclaimee
        mine, theirs = shares[reclaimer], shares[reclaimee]
        held = after.get(reclaimee, 0.0)
        if not _at_most(held, theirs.allocatable()):
            rule = QuotaRule.FAIR_SHARE
        elif _at_most(after.get(reclaimer, 0.0) + demand, mine.deserved) and not _at_most(
            held, theirs.deserved
        ):
            rule = QuotaRule.DESERVED_QUOTA
        else:
            return None, reclaimee
        # KAI's boundary: once reclaimed, the reclaiming side must stay less saturated than
        # the side it took from (reclaimerSaturationMultiplier 1, KAI's default).
        ratio_mine = _saturation(after.get(reclaimer, 0.0) + demand, mine.fair_share)
        ratio_theirs = _saturation(held - gpus, theirs.fair_share)
        if ratio_mine > 1 and theirs.fair_share > 0 and ratio_mine >= ratio_theirs:
            return None, reclaimee
        return rule, reclaimee

    def _verdict(
        self,
        rule: QuotaRule,
        where: str,
        beneficiary_queue: str,
        victim_queue: str,
        after: Mapping[str, float],
    ) -> QuotaVerdict:
        beneficiary, victim = self._view(beneficiary_queue, after), self._view(victim_queue, after)
        return QuotaVerdict(rule, where, beneficiary, victim)

    def _view(self, queue: str, after: Mapping[str, float]) -> ShareView:
        # A queue the tree does not know (a victim's) has no share: shown as unmanaged.
        share = self._shares.get(queue, _NO_SHARE)
        return ShareView(
            queue=queue,
            deserved=share.deserved,
            fair_share=share.fair_share,
            limit=share.limit,
            allocated_before=self._allocated.get(queue, 0.0),
            allocated_after=after.get(queue, 0.0),
        )


def _saturation(allocated: float, fair_share: float) -> float:
    if fair_share == UNLIMITED:
        return 0.0
    if fair_share <= 0:
        return math.inf if allocated > _EPSILON else 0.0
    return allocated / fair_share


def _leveled(tree: QueueTree, reclaimer: str, reclaimee: str) -> tuple[str, str] | None:
    """The two queues just below the lowest common ancestor (KAI: getLeveledQueues)."""
    mine, theirs = tree.path(reclaimer), tree.path(reclaimee)
    for left, right in zip(mine, theirs, strict=False):
        if left != right:
            return left, right
    return None
