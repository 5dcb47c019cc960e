"""`explain` agrees with the SQL read surface on every (running podgroup, preemptor queue) pair.

The narrative comes from the core over the tree and configuration read back from PostgreSQL;
every number is compared here with the SQL functions themselves (min_runtime_for,
preempt_protection(at) / reclaim_protection(q, at), is_protected), independently of the
checks ``explain`` makes on itself.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from minruntime.audit.explain import Explainer, UnknownPodGroupError, explain
from minruntime.audit.explain_model import Explanation
from minruntime.core import MinRuntimeConfig, QueueTree
from minruntime.store.shadows import LIVE
from minruntime.store.unit import ReadUnit
from tests.cloudevents import (
    T0,
    Event,
    allocated,
    config,
    config_of,
    design_tree,
    queue,
    queue_of,
    released,
    submitted,
)
from tests.integration.helpers import Feed, database_examples, reset_state
from tests.unit.core.core_testkit import configs as config_strategy
from tests.unit.core.core_testkit import random_trees

S = timedelta(seconds=1)
DESIGN_QUEUES = ("A", "B", "C", "D", "leaf1", "leaf2", "leaf3", "research", "vision")
# Every queue of the tree, a queue nobody declared, and None (the preempt rule by default).
PREEMPTORS: tuple[str | None, ...] = (None, *DESIGN_QUEUES, "ghost")
# 0, every window end of the world (15s … 600s) and long after: the strict boundary at each.
MOMENTS = (0, 15, 30, 40, 45, 60, 70, 100, 180, 200, 300, 600, 4000)


def design_world(feed: Feed) -> None:
    """SEMANTICS.md §4's tree plus a second root, three node pools and twelve podgroups."""
    feed.send(
        *design_tree(),
        queue("research", reclaim="45s"),
        queue("vision", "research", preempt="30s", reclaim="15s"),
        # default: lca; a100: the queue method with its own defaults; gpu-x: no own config.
        config("default", defaultPreemptMinRuntime="100s", defaultReclaimMinRuntime="70s"),
        config(
            "a100",
            defaultPreemptMinRuntime="200s",
            defaultReclaimMinRuntime="40s",
            reclaimResolveMethod="queue",
        ),
    )
    running = [
        ("v1", "leaf1", None),
        ("v2", "leaf2", None),
        ("v3", "leaf3", None),
        ("vB", "B", None),
        ("vA", "A", None),
        ("vR", "vision", None),
        ("vU", "nowhere", None),
        ("vP", "leaf3", "a100"),
        ("vQ", "leaf1", "a100"),
        ("vX", "leaf2", "gpu-x"),
    ]
    messages: list[Event] = []
    for uid, where, pool in running:
        messages += [submitted(uid, where, 2, node_pool=pool), allocated(uid, 2, time=T0)]
    # Elastic: workers may shrink to 2 of 4, the launcher must stay; 3 workers running.
    messages += [
        submitted(
            "vE",
            "leaf2",
            [
                {"name": "launcher", "subGroup": "launcher", "gpu": 0},
                *({"name": f"w{i}", "subGroup": "workers", "gpu": 1} for i in range(4)),
            ],
            sub_groups=[
                {"name": "launcher", "minAvailable": 1},
                {"name": "workers", "minAvailable": 2},
            ],
        ),
        allocated("vE", ["launcher", "w0", "w1", "w2"], time=T0),
        submitted("pending", "leaf1", 1),
        submitted("done", "leaf2", 1),
        allocated("done", 1, time=T0),
        released("done", time=T0 + 50 * S),
        # Known only from an allocation (never submitted): no queue.
        allocated("orphan", ["orphan-0"], time=T0),
    ]
    outcome = feed.send(*messages)
    assert outcome.dead_lettered == 0


