"""What a podgroup allows to be evicted (SEMANTICS.md §10 "Semi-preemptible").

``preemptible``: any of its pods, subject to the minimum runtime (§5–§6).
``non-preemptible``: none; the scheduler never picks it as a victim.
``semi-preemptible``: each subgroup's first ``minAvailable`` running pods — the *core* — are
never evictable, protected or not; the pods above the core follow §5–§6. A requeue evicts the
whole gang, so it never requeues a semi-preemptible podgroup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from minruntime.core.elastic import SubGroup


class Preemptibility(StrEnum):
    """What a podgroup allows to be evicted (the wire's and KAI's words)."""

    PREEMPTIBLE = "preemptible"
    NON_PREEMPTIBLE = "non-preemptible"
    SEMI_PREEMPTIBLE = "semi-preemptible"

    @classmethod
    def of_flag(cls, preemptible: bool) -> Preemptibility:
        """The value the wire's older ``preemptible: true/false`` means."""
        return cls.PREEMPTIBLE if preemptible else cls.NON_PREEMPTIBLE

    @property
    def preemptible(self) -> bool:
        """The ``preemptible`` flag of the read surface: some of its pods may be evicted."""
        return self is not Preemptibility.NON_PREEMPTIBLE


def core_pods(subgroups: Iterable[SubGroup], running: Mapping[str, int]) -> int:
    """The running pods of a semi-preemptible core: Σ min(running, minAvailable) per subgroup
    (``running``: subgroup name -> running pods)."""
    return sum(min(running.get(sub.name, 0), sub.min_available) for sub in subgroups)


def above_core(subgroups: Iterable[SubGroup], running: Mapping[str, int]) -> int:
    """The running pods above the core: Σ max(0, running − minAvailable) per subgroup."""
    return sum(max(0, running.get(sub.name, 0) - sub.min_available) for sub in subgroups)
