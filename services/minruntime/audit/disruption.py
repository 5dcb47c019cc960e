"""What ``minruntime explain`` shows of the disruption budget and gap (core.disruption): pure.

The rules in force for a podgroup's queue (the node pool's, with the Queue's valid
``minruntime.kai.scheduler/`` annotations applied), the evictions they count at the instant
explained, and whether one more eviction would be skipped now, and until when.
``minruntime.audit.explain`` reads the pieces from the same shadow as the rest.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from minruntime.core.disruption import (
    QUEUE_DISRUPTION_ANNOTATIONS,
    DisruptionHistory,
    DisruptionLedger,
    DisruptionPolicy,
    TopOwner,
    evictions_in_window,
    queue_policy,
)


@dataclass(frozen=True, slots=True)
class DisruptionFacts:
    """The disruption rules in force for a podgroup at one instant, and what they count."""

    # The budget (both None: off) and the gap (None: off) in force for the podgroup's queue.
    max_evictions_per_window: int | None
    eviction_window: timedelta | None
    min_eviction_gap: timedelta | None
    # The Queue's annotations that replaced the node pool's values, and the ones ignored
    # (out of bounds) with why.
    overridden_by: tuple[str, ...]
    problems: tuple[str, ...]
    # Evictions of the queue within the window at the instant (None: no budget).
    counted: int | None
    # The podgroup's top owner (None: none known) and its newest eviction counted.
    owner: TopOwner | None
    owner_last_evicted: datetime | None
    # The rule that would skip one more eviction now (disruption_budget | eviction_gap), and
    # when it frees up; both None: neither would.
    refused_by: str | None
    frees_at: datetime | None


def disruption_facts(
    pool: DisruptionPolicy,
    queue: str,
    queue_annotations: Mapping[str, str],
    owner: TopOwner | None,
    evictions: Iterable[tuple[str | None, str | None, datetime]],
    at: datetime,
) -> DisruptionFacts | None:
    """The rules in force for ``queue`` under ``pool``; ``evictions`` (queue, owner uid,
    when) counted at ``at``. None: no rule is on for it."""
    reading = queue_policy(pool, queue_annotations)
    policy = reading.policy
    if not policy.active and not reading.problems:
        return None
    by_queue: dict[str, list[datetime]] = {}
    by_owner: dict[str, list[datetime]] = {}
    for in_queue, owner_uid, moment in evictions:
        if moment > at:
            continue
        if in_queue is not None:
            by_queue.setdefault(in_queue, []).append(moment)
        if owner_uid is not None:
            by_owner.setdefault(owner_uid, []).append(moment)
    history = DisruptionHistory(
        {name: tuple(times) for name, times in by_queue.items()},
        {uid: tuple(times) for uid, times in by_owner.items()},
    )
    refusal = DisruptionLedger(history).refusal(queue, owner, policy, at)
    window = policy.eviction_window
    counted = None if window is None else evictions_in_window(by_queue.get(queue, ()), at, window)
    owned = by_owner.get(owner.uid, []) if owner is not None else []
    overridden = tuple(
        key
        for key in QUEUE_DISRUPTION_ANNOTATIONS
        if key in queue_annotations and not any(p.startswith(key) for p in reading.problems)
    )
    return DisruptionFacts(
        max_evictions_per_window=policy.max_evictions_per_window,
        eviction_window=window,
        min_eviction_gap=policy.min_eviction_gap,
        overridden_by=overridden,
        problems=reading.problems,
        counted=counted,
        owner=owner,
        owner_last_evicted=max(owned) if owned else None,
        refused_by=None if refusal is None else refusal.rule,
        frees_at=None if refusal is None else refusal.frees_at,
    )
