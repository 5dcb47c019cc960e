"""A queue's share settings as KAI reads them: quota, limit, over-quota weight, priority.

KAI's Queue (scheduling.run.ai/v2) has ``spec.resources.<gpu|cpu|memory>`` with ``quota``
(the deserved amount), ``limit`` and ``overQuotaWeight``, and ``spec.priority``; -1 means
unlimited (KAI's ``UnlimitedResourceQuantity``, pkg/common/constants). The proportion rules
that use them are in core.proportion and docs/rule-engine.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Final

from minruntime.core.errors import InvalidQueueError

# KAI's "no limit" / "no quota" value (pkg/common/constants: UnlimitedResourceQuantity).
UNLIMITED: Final = -1.0
# KAI's priority of a Queue without spec.priority (pkg/common/constants: DefaultQueuePriority).
DEFAULT_QUEUE_PRIORITY: Final = 100
# The largest amount a queue may name: far above any cluster, far below float's whole units.
MAX_QUEUE_AMOUNT: Final = 1e15


def _check_amount(value: float, what: str, *, unlimited_ok: bool) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value > MAX_QUEUE_AMOUNT
        or (value < 0 and not (unlimited_ok and value == UNLIMITED))
    ):
        allowed = ">= 0 or -1 (unlimited)" if unlimited_ok else ">= 0"
        raise InvalidQueueError(f"{what} must be a finite number {allowed}, got {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ResourceQuota:
    """One resource of a queue: deserved ``quota``, ``limit`` (-1: none), over-quota weight."""

    quota: float = 0.0
    limit: float = UNLIMITED
    over_quota_weight: float = 1.0

    def __post_init__(self) -> None:
        _check_amount(self.quota, "quota", unlimited_ok=True)
        _check_amount(self.limit, "limit", unlimited_ok=True)
        _check_amount(self.over_quota_weight, "overQuotaWeight", unlimited_ok=False)


# What KAI gives a queue it synthesises (pkg/scheduler/cache/cluster_info/queue.go,
# getDefaultParentQueue): deserved and limit unlimited, weight 1. The planner uses it for a
# queue whose GPU share is not set, so such a queue is never "over its share".
UNMANAGED: Final = ResourceQuota(quota=UNLIMITED, limit=UNLIMITED, over_quota_weight=1.0)


@dataclass(frozen=True, slots=True, kw_only=True)
class QueueResources:
    """A queue's spec.resources: GPUs (fractions), CPU (millicpus), memory (megabytes)."""

    gpu: ResourceQuota | None = None
    cpu: ResourceQuota | None = None
    memory: ResourceQuota | None = None

    def __post_init__(self) -> None:
        for name in ("gpu", "cpu", "memory"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, ResourceQuota):
                raise InvalidQueueError(f"resources.{name} must be a ResourceQuota")