def sql_answers(
    conn: sa.Connection,
    uid: str,
    victim_queue: str | None,
    pool: str,
    preemptor: str | None,
    at: object,
) -> dict[str, object]:
    """The SQL read surface's own answers for one question."""
    rule_preemptor = preemptor or victim_queue
    if preemptor is None or preemptor == victim_queue:
        table = "minruntime.preempt_protection(:at)"
    else:
        table = "minruntime.reclaim_protection(:q, :at)"
    row = conn.execute(
        sa.text(f"SELECT * FROM {table} WHERE uid = :uid"), {"q": preemptor, "at": at, "uid": uid}
    ).one()
    answers: dict[str, object] = {
        "min_runtime": row.min_runtime,
        "resolved_from": row.resolved_from,
        "protected_until": row.protected_until,
        "evictable_pods": row.evictable_pods,
        "table_is_protected": row.is_protected,
    }
    if victim_queue is not None:
        resolved = conn.execute(
            sa.text("SELECT * FROM minruntime.min_runtime_for(:v, :p, :pool)"),
            {"v": victim_queue, "p": rule_preemptor, "pool": pool},
        ).one()
        answers["rule"] = resolved.rule
        answers["min_runtime_for"] = (resolved.min_runtime, resolved.resolved_from)
        answers["is_protected"] = conn.execute(
            sa.text("SELECT minruntime.is_protected(:uid, :q, :at)"),
            {"uid": uid, "q": rule_preemptor, "at": at},
        ).scalar_one()
    return answers


def assert_agrees(explanation: Explanation, sql: dict[str, object]) -> None:
    """Every number of the explanation is the SQL's; the narrative leads to the same value."""
    assert explanation.disagreements == ()
    rule = explanation.rule
    assert rule is not None
    assert explanation.elastic is not None
    verdict = explanation.verdict
    assert rule.min_runtime == sql["min_runtime"]
    assert rule.resolved_from == sql["resolved_from"]
    assert verdict.protected_until == sql["protected_until"]
    assert explanation.elastic.evictable_pods == sql["evictable_pods"]
    assert verdict.protected == sql["table_is_protected"]
    if "rule" in sql:
        assert rule.rule == sql["rule"]
        assert (rule.min_runtime, rule.resolved_from) == sql["min_runtime_for"]
        assert verdict.protected == sql["is_protected"]
    # The walk the reader sees ends where the value came from (or at the top: the default).
    applying = [step.queue for step in rule.walk if step.applies]
    assert applying == ([rule.resolved_from] if rule.resolved_from is not None else [])
    if rule.resolved_from is None:
        assert rule.min_runtime == rule.default_min_runtime
    if rule.walk:
        assert rule.walk[0].queue == rule.walk_start
        assert all(step.value is None for step in rule.walk[:-1])
        assert rule.victim_path is not None
        assert rule.walk_start in rule.victim_path
    subgroups = explanation.elastic.subgroups
    if subgroups:
        assert sum(sub.evictable for sub in subgroups) == explanation.elastic.evictable_pods


def running_podgroups(conn: sa.Connection) -> list[tuple[str, str | None, str]]:
    return [
        (row.uid, row.queue, row.node_pool)
        for row in conn.execute(
            sa.text(
                "SELECT uid, queue, node_pool FROM minruntime.podgroups"
                " WHERE status = 'running' ORDER BY uid"
            )
        )
    ]


def check_every_pair(
    engine: sa.Engine, preemptors: Iterable[str | None], moments: Sequence[int]
) -> int:
    checked = 0
    with engine.connect() as conn:
        podgroups = running_podgroups(conn)
        for offset in moments:
            at = T0 + offset * S
            explainer = Explainer(ReadUnit(conn, LIVE), at)
            for uid, victim_queue, pool in podgroups:
                for preemptor in preemptors:
                    explanation = explainer.explain(uid, preemptor)
                    sql = sql_answers(conn, uid, victim_queue, pool, preemptor, at)
                    assert_agrees(explanation, sql)
                    checked += 1
    return checked


