"""What ended a run, in the words of ``core.runs``, for the fold too (no podgroup types here).

A release without a reason is ``released``, or ``requeued`` when a committed requeue of the run
was waiting for it; a deletion is ``deleted``, or ``deleted-by-eviction`` when one was waiting;
any other reason is kept as it came. The ones that say the cluster took the resources away are
``EVICTIONS``: a protection violation may be one (``core.violation``), and a podgroup's last one
re-arms its preemption delay (``core.preemption_delay``).
"""

from __future__ import annotations

from typing import Final

RELEASED: Final = "released"
REQUEUED: Final = "requeued"
DELETED: Final = "deleted"
DELETED_BY_EVICTION: Final = "deleted-by-eviction"
# Reasons that say the cluster took the resources away (the bridge's and the worker's words).
EVICTION_REASONS: Final = frozenset({"evicted", "preempted", REQUEUED})
# Every ended_by that is an eviction: a closed set (metric labels use it).
EVICTIONS: Final = EVICTION_REASONS | {DELETED_BY_EVICTION}


def ended_by_reason(reason: str | None, *, deleted: bool, awaiting_release: bool) -> str:
    """Why a run ended: a release's ``reason`` (or a deletion), refined as the module says."""
    if deleted or reason == DELETED:
        return DELETED_BY_EVICTION if awaiting_release else DELETED
    if not reason:
        return REQUEUED if awaiting_release else RELEASED
    return reason
