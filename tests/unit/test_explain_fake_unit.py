"""``audit.explain`` against a fake read unit: the explanation needs no PostgreSQL.

The fake answers what the read surface would (``store.unit.StateReader``) for one running
podgroup in a queue with a one-hour preempt window; the rule engine's narrative is computed
from the tree and configuration the fake hands over, and compared with the fake's "SQL"
numbers, so a difference shows up as a disagreement exactly as it does against the database.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

import pytest

from minruntime.audit.explain import Explainer, explain
from minruntime.core import (
    MemberPod,
    NodePoolConfigs,
    PodGroupSpec,
    PodGroupState,
    Preemptibility,
    Queue,
    QueueTree,
    SubGroup,
)
from minruntime.errors import UnknownPodGroupError
from minruntime.store.queues import QueueRow, StoredTree
from minruntime.store.unit import LIVE, EvictedRun, Handshake, ProtectionRow, State, StateReader
from tests.cloudevents import T0
from tests.unit.test_explain_command import facts

HOUR = timedelta(hours=1)
AT = T0 + 10 * timedelta(minutes=1)


def stored_tree() -> StoredTree:
    """One root queue, ``team``, whose podgroups are protected for an hour (preempt rule)."""
    row = QueueRow(
        "team", None, HOUR, None, ("team",), None, None, None, None, None, None, None, None
    )
    return StoredTree(
        uuid.uuid4(), QueueTree([Queue(name="team", preempt_min_runtime=HOUR)]), {"team": row}
    )


def running_state() -> PodGroupState:
    spec = PodGroupSpec(
        "train", "ml", "team", "default", 0, Preemptibility.PREEMPTIBLE, (SubGroup("default", 2),)
    )
    pods = {"p0": MemberPod("default", 1), "p1": MemberPod("default", 1)}
    return PodGroupState(
        "pg-1", spec, {"p0": "n0", "p1": "n1"}, T0, T0, None, pods, {}, T0 - timedelta(minutes=1)
    )


@dataclass
class FakeUnit:
    """A read unit over plain values: the answers the read surface gives for ``pg-1``."""

    protection: ProtectionRow = field(
        default_factory=lambda: ProtectionRow(
            uid="pg-1",
            queue="team",
            node_pool="default",
            start_time=T0,
            min_runtime=HOUR,
            resolved_from="team",
            protected_until=T0 + HOUR,
            is_protected=True,
            evictable_pods=0,
        )
    )
    asked: list[str] = field(default_factory=list)

    @property
    def state(self) -> State:
        return LIVE

    def now(self) -> datetime:
        return AT

    def queue_tree(self) -> StoredTree:
        return stored_tree()

    def node_pool_configs(self) -> NodePoolConfigs:
        return NodePoolConfigs()

    def protection_rows(
        self, at: datetime, reclaimer_queue: str | None = None, uid: str | None = None
    ) -> tuple[ProtectionRow, ...]:
        self.asked.append(f"protection_rows {uid}")
        return (self.protection,) if uid in (None, "pg-1") else ()

    def podgroup_facts(self, uid: str) -> Mapping[str, Any] | None:
        if uid != "pg-1":
            return None
        # The read surface's row: the explanation's facts plus the stored elasticity.
        return {**asdict(facts(namespace="ml", queue="team", running_pods=2)), "is_elastic": False}

    def podgroup_annotations(self, uid: str) -> Any:
        return {}

    def podgroup_states(self, uids: Iterable[str]) -> Mapping[str, PodGroupState]:
        return {uid: running_state() for uid in uids if uid == "pg-1"}

    def min_runtime_rule(self, victim: str, preemptor: str, node_pool: str) -> str:
        return "preempt"

    def is_protected(self, uid: str, preemptor: str, at: datetime) -> bool:
        return self.protection.is_protected

    def committed_requeues(self, uid: str, at: datetime, most: int) -> list[datetime]:
        return []

    def newest_quota_shares(self, uid: str, at: datetime) -> dict[str, Any] | None:
        return None

    def newest_abandoned(
        self, uid: str, at: datetime
    ) -> tuple[datetime, str, datetime | None] | None:
        return None

    def newest_handshake(self, uid: str, at: datetime) -> Handshake | None:
        return None

    def last_eviction(self, uid: str, at: datetime) -> EvictedRun | None:
        return None

    def disruption_rows(self, since: datetime) -> list[tuple[Any, ...]]:
        return []


def test_explain_reads_only_the_unit_and_agrees_with_its_numbers() -> None:
    unit = FakeUnit()
    reader: StateReader = unit  # the fake is a StateReader (mypy checks the protocol)
    explanation = explain(reader, "pg-1", AT)
    assert explanation.at == AT
    assert explanation.podgroup.queue == "team"
    assert explanation.disagreements == ()
    assert explanation.verdict.protected
    assert explanation.verdict.protected_until == T0 + HOUR
    assert explanation.verdict.remaining == T0 + HOUR - AT
    assert explanation.rule is not None
    assert explanation.elastic is not None
    assert explanation.elastic.evictable_pods == 0
    assert unit.asked == ["protection_rows pg-1"]


def test_without_an_instant_the_unit_says_when_now_is() -> None:
    assert Explainer(FakeUnit(), None).at == AT


def test_a_number_the_sql_gets_wrong_is_a_disagreement() -> None:
    unit = FakeUnit()
    unit.protection = replace(unit.protection, min_runtime=2 * HOUR)
    (disagreement,) = explain(unit, "pg-1", AT).disagreements
    assert disagreement.startswith("min_runtime: SQL says")


def test_an_unknown_podgroup_is_one_user_error() -> None:
    with pytest.raises(UnknownPodGroupError, match="no podgroup with uid 'nope'"):
        explain(FakeUnit(), "nope", AT)
