"""Requeue planning: which nominated podgroups to evict, for whom (SEMANTICS.md §8).

One call per worker cycle, pure: ``plan_requeue_cycle(cluster, candidates, tree=, configs=,
now=)`` returns every decision in order and the promised-capacity ledger after it. The worker
then writes each decision, its cooldown and its event in one transaction. The rules (order,
placement, when an eviction is justified) are written down in docs/rule-engine.md.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Final

from minruntime.core.annotations import REQUEUE_DELAY_ANNOTATION
from minruntime.core.config import NodePoolConfigs
from minruntime.core.cooldown import cooldown_gate, requeue_delay, requeue_not_before
from minruntime.core.disruption import (
    DisruptionLedger,
    DisruptionPolicy,
    TopOwner,
    queue_policy,
    read_top_owner,
)
from minruntime.core.elastic import VictimEviction, passes_victim_filter, validate_scenario
from minruntime.core.nomination import nominate
from minruntime.core.placement import FreeCapacityLedger, gpu_units, units_to_gpu
from minruntime.core.preemptibility import Preemptibility
from minruntime.core.proportion import QuotaJudge, QuotaVerdict, fair_shares, manages_gpus
from minruntime.core.protection import is_protected
from minruntime.core.queue_tree import QueueTree
from minruntime.core.requeue_cap import capped_podgroups
from minruntime.core.requeue_model import (
    ClusterState,
    CyclePlan,
    Exclusion,
    ExclusionReason,
    PendingPodGroup,
    PodPlacement,
    RequeueDecision,
    RequeueOutcome,
    RequeueReason,
    RunningPodGroup,
)
from minruntime.core.resolution import PoolResolvers, Resolver
from minruntime.core.timestamps import require_aware

_FAR_FUTURE: Final = datetime.max.replace(tzinfo=UTC)
# What deciding one candidate may raise on values at the edge of what Python can compute
# (a date past year 9999, a number too large to round): that candidate is excluded.
_UNDECIDABLE: Final = (ValueError, ArithmeticError)


def _planner_error(uid: str, error: Exception) -> Exclusion:
    return Exclusion(
        "podgroup", uid, ExclusionReason.PLANNER_ERROR, f"{type(error).__name__}: {error}"
    )


@dataclass(frozen=True, slots=True)
class _Contender:
    uid: str
    queue: str
    # The gang's GPU units, largest first: the order placement uses and the fit-cache key.
    demands: tuple[int, ...] | None
    pods: tuple[tuple[str, float], ...]
    total: int
    largest: int
    # Not a beneficiary before this instant (its preemption delay); None: no delay.
    delay_ends_at: datetime | None = None


def _contender(podgroup: PendingPodGroup) -> _Contender:
    gang = podgroup.required_pods()
    if gang is None:
        return _Contender(podgroup.uid, podgroup.queue, None, (), 0, 0)
    ordered = sorted(gang, key=lambda pod: -gpu_units(pod.gpu))
    demands = tuple(gpu_units(pod.gpu) for pod in ordered)
    return _Contender(
        podgroup.uid,
        podgroup.queue,
        demands,
        tuple((pod.name, pod.gpu) for pod in ordered),
        sum(demands),
        demands[0] if demands else 0,
        podgroup.delay_ends_at,
    )


def _contender_order(podgroup: PendingPodGroup) -> tuple[int, int, datetime, str]:
    submitted = podgroup.submitted_at
    return (
        -podgroup.priority,
        0 if submitted is not None else 1,
        submitted if submitted is not None else _FAR_FUTURE,
        podgroup.uid,
    )


def plan_requeue_cycle(
    cluster: ClusterState,
    candidates: Mapping[str, Collection[str]],
    *,
    tree: QueueTree,
    configs: NodePoolConfigs,
    now: datetime,
) -> CyclePlan:
    """Decide, in order, every candidate (uid -> nominators) of one requeue cycle at ``now``."""
    require_aware(now, "now")
    return _Planner(cluster, tree, configs, now).plan(candidates)


class _Planner:
    """The state of one cycle: the ledger, the pending index and what was taken."""

    def __init__(
        self, cluster: ClusterState, tree: QueueTree, configs: NodePoolConfigs, now: datetime
    ) -> None:
        self._cluster = cluster
        self._configs = configs
        self._now = now
        self._running = {pg.uid: pg for pg in cluster.running}
        self._resolvers = PoolResolvers(tree, configs)
        self._ledger = FreeCapacityLedger(self._free_nodes())
        by_pool: dict[str, list[PendingPodGroup]] = {}
        for podgroup in cluster.pending:
            if podgroup.uid not in cluster.promised_to:
                by_pool.setdefault(podgroup.node_pool, []).append(podgroup)
        self._pending: dict[str, list[_Contender]] = {}
        # Negated priorities, ascending, to find "strictly higher priority" by bisection.
        self._ranks: dict[str, list[int]] = {}
        for pool, podgroups in by_pool.items():
            podgroups.sort(key=_contender_order)
            self._pending[pool] = [_contender(pg) for pg in podgroups]
            self._ranks[pool] = [-pg.priority for pg in podgroups]
        self._taken: set[str] = set()
        # Candidate uid -> (work at risk, last checkpoint) at ``now``, for its decision.
        self._at_risk: dict[str, tuple[float | None, datetime | None]] = {}
        # Per pool: gang shape -> fits without any eviction, valid until the next commit.
        self._fits_now: dict[str, dict[tuple[int, ...], bool]] = {}
        self._new_promises: Counter[str] = Counter()
        # §10: the running podgroups that reached their requeue cap, decided once per cycle.
        self._capped = capped_podgroups(self._running, cluster.requeue_history, configs, now)
        # Disruption budgets and pacing: off (no ledger) unless a pool or a queue sets one.
        self._disruption = DisruptionLedger(cluster.disruption_history)
        self._queue_policies: dict[tuple[str, str], DisruptionPolicy] = {}
        # KAI's queue shares, per pool, built on first use; never when no queue sets a GPU
        # share, so such trees plan exactly as before.
        self._quota_on = any(manages_gpus(queue) for queue in tree)
        self._judges: dict[str, QuotaJudge] = {}

    def _free_nodes(self) -> list[tuple[str, str, int]]:
        cluster = self._cluster
        used: Counter[str] = Counter()
        for podgroup in cluster.running:
            if podgroup.uid not in cluster.awaiting_release:
                for pod in podgroup.pods:
                    if pod.running and pod.node is not None:
                        used[pod.node] += gpu_units(pod.gpu)
        return [
            (
                node.name,
                node.node_pool,
                gpu_units(node.gpu)
                - used[node.name]
                - gpu_units(cluster.promised.get(node.name, 0.0)),
            )
            for node in cluster.nodes
        ]

    def plan(self, candidates: Mapping[str, Collection[str]]) -> CyclePlan:
        excluded: list[Exclusion] = []
        order: dict[str, tuple[int, int, float, timedelta, str]] = {}
        for uid in candidates:
            try:
                order[uid] = self._candidate_order(uid)
            except _UNDECIDABLE as error:
                excluded.append(_planner_error(uid, error))
        decisions: list[RequeueDecision] = []
        for uid in sorted(order, key=order.__getitem__):
            checkpoint = self._ledger.checkpoint()
            try:
                decisions.append(self._decide(uid, tuple(sorted(set(candidates[uid])))))
            except _UNDECIDABLE as error:
                # One candidate the arithmetic cannot handle must not stop the others: it
                # gets no decision, and whatever its trial changed is undone.
                self._ledger.rollback(checkpoint)
                excluded.append(_planner_error(uid, error))
        promised = Counter({node: gpu_units(gpus) for node, gpus in self._cluster.promised.items()})
        promised.update(self._new_promises)
        return CyclePlan(
            tuple(decisions),
            MappingProxyType(
                {node: units_to_gpu(units) for node, units in sorted(promised.items()) if units}
            ),
            tuple(excluded),
        )

    def _candidate_order(self, uid: str) -> tuple[int, int, float, timedelta, str]:
        # Lowest priority first, then the least work at risk (checkpoint preference), then the
        # largest overrun, then uid; unknown podgroups last. Among victims of one priority
        # that could serve the same beneficiary, the first one tried serves it: the one whose
        # eviction loses the least work.
        podgroup = self._running.get(uid)
        if podgroup is None:
            return (1, 0, 0.0, timedelta(0), uid)
        overrun = nominate(podgroup.nomination_candidate(), self._now).overrun
        saved_at = podgroup.last_checkpoint(self._now)
        risk = podgroup.work_at_risk(self._now, saved_at)
        self._at_risk[uid] = (risk, saved_at)
        return (
            0,
            podgroup.priority,
            math.inf if risk is None else risk,
            -(overrun or timedelta(0)),
            uid,
        )

    def _uncommitted(
        self,
        uid: str,
        nominated_by: tuple[str, ...],
        reason: RequeueReason,
        outcome: RequeueOutcome = RequeueOutcome.SKIPPED,
        *,
        delay_ends_at: datetime | None = None,
        quota: QuotaVerdict | None = None,
    ) -> RequeueDecision:
        """A decision that evicts nothing: skipped, or rolled back (``outcome``)."""
        risk, saved_at = self._at_risk.get(uid, (None, None))
        return RequeueDecision(
            uid=uid,
            outcome=outcome,
            reason=reason,
            nominated_by=nominated_by,
            decided_at=self._now,
            delay_ends_at=delay_ends_at,
            quota=quota,
            work_at_risk=risk,
            last_checkpoint=saved_at,
        )

    def _decide(self, uid: str, nominated_by: tuple[str, ...]) -> RequeueDecision:
        podgroup = self._running.get(uid)
        if podgroup is not None:
            gate = cooldown_gate(podgroup.annotations, self._now)
            if gate is not None:
                return self._uncommitted(uid, nominated_by, RequeueReason(gate))
        if podgroup is None or not podgroup.running_pods:
            return self._uncommitted(uid, nominated_by, RequeueReason.NOT_RUNNING)
        if uid in self._cluster.awaiting_release:
            return self._uncommitted(uid, nominated_by, RequeueReason.ALREADY_COMMITTED)
        if podgroup.preemptibility is Preemptibility.NON_PREEMPTIBLE:
            return self._uncommitted(uid, nominated_by, RequeueReason.NOT_PREEMPTIBLE)
        if podgroup.preemptibility is Preemptibility.SEMI_PREEMPTIBLE:
            return self._uncommitted(uid, nominated_by, RequeueReason.SEMI_PREEMPTIBLE)
        if uid in self._capped:
            return self._uncommitted(uid, nominated_by, RequeueReason.REQUEUE_LIMIT)
        policy = self._disruption_policy(podgroup)
        if policy.active:
            owner = _owner(podgroup)
            refusal = self._disruption.refusal(podgroup.queue, owner, policy, self._now)
            if refusal is not None:
                return replace(
                    self._uncommitted(uid, nominated_by, RequeueReason(refusal.rule)),
                    frees_at=refusal.frees_at,
                )
        return self._attempt(podgroup, nominated_by)

    def _disruption_policy(self, podgroup: RunningPodGroup) -> DisruptionPolicy:
        """The victim's queue's disruption policy in its pool (once per queue and pool)."""
        key = (podgroup.node_pool, podgroup.queue)
        policy = self._queue_policies.get(key)
        if policy is None:
            pool = self._configs.for_pool(podgroup.node_pool).disruption
            annotations = self._cluster.queue_annotations.get(podgroup.queue, {})
            policy = queue_policy(pool, annotations).policy if annotations else pool
            self._queue_policies[key] = policy
        return policy

    def _attempt(self, victim: RunningPodGroup, nominated_by: tuple[str, ...]) -> RequeueDecision:
        ledger = self._ledger
        checkpoint = ledger.checkpoint()
        for pod in victim.pods:
            if pod.running and pod.node is not None:
                ledger.release(pod.node, gpu_units(pod.gpu))
        trial = self._serve(victim, checkpoint)
        if trial.placed:
            return self._commit(victim, nominated_by, trial.placed, checkpoint)
        ledger.rollback(checkpoint)
        delayed, quota = trial.delayed, trial.quota
        if delayed is not None:
            # Every possible beneficiary is inside its preemption-delay window.
            reason, quota = RequeueReason.PREEMPTION_DELAY, None
        elif quota is not None:
            # Every beneficiary that would be placed is one KAI refuses or reclaims back.
            reason = RequeueReason.BENEFICIARY_OVER_QUOTA
        elif not trial.contenders:
            reason = RequeueReason.NO_HIGHER_PRIORITY_PENDING
        elif trial.protected_fit:
            reason = RequeueReason.PROTECTED
        else:
            reason = RequeueReason.NO_CONTENDER_FITS
        outcome = RequeueOutcome.ROLLED_BACK
        return self._uncommitted(
            victim.uid, nominated_by, reason, outcome, delay_ends_at=delayed, quota=quota
        )

    def _serve(self, victim: RunningPodGroup, checkpoint: int) -> _Trial:
        """Place higher-priority contenders that need the capacity the victim freed.

        Returns the placements, whether any contender was left to try, whether one would
        have been placed but for the victim's minimum runtime, the earliest end of the
        preemption-delay windows that kept a possible beneficiary from being placed (None:
        none did), and the first share verdict that kept one from being placed (None: none).
        """
        pool = victim.node_pool
        ledger = self._ledger
        pending = self._pending.get(pool, [])
        higher = pending[: bisect_left(self._ranks.get(pool, []), -victim.priority)]
        # In the tree the pool's scheduler sees: its queues and the queues of no pool.
        excluded = _Exclusion(victim, self._resolvers(pool), self._now)
        fits_now = self._fits_now.setdefault(pool, {})
        fits_freed: dict[tuple[int, ...], bool] = {}
        placed: list[tuple[_Contender, tuple[str, ...]]] = []
        contenders = protected_fit = False
        delayed: datetime | None = None
        quota: QuotaVerdict | None = None
        judge = self._judge(pool)
        shares = _VictimShares(victim) if judge is not None else None
        now = self._now
        # Cheap bounds first: no pod larger than the largest hole, no gang above the total.
        largest, total = ledger.max_free(pool), ledger.total_free(pool)
        for contender in higher:
            if contender.uid in self._taken:
                continue
            contenders = True
            demands = contender.demands
            if demands is None or contender.largest > largest or contender.total > total:
                continue
            # Justified only if the gang needs the freed capacity: the scheduler could place
            # a gang that already fits without evicting anyone. The fit checks come first:
            # they are cached per gang shape, while protection is resolved per contender
            # queue, and most contenders do not fit at all.
            fits_before = fits_now.get(demands)
            if fits_before:
                continue
            fits = fits_freed.get(demands)
            if fits is None:
                fits = fits_freed[demands] = ledger.fits(pool, demands)
            if not fits:
                continue
            if fits_before is None:
                fits_before = fits_now[demands] = ledger.fits_at(checkpoint, pool, demands)
                if fits_before:
                    continue
            if excluded.against(contender.queue):
                protected_fit = True
                continue
            delay_ends_at = contender.delay_ends_at
            if delay_ends_at is not None and now < delay_ends_at:
                # A possible beneficiary, but inside its preemption-delay window.
                if delayed is None or delay_ends_at < delayed:
                    delayed = delay_ends_at
                continue
            if judge is not None and shares is not None:
                verdict = shares.judge(judge, contender.queue, units_to_gpu(contender.total))
                if verdict is not None:
                    quota = quota or verdict
                    continue
            nodes = ledger.place(pool, demands)
            assert nodes is not None  # it fitted an instant ago on the same ledger
            placed.append((contender, nodes))
            if shares is not None:
                shares.placed.append((contender.queue, units_to_gpu(contender.total)))
            if not ledger.gained_since(checkpoint, pool):
                break  # nothing freed is left over: nobody else can need this eviction
            fits_freed.clear()
            largest, total = ledger.max_free(pool), ledger.total_free(pool)
        return _Trial(placed, contenders, protected_fit, delayed, quota)

    def _judge(self, pool: str) -> QuotaJudge | None:
        """The pool's share judge (None when no queue sets a GPU share)."""
        if not self._quota_on:
            return None
        judge = self._judges.get(pool)
        if judge is None:
            # KAI divides shares per shard: among the queues the pool's scheduler sees.
            tree = self._resolvers(pool).tree
            judge = self._judges[pool] = _pool_judge(self._cluster, tree, pool)
        return judge

    def _commit(
        self,
        victim: RunningPodGroup,
        nominated_by: tuple[str, ...],
        placed: list[tuple[_Contender, tuple[str, ...]]],
        checkpoint: int,
    ) -> RequeueDecision:
        # Computed before anything is taken, so a failure here leaves the planner unchanged.
        default = self._configs.for_pool(victim.node_pool).default_requeue_delay
        delay, problem = requeue_delay(victim.annotations.get(REQUEUE_DELAY_ANNOTATION), default)
        not_before = requeue_not_before(self._now, delay)
        for pool in self._ledger.pools_changed_since(checkpoint):
            self._fits_now.pop(pool, None)
        risk, saved_at = self._at_risk.get(victim.uid, (None, None))
        reserved: Counter[str] = Counter()
        placements: list[PodPlacement] = []
        for contender, nodes in placed:
            self._taken.add(contender.uid)
            for (pod, gpu), node, units in zip(
                contender.pods, nodes, contender.demands or (), strict=True
            ):
                placements.append(PodPlacement(contender.uid, pod, node, gpu))
                reserved[node] += units
        self._new_promises.update(reserved)
        self._disruption.record(victim.queue, _owner(victim), self._now)
        judge = self._judges.get(victim.node_pool)
        if judge is not None:
            freed = units_to_gpu(_running_units(victim))
            judge.commit(
                [
                    (victim.queue, -freed),
                    *((contender.queue, units_to_gpu(contender.total)) for contender, _ in placed),
                ]
            )
        return RequeueDecision(
            uid=victim.uid,
            outcome=RequeueOutcome.COMMITTED,
            reason=None,
            nominated_by=nominated_by,
            decided_at=self._now,
            beneficiaries=tuple(contender.uid for contender, _ in placed),
            requeue_not_before=not_before,
            reservations={
                node: units_to_gpu(units) for node, units in sorted(reserved.items()) if units
            },
            placements=tuple(placements),
            delay_problem=problem,
            work_at_risk=risk,
            last_checkpoint=saved_at,
        )


