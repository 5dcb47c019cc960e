"""Disruption budgets and pacing: how often a queue, and a workload owner, may be disrupted.

Two rules, each off unless configured (docs/rule-engine.md, "Disruption budgets and pacing"):

- **Budget per queue**: at most ``maxEvictionsPerWindow`` evictions of the queue's podgroups
  within ``evictionWindow`` (the node pool's values; a Queue's annotations
  ``minruntime.kai.scheduler/max-evictions-per-window`` and ``.../eviction-window`` override
  them for that queue). A requeue that would exceed it is skipped: ``disruption_budget``.
- **Gap per owner**: at least ``minEvictionGap`` between two evictions of gangs of the same
  top owner (``podgroup.submitted``'s ``topOwner``, else KAI's
  ``kai.scheduler/top-owner-metadata``: a JobSet, a RayJob, ...; the victim's Queue's
  ``minruntime.kai.scheduler/min-eviction-gap`` overrides the pool's gap). A requeue that
  would come sooner is skipped: ``eviction_gap``.

Both count the service's own committed requeues and the evictions it observed from the
scheduler (runs ended by an eviction), passed in as ``DisruptionHistory``; the planner adds
each commit of its cycle as it makes it. Each skip says when the rule frees up.

Operator values (node-pool config) are checked here with one-line ``InvalidConfigError``s; a
Queue's annotation that is invalid is ignored (the pool's value applies) and reported as a
problem, as KAI ignores a bad annotation; an owner annotation that cannot be read means "no
owner" (no gap), with a problem to count.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final, TypeVar, cast

from minruntime.core.durations import format_duration, parse_duration
from minruntime.core.errors import InvalidConfigError, MinRuntimeError
from minruntime.core.timestamps import window_start

ARG_MAX_EVICTIONS_PER_WINDOW: Final = "maxEvictionsPerWindow"
ARG_EVICTION_WINDOW: Final = "evictionWindow"
ARG_MIN_EVICTION_GAP: Final = "minEvictionGap"
MAX_EVICTIONS_ANNOTATION: Final = "minruntime.kai.scheduler/max-evictions-per-window"
EVICTION_WINDOW_ANNOTATION: Final = "minruntime.kai.scheduler/eviction-window"
MIN_EVICTION_GAP_ANNOTATION: Final = "minruntime.kai.scheduler/min-eviction-gap"
# The Queue annotations that override the node pool's rules for that queue (in this order).
QUEUE_DISRUPTION_ANNOTATIONS: Final = (
    MAX_EVICTIONS_ANNOTATION,
    EVICTION_WINDOW_ANNOTATION,
    MIN_EVICTION_GAP_ANNOTATION,
)
TOP_OWNER_ANNOTATION: Final = "kai.scheduler/top-owner-metadata"

MAX_EVICTIONS_PER_WINDOW: Final = 100_000
MAX_EVICTION_WINDOW: Final = timedelta(days=31)
MAX_EVICTION_GAP: Final = timedelta(days=7)
# KAI writes five short YAML fields; anything much longer is not its metadata.
MAX_OWNER_METADATA: Final = 2048
_OWNER_FIELD: Final = 253  # a Kubernetes name (and a uid, a kind) fits
_T = TypeVar("_T")


def _shown(value: object) -> str:
    """``value`` as a one-line error shows it: its repr, at most 64 characters."""
    text = repr(value)
    return text if len(text) <= 64 else f"{text[:61]}..."


def check_count(value: object, label: str, most: int, unset: str = "") -> int:
    """``value`` if it is a whole number in [1, most]; else InvalidConfigError (``unset``: what
    the message adds about leaving it unset)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidConfigError(f"{label} must be a whole number, got {_shown(value)}")
    if not 1 <= value <= most:
        raise InvalidConfigError(f"{label} must be from 1 to {most}{unset}, got {value}")
    return value


def parse_count(text: str, label: str, most: int) -> int:
    """A whole number written as decimal digits (a config value or an annotation); its
    bounds are the caller's to check (``most`` is for the message)."""
    stripped = text.strip()
    # Only plain digits, and not so many that converting them costs anything: int() would
    # also take "+3", "3_0" or non-ASCII digits.
    if not (stripped.isascii() and stripped.isdigit() and len(stripped) <= 9):
        raise InvalidConfigError(
            f"{label} must be a whole number from 1 to {most}, got {_shown(text)}"
        )
    return int(stripped)


def check_max_evictions(value: object, label: str = ARG_MAX_EVICTIONS_PER_WINDOW) -> int:
    """``value`` if it is a whole number in [1, MAX_EVICTIONS_PER_WINDOW]; else
    InvalidConfigError (a budget of 0 would forbid every requeue: leave it unset instead)."""
    return check_count(value, label, MAX_EVICTIONS_PER_WINDOW, " (unset = unlimited)")


