"""One-line descriptions of the events in a podgroup's story (``minruntime audit``).

Wire names (``preemptMinRuntime``) and canonical durations (``1h30m``), so what a line says
can be matched with the events a user sent.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, Final

from minruntime import events as ev
from minruntime.audit.violations import who_evicted
from minruntime.core import format_duration, format_rfc3339

# (wire name, attribute) of the fields a queue or configuration event sets.
_QUEUE_FIELDS: Final = (
    ("parentQueue", "parent_queue"),
    ("preemptMinRuntime", "preempt_min_runtime"),
    ("reclaimMinRuntime", "reclaim_min_runtime"),
)
_CONFIG_FIELDS: Final = (
    ("defaultPreemptMinRuntime", "default_preempt_min_runtime"),
    ("defaultReclaimMinRuntime", "default_reclaim_min_runtime"),
    ("reclaimResolveMethod", "reclaim_resolve_method"),
    ("defaultRequeueDelay", "default_requeue_delay"),
    ("maxRequeues", "max_requeues"),
    ("maxRequeuesWindow", "max_requeues_window"),
)


def describe_event(event: ev.Event | None, event_type: str) -> str:
    """What a podgroup's own event says, in one line (its type when it cannot be read)."""
    if event is None:
        return event_type
    text = TEXTS.get(type(event.data))
    return event_type if text is None else text(event.data)


def _submitted(data: ev.PodGroupSubmittedData) -> str:
    return (
        f"submitted to queue {data.queue} (pool {data.node_pool}, priority "
        f"{data.priority}, {_count(len(data.pods), 'pod')})"
    )


def _allocated(data: ev.PodGroupAllocatedData) -> str:
    nodes = sorted({pod.node for pod in data.pods})
    return f"allocated {_count(len(data.pods), 'pod')} on {', '.join(nodes)}"


def _released(data: ev.PodGroupReleasedData) -> str:
    pods = "all pods" if data.pods is None else _count(len(data.pods), "pod")
    released = f"released {pods}" + (f" ({data.reason})" if data.reason else "")
    return released + _evicted_by(data)


def _annotated(data: ev.PodGroupAnnotatedData) -> str:
    return "annotated " + ", ".join(
        f"{key} removed" if value is None else f"{key}={value}"
        for key, value in sorted(data.annotations.items())
    )


def _committed(data: ev.RequeueCommittedData) -> str:
    return (
        f"requeue committed ({_by(data.nominated_by)}): "
        f"{_list(data.beneficiaries)} fit once it is gone; "
        f"cooldown until {format_rfc3339(data.requeue_not_before)}"
        + (f"; {data.delay_problem}" if data.delay_problem else "")
    )


def _abandoned(data: ev.RequeueAbandonedData) -> str:
    return (
        f"requeue abandoned: {data.reason} (decision {data.decision}, not carried out by"
        f" {format_rfc3339(data.deadline)}); cooldown until"
        f" {format_rfc3339(data.requeue_not_before)} cleared"
        + (f"; {data.message}" if data.message else "")
    )


def checkpoint_text(data: ev.RequeueCheckpointData) -> str:
    """A checkpoint handshake's end, as the timeline says it."""
    waited = (data.ended_at - data.requested_at).total_seconds()
    asked = f"requested at {format_rfc3339(data.requested_at)}, grace {format_duration(data.grace)}"
    if data.outcome == "acknowledged" and data.checkpointed_at is not None:
        return (
            f"checkpoint acknowledged after {waited:.1f} s (checkpointed at"
            f" {format_rfc3339(data.checkpointed_at)}; {asked}; decision {data.decision})"
        )
    if data.outcome == "timed_out":
        return f"checkpoint timed out after {waited:.1f} s ({asked}; decision {data.decision})"
    return f"checkpoint wait ended: PodGroup gone after {waited:.1f} s ({asked})"


