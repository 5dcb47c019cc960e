"""Minimum-runtime protection windows (SEMANTICS.md §5)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Final

from minruntime.core.timestamps import require_aware

# Where start + minRuntime does not fit in a datetime the window never ends in practice.
FOREVER: Final = datetime.max.replace(tzinfo=UTC)


def window_end(start: datetime, span: timedelta) -> datetime:
    """``start + span``, or FOREVER where that does not fit in a datetime."""
    try:
        return start + span
    except OverflowError:
        return FOREVER


def protected_until(start_time: datetime | None, min_runtime: timedelta) -> datetime | None:
    """Return the end of the protection window, or None when there is no start time."""
    if start_time is None:
        return None
    require_aware(start_time, "start time")
    return window_end(start_time, min_runtime)


def is_protected(start_time: datetime | None, min_runtime: timedelta, now: datetime) -> bool:
    """Return True iff ``now < start_time + min_runtime``; never without a start time."""
    # Strict: at exactly start + minRuntime the podgroup is no longer protected.
    return remaining_protection(start_time, min_runtime, now) > timedelta(0)


def remaining_protection(
    start_time: datetime | None, min_runtime: timedelta, now: datetime
) -> timedelta:
    """Return how much longer the podgroup stays protected (zero when it is not)."""
    require_aware(now, "now")
    until = protected_until(start_time, min_runtime)
    if until is None or now >= until:
        return timedelta(0)
    return until - now