def check_duration(value: object, label: str, most: timedelta) -> timedelta:
    """``value`` if it is a duration in (0, most]; else InvalidConfigError."""
    if not isinstance(value, timedelta):
        raise InvalidConfigError(f"{label} must be a duration, got {_shown(value)}")
    if not timedelta(0) < value <= most:
        shown_value = (
            f"-{format_duration(-value)}" if value < timedelta(0) else format_duration(value)
        )
        raise InvalidConfigError(
            f"{label} must be positive and at most {format_duration(most)}, got {shown_value}"
        )
    return value


def parse_max_evictions(text: str, label: str = ARG_MAX_EVICTIONS_PER_WINDOW) -> int:
    """A budget written as decimal digits (a config value or an annotation)."""
    return check_max_evictions(parse_count(text, label, MAX_EVICTIONS_PER_WINDOW), label)


def parse_config_duration(text: str, label: str) -> timedelta:
    """A duration (SEMANTICS.md §1) of the config value or annotation ``label``."""
    try:
        return parse_duration(text)
    except MinRuntimeError as error:
        # Re-raised as a config error so the caller learns which value was wrong.
        raise InvalidConfigError(f"{label}: {error}") from error


def parse_bounded_duration(text: str, label: str, most: timedelta) -> timedelta:
    """A window or a gap written in the duration grammar (SEMANTICS.md §1)."""
    return check_duration(parse_config_duration(text, label), label, most)


def check_queue_annotation(key: str, text: str) -> int | timedelta:
    """The value of the Queue annotation ``key`` (one of QUEUE_DISRUPTION_ANNOTATIONS);
    InvalidConfigError (one line) unless ``text`` is a valid one."""
    if key == MAX_EVICTIONS_ANNOTATION:
        return parse_max_evictions(text, key)
    if key == EVICTION_WINDOW_ANNOTATION:
        return parse_bounded_duration(text, key, MAX_EVICTION_WINDOW)
    if key == MIN_EVICTION_GAP_ANNOTATION:
        return parse_bounded_duration(text, key, MAX_EVICTION_GAP)
    raise InvalidConfigError(
        f"{key} is not a disruption annotation ({', '.join(QUEUE_DISRUPTION_ANNOTATIONS)})"
    )


@dataclass(frozen=True, slots=True)
class DisruptionPolicy:
    """The disruption rules of one node pool (or of one queue, overridden). None = off."""

    max_evictions_per_window: int | None = None
    eviction_window: timedelta | None = None
    min_eviction_gap: timedelta | None = None

    def __post_init__(self) -> None:
        if (self.max_evictions_per_window is None) != (self.eviction_window is None):
            raise InvalidConfigError(
                f"{ARG_MAX_EVICTIONS_PER_WINDOW} and {ARG_EVICTION_WINDOW} go together: "
                "set both or neither"
            )
        if self.max_evictions_per_window is not None:
            check_max_evictions(self.max_evictions_per_window)
        if self.eviction_window is not None:
            check_duration(self.eviction_window, ARG_EVICTION_WINDOW, MAX_EVICTION_WINDOW)
        if self.min_eviction_gap is not None:
            check_duration(self.min_eviction_gap, ARG_MIN_EVICTION_GAP, MAX_EVICTION_GAP)

    @property
    def active(self) -> bool:
        """True when any rule is on."""
        return self.max_evictions_per_window is not None or self.min_eviction_gap is not None


@dataclass(frozen=True, slots=True)
class QueuePolicy:
    """A queue's policy: the pool's, with the Queue's valid annotations applied."""

    policy: DisruptionPolicy
    # Annotations that were invalid and ignored (for the log and a counter).
    problems: tuple[str, ...] = ()


def queue_policy(pool: DisruptionPolicy, annotations: Mapping[str, str]) -> QueuePolicy:
    """The pool's budget overridden by the Queue's annotations (each valid one applies; an
    invalid one is ignored with a problem; a budget needs both a number and a window)."""
    problems: list[str] = []

    def override(key: str, pool_value: _T) -> _T:
        text = annotations.get(key)
        if text is not None:
            try:
                return cast(_T, check_queue_annotation(key, text))
            except MinRuntimeError as error:
                problems.append(f"{error}; ignored")
        return pool_value

    limit = override(MAX_EVICTIONS_ANNOTATION, pool.max_evictions_per_window)
    window = override(EVICTION_WINDOW_ANNOTATION, pool.eviction_window)
    gap = override(MIN_EVICTION_GAP_ANNOTATION, pool.min_eviction_gap)
    if (limit is None) != (window is None):
        problems.append(
            f"{MAX_EVICTIONS_ANNOTATION} and {EVICTION_WINDOW_ANNOTATION} need each other"
            " (the node pool sets neither); ignored"
        )
        limit, window = pool.max_evictions_per_window, pool.eviction_window
    policy = DisruptionPolicy(limit, window, gap)
    return QueuePolicy(policy, tuple(problems))


