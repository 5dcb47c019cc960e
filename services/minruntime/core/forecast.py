"""Protection forecast: which running podgroups lose a protection window, and when.

A running podgroup meets one window per class of possible preemptors (``core.violation``:
the preempt rule, the reclaim rule from each other root and each lowest common ancestor, the
unknown-queue default). Each window ends at ``start + min runtime`` (strict, §5: from that
instant on it no longer protects). The forecast lists the windows that end in ``(now, now +
horizon]``, soonest first: who can be preempted next, and by whom.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import NamedTuple

from minruntime.core.timestamps import require_aware
from minruntime.core.violation import RuleWindow, RunRules


class RunningRun(NamedTuple):
    """A running podgroup: its queue (None: a placeholder), node pool and run start."""

    uid: str
    queue: str | None
    node_pool: str
    start: datetime


class Expiry(NamedTuple):
    """One window of one running podgroup that ends inside the horizon."""

    uid: str
    queue: str | None
    node_pool: str
    start: datetime
    window: RuleWindow
    ends_at: datetime


def expiring(
    runs: Iterable[RunningRun], rules: RunRules, now: datetime, horizon: timedelta
) -> list[Expiry]:
    """The windows of ``runs`` that end after ``now`` and at or before ``now + horizon``,
    soonest first (then by uid and the windows' order)."""
    require_aware(now, "now")
    if horizon < timedelta(0):
        raise ValueError("the horizon must not be negative")
    last = now + horizon
    found = []
    for run in runs:
        for window in rules.windows(run.queue, run.node_pool):
            try:
                ends = run.start + window.min_runtime
            except OverflowError:
                continue  # never ends
            if now < ends <= last:
                found.append(Expiry(run.uid, run.queue, run.node_pool, run.start, window, ends))
    found.sort(key=lambda expiry: (expiry.ends_at, expiry.uid))
    return found
