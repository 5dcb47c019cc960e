from __future__ import annotations

from datetime import timedelta

import pytest
from core_testkit import design_tree, s

from minruntime.core import MinRuntimeConfig, Queue, QueueTree, Resolution, Resolver

LCA = MinRuntimeConfig()
QUEUE = MinRuntimeConfig(reclaim_resolve_method="queue")


def reclaim(reclaimer: str, victim: str, config: MinRuntimeConfig = LCA) -> Resolution:
    return Resolver(design_tree(), config).reclaim_min_runtime(reclaimer, victim)


# --- the worked examples of SEMANTICS.md §4 --------------------------------------------------


def test_cousins_ignore_the_victim_leaf_value() -> None:
    result = reclaim("leaf3", "leaf1")
    assert (result.min_runtime, result.source) == (s(600), "B")
    assert result.start == "C"


def test_preempt_examples() -> None:
    tree = QueueTree(
        [
            Queue(name="A"),
            Queue(name="B", parent="A", preempt_min_runtime=s(600)),
            Queue(name="C", parent="B"),
            Queue(name="leaf1", parent="C", preempt_min_runtime=s(300)),
            Queue(name="leaf2", parent="C"),
        ]
    )
    resolver = Resolver(tree, LCA)
    assert resolver.preempt_min_runtime("leaf1") == Resolution(s(300), "leaf1", "leaf1")
    leaf2 = resolver.preempt_min_runtime("leaf2")
    assert (leaf2.min_runtime, leaf2.source) == (s(600), "B")


# --- the worked examples of both methods ----------------------------------------------------


@pytest.mark.parametrize(
    ("config", "reclaimer", "victim", "expected", "source"),
    [
        (LCA, "leaf1", "leaf3", s(60), "D"),  # cousins use the LCA's child on the victim's side
        (LCA, "leaf1", "leaf2", s(180), "leaf2"),  # siblings honour the victim leaf
        # Method queue walks from the victim, whatever the reclaimer.
        (QUEUE, "leaf1", "leaf3", s(60), "D"),
        (QUEUE, "leaf3", "leaf1", s(0), "leaf1"),
        (QUEUE, "leaf1", "leaf2", s(180), "leaf2"),
        (QUEUE, "A", "C", s(600), "B"),
    ],
)
def test_reclaim_examples_give_the_value_and_the_queue_it_came_from(
    config: MinRuntimeConfig, reclaimer: str, victim: str, expected: timedelta, source: str
) -> None:
    result = reclaim(reclaimer, victim, config)
    assert (result.min_runtime, result.source) == (expected, source)


# --- edge cases -----------------------------------------------------------------------------


def test_same_queue_reclaim_is_the_queue_method() -> None:
    assert reclaim("leaf1", "leaf1").min_runtime == s(0)
    assert reclaim("leaf3", "leaf3").source == "D"


def test_victim_is_ancestor_of_reclaimer_stays_at_the_victim() -> None:
    # Victim C is the LCA itself: walk from C, which inherits 600s from B.
    result = reclaim("leaf1", "C")
    assert (result.min_runtime, result.source, result.start) == (s(600), "B", "C")
    result = reclaim("leaf3", "D")
    assert (result.min_runtime, result.source) == (s(60), "D")


def test_reclaimer_is_ancestor_of_victim_steps_one_down() -> None:
    # LCA is B (the reclaimer), one step toward leaf1 is C: unset, inherits B's 600s.
    result = reclaim("B", "leaf1")
    assert (result.min_runtime, result.source, result.start) == (s(600), "B", "C")
    result = reclaim("C", "leaf1")
    assert (result.min_runtime, result.source) == (s(0), "leaf1")


DEFAULTS = MinRuntimeConfig(default_preempt_min_runtime=s(11), default_reclaim_min_runtime=s(22))


@pytest.mark.parametrize(("reclaimer", "victim"), [("nope", "leaf1"), ("leaf1", "nope")])
@pytest.mark.parametrize("method", ["lca", "queue"])
def test_unknown_queue_on_either_side_is_the_default(
    reclaimer: str, victim: str, method: str
) -> None:
    config = MinRuntimeConfig(default_reclaim_min_runtime=s(22), reclaim_resolve_method=method)
    result = Resolver(design_tree(), config).reclaim_min_runtime(reclaimer, victim)
    assert result == Resolution(s(22), None, None)


def test_unknown_victim_preempt_is_the_default() -> None:
    resolver = Resolver(design_tree(), DEFAULTS)
    assert resolver.preempt_min_runtime("nope") == Resolution(s(11), None, None)
    # The design tree sets no preempt value at all: every queue falls to the default.
    result = resolver.preempt_min_runtime("leaf1")
    assert (result.min_runtime, result.source) == (s(11), None)


def different_roots() -> Resolver:
    """Two trees (r1 -> mid -> v, r2 -> w) and an orphan, with the DEFAULTS config."""
    tree = QueueTree(
        [
            Queue(name="r1", reclaim_min_runtime=s(100)),
            Queue(name="mid", parent="r1", reclaim_min_runtime=s(5)),
            Queue(name="v", parent="mid", reclaim_min_runtime=s(7)),
            Queue(name="r2"),
            Queue(name="w", parent="r2", reclaim_min_runtime=s(9)),
            Queue(name="orphan", parent="gone", reclaim_min_runtime=s(3)),
        ]
    )
    return Resolver(tree, DEFAULTS)


