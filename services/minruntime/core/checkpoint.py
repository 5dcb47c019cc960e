"""The checkpoint handshake's contract and the work a run has at risk (issue 28).

A workload opts in per podgroup: the PodGroup carries ``minruntime.kai.scheduler/
checkpoint-grace: <duration>`` (more than 0, at most ``MAX_CHECKPOINT_GRACE``). Before it evicts
such a podgroup, the evictor writes ``checkpoint-requested-at: <RFC3339>`` on the PodGroup and
waits until the workload writes ``checkpointed-at: <t >= requested-at>`` (acknowledged) or the
grace runs out (timed out), then evicts. A workload that never answers costs exactly its grace.

The workload may write ``checkpointed-at`` at any time (after every save, not only when asked):
it is the run's **last checkpoint**, and the work an eviction would lose is the time since it
(since the run's start when there is none), times the run's GPUs. A value that is not RFC3339,
lies in the future of the event that carries it (by more than CLOCK_TOLERANCE), or before the
run started is ignored (a workload wrote it: ignored and counted, as KAI ignores a bad
annotation).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

from minruntime.core.durations import parse_duration
from minruntime.core.errors import MinRuntimeError
from minruntime.core.timestamps import read_time_between

CHECKPOINT_GRACE_ANNOTATION: Final = "minruntime.kai.scheduler/checkpoint-grace"
# Written by the evictor when it asks for a checkpoint before an eviction.
CHECKPOINT_REQUESTED_AT_ANNOTATION: Final = "minruntime.kai.scheduler/checkpoint-requested-at"
# Written by the workload (or `minruntime checkpoint ack`) after it saved a checkpoint.
CHECKPOINTED_AT_ANNOTATION: Final = "minruntime.kai.scheduler/checkpointed-at"
# The longest wait a podgroup may ask for: a requeue exists to let better work run soon.
MAX_CHECKPOINT_GRACE: Final = timedelta(minutes=30)
# The handshake's outcomes (the requeue.checkpoint event's ``outcome``): the workload wrote a
# checkpointed-at at or after the request; the grace ran out first; the PodGroup was deleted
# during the wait (the wait ends at once, nothing is left to evict).
CHECKPOINT_OUTCOMES: Final = ("acknowledged", "timed_out", "gone")
# How far a workload's checkpoint time may lie after the event that carries it and still
# count: the API server keeps change times in whole seconds (managedFields: a checkpoint at
# 10:00:00.6 arrives in an event of 10:00:00), and the workload's clock is not the API server's.
CLOCK_TOLERANCE: Final = timedelta(seconds=2)


@dataclass(frozen=True, slots=True)
class GraceReading:
    """The checkpoint-grace annotation read: the grace, or why not (both None: absent)."""

    grace: timedelta | None = None
    problem: str | None = None


def read_checkpoint_grace(annotations: Mapping[str, str | None]) -> GraceReading:
    """The podgroup's checkpoint grace: a duration in (0, MAX_CHECKPOINT_GRACE]."""
    text = annotations.get(CHECKPOINT_GRACE_ANNOTATION)
    if text is None:
        return GraceReading()
    try:
        grace = parse_duration(text)
    except MinRuntimeError as error:
        return GraceReading(problem=f"{CHECKPOINT_GRACE_ANNOTATION}: {error}")
    if grace <= timedelta(0) or grace > MAX_CHECKPOINT_GRACE:
        return GraceReading(
            problem=f"{CHECKPOINT_GRACE_ANNOTATION} {text!r} is not in (0, 30m]",
        )
    return GraceReading(grace)


# A checkpoint time annotation's value, or None when absent or ignored: not RFC3339, before
# ``not_before`` (the run's start, or the request), after ``not_after`` (the event that carries
# it: a checkpoint cannot be in the future).
read_checkpoint_time = read_time_between


def last_checkpoint(
    annotations: Mapping[str, str | None], run_start: datetime | None, at: datetime
) -> datetime | None:
    """The run's last checkpoint as the annotations say it at ``at`` (None: none usable; a
    time at most CLOCK_TOLERANCE after ``at`` counts)."""
    text = annotations.get(CHECKPOINTED_AT_ANNOTATION)
    return read_checkpoint_time(text, run_start, at + CLOCK_TOLERANCE)


def work_at_risk(
    run_start: datetime, checkpoint: datetime | None, gpus: float, now: datetime
) -> float:
    """GPU-seconds an eviction at ``now`` loses: the time since the last checkpoint (the
    run's start when none is known, or when it is older than the start), times the GPUs."""
    since = run_start if checkpoint is None or checkpoint < run_start else checkpoint
    return max(0.0, (now - since).total_seconds()) * gpus


def refused_checkpoint(
    changes: Mapping[str, str | None],
    previous: Mapping[str, str],
    at: datetime | None,
    run_start: datetime | None,
) -> bool:
    """True when ``changes`` (an event at ``at``) carry a new ``checkpointed-at`` the podgroup
    fold ignores: not RFC3339, more than CLOCK_TOLERANCE after ``at``, or before the running
    run's start. The value already held is not news (the bridge sends every annotation on each
    change), and a removal (None) is always taken."""
    text = changes.get(CHECKPOINTED_AT_ANNOTATION)
    if text is None or text == previous.get(CHECKPOINTED_AT_ANNOTATION):
        return False
    return (
        read_checkpoint_time(text, run_start, None if at is None else at + CLOCK_TOLERANCE) is None
    )


def kept_checkpoint(annotations: dict[str, str], previous: Mapping[str, str]) -> dict[str, str]:
    """``annotations`` with the ``checkpointed-at`` of ``previous`` put back (or none): what
    the fold keeps when it ignores a new one."""
    held = previous.get(CHECKPOINTED_AT_ANNOTATION)
    if held is None:
        annotations.pop(CHECKPOINTED_AT_ANNOTATION, None)
    else:
        annotations[CHECKPOINTED_AT_ANNOTATION] = held
    return annotations
