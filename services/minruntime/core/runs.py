"""The run an event ended, as plain facts (SEMANTICS.md §5, §10 "Runs and violations").

A run lasts from the allocation that took a podgroup from zero pods to some (§5) to the event
that took it out of ``running``: the release of its last pod, or its deletion. Its
``ended_by`` is the release reason, refined as ``core.evictions`` says for what the reason
alone cannot say. A run the scheduler attributed (``Release.eviction``) carries the
attribution (action, evictor, its queue, when), which names the one rule that applied
(``core.attribution``).

A run ended by an eviction — ``evicted``, ``preempted``, ``requeued``,
``deleted-by-eviction`` — may be a protection violation (``core.violation``); completions,
failures and deletions that no eviction caused never are. Its work lost is the GPU-seconds
since its last checkpoint when the workload wrote one during the run
(``minruntime.kai.scheduler/checkpointed-at``, core.checkpoint), else the whole run's.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from decimal import Decimal, InvalidOperation
from typing import Final, NamedTuple

from minruntime.core.checkpoint import last_checkpoint
from minruntime.core.disruption import TopOwner
from minruntime.core.evictions import EVICTIONS, Attribution, ended_by_reason
from minruntime.core.podgroup import Deletion, PodGroupChange, PodGroupState, Release, owner_of
from minruntime.core.preemptibility import Preemptibility, core_pods

# Fixed scales, so a run's numbers are the same text whether its pods' GPUs were folded from
# the wire (floats) or loaded back from the store (numerics).
_GPU_SCALE: Final = Decimal("0.000001")
_GPU_SECONDS_SCALE: Final = Decimal("0.001")


class EndedRun(NamedTuple):
    """One run of a podgroup, from its start to the event that ended it."""

    uid: str
    # None for a placeholder (never submitted): its windows are the node pool's defaults.
    queue: str | None
    node_pool: str
    preemptibility: str
    start: datetime
    end: datetime
    ended_by: str
    # The GPUs its pods held when it ended; None when a pod's GPU is not known.
    gpus: Decimal | None
    # Semi-preemptible: the pods of its core it still held (§10); 0 for the other values.
    core: int = 0
    # Who evicted it, when the scheduler said so (None: not known).
    attribution: Attribution | None = None
    # Its top owner (the submission's topOwner, else kai.scheduler/top-owner-metadata: a
    # JobSet, a RayJob, ...; None: none).
    owner: TopOwner | None = None
    # Its last checkpoint when it ended (core.checkpoint: minruntime.kai.scheduler/
    # checkpointed-at, not before its start nor after its end; None: none known).
    checkpoint: datetime | None = None

    @property
    def owner_kind(self) -> str | None:
        """The top owner's kind (None: no top owner known)."""
        return None if self.owner is None else self.owner.kind

    @property
    def eviction(self) -> bool:
        """True when the cluster took the run away (it may be a protection violation)."""
        return self.ended_by in EVICTIONS

    @property
    def duration(self) -> timedelta:
        """How long it ran (zero when its end is stamped before its start)."""
        return max(self.end - self.start, timedelta(0))

    @property
    def gpu_seconds(self) -> Decimal | None:
        """GPUs held at the end times the seconds it ran (None when the GPUs are not known)."""
        return None if self.gpus is None else _gpu_seconds(self.gpus, self.duration)

    @property
    def since_checkpoint(self) -> timedelta | None:
        """For a run an eviction ended, the time from its last checkpoint to its end (None:
        not ended by an eviction, or no checkpoint known)."""
        if self.checkpoint is None or not self.eviction:
            return None
        return max(self.end - max(self.start, self.checkpoint), timedelta(0))

    @property
    def gpu_seconds_since_checkpoint(self) -> Decimal | None:
        """The work an eviction really lost: GPUs times the seconds from its last checkpoint
        to its end (None: not ended by an eviction, no checkpoint known, or GPUs unknown)."""
        lost = self.since_checkpoint
        if lost is None or self.gpus is None:
            return None
        return _gpu_seconds(self.gpus, lost)

    @property
    def gpu_seconds_lost(self) -> Decimal | None:
        """The work an eviction lost, as the metrics and ``violations`` count it: since the
        last checkpoint when one is known, else the whole run's GPU-seconds."""
        since = self.gpu_seconds_since_checkpoint
        return self.gpu_seconds if since is None else since


def ended_run(
    before: PodGroupState, after: PodGroupState, change: PodGroupChange, at: datetime
) -> EndedRun | None:
    """The run ``change`` (an event at ``at``) ended, going from ``before`` to ``after``."""
    if before.status != "running" or after.status == "running" or before.start_time is None:
        return None
    spec = before.spec
    release = change if isinstance(change, Release) else None
    eviction = None if release is None else release.eviction
    return EndedRun(
        uid=before.uid,
        queue=None if spec is None else spec.queue,
        node_pool=before.node_pool,
        preemptibility=before.preemptibility,
        start=before.start_time,
        end=at,
        ended_by=ended_by_reason(
            None if release is None else release.reason,
            deleted=isinstance(change, Deletion),
            awaiting_release=before.awaiting_release,
            attributed=eviction is not None,
        ),
        gpus=held_gpus(before),
        core=held_core(before),
        attribution=eviction,
        owner=owner_of(before),
        checkpoint=last_checkpoint(before.annotations, before.start_time, at),
    )


def held_core(state: PodGroupState) -> int:
    """The running pods of a semi-preemptible podgroup's core (0 for the other values)."""
    if state.preemptibility is not Preemptibility.SEMI_PREEMPTIBLE:
        return 0
    pods = state.pods
    running = Counter(
        pods[name].subgroup if name in pods else state.fallback_subgroup for name in state.allocated
    )
    return core_pods(state.subgroups, running)


def held_gpus(state: PodGroupState) -> Decimal | None:
    """The GPUs of the pods holding resources (None when one of them has no known GPU)."""
    total = Decimal(0)
    for name in state.allocated:
        pod = state.pods.get(name)
        if pod is None or pod.gpu is None:
            return None
        total += pod.gpu if isinstance(pod.gpu, Decimal) else Decimal(str(pod.gpu))
    return _scaled(total, _GPU_SCALE)


def _gpu_seconds(gpus: Decimal, span: timedelta) -> Decimal | None:
    seconds = Decimal(span // timedelta(microseconds=1)) / 1_000_000
    return _scaled(gpus * seconds, _GPU_SECONDS_SCALE)


def _scaled(value: Decimal, scale: Decimal) -> Decimal | None:
    """``value`` at ``scale``; None for what no count of GPUs can be (a value stored by an
    older version: infinite, not a number, or beyond the decimal precision)."""
    if not value.is_finite():
        return None
    try:
        # Beyond the context's precision: InvalidOperation (trapped by the default context).
        return value.quantize(scale)
    except InvalidOperation:
        return None