def test_explain_agrees_with_sql_on_every_pair_of_the_design_tree(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    checked = check_every_pair(engine, PREEMPTORS, MOMENTS)
    assert checked == len(MOMENTS) * 12 * len(PREEMPTORS)


def explained(engine: sa.Engine, uid: str, preemptor: str | None, offset: float) -> Explanation:
    with engine.connect() as conn:
        return explain(ReadUnit(conn, LIVE), uid, T0 + offset * S, preemptor)


def test_the_design_documents_examples_read_as_the_document_says(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    # leaf1 → leaf3 = 60s (D): cousins, the LCA's child on the victim's side.
    rule = explained(engine, "v3", "leaf1", 30).rule
    assert rule is not None
    assert (rule.rule, rule.lca, rule.walk_start, rule.resolved_from) == (
        "reclaim-lca",
        "B",
        "D",
        "D",
    )
    assert rule.victim_path == ("A", "B", "D", "leaf3")
    assert rule.reclaimer_path == ("A", "B", "C", "leaf1")
    assert [(s.queue, s.value, s.applies) for s in rule.walk] == [("D", 60 * S, True)]
    # leaf3 → leaf1 = 600s (B): leaf1's 0s is ignored, C is unset and inherits B's value.
    rule = explained(engine, "v1", "leaf3", 30).rule
    assert rule is not None
    assert [(s.queue, s.value, s.applies) for s in rule.walk] == [
        ("C", None, False),
        ("B", 600 * S, True),
    ]
    assert rule.min_runtime == 600 * S
    # leaf1 → leaf2 = 180s (leaf2): siblings honour the victim leaf's value.
    rule = explained(engine, "v2", "leaf1", 30).rule
    assert rule is not None
    assert (rule.walk_start, rule.resolved_from) == ("leaf2", "leaf2")
    # Preempt: leaf1 300s (its own), leaf2 600s (from B).
    for uid, value, source in (("v1", 300, "leaf1"), ("v2", 600, "B")):
        rule = explained(engine, uid, None, 30).rule
        assert rule is not None
        assert (rule.rule, rule.min_runtime, rule.resolved_from) == ("preempt", value * S, source)
    # Different roots: only the victim's root counts (research 45s, not vision's 15s).
    rule = explained(engine, "vR", "leaf1", 30).rule
    assert rule is not None
    assert (rule.lca, rule.walk_start, rule.resolved_from) == (None, "research", "research")


def test_node_pool_defaults_and_methods_are_named(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    # a100 uses the queue method: the walk starts at the victim's queue (leaf3 unset → D).
    explanation = explained(engine, "vP", "leaf1", 30)
    rule = explanation.rule
    assert rule is not None
    assert (rule.rule, rule.config_node_pool, rule.walk_start) == ("reclaim-queue", "a100", "leaf3")
    assert rule.resolved_from == "D"
    assert rule.lca is None
    # gpu-x has no configuration: the default pool's is in force.
    rule = explained(engine, "vX", "vision", 30).rule
    assert rule is not None
    assert rule.config_node_pool == "default"
    # An unknown queue: the node pool's default, said in a note; no walk.
    explanation = explained(engine, "vU", None, 30)
    rule = explanation.rule
    assert rule is not None
    assert (rule.min_runtime, rule.resolved_from, rule.walk) == (100 * S, None, ())
    assert any("'nowhere' is not in the queue tree" in note for note in explanation.notes)
    explanation = explained(engine, "v1", "ghost", 30)
    assert explanation.rule is not None
    assert explanation.rule.min_runtime == 70 * S
    assert any("reclaimer's queue 'ghost'" in note for note in explanation.notes)
    # a100's preempt default (no queue above leaf1 sets... leaf1 does: 300s) vs vU's 100s.
    rule = explained(engine, "vQ", None, 30).rule
    assert rule is not None
    assert (rule.min_runtime, rule.resolved_from) == (300 * S, "leaf1")


def test_the_elastic_allowance_follows_the_window(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    # vE in leaf2: preempt resolves to B's 600s. Protected at +30s: workers 3 running, keep 2.
    protected = explained(engine, "vE", None, 30)
    assert protected.verdict.protected
    assert protected.elastic is not None
    assert protected.elastic.is_elastic
    assert [
        (s.name, s.min_available, s.pods, s.running, s.evictable)
        for s in protected.elastic.subgroups
    ] == [
        ("launcher", 1, 1, 1, 0),
        ("workers", 2, 4, 3, 1),
    ]
    assert protected.elastic.evictable_pods == 1
    # After the window every running pod may go.
    over = explained(engine, "vE", None, 600)
    assert not over.verdict.protected
    assert over.verdict.protected_until == T0 + 600 * S
    assert over.elastic is not None
    assert over.elastic.evictable_pods == 4
    assert [s.evictable for s in over.elastic.subgroups] == [1, 3]


def test_the_window_is_strict_at_its_end(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    before = explained(engine, "v1", None, 300 - 0.000001)
    at_end = explained(engine, "v1", None, 300)
    assert before.verdict.protected
    assert before.verdict.remaining == timedelta(microseconds=1)
    assert not at_end.verdict.protected
    assert at_end.verdict.remaining == timedelta(0)


def test_not_running_and_unknown_podgroups(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    pending = explained(engine, "pending", "leaf3", 30)
    assert (pending.rule, pending.verdict.protected) == (None, False)
    assert "never run" in pending.notes[0]
    done = explained(engine, "done", None, 30)
    assert done.podgroup.status == "finished"
    assert not done.verdict.protected
    assert "ended at 2026-11-21T10:00:50Z" in done.notes[0]
    assert done.disagreements == ()
    with pytest.raises(
        UnknownPodGroupError, match=r"^no podgroup with uid 'nope' at 2026-11-21T10:00:30Z$"
    ):
        explained(engine, "nope", None, 30)
    with engine.connect() as conn, pytest.raises(UnknownPodGroupError) as error:
        Explainer(ReadUnit(conn, LIVE), None).explain("nope")
    assert str(error.value) == "no podgroup with uid 'nope'"


def test_a_podgroup_never_submitted_resolves_to_the_default(engine: sa.Engine) -> None:
    design_world(Feed(engine))
    orphan = explained(engine, "orphan", None, 30)
    assert orphan.rule is not None
    assert orphan.elastic is not None
    assert (orphan.podgroup.queue, orphan.rule.min_runtime, orphan.rule.resolved_from) == (
        None,
        100 * S,
        None,
    )
    assert orphan.verdict.protected
    assert orphan.elastic.evictable_pods == 0
    assert "never submitted" in orphan.notes[0]
    assert orphan.disagreements == ()


# -- random trees (the core's strategies), fed through apply_batch ------------------------------


@dataclass(frozen=True)
class RandomWorld:
    tree: QueueTree
    configs: dict[str, MinRuntimeConfig]
    podgroups: list[tuple[str, str, str, int, int]]  # uid, queue, pool, pods, minAvailable
    preemptors: list[str | None]
    moments: list[int]


@st.composite
def random_worlds(draw: st.DrawFn) -> RandomWorld:
    tree = draw(random_trees(max_queues=8))
    names = [q.name for q in tree]
    pools = ["default", "p1", "p2"]
    configs = {
        pool: draw(config_strategy) for pool in draw(st.lists(st.sampled_from(pools), unique=True))
    }
    podgroups = [
        (
            f"pg{i}",
            draw(st.sampled_from([*names, "nowhere"])),
            draw(st.sampled_from(pools)),
            pods := draw(st.integers(1, 3)),
            draw(st.integers(0, pods)),
        )
        for i in range(draw(st.integers(1, 5)))
    ]
    preemptors = draw(
        st.lists(st.sampled_from([None, *names, "nowhere"]), min_size=1, max_size=4, unique=True)
    )
    moments = draw(st.lists(st.integers(0, 8000), min_size=1, max_size=2, unique=True))
    return RandomWorld(tree, configs, podgroups, preemptors, moments)


def feed_random_world(engine: sa.Engine, world: RandomWorld) -> None:
    reset_state(engine)
    feed = Feed(engine)
    messages = [queue_of(q) for q in world.tree]
    messages += [config_of(pool, c) for pool, c in world.configs.items()]
    for uid, where, pool, pods, min_available in world.podgroups:
        messages.append(
            submitted(
                uid,
                where,
                pods,
                node_pool=pool,
                sub_groups=[{"name": "default", "minAvailable": min_available}],
            )
        )
        # One pod stays pending when there are several: running < pods.
        messages.append(allocated(uid, max(1, pods - 1), time=T0))
    assert feed.send(*messages).dead_lettered == 0


@database_examples(25)
@given(world=random_worlds())
def test_explain_agrees_with_sql_on_random_trees(engine: sa.Engine, world: RandomWorld) -> None:
    feed_random_world(engine, world)
    checked = check_every_pair(engine, world.preemptors, world.moments)
    assert checked == len(world.podgroups) * len(world.preemptors) * len(world.moments)
