"""The requeue cap (SEMANTICS.md §10): at most N committed requeues of one podgroup in a window.

The node pool's ``maxRequeues`` / ``maxRequeuesWindow`` set it; the podgroup's annotation
``minruntime.kai.scheduler/max-requeues`` may lower the number, never raise it. A cap without
a window counts every committed requeue of the podgroup. The rules and a worked example are
in docs/rule-engine.md ("Requeue cap").
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from minruntime.core.annotations import MAX_REQUEUES_ANNOTATION
from minruntime.core.config import MinRuntimeConfig, NodePoolConfigs, parse_max_requeues
from minruntime.core.errors import MinRuntimeError
from minruntime.core.requeue_model import RunningPodGroup
from minruntime.core.timestamps import BEGINNING, require_aware, window_start


class CapSource(StrEnum):
    """Where the cap in force comes from."""

    NODE_POOL = "node_pool"
    ANNOTATION = "annotation"


@dataclass(frozen=True, slots=True)
class AnnotatedCap:
    """The max-requeues annotation: its value, or why it is ignored (both None: absent)."""

    value: int | None = None
    problem: str | None = None


def annotated_max_requeues(annotations: Mapping[str, str]) -> AnnotatedCap:
    """Read the max-requeues annotation: a whole number in [1, MAX_REQUEUES], else a problem."""
    text = annotations.get(MAX_REQUEUES_ANNOTATION)
    if text is None:
        return AnnotatedCap()
    try:
        return AnnotatedCap(parse_max_requeues(text, MAX_REQUEUES_ANNOTATION))
    except MinRuntimeError as error:
        # KAI ignores a bad annotation with a warning; here the operator's cap applies.
        return AnnotatedCap(problem=f"{error}; ignored")


@dataclass(frozen=True, slots=True)
class RequeueCap:
    """The cap in force for one podgroup: ``limit`` requeues within ``window``."""

    limit: int
    # None: no window, every committed requeue of the podgroup counts.
    window: timedelta | None
    source: CapSource

    def window_start(self, now: datetime) -> datetime:
        """Requeues decided after this instant count (the beginning of time without a window)."""
        return BEGINNING if self.window is None else window_start(now, self.window)

    def counted(self, requeues: Iterable[datetime], now: datetime) -> tuple[datetime, ...]:
        """The requeue times inside the window at ``now`` (after now - window), oldest first."""
        start = self.window_start(now)
        return tuple(sorted(moment for moment in requeues if moment > start))

    def reached(self, requeues: Iterable[datetime], now: datetime) -> bool:
        """True if one more requeue would exceed the cap: count in the window >= limit."""
        return len(self.counted(requeues, now)) >= self.limit

    def frees_at(self, requeues: Iterable[datetime], now: datetime) -> datetime | None:
        """When the count drops below the limit again (None: never, or it is below now)."""
        counted = self.counted(requeues, now)
        if len(counted) < self.limit or self.window is None:
            return None
        # The (count - limit + 1)-th oldest must leave the window: it leaves at t + window.
        leaving = counted[len(counted) - self.limit]
        try:
            return leaving + self.window
        except OverflowError:
            return None


def requeue_cap(config: MinRuntimeConfig, annotations: Mapping[str, str]) -> RequeueCap | None:
    """The cap in force for a podgroup of a pool with ``config`` (None: unlimited).

    A valid annotation applies when it is lower than the pool's cap, or the pool has none; it
    never raises the cap. The pool's window applies to both.
    """
    annotated = annotated_max_requeues(annotations).value
    pool_cap = config.max_requeues
    window = config.max_requeues_window
    if annotated is not None and (pool_cap is None or annotated < pool_cap):
        return RequeueCap(annotated, window, CapSource.ANNOTATION)
    if pool_cap is None:
        return None
    return RequeueCap(pool_cap, window, CapSource.NODE_POOL)


def capped_podgroups(
    running: Mapping[str, RunningPodGroup],
    requeues: Mapping[str, Iterable[datetime]],
    configs: NodePoolConfigs,
    now: datetime,
) -> frozenset[str]:
    """The uids of the ``running`` podgroups (by uid) that reached their cap at ``now``.

    ``requeues``: uid -> the times of its committed requeues. Only podgroups with one can
    have reached a cap (it is at least 1), so this costs one step per such podgroup.
    """
    require_aware(now, "now")
    capped: set[str] = set()
    for uid, times in requeues.items():
        podgroup = running.get(uid)
        if podgroup is None:
            continue
        cap = requeue_cap(configs.for_pool(podgroup.node_pool), podgroup.annotations)
        if cap is not None and cap.reached(times, now):
            capped.add(uid)
    return frozenset(capped)
