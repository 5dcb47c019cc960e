"""``data`` models of the output event types (``kai.requeue-decisions``): what we decide."""

from __future__ import annotations

from pydantic import Field

from minruntime.events.base import EventData
from minruntime.events.types import Name, Timestamp


class RequeueCommittedData(EventData):
    """A requeue was committed: the cluster side evicts the podgroup."""

    uid: Name
    """The requeued podgroup's uid."""
    nominated_by: tuple[Name, ...] = Field(min_length=1)
    """Every component that nominated it (a candidate is attempted once)."""
    beneficiaries: tuple[Name, ...] = Field(min_length=1)
    """Uids of the pending podgroups the freed capacity is promised to."""
    requeue_not_before: Timestamp
    """Cooldown end: the podgroup is not nominated again before this time."""
    decided_at: Timestamp
    """When the decision was committed."""


class RequeueRolledBackData(EventData):
    """A requeue was attempted and rolled back (no contender fits): nothing changed."""

    uid: Name
    """The candidate podgroup's uid."""
    nominated_by: tuple[Name, ...] = Field(min_length=1)
    """Every component that nominated it."""
    reason: Name
    """Why it was rolled back, e.g. no_contender_fits."""


class RequeueSkippedData(EventData):
    """A nominated podgroup was not attempted, e.g. in cooldown or no longer running."""

    uid: Name
    """The candidate podgroup's uid."""
    nominated_by: tuple[Name, ...] = Field(min_length=1)
    """Every component that nominated it."""
    reason: Name
    """Why it was skipped, e.g. cooldown, not_running."""
