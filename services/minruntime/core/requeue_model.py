"""The requeue planner's values (SEMANTICS.md §8): the cluster state it reads and the
decisions it returns.

The requeue worker builds the cluster state from its store once per cycle. Everything here is
immutable and validated on construction, so the planner can trust it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import MappingProxyType
from typing import ClassVar, Final

from minruntime.core.checkpoint import last_checkpoint, work_at_risk
from minruntime.core.config import DEFAULT_NODE_POOL
from minruntime.core.disruption import DisruptionHistory, TopOwner
from minruntime.core.elastic import DEFAULT_SUBGROUP, PodGroupPods, SubGroup
from minruntime.core.errors import MinRuntimeError
from minruntime.core.gpus import MAX_GPUS_IN_PLAN
from minruntime.core.nomination import NominationCandidate
from minruntime.core.preemptibility import Preemptibility
from minruntime.core.proportion import QuotaVerdict
from minruntime.core.timestamps import require_aware


class InvalidClusterStateError(MinRuntimeError):
    """A cluster state handed to the requeue planner is inconsistent."""

    kind: ClassVar[str] = "invalid_snapshot"


class InvalidGpuError(InvalidClusterStateError):
    """A GPU amount is not a finite number in [0, MAX_GPUS_IN_PLAN]."""

    kind: ClassVar[str] = "invalid_gpu"


def _check_gpu(value: float, what: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 <= value <= MAX_GPUS_IN_PLAN
    ):
        raise InvalidGpuError(
            f"{what}: GPUs must be a finite number in [0, {MAX_GPUS_IN_PLAN}], got {value!r}"
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    """A node: its GPU capacity (fractions allowed) and the node pool it belongs to."""

    name: str
    gpu: float
    node_pool: str = DEFAULT_NODE_POOL

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidClusterStateError("a node needs a non-empty name")
        _check_gpu(self.gpu, f"node {self.name}")


@dataclass(frozen=True, slots=True, kw_only=True)
class Pod:
    """One pod: its GPU request, subgroup, and where it runs if it holds resources."""

    name: str
    gpu: float = 0.0
    subgroup: str = DEFAULT_SUBGROUP
    node: str | None = None
    # Holds resources on ``node``; pods still releasing count as running (§6).
    running: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise InvalidClusterStateError("a pod needs a non-empty name")
        _check_gpu(self.gpu, f"pod {self.name}")
        if self.running and not self.node:
            raise InvalidClusterStateError(f"pod {self.name} is running but has no node")


def _pod_set(uid: str, pods: tuple[Pod, ...], subgroups: tuple[SubGroup, ...]) -> PodGroupPods:
    names = Counter(pod.name for pod in pods)
    duplicates = sorted(name for name, count in names.items() if count > 1)
    if duplicates:
        raise InvalidClusterStateError(
            f"podgroup {uid}: duplicate pod name(s) {', '.join(duplicates)}"
        )
    return PodGroupPods(
        uid=uid,
        pods={pod.name: pod.subgroup for pod in pods},
        running=frozenset(pod.name for pod in pods if pod.running),
        subgroups=subgroups,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class RunningPodGroup:
    """A podgroup that holds resources: a possible requeue candidate (victim)."""

    uid: str
    queue: str
    priority: int
    start_time: datetime | None
    pods: tuple[Pod, ...]
    node_pool: str = DEFAULT_NODE_POOL
    preemptibility: Preemptibility = Preemptibility.PREEMPTIBLE
    annotations: Mapping[str, str] = field(default_factory=dict)
    subgroups: tuple[SubGroup, ...] = (SubGroup(),)
    # Its top owner as stored from the submission's topOwner (None: the planner reads
    # kai.scheduler/top-owner-metadata from the annotations instead).
    owner: TopOwner | None = None
    # Derived: the elastic view of the pods (§6), built once.
    pod_set: PodGroupPods = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", tuple(self.pods))
        object.__setattr__(self, "subgroups", tuple(self.subgroups))
        object.__setattr__(self, "annotations", MappingProxyType(dict(self.annotations)))
        if self.start_time is not None:
            require_aware(self.start_time, f"podgroup {self.uid} start time")
        object.__setattr__(self, "pod_set", _pod_set(self.uid, self.pods, self.subgroups))

    @property
    def running_pods(self) -> int:
        """The number of pods holding resources."""
        return len(self.pod_set.running)

    def last_checkpoint(self, now: datetime) -> datetime | None:
        """Its run's last checkpoint at ``now`` (core.checkpoint; None: none usable)."""
        return last_checkpoint(self.annotations, self.start_time, now)

    def work_at_risk(self, now: datetime, checkpoint: datetime | None = None) -> float | None:
        """GPU-seconds an eviction at ``now`` would lose: since its last checkpoint (``checkpoint``
        when the caller has read it already), else since its start, times the GPUs its pods
        hold (None: no start time known)."""
        if self.start_time is None:
            return None
        saved = self.last_checkpoint(now) if checkpoint is None else checkpoint
        held = math.fsum(pod.gpu for pod in self.pods if pod.running)
        return work_at_risk(self.start_time, saved, held, now)

    def nomination_candidate(self) -> NominationCandidate:
        """The view of this podgroup that the expected-runtime nominator judges."""
        return NominationCandidate(
            running_pods=self.running_pods,
            preemptibility=self.preemptibility,
            annotations=self.annotations,
            start_time=self.start_time,
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingPodGroup:
    """A podgroup waiting for resources: a possible beneficiary (contender) of a requeue."""

    uid: str
    queue: str
    priority: int
    pods: tuple[Pod, ...]
    node_pool: str = DEFAULT_NODE_POOL
    subgroups: tuple[SubGroup, ...] = (SubGroup(),)
    # Breaks priority ties: older first (unknown after known), then uid.
    submitted_at: datetime | None = None
    # The end of its preemption-delay window (core.preemption_delay; None: no delay): before
    # it, it is not a requeue beneficiary.
    delay_ends_at: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", tuple(self.pods))
        object.__setattr__(self, "subgroups", tuple(self.subgroups))
        if self.submitted_at is not None:
            require_aware(self.submitted_at, f"podgroup {self.uid} submission time")
        if self.delay_ends_at is not None:
            require_aware(self.delay_ends_at, f"podgroup {self.uid} preemption-delay end")
        _pod_set(self.uid, self.pods, self.subgroups)

    def required_pods(self) -> tuple[Pod, ...] | None:
        """The gang: each subgroup's first minAvailable pods; None if a subgroup has too few."""
        gang: list[Pod] = []
        for subgroup in self.subgroups:
            members = [pod for pod in self.pods if pod.subgroup == subgroup.name]
            if len(members) < subgroup.min_available:
                return None
            gang.extend(members[: subgroup.min_available])
        return tuple(gang)


@dataclass(frozen=True, slots=True, kw_only=True)
class ClusterState:
    """Everything the planner needs to know about the cluster at the start of a cycle."""

    nodes: tuple[Node, ...]
    running: tuple[RunningPodGroup, ...] = ()
    pending: tuple[PendingPodGroup, ...] = ()
    # Node -> GPUs promised to beneficiaries of earlier commits that are not placed yet.
    promised: Mapping[str, float] = field(default_factory=dict)
    # Victims of earlier commits that still hold resources: their pods count as already
    # freed (the promise above is carved out of that capacity) and they are not retried.
    awaiting_release: frozenset[str] = frozenset()
    # Beneficiaries of earlier commits still pending: they already hold a promise and are
    # not contenders again (one podgroup must not cause two evictions).
    promised_to: frozenset[str] = frozenset()
    # Podgroup uid -> the times of its committed requeues the requeue cap may count (§10):
    # at least those inside the window in force; older ones are ignored.
    requeue_history: Mapping[str, tuple[datetime, ...]] = field(default_factory=dict)
    # Past evictions (committed requeues and the scheduler's observed evictions) per queue
    # and per top owner, which the disruption budget and the eviction gap count.
    disruption_history: DisruptionHistory = field(default_factory=DisruptionHistory)
    # Queue name -> its annotations (a budget overridden per queue).
    queue_annotations: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for name in ("nodes", "running", "pending"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        history = {uid: tuple(times) for uid, times in self.requeue_history.items()}
        for uid, times in history.items():
            for moment in times:
                require_aware(moment, f"podgroup {uid} requeue time")
        object.__setattr__(self, "requeue_history", MappingProxyType(history))
        object.__setattr__(self, "promised", MappingProxyType(dict(self.promised)))
        object.__setattr__(self, "awaiting_release", frozenset(self.awaiting_release))
        object.__setattr__(self, "promised_to", frozenset(self.promised_to))
        _unique("node name", (node.name for node in self.nodes))
        _unique("podgroup uid", [pg.uid for pg in self.running] + [pg.uid for pg in self.pending])
        for node, gpus in self.promised.items():
            _check_gpu(gpus, f"promised capacity on node {node}")


def _unique(what: str, names: Iterable[str]) -> None:
    duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
    if duplicates:
        raise InvalidClusterStateError(f"duplicate {what}(s) in snapshot: {', '.join(duplicates)}")


class RequeueOutcome(StrEnum):
    """What happened to a candidate (the ``outcome`` column of requeue_decisions)."""

    COMMITTED = "committed"
    ROLLED_BACK = "rolled_back"
    SKIPPED = "skipped"


class RequeueReason(StrEnum):
    """Why a candidate was skipped or rolled back (a finite metric label)."""

    COOLDOWN = "cooldown"
    INVALID_NOT_BEFORE = "invalid_not_before"
    NOT_RUNNING = "not_running"
    ALREADY_COMMITTED = "already_committed"
    # Not in §8's list: an external nominator may name a podgroup that KAI never evicts.
    NOT_PREEMPTIBLE = "not_preemptible"
    # §10: a requeue evicts the whole gang, and a semi-preemptible core is never evictable.
    SEMI_PREEMPTIBLE = "semi_preemptible"
    NO_HIGHER_PRIORITY_PENDING = "no_higher_priority_pending"
    PROTECTED = "protected"
    NO_CONTENDER_FITS = "no_contender_fits"
    # Every possible beneficiary is inside its preemption-delay window (SEMANTICS.md §10).
    PREEMPTION_DELAY = "preemption_delay"
    # §10: the podgroup reached its requeue cap (maxRequeues within maxRequeuesWindow).
    REQUEUE_LIMIT = "requeue_limit"
    # KAI's queue shares: every beneficiary that would be placed is one KAI refuses (its queue
    # over a limit) or reclaims back for the recreated victim (docs/rule-engine.md).
    BENEFICIARY_OVER_QUOTA = "beneficiary_over_quota"
    # core.disruption: the victim's queue has used its evictions of the window, or its top
    # owner was evicted less than minEvictionGap ago.
    DISRUPTION_BUDGET = "disruption_budget"
    EVICTION_GAP = "eviction_gap"


@dataclass(frozen=True, slots=True)
class PodPlacement:
    """Where one pod of a beneficiary is expected to run once the victim is gone."""

    podgroup: str
    pod: str
    node: str
    gpu: float


@dataclass(frozen=True, slots=True, kw_only=True)
class RequeueDecision:
    """The planner's verdict on one candidate."""

    uid: str
    outcome: RequeueOutcome
    # None when committed.
    reason: RequeueReason | None
    nominated_by: tuple[str, ...]
    decided_at: datetime
    beneficiaries: tuple[str, ...] = ()
    requeue_not_before: datetime | None = None
    # Node -> GPUs promised to the beneficiaries (committed decisions only).
    reservations: Mapping[str, float] = field(default_factory=dict)
    placements: tuple[PodPlacement, ...] = ()
    # Why the requeue-delay annotation was ignored, for the audit record.
    delay_problem: str | None = None
    # Rolled back for preemption_delay: the earliest instant a beneficiary's window ends.
    delay_ends_at: datetime | None = None
    # Rolled back for beneficiary_over_quota: the rule and the shares that decided it.
    quota: QuotaVerdict | None = None
    # Skipped for disruption_budget or eviction_gap: when the rule frees up.
    frees_at: datetime | None = None
    # GPU-seconds the eviction would lose at decided_at (RunningPodGroup.work_at_risk: since the
    # last checkpoint, else the run's start), and that checkpoint (None: none known); both
    # None for a candidate not running.
    work_at_risk: float | None = None
    last_checkpoint: datetime | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "reservations", MappingProxyType(dict(self.reservations)))


class ExclusionReason(StrEnum):
    """Why a stored node or podgroup was left out of a cycle (a finite metric label)."""

    # A GPU amount (node capacity, pod request, promise) not finite in [0, MAX_GPUS_IN_PLAN].
    INVALID_GPU = "invalid_gpu"
    # A start or submission time outside years 1-9999, or without a UTC offset.
    INVALID_TIME = "invalid_time"
    # Annotations that are not a map of strings.
    INVALID_ANNOTATIONS = "invalid_annotations"
    # Anything else the cluster state's own checks refuse (duplicate pod names, a subgroup's
    # minAvailable below zero, a running pod without a node, ...).
    INVALID_SNAPSHOT = "invalid_snapshot"
    # A nomination that names no nominator.
    INVALID_NOMINATION = "invalid_nomination"
    # The node pool's stored configuration is unusable: its podgroups cannot be judged.
    INVALID_CONFIG = "invalid_config"
    # The stored queue tree is unusable (a cycle, a bad minimum runtime): nothing is judged.
    INVALID_QUEUE_TREE = "invalid_queue_tree"
    # A node running pods of an excluded podgroup: how full it is is unknown.
    HOSTS_EXCLUDED_PODGROUP = "hosts_excluded_podgroup"
    # The planner could not decide this candidate (an arithmetic limit): no decision.
    PLANNER_ERROR = "planner_error"


_REASON_OF_KIND: Final = {
    "invalid_gpu": ExclusionReason.INVALID_GPU,
    "invalid_timestamp": ExclusionReason.INVALID_TIME,
}


def exclusion_reason(error: MinRuntimeError) -> ExclusionReason:
    """The exclusion reason for an error the cluster state's checks raised."""
    return _REASON_OF_KIND.get(error.kind, ExclusionReason.INVALID_SNAPSHOT)


@dataclass(frozen=True, slots=True)
class Exclusion:
    """A node, podgroup, node pool or queue tree left out of a cycle, and why."""

    # "node", "podgroup", "node_pool" or "queue_tree" (a finite metric label).
    what: str
    name: str
    reason: ExclusionReason
    detail: str = ""


@dataclass(frozen=True, slots=True)
class CyclePlan:
    """The decisions of one cycle, in processing order, and the promises after them."""

    decisions: tuple[RequeueDecision, ...]
    # Node -> GPUs promised: the cluster state's promises plus this cycle's reservations.
    promised: Mapping[str, float]
    # Candidates the planner could not decide (no decision recorded for them).
    excluded: tuple[Exclusion, ...] = ()

    def committed(self) -> tuple[RequeueDecision, ...]:
        """The decisions that evict a podgroup."""
        return tuple(d for d in self.decisions if d.outcome is RequeueOutcome.COMMITTED)
