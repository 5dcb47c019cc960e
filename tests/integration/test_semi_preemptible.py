"""Semi-preemptible podgroups through the processor into PostgreSQL (SEMANTICS.md §10).

The core's ``evictable_pods``, the SQL read surface (``preempt_protection`` view and function,
``reclaim_protection()``, ``is_protected()``) and the requeue planner, fed by the worker's own
cluster loader, agree on random gangs: a semi-preemptible core is never evictable, protected
or not, and the planner never evicts a gang whole unless SQL says every running pod may go.
Old rows keep meaning what their flag said.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    EXPECTED_RUNTIME_PLUGIN,
    Preemptibility,
    RequeueOutcome,
    RequeueReason,
    evictable_pods,
    plan_requeue_cycle,
)
from minruntime.requeue.cycle_inputs import load_cycle_inputs
from minruntime.store.unit import ReadUnit
from tests.cloudevents import T0, Event, allocated, node, queue, released, submitted
from tests.integration.helpers import Feed, database_examples, reset_state, rows, scalar

QUEUES = ("q1", "q2")
VALUES = [value.value for value in Preemptibility]


@dataclass(frozen=True)
class Gang:
    uid: str
    queue: str
    preemptibility: str
    # (subgroup, minAvailable, pods, running pods)
    subgroups: tuple[tuple[str, int, int, int], ...]
    start: int


@st.composite
def gangs(draw: st.DrawFn, uid: str) -> Gang:
    subgroups = []
    for name in draw(st.lists(st.sampled_from(["a", "b"]), min_size=1, unique=True)):
        pods = draw(st.integers(1, 4))
        subgroups.append(
            (
                name,
                draw(st.integers(0, pods)),
                pods,
                draw(st.integers(1 if not subgroups else 0, pods)),
            )
        )
    return Gang(
        uid,
        draw(st.sampled_from(QUEUES)),
        draw(st.sampled_from(VALUES)),
        tuple(subgroups),
        draw(st.integers(0, 600)),
    )


def _messages(gang: Gang) -> list[Event]:
    pods = [
        {"name": f"{gang.uid}-{name}{i}", "subGroup": name, "gpu": 1}
        for name, _, count, _ in gang.subgroups
        for i in range(count)
    ]
    running = [f"{gang.uid}-{name}{i}" for name, _, _, held in gang.subgroups for i in range(held)]
    return [
        submitted(
            gang.uid,
            gang.queue,
            pods,
            priority=0,
            preemptibility=gang.preemptibility,
            sub_groups=[{"name": n, "minAvailable": m} for n, m, _, _ in gang.subgroups],
            annotations={"kai.scheduler/expected-runtime": "1s"},
        ),
        allocated(gang.uid, running, time=T0 + timedelta(seconds=gang.start), node="n1"),
    ]


@database_examples(25)
@given(
    world=st.lists(st.integers(0, 0), min_size=1, max_size=5).flatmap(
        lambda slots: st.tuples(*(gangs(f"pg{i}") for i in range(len(slots))))
    ),
    offset=st.integers(0, 1200),
)
def test_the_core_the_read_surface_and_the_planner_agree(
    engine: sa.Engine, world: tuple[Gang, ...], offset: int
) -> None:
    reset_state(engine)
    feed = Feed(engine)
    feed.send(
        queue("q1", preempt="5m", reclaim="10m"),
        queue("q2", preempt="15m", reclaim="2m"),
        node("n1", 1000),
    )
    assert feed.send(*(m for gang in world for m in _messages(gang))).dead_lettered == 0
    at = T0 + timedelta(seconds=offset)
    with engine.connect() as conn:
        inputs = load_cycle_inputs(conn, at)
    running = {pg.uid: pg for pg in inputs.cluster.running}
    assert {uid: pg.preemptibility.value for uid, pg in running.items()} == {
        gang.uid: gang.preemptibility for gang in world
    }
    stored = {
        r.uid: r
        for r in rows(engine, "SELECT uid, preemptible, preemptibility FROM minruntime.podgroups")
    }
    for gang in world:
        assert stored[gang.uid].preemptibility == gang.preemptibility
        assert stored[gang.uid].preemptible is (gang.preemptibility != "non-preemptible")

    # The view and the function at the same instant say the same.
    same = rows(
        engine,
        "SELECT v.evictable_pods AS v, f.evictable_pods AS f FROM minruntime.preempt_protection v"
        " JOIN minruntime.preempt_protection(now()) f USING (uid)",
    )
    assert len(same) == len(world)
    assert all(r.v == r.f for r in same)

    # Every rule (preempt: the victim's own queue; reclaim: the other): the SQL's evictable
    # pods are the core's evictable_pods under the SQL's own is_protected.
    sql_evictable: dict[tuple[str, str], int] = {}
    for preemptor in QUEUES:
        for r in rows(
            engine,
            "SELECT r.uid, r.is_protected, r.evictable_pods,"
            " minruntime.is_protected(r.uid, :q, :at) AS asked,"
            " p.is_protected AS preempt_protected, p.evictable_pods AS preempt_evictable"
            " FROM minruntime.reclaim_protection(:q, :at) r"
            " JOIN minruntime.preempt_protection(:at) p USING (uid)",
            q=preemptor,
            at=at,
        ):
            victim = running[r.uid]
            same_queue = victim.queue == preemptor
            protected = r.preempt_protected if same_queue else r.is_protected
            evictable = r.preempt_evictable if same_queue else r.evictable_pods
            assert r.asked is protected, (r.uid, preemptor)
            core = evictable_pods(victim.pod_set, protected, victim.preemptibility)
            assert evictable == core, (r.uid, preemptor)
            if victim.preemptibility is Preemptibility.SEMI_PREEMPTIBLE:
                below = sum(
                    max(0, held - minimum)
                    for _, minimum, _, held in next(g.subgroups for g in world if g.uid == r.uid)
                )
                assert evictable == below
            sql_evictable[(r.uid, preemptor)] = evictable

    # The planner, nominating every gang (no contender here: see the next test), skips
    # every semi-preemptible one at its gate and evicts nothing.
    plan = plan_requeue_cycle(
        inputs.cluster,
        {uid: {EXPECTED_RUNTIME_PLUGIN} for uid in running},
        tree=inputs.tree,
        configs=inputs.configs,
        now=at,
    )
    for decision in plan.decisions:
        if running[decision.uid].preemptibility is Preemptibility.SEMI_PREEMPTIBLE:
            assert decision.outcome is RequeueOutcome.SKIPPED
            assert decision.reason is RequeueReason.SEMI_PREEMPTIBLE
    assert not plan.committed()


def test_the_planner_commits_only_what_sql_says_may_go_whole(engine: sa.Engine, feed: Feed) -> None:
    reset_state(engine)
    feed.send(queue("q1", preempt="0s", reclaim="0s"), node("n1", 4))
    outcome = feed.send(
        *_messages(Gang("semi", "q1", "semi-preemptible", (("a", 1, 2, 2),), 0)),
        *_messages(Gang("plain", "q1", "preemptible", (("a", 1, 2, 2),), 0)),
        submitted("urgent", "q1", 2, priority=50),
    )
    assert outcome.dead_lettered == 0
    at = T0 + timedelta(hours=1)
    with engine.connect() as conn:
        inputs = load_cycle_inputs(conn, at)
    plan = plan_requeue_cycle(
        inputs.cluster,
        {"semi": {"proportion"}, "plain": {EXPECTED_RUNTIME_PLUGIN}},
        tree=inputs.tree,
        configs=inputs.configs,
        now=at,
    )
    outcomes = {d.uid: (d.outcome, d.reason, d.beneficiaries) for d in plan.decisions}
    assert outcomes["semi"] == (RequeueOutcome.SKIPPED, RequeueReason.SEMI_PREEMPTIBLE, ())
    assert outcomes["plain"] == (RequeueOutcome.COMMITTED, None, ("urgent",))
    evictable = {
        r.uid: (r.evictable_pods, r.is_protected)
        for r in rows(engine, "SELECT * FROM minruntime.preempt_protection(:at)", at=at)
    }
    # Both windows are over (0s): the plain gang may lose both pods, the semi one only 1.
    assert evictable == {"semi": (1, False), "plain": (2, False)}


def test_evicting_the_core_is_a_definite_violation_in_the_runs(
    engine: sa.Engine, feed: Feed
) -> None:
    reset_state(engine)
    feed.send(queue("q1", preempt="1m", reclaim="1m"))
    feed.send(*_messages(Gang("semi", "q1", "semi-preemptible", (("a", 1, 2, 2),), 0)))
    feed.send(*_messages(Gang("plain", "q1", "preemptible", (("a", 1, 2, 2),), 0)))
    # Hours after every window: only the semi-preemptible core makes it a violation.
    late = T0 + timedelta(hours=2)
    feed.send(
        released("semi", time=late, reason="evicted"),
        released("plain", time=late, reason="evicted"),
    )
    runs = {
        r.uid: r
        for r in rows(
            engine,
            "SELECT uid, preemptibility, protection, violation, ended_inside_protection,"
            " core_pods, cut_short FROM minruntime.runs",
        )
    }
    assert (runs["semi"].preemptibility, runs["semi"].core_pods) == ("semi-preemptible", 1)
    assert (runs["semi"].protection, runs["semi"].violation) == ("definite", "definite")
    assert runs["semi"].cut_short is None
    assert (runs["plain"].protection, runs["plain"].violation, runs["plain"].core_pods) == (
        "none",
        None,
        0,
    )
    assert scalar(engine, "SELECT count(*) FROM minruntime.runs WHERE violation IS NOT NULL") == 1


def test_explain_shows_the_core_and_agrees_with_sql(engine: sa.Engine, feed: Feed) -> None:
    from minruntime.audit.explain import explain
    from minruntime.store.shadows import LIVE

    reset_state(engine)
    feed.send(queue("q1", preempt="10m", reclaim="10m"))
    feed.send(
        *_messages(Gang("semi", "q1", "semi-preemptible", (("a", 1, 1, 1), ("b", 2, 4, 3)), 0))
    )
    for offset, protected in ((60, True), (3600, False)):
        with engine.connect() as conn:
            explanation = explain(
                ReadUnit(conn, LIVE), "semi", T0 + timedelta(seconds=offset), None
            )
        assert explanation.podgroup.preemptibility == "semi-preemptible"
        assert explanation.verdict.protected is protected
        assert explanation.disagreements == ()
        elastic = explanation.elastic
        assert elastic is not None
        assert elastic.semi_preemptible
        # Protected or not: only the pod above subgroup b's core of 2 may go.
        assert [(s.name, s.running, s.core, s.evictable) for s in elastic.subgroups] == [
            ("a", 1, 1, 0),
            ("b", 3, 2, 1),
        ]
        assert elastic.evictable_pods == 1