@dataclass(frozen=True, slots=True)
class _Trial:
    """What serving one victim's freed capacity found (see ``_Planner._serve``)."""

    placed: list[tuple[_Contender, tuple[str, ...]]]
    contenders: bool
    protected_fit: bool
    delayed: datetime | None
    quota: QuotaVerdict | None


def _running_units(podgroup: RunningPodGroup) -> int:
    return sum(gpu_units(pod.gpu) for pod in podgroup.pods if pod.running and pod.node)


def _gang_units(podgroup: RunningPodGroup | PendingPodGroup) -> int:
    """The GPUs of each subgroup's first minAvailable pods (KAI's reclaimer request)."""
    total = 0
    for subgroup in podgroup.subgroups:
        members = [pod for pod in podgroup.pods if pod.subgroup == subgroup.name]
        total += sum(gpu_units(pod.gpu) for pod in members[: subgroup.min_available])
    return total


def _pool_judge(cluster: ClusterState, tree: QueueTree, pool: str) -> QuotaJudge:
    """KAI's shares of ``pool``'s GPUs, with earlier commits counted as done."""
    total = sum(gpu_units(node.gpu) for node in cluster.nodes if node.node_pool == pool)
    allocated: Counter[str] = Counter()
    requested: Counter[str] = Counter()
    for running in cluster.running:
        if running.node_pool == pool:
            requested[running.queue] += sum(gpu_units(pod.gpu) for pod in running.pods)
            if running.uid not in cluster.awaiting_release:
                allocated[running.queue] += _running_units(running)
    for pending in cluster.pending:
        if pending.node_pool == pool:
            requested[pending.queue] += sum(gpu_units(pod.gpu) for pod in pending.pods)
            if pending.uid in cluster.promised_to:
                allocated[pending.queue] += _gang_units(pending)
    shares = fair_shares(
        tree,
        units_to_gpu(total),
        {queue: units_to_gpu(units) for queue, units in allocated.items()},
        {queue: units_to_gpu(units) for queue, units in requested.items()},
    )
    return QuotaJudge(tree, shares)