@dataclass(frozen=True, slots=True)
class TopOwner:
    """A podgroup's top owner (a JobSet, a RayJob, a Deployment, ...)."""

    kind: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class OwnerReading:
    """The top-owner annotation read: the owner, or why it was not (both None: absent)."""

    owner: TopOwner | None = None
    problem: str | None = None


def read_top_owner(annotations: Mapping[str, str]) -> OwnerReading:
    """KAI's ``kai.scheduler/top-owner-metadata`` (YAML ``name:``/``uid:``/``kind:`` lines,
    as KAI's podgrouper writes it, or the same as a JSON object), bounded."""
    text = annotations.get(TOP_OWNER_ANNOTATION)
    if text is None:
        return OwnerReading()
    if len(text) > MAX_OWNER_METADATA:
        return OwnerReading(problem=f"{TOP_OWNER_ANNOTATION} longer than {MAX_OWNER_METADATA}")
    fields = _owner_fields(text)
    if fields is None:
        return OwnerReading(problem=f"{TOP_OWNER_ANNOTATION} is not YAML or JSON fields")
    kind, name, uid = (fields.get(key, "") for key in ("kind", "name", "uid"))
    if not (kind and name and uid) or max(len(kind), len(name), len(uid)) > _OWNER_FIELD:
        return OwnerReading(problem=f"{TOP_OWNER_ANNOTATION} lacks a kind, a name or a uid")
    return OwnerReading(TopOwner(kind, name, uid))


def owner_uid(stored: str | None, annotation: str | None) -> str | None:
    """The uid of an eviction's top owner: the one stored from the submission, else the one
    its top-owner annotation names (None: neither)."""
    if stored is not None or annotation is None:
        return stored
    owner = read_top_owner({TOP_OWNER_ANNOTATION: annotation}).owner
    return None if owner is None else owner.uid


def _owner_fields(text: str) -> dict[str, str] | None:
    stripped = text.strip()
    if stripped.startswith("{"):
        try:
            loaded = json.loads(stripped)
        except ValueError:
            return None
        if not isinstance(loaded, dict):
            return None
        return {str(key): str(value) for key, value in loaded.items() if isinstance(value, str)}
    fields: dict[str, str] = {}
    for line in stripped.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, colon, value = line.partition(":")
        if not colon or line[:1].isspace():
            return None
        fields[key.strip()] = value.strip().strip("\"'")
    return fields


@dataclass(frozen=True, slots=True)
class DisruptionHistory:
    """Past evictions the rules count: queue -> times, owner uid -> times (any order)."""

    by_queue: Mapping[str, tuple[datetime, ...]] = field(default_factory=dict)
    by_owner: Mapping[str, tuple[datetime, ...]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Refusal:
    """A rule that refuses one more eviction now, and when it frees up."""

    rule: str  # "disruption_budget" | "eviction_gap"
    frees_at: datetime


class DisruptionLedger:
    """The history plus the commits of this cycle: does a rule refuse one more eviction?"""

    def __init__(self, history: DisruptionHistory) -> None:
        self._queues = {queue: sorted(times) for queue, times in history.by_queue.items()}
        self._owners = {owner: max(times) for owner, times in history.by_owner.items() if times}

    def refusal(
        self, queue: str, owner: TopOwner | None, policy: DisruptionPolicy, now: datetime
    ) -> Refusal | None:
        """The first rule (budget, then gap) that refuses an eviction at ``now``; None: none."""
        limit, window = policy.max_evictions_per_window, policy.eviction_window
        if limit is not None and window is not None:
            start = window_start(now, window)
            counted = sorted(
                moment for moment in self._queues.get(queue, ()) if start < moment <= now
            )
            if len(counted) >= limit:
                # The (count - limit + 1)-th newest must leave the window.
                return Refusal("disruption_budget", counted[len(counted) - limit] + window)
        gap = policy.min_eviction_gap
        if gap is not None and owner is not None:
            last = self._owners.get(owner.uid)
            if last is not None and last <= now < last + gap:
                return Refusal("eviction_gap", last + gap)
        return None

    def record(self, queue: str, owner: TopOwner | None, now: datetime) -> None:
        """An eviction committed at ``now`` (it counts for the rest of the cycle)."""
        self._queues.setdefault(queue, []).append(now)
        if owner is not None:
            self._owners[owner.uid] = max(now, self._owners.get(owner.uid, now))


def evictions_in_window(times: Iterable[datetime], now: datetime, window: timedelta) -> int:
    """How many of ``times`` are in (now - window, now]."""
    start = window_start(now, window)
    return sum(1 for moment in times if start < moment <= now)
