"""Elastic podgroups: victim filtering and eviction-scenario validation (SEMANTICS.md §6)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Final

from minruntime.core.errors import InvalidPodGroupError
from minruntime.core.preemptibility import Preemptibility, above_core

DEFAULT_SUBGROUP: Final = "default"


@dataclass(frozen=True, slots=True)
class SubGroup:
    """A named set of pods that must keep ``min_available`` of them to be useful."""

    name: str = DEFAULT_SUBGROUP
    min_available: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise InvalidPodGroupError("a subgroup needs a non-empty name")
        if (
            not isinstance(self.min_available, int)
            or isinstance(self.min_available, bool)
            or self.min_available < 0
        ):
            raise InvalidPodGroupError(
                f"subgroup {self.name!r}: minAvailable must be a whole number >= 0, "
                f"got {self.min_available!r}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class PodGroupPods:
    """The pods of one podgroup: every pod's subgroup, and which pods hold resources."""

    uid: str
    # Pod name -> subgroup name, for pods in any state.
    pods: Mapping[str, str]
    # Pods holding resources; pods still releasing count as running.
    running: frozenset[str] = frozenset()
    subgroups: tuple[SubGroup, ...] = (SubGroup(),)

    def __post_init__(self) -> None:
        object.__setattr__(self, "pods", MappingProxyType(dict(self.pods)))
        object.__setattr__(self, "running", frozenset(self.running))
        names = [subgroup.name for subgroup in self.subgroups]
        if not names:
            raise InvalidPodGroupError(f"podgroup {self.uid}: needs at least one subgroup")
        duplicates = sorted(name for name, count in Counter(names).items() if count > 1)
        if duplicates:
            raise InvalidPodGroupError(
                f"podgroup {self.uid}: duplicate subgroup name(s) {', '.join(duplicates)}"
            )
        undeclared = sorted({sub for sub in self.pods.values() if sub not in names})
        if undeclared:
            raise InvalidPodGroupError(
                f"podgroup {self.uid}: pods refer to undeclared subgroup(s) "
                f"{', '.join(undeclared)}; declared: {', '.join(names)}"
            )
        strangers = sorted(self.running - self.pods.keys())
        if strangers:
            raise InvalidPodGroupError(
                f"podgroup {self.uid}: running pod(s) {', '.join(strangers)} are not its pods"
            )

    def pod_count(self, subgroup: str) -> int:
        """Return how many pods, in any state, belong to ``subgroup``."""
        return sum(1 for sub in self.pods.values() if sub == subgroup)

    def running_count(self, subgroup: str) -> int:
        """Return how many pods of ``subgroup`` hold resources."""
        return sum(1 for pod in self.running if self.pods[pod] == subgroup)


def is_elastic(podgroup: PodGroupPods) -> bool:
    """True if any subgroup has fewer required pods (minAvailable) than pods."""
    return any(
        subgroup.min_available < podgroup.pod_count(subgroup.name)
        for subgroup in podgroup.subgroups
    )


def protected_elasticity(
    subgroups: Iterable[SubGroup], pod_subgroups: Iterable[str], running_subgroups: Iterable[str]
) -> tuple[bool, int]:
    """(``is_elastic``, ``evictable_pods(protected=True)``) counted in one pass over the pods.

    For the projection, which writes both for every podgroup it changes: given the subgroup
    of each pod and of each running pod of a podgroup whose pods all belong to its declared,
    distinct subgroups (what ``PodGroupPods`` checks; this does not).
    """
    pods = _counted(pod_subgroups)
    declared = tuple(subgroups)
    if not any(sub.min_available < pods.get(sub.name, 0) for sub in declared):
        return False, 0
    return True, above_core(declared, _counted(running_subgroups))


def _counted(names: Iterable[str]) -> dict[str, int]:
    """How many times each name comes: a Counter's counts, without its cost (its Mapping
    check and method calls cost more than counting a podgroup's few pods; every podgroup the
    projection writes is counted, issue 30)."""
    counts: dict[str, int] = {}
    for name in names:
        counts[name] = counts.get(name, 0) + 1
    return counts


def passes_victim_filter(podgroup: PodGroupPods, protected: bool) -> bool:
    """False only for a protected non-elastic podgroup; elastic ones are validated per scenario."""
    return not protected or is_elastic(podgroup)


def evictable_pods(
    podgroup: PodGroupPods,
    protected: bool,
    preemptibility: Preemptibility = Preemptibility.PREEMPTIBLE,
) -> int:
    """Return how many running pods the podgroup may lose now without breaking §6 (§10: a
    semi-preemptible one never its core, protected or not)."""
    semi = preemptibility is Preemptibility.SEMI_PREEMPTIBLE
    if not (semi or protected):
        return len(podgroup.running)
    # Semi-preemptible, protected or not: a protected non-elastic gang has nothing above its
    # core either.
    if not (semi or is_elastic(podgroup)):
        return 0
    return above_core(podgroup.subgroups, Counter(podgroup.pods[pod] for pod in podgroup.running))


@dataclass(frozen=True, slots=True)
class VictimEviction:
    """One victim of a scenario: its pods, whether it is protected, which pods it loses."""

    podgroup: PodGroupPods
    protected: bool
    evicted: frozenset[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        object.__setattr__(self, "evicted", frozenset(self.evicted))

    @classmethod
    def whole(cls, podgroup: PodGroupPods, protected: bool) -> VictimEviction:
        """Evict every running pod (a requeue evicts the whole podgroup)."""
        return cls(podgroup, protected, podgroup.running)


@dataclass(frozen=True, slots=True)
class ScenarioVerdict:
    """Whether an eviction scenario respects minimum runtimes, and if not, why."""

    valid: bool
    reason: str | None = None
    podgroup: str | None = None
    subgroup: str | None = None


VALID_SCENARIO: Final = ScenarioVerdict(True)


def validate_scenario(victims: Iterable[VictimEviction]) -> ScenarioVerdict:
    """Check every protected victim keeps each subgroup's minAvailable; one failure fails all."""
    for victim in victims:
        podgroup = victim.podgroup
        strangers = sorted(victim.evicted - podgroup.running)
        if strangers:
            raise InvalidPodGroupError(
                f"podgroup {podgroup.uid}: cannot evict {', '.join(strangers)}: not running"
            )
        if not victim.protected or not victim.evicted:
            continue
        if not is_elastic(podgroup):
            # The victim filter should have excluded it; a scenario that still contains it
            # would break its protection, so it is refused rather than trusted.
            return ScenarioVerdict(
                False,
                f"podgroup {podgroup.uid} is protected by its minimum runtime and not elastic",
                podgroup.uid,
            )
        lost = Counter(podgroup.pods[pod] for pod in victim.evicted)
        for subgroup in podgroup.subgroups:
            if not lost[subgroup.name]:
                continue
            left = podgroup.running_count(subgroup.name) - lost[subgroup.name]
            if subgroup.min_available > left:
                return ScenarioVerdict(
                    False,
                    f"podgroup {podgroup.uid} is protected by its minimum runtime: subgroup "
                    f"{subgroup.name!r} would keep {left} running pod(s), "
                    f"below minAvailable {subgroup.min_available}",
                    podgroup.uid,
                    subgroup.name,
                )
    return VALID_SCENARIO