class TreeChanges:
    """The queues and configurations seen so far, to say what a tree event changed."""

    def __init__(self) -> None:
        self.queues: dict[str, ev.QueueUpsertedData] = {}
        self.configs: dict[str, ev.ConfigUpdatedData] = {}

    def note(self, event: ev.Event) -> str:
        """Remember the event's queue or configuration; what it changed, in one line."""
        note = TREE_TEXTS.get(type(event.data))
        return event.type if note is None else note(self, event.data)

    def _queue_upserted(self, data: ev.QueueUpsertedData) -> str:
        known = self.queues.get(data.name)
        self.queues[data.name] = data
        if known is None:
            values = _fields(data, _QUEUE_FIELDS)
            return f"queue {data.name} created" + (f" ({values})" if values else "")
        return f"queue {data.name} {_diff(known, data, _QUEUE_FIELDS)}"

    def _queue_deleted(self, data: ev.QueueDeletedData) -> str:
        self.queues.pop(data.name, None)
        return f"queue {data.name} deleted"

    def _config_updated(self, data: ev.ConfigUpdatedData) -> str:
        previous = self.configs.get(data.node_pool)
        self.configs[data.node_pool] = data
        # A pool never configured had the built-in defaults.
        base = previous or ev.ConfigUpdatedData.model_validate({"nodePool": data.node_pool})
        return f"config {data.node_pool} {_diff(base, data, _CONFIG_FIELDS)}"


TEXTS: Final[Mapping[type[ev.EventData], Callable[[Any], str]]] = {
    ev.PodGroupSubmittedData: _submitted,
    ev.PodGroupAllocatedData: _allocated,
    ev.PodGroupReleasedData: _released,
    ev.PodGroupAnnotatedData: _annotated,
    ev.PodGroupDeletedData: lambda data: "deleted",
    ev.RequeueNominatedData: lambda data: (
        f"nominated by {data.nominated_by}" + (f": {data.reason}" if data.reason else "")
    ),
    ev.RequeueCommittedData: _committed,
    ev.RequeueRolledBackData: lambda data: (
        f"requeue rolled back: {data.reason} ({_by(data.nominated_by)})"
    ),
    ev.RequeueSkippedData: lambda data: (
        f"requeue skipped: {data.reason} ({_by(data.nominated_by)})"
    ),
    ev.RequeueAbandonedData: _abandoned,
    ev.RequeueCheckpointData: checkpoint_text,
}
"""The line of each event type that is a podgroup's own event (its subject is the uid)."""

TREE_TEXTS: Final[Mapping[type[ev.EventData], Callable[[TreeChanges, Any], str]]] = {
    ev.QueueUpsertedData: TreeChanges._queue_upserted,
    ev.QueueDeletedData: TreeChanges._queue_deleted,
    ev.ConfigUpdatedData: TreeChanges._config_updated,
}
"""What each queue tree or configuration event changed (a window's row says it)."""

UNTOLD: Final = frozenset({ev.NodeUpsertedData, ev.NodeDeletedData})
"""Input types that are never part of a podgroup's story: their subject is a node, and the
audit does not read them (``timeline._read_entries``)."""


def _diff(old: object, new: object, fields: Sequence[tuple[str, str]]) -> str:
    changed = [
        f"{wire} {_value(getattr(old, attr))}→{_value(getattr(new, attr))}"
        for wire, attr in fields
        if getattr(old, attr) != getattr(new, attr)
    ]
    return ", ".join(changed) if changed else "applied again, unchanged"


def _fields(data: object, fields: Sequence[tuple[str, str]]) -> str:
    return ", ".join(
        f"{wire} {_value(getattr(data, attr))}"
        for wire, attr in fields
        if getattr(data, attr) is not None
    )


def _value(value: object) -> str:
    if value is None:
        return "unset"
    if isinstance(value, timedelta):
        return format_duration(value)
    return str(value)


def _by(nominators: Sequence[str]) -> str:
    return f"nominated by {_list(nominators)}"


def _list(names: Sequence[str]) -> str:
    return ", ".join(names)


def _count(number: int, noun: str) -> str:
    return f"{number} {noun}{'' if number == 1 else 's'}"


def _evicted_by(data: ev.PodGroupReleasedData) -> str:
    """Who evicted, when the scheduler said so (nothing for a plain release)."""
    eviction = data.eviction
    if eviction is None:
        return ""
    who = who_evicted(eviction.action, eviction.evictor, eviction.evictor_queue, eviction.at)
    return f", evicted {who} [{eviction.source}]"
