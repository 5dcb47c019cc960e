"""Queues of node pools (KAI's shards): each pool resolves in the tree its scheduler sees.

The tree of pool P is the queues of P and the queues of no pool (``QueueTree.for_pool``).
Properties: with every queue of no pool, every pool resolves in the whole tree, as before
node pools on queues existed; and a queue of another pool never changes anything a pool
resolves — not the resolver's answers, the protection windows, the rules a run met, nor the
requeue planner's decisions.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta

import pytest
from core_testkit import (
    T0,
    configs,
    naive_preempt,
    naive_reclaim,
    node,
    nominated,
    pending_pg,
    plan,
    queue_names,
    random_trees,
    running_pg,
    s,
)
from hypothesis import assume, given
from hypothesis import strategies as st
from test_core_requeue_properties import Case, cases

from minruntime.core import (
    ClusterState,
    InvalidQueueError,
    MinRuntimeConfig,
    NodePoolConfigs,
    PoolResolvers,
    ProtectedRun,
    ProtectionWindows,
    Queue,
    QueueCycleError,
    QueueTree,
    RequeueOutcome,
    RequeueReason,
    Resolver,
    RunRules,
    plan_requeue_cycle,
)

# The pools a queue may belong to (None: every pool's tree), and the pools asked about: one
# that no queue names, and None (= default).
QUEUE_POOLS = [None, None, "default", "a", "b"]
ASKED_POOLS = ["default", "a", "b", "elsewhere", None]


def tree_of(*queues: Queue) -> QueueTree:
    return QueueTree(queues)


def org_tree() -> QueueTree:
    """The example of docs/rule-engine.md: `org` in every pool, the rest in a100 or h100."""
    return tree_of(
        Queue(name="org", reclaim_min_runtime=s(7200)),
        Queue(name="vision", parent="org", node_pool="a100", reclaim_min_runtime=s(1800)),
        Queue(name="speech", parent="org", node_pool="a100"),
        Queue(name="serving", parent="org", node_pool="h100", preempt_min_runtime=s(900)),
        Queue(name="canary", parent="serving", reclaim_min_runtime=s(300)),
    )


# --- the tree of a pool ---------------------------------------------------------------------


def test_a_pool_sees_its_queues_and_the_queues_of_no_pool() -> None:
    tree = org_tree()
    assert {q.name for q in tree.for_pool("a100")} == {"org", "vision", "speech", "canary"}
    assert {q.name for q in tree.for_pool("h100")} == {"org", "serving", "canary"}
    # A pool no queue names (and the default pool, here) sees the queues of no pool only.
    assert {q.name for q in tree.for_pool("v100")} == {"org", "canary"}
    assert {q.name for q in tree.for_pool(None)} == {"org", "canary"}
    assert tree.for_pool("v100") is tree.shared()
    assert tree.node_pools() == frozenset({"a100", "h100"})


def test_a_queue_whose_parent_another_pool_holds_is_a_root_in_its_pool() -> None:
    tree = org_tree()
    # canary's parent (serving) is h100's: in h100 it hangs under it, elsewhere it is a root.
    assert tree.for_pool("h100").path("canary") == ("org", "serving", "canary")
    assert tree.for_pool("a100").path("canary") == ("canary",)
    assert tree.for_pool("a100").roots() == ("org", "canary")
    # The whole tree still knows the link (and refuses cycles across pools).
    assert tree.path("canary") == ("org", "serving", "canary")
    with pytest.raises(QueueCycleError):
        tree.with_queue(Queue(name="serving", parent="canary", node_pool="h100"))


def test_pool_trees_are_made_once_and_a_tree_of_no_pools_is_its_own() -> None:
    tree = org_tree()
    assert tree.for_pool("a100") is tree.for_pool("a100")
    assert tree.for_pool("a100").for_pool("a100") is tree.for_pool("a100")
    assert tree.for_pool("") is tree.for_pool("default") is tree.for_pool(None)
    plain = tree_of(Queue(name="x"), Queue(name="y", parent="x"))
    assert plain.for_pool("a100") is plain
    assert plain.shared() is plain
    assert plain.node_pools() == frozenset()


def test_the_default_pool_is_a_pool_like_any_other() -> None:
    tree = tree_of(
        Queue(name="root"),
        Queue(name="team", parent="root", node_pool="default", preempt_min_runtime=s(60)),
    )
    assert "team" in tree.for_pool(None)
    assert "team" in tree.for_pool("default")
    assert "team" not in tree.for_pool("a100")
    assert "team" not in tree.shared()


@pytest.mark.parametrize("pool", ["", 7])
def test_a_queue_s_node_pool_is_a_name_or_absent(pool: object) -> None:
    with pytest.raises(InvalidQueueError, match="node pool"):
        Queue(name="q", node_pool=pool)  # type: ignore[arg-type]


def test_the_node_pool_is_part_of_a_queue_s_identity_in_the_tree() -> None:
    assert tree_of(Queue(name="q")) != tree_of(Queue(name="q", node_pool="a100"))
    assert hash(tree_of(Queue(name="q", node_pool="a"))) == hash(
        tree_of(Queue(name="q", node_pool="a"))
    )


# --- resolution in a pool's tree ------------------------------------------------------------


def test_each_pool_resolves_in_its_own_tree() -> None:
    tree = org_tree()
    resolvers = PoolResolvers(tree, NodePoolConfigs({"default": MinRuntimeConfig()}))
    a100, h100 = resolvers("a100"), resolvers("h100")
    # Siblings under org: the victim's own value, else org's.
    assert a100.reclaim_min_runtime("speech", "vision").min_runtime == s(1800)
    assert a100.reclaim_min_runtime("vision", "speech").source == "org"
    # serving is h100's: to a100's scheduler it does not exist, so the default applies.
    assert a100.reclaim_min_runtime("serving", "vision").source is None
    assert a100.preempt_min_runtime("serving").source is None
    assert h100.preempt_min_runtime("serving").min_runtime == s(900)
    # canary: under serving in h100 (preempt inherited), a root elsewhere.
    assert h100.preempt_min_runtime("canary").source == "serving"
    assert a100.preempt_min_runtime("canary").source is None
    # Across roots in a100 (canary is one there): only the victim's root counts.
    assert a100.reclaim_min_runtime("canary", "speech").source == "org"


def test_pools_that_see_one_tree_under_one_config_share_a_resolver() -> None:
    tree = org_tree()
    resolvers = PoolResolvers(tree, NodePoolConfigs())
    assert resolvers("v100") is resolvers("p3") is resolvers(None)
    assert resolvers("a100") is not resolvers("h100")
    assert resolvers("a100").tree is tree.for_pool("a100")


def test_windows_and_rules_of_a_run_come_from_its_pool_s_tree() -> None:
    tree = org_tree()
    pools = NodePoolConfigs({"default": MinRuntimeConfig(default_reclaim_min_runtime=s(60))})
    run = ProtectedRun(uid="u", start_time=T0, queue="canary", node_pool="h100")
    windows = ProtectionWindows(tree, pools)
    assert [(w.rule.value, w.resolved_from) for w in windows.of(run)] == [
        ("preempt", "serving"),
        ("reclaim", "org"),
        ("reclaim", "canary"),
    ]
    # In a100, canary is a root of its own: its own reclaim value, no preempt window.
    elsewhere = windows.of(replace(run, node_pool="a100"))
    assert [(w.rule.value, w.resolved_from) for w in elsewhere] == [("reclaim", "canary")]
    rules = RunRules(tree, pools)
    # In h100: reclaimers whose LCA is org walk from serving (org's 2h), those whose LCA is
    # serving from canary (its 5m), and an unknown queue's the default.
    assert [w.resolved_from for w in rules.windows("canary", "h100")[1:]] == [
        "org",
        "canary",
        None,
    ]
    # A queue of another pool is an unknown queue: the defaults only.
    assert [w.resolved_from for w in rules.windows("vision", "h100")] == [None, None]


def test_the_planner_protects_a_victim_by_its_pool_s_tree_only() -> None:
    # ``team`` protects its jobs for 3h, but only in pool b: the a100 scheduler does not see
    # it, so a job of queue team in a100 has the default (none) there, and is requeued.
    tree = tree_of(
        Queue(name="org"),
        Queue(name="team", parent="org", node_pool="b", preempt_min_runtime=s(3 * 3600)),
    )
    for pool, outcome in (("a100", RequeueOutcome.COMMITTED), ("b", RequeueOutcome.ROLLED_BACK)):
        snapshot = ClusterState(
            nodes=(node("n1", pool=pool),),
            running=(
                running_pg("job", pool=pool),
                running_pg("filler", gpus=(("n1", 4.0),), annotations={}, pool=pool),
            ),
            pending=(pending_pg("urgent", pool=pool),),
        )
        (decision,) = plan(snapshot, nominated("job"), tree=tree).decisions
        assert decision.outcome is outcome, pool
        if outcome is RequeueOutcome.ROLLED_BACK:
            assert decision.reason is RequeueReason.PROTECTED


# --- properties -----------------------------------------------------------------------------


@given(random_trees(), configs, st.sampled_from(ASKED_POOLS), st.data())
def test_with_no_queue_in_a_pool_every_pool_resolves_in_the_whole_tree(
    tree: QueueTree, config: MinRuntimeConfig, pool: str | None, data: st.DataObject
) -> None:
    assert tree.for_pool(pool) is tree
    pools = NodePoolConfigs({"default": config})
    resolver = PoolResolvers(tree, pools)(pool)
    names = queue_names(tree)
    for _ in range(5):
        reclaimer, victim = data.draw(names), data.draw(names)
        reclaim = resolver.reclaim_min_runtime(reclaimer, victim)
        assert (reclaim.min_runtime, reclaim.source) == naive_reclaim(
            tree, config, reclaimer, victim
        )
        preempt = resolver.preempt_min_runtime(victim)
        assert (preempt.min_runtime, preempt.source) == naive_preempt(tree, config, victim)
        # The rules a run meets do not depend on the pool's name either.
        rules = RunRules(tree, pools)
        assert rules.windows(victim, pool) == rules.windows(victim, "default")


@dataclass(frozen=True)
class Sharded:
    """A tree, the same tree with the queues of other pools than ``pool`` changed, and pool."""

    tree: QueueTree
    changed: QueueTree
    pool: str | None


@st.composite
def pooled_trees(draw: st.DrawFn, max_queues: int = 12) -> QueueTree:
    """Random forests whose queues belong to no pool, ``default``, ``a`` or ``b``."""
    tree = draw(random_trees(max_queues=max_queues))
    return QueueTree(replace(q, node_pool=draw(st.sampled_from(QUEUE_POOLS))) for q in tree)


@st.composite
def sharded(draw: st.DrawFn, max_queues: int = 12) -> Sharded:
    tree = draw(pooled_trees(max_queues))
    pool = draw(st.sampled_from(ASKED_POOLS))
    own = pool or "default"
    others = [p for p in ("default", "a", "b") if p != own]
    names = [q.name for q in tree]
    parents = st.sampled_from([None, "ghost", *names])
    changed: list[Queue] = []
    for queue in tree:
        if queue.node_pool is None or queue.node_pool == own:
            changed.append(queue)
            continue
        action = draw(st.sampled_from(["keep", "drop", "change"]))
        if action == "keep":
            changed.append(queue)
        elif action == "change":
            changed.append(
                replace(
                    queue,
                    parent=draw(parents),
                    preempt_min_runtime=draw(st.sampled_from([None, s(0), s(45), s(9000)])),
                    reclaim_min_runtime=draw(st.sampled_from([None, s(0), s(45), s(9000)])),
                    node_pool=draw(st.sampled_from(others)),
                )
            )
    for index in range(draw(st.integers(0, 3))):
        changed.append(
            Queue(
                name=f"x{index}",
                parent=draw(parents),
                preempt_min_runtime=draw(st.sampled_from([None, s(30), s(7000)])),
                reclaim_min_runtime=draw(st.sampled_from([None, s(0), s(7000)])),
                node_pool=draw(st.sampled_from(others)),
            )
        )
    try:
        other = QueueTree(changed)
    except QueueCycleError:
        assume(False)
        raise
    return Sharded(tree, other, pool)


def _questions(case: Sharded) -> list[str]:
    return sorted({q.name for q in case.tree} | {q.name for q in case.changed} | {"nowhere"})


@given(sharded(), configs)
def test_a_queue_of_another_pool_never_affects_a_pool_s_resolution(
    case: Sharded, config: MinRuntimeConfig
) -> None:
    pools = NodePoolConfigs({"default": config})
    assert case.tree.for_pool(case.pool) == case.changed.for_pool(case.pool)
    before: Resolver = PoolResolvers(case.tree, pools)(case.pool)
    after: Resolver = PoolResolvers(case.changed, pools)(case.pool)
    windows_before = ProtectionWindows(case.tree, pools)
    windows_after = ProtectionWindows(case.changed, pools)
    rules_before, rules_after = RunRules(case.tree, pools), RunRules(case.changed, pools)
    names = _questions(case)
    for victim in names:
        assert before.preempt_min_runtime(victim) == after.preempt_min_runtime(victim)
        for reclaimer in names:
            assert before.reclaim_min_runtime(reclaimer, victim) == after.reclaim_min_runtime(
                reclaimer, victim
            )
        run = ProtectedRun(uid="u", start_time=T0, queue=victim, node_pool=case.pool or "default")
        assert windows_before.of(run) == windows_after.of(run)
        assert rules_before.windows(victim, case.pool) == rules_after.windows(victim, case.pool)


@given(cases(), st.data())
def test_a_queue_of_another_pool_never_changes_a_requeue_decision_in_a_pool(
    case: Case, data: st.DataObject
) -> None:
    # The cluster's pools are "default" and "b"; its queues get pools, then every queue of a
    # pool other than the one looked at is changed.
    pool = data.draw(st.sampled_from(["default", "b"]))
    tree = QueueTree(
        replace(q, node_pool=data.draw(st.sampled_from([None, "default", "b"]))) for q in case.tree
    )
    other = "b" if pool == "default" else "default"
    changed = QueueTree(
        replace(
            q,
            preempt_min_runtime=data.draw(st.sampled_from([None, s(0), s(7200)])),
            reclaim_min_runtime=data.draw(st.sampled_from([None, s(0), s(7200)])),
        )
        if q.node_pool == other
        else q
        for q in tree
    ).with_queue(Queue(name="stranger", node_pool=other, preempt_min_runtime=s(7200)))

    def decisions(queues: QueueTree) -> list[object]:
        plan = plan_requeue_cycle(
            case.snapshot, case.candidates, tree=queues, configs=case.configs, now=T0
        )
        in_pool = {pg.uid for pg in case.snapshot.running if pg.node_pool == pool}
        return [d for d in plan.decisions if d.uid in in_pool]

    assert decisions(tree) == decisions(changed)


def test_spans_cover_the_windows_of_every_pool() -> None:
    tree = org_tree()
    windows = ProtectionWindows(tree, NodePoolConfigs())
    spans = windows.spans()
    for pool in ("a100", "h100", "v100"):
        for name in ("org", "vision", "speech", "serving", "canary"):
            run = ProtectedRun(uid="u", start_time=T0, queue=name, node_pool=pool)
            assert {w.min_runtime for w in windows.of(run)} <= spans
    assert timedelta(seconds=900) in spans
