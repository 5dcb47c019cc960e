"""The requeue cooldown: ``requeue-not-before`` and ``requeue-delay`` (SEMANTICS.md §7, §8)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from minruntime.core.annotations import REQUEUE_NOT_BEFORE_ANNOTATION
from minruntime.core.durations import parse_duration
from minruntime.core.errors import MinRuntimeError
from minruntime.core.timestamps import parse_rfc3339, require_aware


def in_cooldown(not_before: datetime | None, now: datetime) -> bool:
    """True while ``now < not_before``; never without a not-before time."""
    require_aware(now, "now")
    if not_before is None:
        return False
    require_aware(not_before, "requeue-not-before")
    return now < not_before


def cooldown_gate(annotations: Mapping[str, str], now: datetime) -> str | None:
    """Why the requeue-not-before annotation holds a podgroup back at ``now``: ``cooldown``, or
    ``invalid_not_before`` when it does not read (the nominator's and the planner's reason
    values); None: it does not."""
    text = annotations.get(REQUEUE_NOT_BEFORE_ANNOTATION)
    if text is None:
        return None
    try:
        not_before = parse_rfc3339(text)
    except MinRuntimeError:
        # Conservative: an unreadable cooldown is treated as a cooldown.
        return "invalid_not_before"
    return "cooldown" if in_cooldown(not_before, now) else None


def requeue_delay(annotation: str | None, default: timedelta) -> tuple[timedelta, str | None]:
    """Return the delay to apply and, if the annotation was unusable, why it was ignored."""
    if annotation is None:
        return default, None
    try:
        delay = parse_duration(annotation)
    except MinRuntimeError as error:
        # A bad annotation must not block a commit that frees capacity: the default applies
        # and the problem is reported for the audit record.
        return default, f"requeue-delay ignored: {error}"
    if delay == timedelta(0):
        return default, "requeue-delay ignored: it must be positive, got 0"
    return delay, None


def requeue_not_before(commit_time: datetime, delay: timedelta) -> datetime:
    """Return the end of the cooldown written when a requeue commits."""
    require_aware(commit_time, "commit time")
    return commit_time + delay
