"""Expected-runtime nomination: which running podgroups are over their expected runtime.

SEMANTICS.md §7. The checks run in a fixed order and the first failure is the skip reason;
a semi-preemptible podgroup is skipped right after the preemptible check (§10).
Minimum-runtime protection is deliberately not checked here: the requeue worker enforces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Final

from minruntime.core.annotations import EXPECTED_RUNTIME_ANNOTATION
from minruntime.core.cooldown import cooldown_gate
from minruntime.core.durations import read_duration
from minruntime.core.preemptibility import Preemptibility
from minruntime.core.timestamps import require_aware


class SkipReason(StrEnum):
    """Why a podgroup was not nominated (a finite metric label)."""

    NOT_RUNNING = "not_running"
    NOT_PREEMPTIBLE = "not_preemptible"
    # §10: a requeue evicts the whole gang, a semi-preemptible core never is.
    SEMI_PREEMPTIBLE = "semi_preemptible"
    INVALID_DURATION = "invalid_duration"
    MISSING_START = "missing_start"
    CLOCK_SKEW = "clock_skew"
    COOLDOWN = "cooldown"
    INVALID_NOT_BEFORE = "invalid_not_before"


@dataclass(frozen=True, slots=True, kw_only=True)
class NominationCandidate:
    """The parts of a podgroup the nominator looks at."""

    running_pods: int
    preemptibility: Preemptibility
    annotations: Mapping[str, str] = field(default_factory=dict)
    start_time: datetime | None = None


@dataclass(frozen=True, slots=True)
class NominationVerdict:
    """The outcome: nominated, skipped with a reason, or simply not over its runtime yet."""

    nominated: bool
    skip_reason: SkipReason | None = None
    # How far past its expected runtime the podgroup is, once that is known to be >= 0.
    overrun: timedelta | None = None


NOT_YET_DUE: Final = NominationVerdict(False)


def _skip(reason: SkipReason, overrun: timedelta | None = None) -> NominationVerdict:
    return NominationVerdict(False, reason, overrun)


def nominate(candidate: NominationCandidate, now: datetime) -> NominationVerdict:
    """Decide whether ``candidate`` is nominated for requeue at ``now``; no side effects."""
    require_aware(now, "now")
    if candidate.running_pods <= 0:
        return _skip(SkipReason.NOT_RUNNING)
    if candidate.preemptibility is Preemptibility.NON_PREEMPTIBLE:
        return _skip(SkipReason.NOT_PREEMPTIBLE)
    if candidate.preemptibility is Preemptibility.SEMI_PREEMPTIBLE:
        return _skip(SkipReason.SEMI_PREEMPTIBLE)
    expected = read_duration(candidate.annotations.get(EXPECTED_RUNTIME_ANNOTATION))
    if expected is None or expected <= timedelta(0):
        return _skip(SkipReason.INVALID_DURATION)
    start = candidate.start_time
    if start is None:
        return _skip(SkipReason.MISSING_START)
    require_aware(start, "start time")
    if start > now:
        return _skip(SkipReason.CLOCK_SKEW)
    overrun = now - start - expected
    # Inclusive: exactly at start + expected the podgroup is due.
    if overrun < timedelta(0):
        return NOT_YET_DUE
    gate = cooldown_gate(candidate.annotations, now)
    if gate is not None:
        return _skip(SkipReason(gate), overrun)
    return NominationVerdict(True, None, overrun)
