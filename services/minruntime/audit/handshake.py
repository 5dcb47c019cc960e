"""Which checkpoint handshake `explain` shows: the newest one ended (``requeue.checkpoint``,
stored in ``checkpoint_handshakes``) or, when the PodGroup carries a newer
``checkpoint-requested-at`` than any ended one, the one still waiting."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from minruntime.audit.explain_model import CheckpointHandshake
from minruntime.core import format_duration, format_rfc3339
from minruntime.core.checkpoint import (
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    read_checkpoint_grace,
    read_checkpoint_time,
)


def handshake_facts(
    annotations: Mapping[str, str | None], ended: Any | None, at: datetime
) -> CheckpointHandshake | None:
    """The handshake to show at ``at``: ``ended`` is the newest stored row requested up to
    ``at`` (outcome, requested_at, grace, ended_at, checkpointed_at) or None."""
    pending = read_checkpoint_time(annotations.get(CHECKPOINT_REQUESTED_AT_ANNOTATION), None, at)
    if ended is not None and (pending is None or ended.requested_at >= pending):
        grace: timedelta = ended.grace
        if ended.ended_at > at:  # as of an instant inside the wait
            return CheckpointHandshake(ended.requested_at, grace)
        return CheckpointHandshake(
            ended.requested_at, grace, ended.outcome, ended.ended_at, ended.checkpointed_at
        )
    if pending is None:
        return None
    return CheckpointHandshake(pending, read_checkpoint_grace(annotations).grace)


def handshake_text(handshake: CheckpointHandshake) -> str:
    """One line for `explain`: waiting since the request, or how and when the wait ended."""
    asked = format_rfc3339(handshake.requested_at)
    grace = format_duration(handshake.grace) if handshake.grace is not None else None
    if handshake.outcome is None or handshake.ended_at is None:
        until = ""
        if handshake.grace is not None:
            latest = format_rfc3339(handshake.requested_at + handshake.grace)
            until = f" (grace {grace}: evicted by {latest} at the latest)"
        return f"waiting since {asked} for the workload's checkpointed-at{until}"
    waited = (handshake.ended_at - handshake.requested_at).total_seconds()
    if handshake.outcome == "acknowledged":
        saved = handshake.checkpointed_at
        at = f" (checkpointed at {format_rfc3339(saved)})" if saved is not None else ""
        return f"acknowledged after {waited:.1f} s{at}; requested at {asked}, then evicted"
    if handshake.outcome == "timed_out":
        return f"timed out after the grace ({grace}); requested at {asked}, then evicted"
    return f"the PodGroup was deleted during the wait ({waited:.1f} s after the request at {asked})"
