"""What ended a run, in the words of ``core.runs``, for the fold too (no podgroup types here).

A release without a reason is ``released``, or ``requeued`` when a committed requeue of the run
was waiting for it (``awaiting_release``: the cluster carried the requeue out); a deletion
(``podgroup.deleted``, or a release with reason ``deleted``) is ``deleted``, or
``deleted-by-eviction`` when one was waiting; any other reason is kept as it came
(``completed``, ``failed``, ``evicted``, ...). A release the scheduler attributed (an
``Attribution``: KAI's ``Evict`` Event, its last-eviction-timestamp annotation or the pods'
``DisruptionTarget`` condition) is ``evicted`` whatever its reason said (a default KAI evicts
by deleting pods, so the bridge may see a plain deletion), unless the reason already names an
eviction. The ones that say the cluster took the resources away are ``EVICTIONS``: a
protection violation may be one (``core.violation``), and a podgroup's last one re-arms its
preemption delay (``core.preemption_delay``).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Final, NamedTuple

RELEASED: Final = "released"
REQUEUED: Final = "requeued"
EVICTED: Final = "evicted"
DELETED: Final = "deleted"
DELETED_BY_EVICTION: Final = "deleted-by-eviction"
# Reasons that say the cluster took the resources away (the bridge's and the worker's words).
EVICTION_REASONS: Final = frozenset({EVICTED, "preempted", REQUEUED})
# Every ended_by that is an eviction: a closed set (metric labels use it).
EVICTIONS: Final = EVICTION_REASONS | {DELETED_BY_EVICTION}


class EvictionSource(StrEnum):
    """Which of the scheduler's traces said who evicted (only an Event names the action)."""

    EVENT = "event"
    ANNOTATION = "annotation"
    CONDITION = "condition"


class EvictionAction(StrEnum):
    """KAI's actions that evict (its ``evictor-action-type``:
    pkg/scheduler/framework/interface.go, ``ActionType``)."""

    PREEMPT = "preempt"
    RECLAIM = "reclaim"
    CONSOLIDATION = "consolidation"
    STALE_GANG_EVICTION = "stalegangeviction"


class Attribution(NamedTuple):
    """Who evicted a run's pods, as the scheduler said it (every field but the source may be
    unknown: None)."""

    source: str
    # The scheduler's action, lower case (KAI's four, or another scheduler's word).
    action: str | None = None
    # The evicting podgroup, "namespace/name".
    evictor: str | None = None
    # The evicting podgroup's queue.
    evictor_queue: str | None = None
    # When the scheduler evicted (its Event's or annotation's time).
    at: datetime | None = None


def ended_by_reason(
    reason: str | None, *, deleted: bool, awaiting_release: bool, attributed: bool = False
) -> str:
    """Why a run ended: a release's ``reason`` (or a deletion), refined as the module says."""
    if deleted or reason == DELETED:
        ended = DELETED_BY_EVICTION if awaiting_release else DELETED
    elif not reason:
        ended = REQUEUED if awaiting_release else RELEASED
    else:
        ended = reason
    if attributed and ended not in EVICTIONS:
        return EVICTED
    return ended