def test_different_roots_use_only_the_victim_root() -> None:
    result = different_roots().reclaim_min_runtime("w", "v")
    assert (result.min_runtime, result.source, result.start) == (s(100), "r1", "r1")


def test_different_roots_with_unset_root_is_the_default_not_further_down() -> None:
    result = different_roots().reclaim_min_runtime("v", "w")
    assert (result.min_runtime, result.source) == (s(22), None)


def test_a_queue_with_unknown_parent_is_its_own_root() -> None:
    result = different_roots().reclaim_min_runtime("v", "orphan")
    assert (result.min_runtime, result.source) == (s(3), "orphan")


def test_zero_stops_the_walk() -> None:
    tree = QueueTree(
        [
            Queue(name="p", preempt_min_runtime=s(600)),
            Queue(name="z", parent="p", preempt_min_runtime=s(0)),
        ]
    )
    result = Resolver(tree, DEFAULTS).preempt_min_runtime("z")
    assert (result.min_runtime, result.source) == (s(0), "z")


def test_resolve_for_picks_preempt_in_the_same_queue_and_reclaim_otherwise() -> None:
    tree = QueueTree(
        [
            Queue(name="p", preempt_min_runtime=s(1), reclaim_min_runtime=s(2)),
            Queue(name="a", parent="p"),
            Queue(name="b", parent="p"),
        ]
    )
    resolver = Resolver(tree, LCA)
    assert resolver.resolve_for("a", "a").min_runtime == s(1)
    assert resolver.resolve_for("a", "b").min_runtime == s(2)


def test_deep_tree_resolves_without_recursion() -> None:
    depth = 200
    queues = [Queue(name="q0", reclaim_min_runtime=s(42), preempt_min_runtime=s(43))]
    queues += [Queue(name=f"q{i}", parent=f"q{i - 1}") for i in range(1, depth)]
    queues.append(Queue(name="side", parent="q0"))
    resolver = Resolver(QueueTree(queues), LCA)
    assert resolver.preempt_min_runtime(f"q{depth - 1}").source == "q0"
    result = resolver.reclaim_min_runtime("side", f"q{depth - 1}")
    assert (result.min_runtime, result.source, result.start) == (s(42), "q0", "q1")
    result = resolver.reclaim_min_runtime(f"q{depth - 1}", f"q{depth - 2}")
    assert result.start == f"q{depth - 2}"


# --- caching --------------------------------------------------------------------------------


def test_results_are_cached_per_walk_start() -> None:
    resolver = Resolver(design_tree(), LCA)
    assert resolver.reclaim_min_runtime("leaf1", "leaf3") is resolver.reclaim_min_runtime(
        "leaf2", "leaf3"
    )


def test_a_resolver_on_a_changed_tree_gives_new_answers_and_the_old_one_keeps_its_own() -> None:
    tree = design_tree()
    old = Resolver(tree, LCA)
    assert old.reclaim_min_runtime("leaf1", "leaf3").min_runtime == s(60)  # warm the cache
    changed = tree.with_queue(Queue(name="D", parent="B", reclaim_min_runtime=s(5)))
    new = Resolver(changed, LCA)
    assert new.reclaim_min_runtime("leaf1", "leaf3").min_runtime == s(5)
    assert old.reclaim_min_runtime("leaf1", "leaf3").min_runtime == s(60)
    moved = Resolver(tree.with_queue(Queue(name="leaf3", parent="C")), LCA)
    # Siblings under C now: leaf3 is unset and inherits B's 600s instead of D's 60s.
    assert moved.reclaim_min_runtime("leaf1", "leaf3").source == "B"


def test_a_resolver_with_another_config_gives_its_answers() -> None:
    tree = design_tree()
    assert Resolver(tree, LCA).reclaim_min_runtime("leaf3", "leaf1").min_runtime == s(600)
    assert Resolver(tree, QUEUE).reclaim_min_runtime("leaf3", "leaf1").min_runtime == s(0)


# --- traces ---------------------------------------------------------------------------------


def test_trace_explains_the_lca_walk() -> None:
    trace = Resolver(design_tree(), LCA).trace_reclaim("leaf3", "leaf1")
    assert trace.lca == "B"
    assert trace.walked == ("C", "B")
    assert trace.resolution.source == "B"
    assert "lowest common ancestor 'B'" in trace.reason
    assert trace.victim_path == ("A", "B", "C", "leaf1")


def test_trace_for_different_roots_and_unknown_queues() -> None:
    resolver = different_roots()
    assert "different roots" in resolver.trace_reclaim("w", "v").reason
    assert "unknown" in resolver.trace_reclaim("nope", "v").reason
    assert "unknown" in resolver.trace_preempt("nope").reason
    preempt = resolver.trace_preempt("v")
    assert preempt.walked == ("v", "mid", "r1")
    assert "default" in preempt.reason
