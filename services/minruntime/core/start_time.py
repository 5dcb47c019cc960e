"""A podgroup's start time as a pure fold over its allocation history (SEMANTICS.md §5).

Only the events' own times are used, never the time they were processed, so replaying the
same history always gives the same start time.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import NamedTuple

from minruntime.core.timestamps import require_aware


class RunState(NamedTuple):
    """Which pods hold resources now, and when the current run started.

    A named tuple: immutable, and cheap to make (the podgroup fold makes one or two per
    allocation or release event).
    """

    allocated: frozenset[str] = frozenset()
    # The protection clock: set while running, cleared when the run ends.
    start_time: datetime | None = None
    # Kept after a run ends so that a finished podgroup can still say when it ran.
    last_start_time: datetime | None = None
    ended_at: datetime | None = None

    @property
    def running(self) -> bool:
        """True while at least one pod holds resources."""
        return bool(self.allocated)


NOT_STARTED = RunState()


def apply_allocated(state: RunState, pods: Iterable[str], at: datetime) -> RunState:
    """Record that ``pods`` now hold resources; going from zero pods to some starts a run."""
    require_aware(at, "allocation time")
    # One new set per call (the podgroup fold runs this for every allocation event).
    allocated = state.allocated.union(pods)
    if len(allocated) == len(state.allocated):
        # Re-delivering an allocation must not move the start time.
        return state
    if state.running:
        # Scaling up a running podgroup keeps its start time.
        return RunState(allocated, state.start_time, state.last_start_time, None)
    return RunState(allocated, at, at, None)


def apply_released(state: RunState, pods: Iterable[str] | None, at: datetime) -> RunState:
    """Record that ``pods`` (None: all) released their resources; releasing all ends the run."""
    require_aware(at, "release time")
    remaining = frozenset() if pods is None else state.allocated.difference(pods)
    if len(remaining) == len(state.allocated):
        # Unknown pods, or nothing running: nothing changes, not even ended_at.
        return state
    if remaining:
        return RunState(remaining, state.start_time, state.last_start_time, state.ended_at)
    return RunState(frozenset(), None, state.last_start_time, at)
