"""Requeue candidates (SEMANTICS.md §7, §8): the expected-runtime nominator run over the
cluster state, and the de-duplicated union of every nominator's nominations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType

from minruntime.core.annotations import EXPECTED_RUNTIME_PLUGIN
from minruntime.core.errors import MinRuntimeError
from minruntime.core.nomination import SkipReason, nominate
from minruntime.core.requeue_model import RunningPodGroup


def collect_candidates(
    builtin: Iterable[str], external: Iterable[tuple[str, str]]
) -> dict[str, frozenset[str]]:
    """De-duplicate nominations by uid, keeping every nominator of each candidate."""
    nominators: dict[str, set[str]] = {}
    for uid in builtin:
        nominators.setdefault(uid, set()).add(EXPECTED_RUNTIME_PLUGIN)
    for uid, nominator in external:
        if not nominator:
            raise MinRuntimeError(f"nomination of {uid} names no nominator")
        nominators.setdefault(uid, set()).add(nominator)
    return {uid: frozenset(names) for uid, names in sorted(nominators.items())}


@dataclass(frozen=True, slots=True)
class NominationReport:
    """The expected-runtime nominator's output for one cycle, with skip reasons for metrics."""

    nominated: tuple[str, ...]
    skipped: Mapping[str, SkipReason]
    # How far past its expected runtime each nominated podgroup is.
    overruns: Mapping[str, timedelta]

    def skip_counts(self) -> dict[SkipReason, int]:
        """Return how many podgroups were skipped for each reason."""
        return dict(Counter(self.skipped.values()))


def expected_runtime_nominations(
    running: Iterable[RunningPodGroup], now: datetime
) -> NominationReport:
    """Apply the expected-runtime nominator (§7) to every running podgroup; no side effects."""
    nominated: list[str] = []
    skipped: dict[str, SkipReason] = {}
    overruns: dict[str, timedelta] = {}
    for podgroup in sorted(running, key=lambda pg: pg.uid):
        verdict = nominate(podgroup.nomination_candidate(), now)
        if verdict.nominated:
            nominated.append(podgroup.uid)
            overruns[podgroup.uid] = verdict.overrun or timedelta(0)
        elif verdict.skip_reason is not None:
            skipped[podgroup.uid] = verdict.skip_reason
    return NominationReport(tuple(nominated), MappingProxyType(skipped), MappingProxyType(overruns))