class _VictimShares:
    """One victim's side of the share rules, and the beneficiaries placed for it so far."""

    __slots__ = ("_demand", "_freed", "_victim", "placed")

    def __init__(self, victim: RunningPodGroup) -> None:
        self._victim = victim
        self._freed = units_to_gpu(_running_units(victim))
        self._demand = units_to_gpu(_gang_units(victim))
        self.placed: list[tuple[str, float]] = []

    def judge(self, judge: QuotaJudge, queue: str, gpus: float) -> QuotaVerdict | None:
        """The verdict on a beneficiary of ``queue`` needing ``gpus`` (None: allowed)."""
        victim = self._victim
        if not judge.applies((victim.queue, queue)):
            return None
        return judge.judge(
            victim_queue=victim.queue,
            victim_gpus=self._freed,
            victim_demand=self._demand,
            beneficiary_queue=queue,
            beneficiary_gpus=gpus,
            placed=self.placed,
        )


class _Exclusion:
    """Whether a victim's minimum runtime protects it against contenders of a given queue."""

    __slots__ = ("_cache", "_elastic_ok", "_now", "_resolver", "_victim")

    def __init__(self, victim: RunningPodGroup, resolver: Resolver, now: datetime) -> None:
        self._victim = victim
        self._resolver = resolver
        self._now = now
        self._cache: dict[str, bool] = {}
        # §6: evicting a protected podgroup whole is valid only if it is elastic and every
        # subgroup may drop to zero pods.
        pods = victim.pod_set
        self._elastic_ok = (
            passes_victim_filter(pods, True)
            and validate_scenario((VictimEviction.whole(pods, True),)).valid
        )

    def against(self, contender_queue: str) -> bool:
        """True if the victim may not be evicted for a contender of ``contender_queue``."""
        cached = self._cache.get(contender_queue)
        if cached is None:
            victim = self._victim
            # Preempt rule within one queue, reclaim rule across queues.
            resolution = self._resolver.resolve_for(victim.queue, contender_queue)
            protected = is_protected(victim.start_time, resolution.min_runtime, self._now)
            cached = self._cache[contender_queue] = protected and not self._elastic_ok
        return cached


def _owner(podgroup: RunningPodGroup) -> TopOwner | None:
    """The victim's top owner: as stored from its submission, else its annotation's."""
    if podgroup.owner is not None:
        return podgroup.owner
    return read_top_owner(podgroup.annotations).owner
