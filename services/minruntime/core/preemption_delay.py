"""The preemption delay of a beneficiary (SEMANTICS.md §10, KAI's preemptor-side delay).

A pending podgroup may say how long after its submission (or its last eviction) it may cause an
eviction: ``spec.preemptionDelay`` on the PodGroup, else its annotation
``kai.scheduler/preemption-delay``, else the same annotation on its pods (in pod order). The
first valid value wins; invalid or negative values are ignored (KAI ignores them with a
warning; the processor counts them). While it is inside its window it may not be a requeue
beneficiary: a requeue on its behalf is an eviction it triggers. Plain allocation is never
delayed.

The window starts at ``max(submission, last eviction)``; the last eviction is the later of the
service's own release that ended a run by an eviction (``core.evictions``) and KAI's annotation
``kai.scheduler/last-eviction-timestamp``, which is ignored when it is unreadable, in the future
of the event that carries it, or before the podgroup existed. Inside while
``now < start + delay`` (strict, as protection in §5). The rules with worked examples:
docs/rule-engine.md, "Preemption delay".
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Final, NamedTuple

from minruntime.core.durations import read_duration
from minruntime.core.protection import window_end
from minruntime.core.timestamps import read_time_between

PREEMPTION_DELAY_ANNOTATION: Final = "kai.scheduler/preemption-delay"
# Written by KAI on the PodGroup when it evicts it (RFC3339).
LAST_EVICTION_ANNOTATION: Final = "kai.scheduler/last-eviction-timestamp"
# A window that would end past this instant ends here: it is far beyond any real delay, and
# every store and reader can hold it (the requeue cycle's inputs refuse later times).
DELAY_FOREVER: Final = datetime(9999, 12, 30, tzinfo=UTC)


class IgnoredValue(StrEnum):
    """A value the service ignores with a counted warning (a finite metric label, ``field``)."""

    PREEMPTION_DELAY = "preemption_delay"
    LAST_EVICTION_TIMESTAMP = "last_eviction_timestamp"
    # minruntime.kai.scheduler/max-requeues that is not a count in [1, MAX_REQUEUES] (the node
    # pool's cap applies; core.requeue_cap).
    MAX_REQUEUES = "max_requeues"
    # minruntime.kai.scheduler/checkpoint-grace that is not a duration in (0, 30m]
    # (core.checkpoint: the podgroup is evicted without a handshake).
    CHECKPOINT_GRACE = "checkpoint_grace"
    # minruntime.kai.scheduler/checkpointed-at that is not RFC3339, lies in the future of the
    # event carrying it, or before the run's start (core.checkpoint: the previous one stands).
    CHECKPOINTED_AT = "checkpointed_at"
    # kai.scheduler/top-owner-metadata that does not read (not YAML/JSON fields, too long, a
    # field missing), on a podgroup whose submission carried no topOwner (no owner, no gap;
    # core.disruption.read_top_owner).
    TOP_OWNER_METADATA = "top_owner_metadata"


class DelaySource(StrEnum):
    """Where a podgroup's preemption delay came from."""

    SPEC = "spec"
    ANNOTATION = "annotation"
    POD = "pod"


class PreemptionDelay(NamedTuple):
    """A podgroup's preemption delay and where it came from (``pod``: the pod that said it)."""

    delay: timedelta
    source: DelaySource
    pod: str | None = None

    def describe(self) -> str:
        """Where it came from, for people: the field or annotation that set it."""
        if self.source is DelaySource.SPEC:
            return "spec.preemptionDelay"
        if self.source is DelaySource.ANNOTATION:
            return f"annotation {PREEMPTION_DELAY_ANNOTATION}"
        return f"annotation {PREEMPTION_DELAY_ANNOTATION} of pod {self.pod}"


class LastEviction(NamedTuple):
    """When the podgroup was last evicted, and who said so (``service`` or ``annotation``)."""

    at: datetime
    source: str


class DelayWindow(NamedTuple):
    """A pending podgroup's preemption-delay window: ``[start, ends_at)``."""

    delay: PreemptionDelay
    start: datetime
    # None: the window starts at the submission.
    last_eviction: LastEviction | None
    ends_at: datetime

    def inside(self, now: datetime) -> bool:
        """True while ``now < ends_at`` (strict)."""
        return now < self.ends_at


# A delay, in the spec or an annotation, reads as any duration does (None: absent or ignored).
valid_delay = read_duration


def submitted_delay(
    spec: str | None, pods: Iterable[tuple[str, str]] = ()
) -> PreemptionDelay | None:
    """What a submission says apart from the podgroup annotation: the spec's valid value, else
    the first valid pod annotation (``pods``: (pod name, value) in pod order)."""
    delay = valid_delay(spec)
    if delay is not None:
        return PreemptionDelay(delay, DelaySource.SPEC)
    for pod, text in pods:
        delay = valid_delay(text)
        if delay is not None:
            return PreemptionDelay(delay, DelaySource.POD, pod)
    return None


def resolve_delay(
    submitted: PreemptionDelay | None, annotation: str | None
) -> PreemptionDelay | None:
    """The delay in force: the spec's, else the podgroup annotation's, else the pods'."""
    if submitted is not None and submitted.source is DelaySource.SPEC:
        return submitted
    delay = valid_delay(annotation)
    if delay is not None:
        return PreemptionDelay(delay, DelaySource.ANNOTATION)
    return submitted


def last_eviction_annotation(
    text: str | None, at: datetime | None, existed_since: datetime | None
) -> datetime | None:
    """The ``last-eviction-timestamp`` an event at ``at`` carries, or None when it is absent or
    ignored: unreadable, after ``at``, or before the podgroup existed (``existed_since``)."""
    return read_time_between(text, existed_since, at)


def last_eviction(service: datetime | None, annotation: datetime | None) -> LastEviction | None:
    """The later of the service's own eviction and KAI's annotation (the service's on a tie)."""
    if service is not None and (annotation is None or service >= annotation):
        return LastEviction(service, "service")
    return None if annotation is None else LastEviction(annotation, "annotation")


def delay_window(
    delay: PreemptionDelay | None, submitted_at: datetime | None, evicted: LastEviction | None
) -> DelayWindow | None:
    """The window of a podgroup with ``delay``; None without a delay or a known start."""
    if delay is None:
        return None
    if evicted is not None and (submitted_at is None or evicted.at > submitted_at):
        start, since = evicted.at, evicted
    elif submitted_at is not None:
        start, since = submitted_at, None
    else:
        return None
    return DelayWindow(delay, start, since, min(window_end(start, delay.delay), DELAY_FOREVER))


def in_delay_window(ends_at: datetime | None, now: datetime) -> bool:
    """True while a pending podgroup may not be a requeue beneficiary (``now < ends_at``)."""
    return ends_at is not None and now < ends_at
