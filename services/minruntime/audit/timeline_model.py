"""The story of one podgroup (``minruntime audit UID``) as plain data.

Built by ``minruntime.audit.timeline``; rendered by ``minruntime.commands.audit`` (tables,
``--json``: these fields, as they are) and ``minruntime.audit.timeline_plot`` (the picture).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any


@dataclass(frozen=True, slots=True)
class Change:
    """One field of the podgroup's state that an event changed."""

    field: str
    before: Any
    after: Any


@dataclass(frozen=True, slots=True)
class Window:
    """The preempt protection window in force (SEMANTICS.md §4–5), as SQL resolves it."""

    min_runtime: timedelta
    # The queue whose preemptMinRuntime applied; None: the node pool's default.
    resolved_from: str | None
    protected_until: datetime
    # Protected at the row's time (strict: not at protected_until itself).
    protected: bool


@dataclass(frozen=True, slots=True)
class Nomination:
    """A ``requeue.nominated`` event: who asked for a requeue, and why."""

    nominated_by: str
    reason: str | None


@dataclass(frozen=True, slots=True)
class Decision:
    """A requeue decision of the worker about this podgroup."""

    decision_id: str
    outcome: str
    # Why it was rolled back or skipped; None for a commit (a contender fits).
    reason: str | None
    nominated_by: tuple[str, ...]
    beneficiaries: tuple[str, ...]
    # The cooldown a commit wrote: not requeued again before this.
    requeue_not_before: datetime | None
    # Why the requeue-delay annotation was ignored (the default delay applied).
    delay_problem: str | None
    run_start: datetime | None


@dataclass(frozen=True, slots=True)
class Row:
    """One event of the story and the state the service had right after it."""

    seq: int
    # When it happened in the cluster (decisions: when decided), and when it was applied.
    time: datetime
    applied_at: datetime
    type: str
    # podgroup | nomination | decision | window | other
    kind: str
    summary: str
    changes: tuple[Change, ...]
    status: str | None
    running_pods: int
    run_start: datetime | None
    # The run in progress after the event, or the one it ended.
    run: int | None
    window: Window | None
    nomination: Nomination | None = None
    decision: Decision | None = None


@dataclass(frozen=True, slots=True)
class WindowSpan:
    """A protection window of a run, in force from ``since`` until the next one."""

    since: datetime
    min_runtime: timedelta
    resolved_from: str | None
    protected_until: datetime


@dataclass(frozen=True, slots=True)
class Run:
    """From an allocation that started the podgroup to the event that stopped it."""

    number: int
    start: datetime
    end: datetime | None
    # released (reason) | requeued | deleted; None while it runs.
    ended_by: str | None
    windows: tuple[WindowSpan, ...]
    # How protected it was when it ended, against every possible preemptor (its row of the
    # runs view: definite | possible | none; None while it runs), whether an eviction ended
    # it, and what was left of the longest window still protecting it.
    protection: str | None = None
    eviction: bool = False
    cut_short: timedelta | None = None
    # When the scheduler said who evicted it (docs/audit.md, violations): the verdict under the
    # one rule that applied (violated | honoured | unguarded; None: no such verdict), what was
    # left of that rule's window, the action, the evicting podgroup and its queue.
    exact_verdict: str | None = None
    applied_cut_short: timedelta | None = None
    action: str | None = None
    evictor: str | None = None
    evictor_queue: str | None = None

    @property
    def protected_until(self) -> datetime | None:
        """The end of the window in force last."""
        return self.windows[-1].protected_until if self.windows else None

    @property
    def ended_inside_protection(self) -> bool:
        """It ended while some rule still protected it (a violation when evicted)."""
        return self.protection not in (None, "none")


@dataclass(frozen=True, slots=True)
class Story:
    """Everything the event log says about one podgroup."""

    uid: str
    name: str | None
    namespace: str | None
    queue: str | None
    node_pool: str | None
    priority: int | None
    status: str | None
    rows: tuple[Row, ...]
    runs: tuple[Run, ...]
    # Log entries replayed to tell it (the podgroup's own and the queue tree's).
    replayed: int
