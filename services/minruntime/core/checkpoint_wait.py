"""The evictor's side of the checkpoint handshake, as rules (issue 28; core.checkpoint holds
the annotation names and bounds).

- The request: ``checkpoint-requested-at`` is written in whole seconds (the time floored), so
  a workload that answers with a second-precision ``checkpointed-at`` right after it still
  answers it, and a wait costs at most its grace, never more.
- Never asked twice: a PodGroup that already carries a ``checkpoint-requested-at`` at or after
  the decision (its ``decidedAt``, floored likewise) is mid-handshake for that decision (an
  evictor restarted during the wait): the wait resumes from that request.
- The wait ends, at the first of: the PodGroup is gone (``gone``, at once); a
  ``checkpointed-at`` at or after the request and not after now (``acknowledged``: a value in
  the future answers once its time has come); the request's time + the grace (``timed_out``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from minruntime.core.checkpoint import (
    CHECKPOINT_REQUESTED_AT_ANNOTATION,
    CHECKPOINTED_AT_ANNOTATION,
    read_checkpoint_time,
)


@dataclass(frozen=True, slots=True)
class WaitEnd:
    """How a handshake's wait ended (``outcome`` is one of CHECKPOINT_OUTCOMES)."""

    outcome: str
    ended_at: datetime
    checkpointed_at: datetime | None = None


def request_time(now: datetime) -> datetime:
    """The ``checkpoint-requested-at`` to write at ``now``: ``now`` floored to the second."""
    return now.replace(microsecond=0)


def pending_request(annotations: Mapping[str, str | None], decided_at: datetime) -> datetime | None:
    """The request already on the PodGroup for a decision made at ``decided_at`` (None: there
    is none for it: absent, not RFC3339, or older than the decision)."""
    return read_checkpoint_time(
        annotations.get(CHECKPOINT_REQUESTED_AT_ANNOTATION), request_time(decided_at), None
    )


def wait_end(
    annotations: Mapping[str, str | None] | None,
    requested_at: datetime,
    grace: timedelta,
    now: datetime,
) -> WaitEnd | None:
    """Whether the wait for a request made at ``requested_at`` ends at ``now``, the PodGroup's
    annotations read then (None: the PodGroup is gone); None: it goes on."""
    if annotations is None:
        return WaitEnd("gone", now)
    answer = read_checkpoint_time(annotations.get(CHECKPOINTED_AT_ANNOTATION), requested_at, now)
    if answer is not None:
        return WaitEnd("acknowledged", now, answer)
    if now >= requested_at + grace:
        return WaitEnd("timed_out", now)
    return None


def time_left(requested_at: datetime, grace: timedelta, now: datetime) -> float:
    """Seconds until the grace of a request made at ``requested_at`` runs out (<= 0: it has)."""
    return (requested_at + grace - now).total_seconds()
