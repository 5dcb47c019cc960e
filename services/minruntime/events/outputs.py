"""``data`` models of the output event types: what we decide, and when protection ends.

``kai.requeue-decisions`` carries the requeue decisions; ``kai.protection`` the
``protection.expired`` wake-ups.

In the decisions, the fields of CONTRACT.md §1 come first; the rest are extensions the worker
fills in so that a decision event alone carries everything its projection needs (replay
applies the event, it never re-plans): when it was decided, which run of the podgroup it
concerns, and where the beneficiaries are expected to land.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from minruntime.events.base import EventData, WireModel
from minruntime.events.types import Duration, Gpus, Name, Timestamp


class PromisedPod(WireModel):
    """One pod of a beneficiary and the node whose freed capacity is promised to it."""

    podgroup: Name
    """The beneficiary's uid."""
    pod: Name
    """The pod's name."""
    node: Name
    """The node it is expected to run on once the requeued podgroup is gone."""
    gpu: Gpus
    """The GPUs promised to it on that node."""


class QueueShareView(WireModel):
    """One queue's GPU share around a requeue, as KAI's proportion plugin counts it."""

    queue: Name
    """The queue."""
    deserved: float = Field(ge=-1, allow_inf_nan=False)
    """Its deserved GPUs (spec.resources.gpu.quota); -1 = unlimited."""
    fair_share: float = Field(ge=0, allow_inf_nan=False)
    """Its fair share of the node pool's GPUs (deserved, then over-quota by priority and weight)."""
    limit: float = Field(ge=-1, allow_inf_nan=False)
    """Its GPU limit; -1 = none."""
    allocated_before: float = Field(allow_inf_nan=False)
    """GPUs its podgroups hold before the requeue (earlier commits counted as done)."""
    allocated_after: float = Field(allow_inf_nan=False)
    """GPUs they would hold with the victim gone and the beneficiary placed."""


class QuotaShares(WireModel):
    """Why a beneficiary was refused: KAI's rule, the queue it held at, both queues' shares."""

    rule: Literal["limit", "fair_share", "deserved_quota"]
    """limit: a queue would exceed its limit; fair_share / deserved_quota: KAI's reclaim
    strategy that would take the GPUs back for the recreated victim."""
    queue: Name
    """The limited queue, or the beneficiary's side of the reclaim (below the common ancestor)."""
    beneficiary: QueueShareView
    """The beneficiary's queue."""
    victim: QueueShareView
    """The victim's queue."""


class RequeueCommittedData(EventData):
    """A requeue was committed: the cluster side evicts the podgroup."""

    uid: Name
    """The requeued podgroup's uid."""
    nominated_by: tuple[Name, ...] = Field(min_length=1)
    """Every component that nominated it (a candidate is attempted once per cycle)."""
    beneficiaries: tuple[Name, ...] = Field(min_length=1)
    """Uids of the pending podgroups the freed capacity is promised to."""
    requeue_not_before: Timestamp
    """Cooldown end (decidedAt + requeue-delay): the podgroup is not requeued again before."""
    decided_at: Timestamp
    """When the decision was committed (the worker's clock, just before its transaction)."""
    run_start: Timestamp | None = None
    """Start time of the run that is requeued."""
    placements: tuple[PromisedPod, ...] = ()
    """Where each beneficiary pod is expected to run; the promise lapses at requeueNotBefore."""
    delay_problem: str | None = None
    """Why the podgroup's requeue-delay annotation was ignored (the default applied)."""


class UncommittedDecisionData(EventData):
    """The fields a rolled-back and a skipped decision share (the reason says which)."""

    uid: Name
    """The candidate podgroup's uid."""
    nominated_by: tuple[Name, ...] = Field(min_length=1)
    """Every component that nominated it."""
    reason: Name
    """Why it was not requeued."""
    decided_at: Timestamp
    """When it was decided."""
    run_start: Timestamp | None = None
    """Start time of the podgroup's current run; absent when it was not running."""


class RequeueRolledBackData(UncommittedDecisionData):
    """A requeue was attempted and rolled back (no contender fits): nothing changed."""

    reason: Name
    """Why it was rolled back: no_higher_priority_pending, protected, no_contender_fits,
    preemption_delay or beneficiary_over_quota."""
    delay_ends_at: Timestamp | None = None
    """preemption_delay only: the earliest instant a possible beneficiary's preemption-delay
    window ends (the candidate may be requeued for it from then on)."""
    quota_shares: QuotaShares | None = None
    """beneficiary_over_quota only: the rule and the shares that decided it."""


class RequeueSkippedData(UncommittedDecisionData):
    """A nominated podgroup was not attempted, e.g. in cooldown or no longer running."""

    reason: Name
    """Why it was skipped: cooldown, invalid_not_before, not_running, already_committed, ..."""


class ProtectionExpiredData(EventData):
    """A protection window of a running podgroup ended at protectedUntil (the event time)."""

    uid: Name
    """The podgroup's uid."""
    queue: Name | None = None
    """The podgroup's queue; absent while its submission has not arrived (defaults apply)."""
    node_pool: Name
    """The podgroup's node pool, whose configuration supplied the defaults and the method."""
    run_start: Timestamp
    """Start time of the run the window protected."""
    rule: Literal["preempt", "reclaim"]
    """preempt: preemptors in the podgroup's own queue; reclaim: reclaimers in other queues."""
    min_runtime: Duration
    """The minimum runtime of the window (positive)."""
    resolved_from: Name | None = None
    """The queue whose value applied; absent: the node-pool default."""
    protected_until: Timestamp
    """runStart + minRuntime: from this instant on, the window no longer protects the run."""
    reclaim_resolve_method: Literal["lca", "queue"] | None = None
    """Reclaim windows only: the node pool's method."""
    # A reclaimer's step-down queue: one below the lowest common ancestor on the victim's side
    # (the victim's root for a reclaimer under another root; the victim's queue when it is
    # the ancestor) — where the lca walk starts (docs/events.md).
    step_down_queues: tuple[Name, ...] | None = Field(default=None, min_length=1)
    """lca only: the step-down queues (root first) of the reclaimers it applies to; else all."""
