"""Protection at a run's end (SEMANTICS.md §10): the rule windows, definite / possible / none."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest
from core_testkit import (
    T0,
    configs,
    design_tree,
    naive_path,
    naive_preempt,
    naive_reclaim,
    queue_names,
    random_trees,
    s,
    with_preempt,
)
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    MinRuntimeConfig,
    NodePoolConfigs,
    ProtectionRule,
    Queue,
    QueueTree,
    Reclaimers,
    RuleWindow,
    RunRules,
    Verdict,
    judge,
)

PREEMPT, RECLAIM = ProtectionRule.PREEMPT, ProtectionRule.RECLAIM


def rules(tree: QueueTree, **config: Any) -> RunRules:
    return RunRules(tree, NodePoolConfigs({"default": MinRuntimeConfig(**config)}))


def summary(windows: tuple[RuleWindow, ...]) -> list[tuple[object, ...]]:
    return [
        (w.rule.value, w.reclaimers.value, w.lca, w.min_runtime.total_seconds(), w.resolved_from)
        for w in windows
    ]


def at(seconds: float) -> datetime:
    return T0 + s(seconds)


# --- the design tree ---------------------------------------------------------------------


def test_a_run_in_leaf1_meets_its_preempt_rule_each_lca_class_and_the_unknown_queue() -> None:
    # A is the only root: no "other roots" class. Reclaimers whose LCA with leaf1 is A (A
    # alone) walk from B: 600s; LCA B (B, D, leaf3) from C, unset: B's 600s; LCA C (C, leaf2)
    # from leaf1: its own 0s. leaf1 has no children. An unknown queue: the default.
    windows = rules(with_preempt(design_tree())).windows("leaf1", "default")
    assert summary(windows) == [
        ("preempt", "own-queue", None, 300.0, "leaf1"),
        ("reclaim", "below", "A", 600.0, "B"),
        ("reclaim", "below", "B", 600.0, "B"),
        ("reclaim", "below", "C", 0.0, "leaf1"),
        ("reclaim", "unknown", None, 0.0, None),
    ]


def test_the_worked_examples_are_the_classes_of_their_reclaimers() -> None:
    # SEMANTICS.md §4: leaf1 -> leaf3 = 60s (D); leaf1 -> leaf2 = 180s (leaf2);
    # leaf3 -> leaf1 = 600s (B). The reclaimer is leaf1 in each; its LCA with the victim is B
    # for leaf3 and C for leaf2.
    tree = design_tree()
    leaf3 = {w.lca: w for w in rules(tree).windows("leaf3", "default")}
    assert (leaf3["B"].min_runtime, leaf3["B"].resolved_from) == (s(60), "D")
    leaf2 = {w.lca: w for w in rules(tree).windows("leaf2", "default")}
    assert (leaf2["C"].min_runtime, leaf2["C"].resolved_from) == (s(180), "leaf2")
    leaf1 = {w.lca: w for w in rules(tree).windows("leaf1", "default")}
    assert (leaf1["B"].min_runtime, leaf1["B"].resolved_from) == (s(600), "B")


def test_an_inner_queue_has_a_class_for_the_queues_below_it() -> None:
    windows = rules(design_tree()).windows("C", "default")
    below_c = [w for w in windows if w.lca == "C"]
    # leaf1 and leaf2 reclaim from below C: the walk starts at C itself (unset -> B's 600s).
    assert [(w.reclaimers, w.walk_start, w.min_runtime) for w in below_c] == [
        (Reclaimers.BELOW, "C", s(600))
    ]


def test_a_second_root_adds_the_other_roots_class_from_the_victims_root() -> None:
    tree = design_tree().with_queue(Queue(name="Z", reclaim_min_runtime=s(5)))
    windows = rules(tree, default_reclaim_min_runtime=s(30)).windows("leaf2", "default")
    other = [w for w in windows if w.reclaimers is Reclaimers.OTHER_ROOTS]
    # Only A's own value counts (unset): the default.
    assert [(w.walk_start, w.min_runtime, w.resolved_from) for w in other] == [("A", s(30), None)]


def test_method_queue_has_one_class_for_every_other_queue() -> None:
    windows = rules(design_tree(), reclaim_resolve_method="queue").windows("leaf2", "default")
    assert summary(windows) == [
        ("preempt", "own-queue", None, 0.0, None),
        ("reclaim", "any", None, 180.0, "leaf2"),
        ("reclaim", "unknown", None, 0.0, None),
    ]


@pytest.mark.parametrize("queue", [None, "nowhere"])
def test_a_placeholder_or_unknown_queue_meets_the_defaults_only(queue: str | None) -> None:
    config = {"default_preempt_min_runtime": s(60), "default_reclaim_min_runtime": s(90)}
    assert summary(rules(design_tree(), **config).windows(queue, "default")) == [
        ("preempt", "own-queue", None, 60.0, None),
        ("reclaim", "any", None, 90.0, None),
    ]


def test_each_node_pool_uses_its_own_configuration() -> None:
    run_rules = RunRules(
        design_tree(),
        NodePoolConfigs(
            {
                "a100": MinRuntimeConfig(
                    default_preempt_min_runtime=s(7), reclaim_resolve_method="queue"
                )
            }
        ),
    )
    assert run_rules.windows("leaf3", "a100")[0].min_runtime == s(7)
    assert [w.reclaimers for w in run_rules.windows("leaf3", "a100")][1] is Reclaimers.ANY
    assert run_rules.windows("leaf3", "other")[0].min_runtime == s(0)


# --- the verdict -------------------------------------------------------------------------


def test_definite_possible_and_none_on_the_design_tree() -> None:
    tree = with_preempt(design_tree())
    run_rules = rules(tree, default_reclaim_min_runtime=s(120))
    # Windows of leaf1: 300 (preempt), 600, 600, 0 (below C), 120 (unknown).
    possible = run_rules.judge("leaf1", "default", T0, at(100))
    assert possible.verdict is Verdict.POSSIBLE
    assert [r.protected for r in possible.rules] == [True, True, True, False, True]
    assert possible.cut_short == s(500)
    assert run_rules.judge("leaf1", "default", T0, at(600)).verdict is Verdict.NONE
    # Without the 0s class (leaf3's windows: 600 preempt via B, 600 from B/A, 60 D, 120).
    definite = run_rules.judge("leaf3", "default", T0, at(59))
    assert definite.verdict is Verdict.DEFINITE
    assert min(rule.cut_short for rule in definite.rules) == s(1)


def test_the_window_end_is_strict() -> None:
    window = RuleWindow(PREEMPT, Reclaimers.OWN_QUEUE, s(60), "q")
    assert judge(T0, at(60), [window]).verdict is Verdict.NONE
    just_inside = judge(T0, at(60) - timedelta(microseconds=1), [window])
    assert just_inside.verdict is Verdict.DEFINITE
    assert just_inside.cut_short == timedelta(microseconds=1)
    assert judge(T0, at(60), [window]).cut_short is None


def test_a_huge_window_ends_at_forever() -> None:
    window = RuleWindow(PREEMPT, Reclaimers.OWN_QUEUE, timedelta(days=999_999_999), None)
    judged = judge(T0, at(1), [window])
    assert judged.verdict is Verdict.DEFINITE
    assert judged.rules[0].protected_until.year == 9999


# --- properties over random trees and configurations ---------------------------------------


def _naive_class(
    tree: QueueTree, config: MinRuntimeConfig, reclaimer: str, victim: str
) -> tuple[Reclaimers, str | None]:
    """Which class a reclaimer of the tree falls in, from the paths alone."""
    if config.reclaim_resolve_method == "queue":
        return Reclaimers.ANY, None
    victim_path, reclaimer_path = naive_path(tree, victim), naive_path(tree, reclaimer)
    if victim_path[0] != reclaimer_path[0]:
        return Reclaimers.OTHER_ROOTS, None
    common = [a for a, b in zip(victim_path, reclaimer_path, strict=False) if a == b]
    return Reclaimers.BELOW, common[-1]


@given(data=st.data(), tree=random_trees(), config=configs)
def test_every_reclaimer_of_the_tree_finds_its_class_with_the_resolvers_answer(
    data: st.DataObject, tree: QueueTree, config: MinRuntimeConfig
) -> None:
    victim = data.draw(queue_names(tree))
    windows = RunRules(tree, NodePoolConfigs({"default": config})).windows(victim, "default")
    preempt, reclaims = windows[0], windows[1:]
    assert (preempt.rule, preempt.reclaimers) == (PREEMPT, Reclaimers.OWN_QUEUE)
    assert (preempt.min_runtime, preempt.resolved_from) == naive_preempt(tree, config, victim)
    assert all(w.rule is RECLAIM for w in reclaims)
    default = (config.default_reclaim_min_runtime, None)
    # Every possible reclaimer's answer is a window, and every window some reclaimer's.
    answers = {naive_reclaim(tree, config, r.name, victim) for r in tree if r.name != victim}
    assert {(w.min_runtime, w.resolved_from) for w in reclaims} == answers | {default}
    if victim not in tree:
        return
    classes = {(w.reclaimers, w.lca): w for w in reclaims}
    assert len(classes) == len(reclaims)
    members: dict[tuple[Reclaimers, str | None], int] = dict.fromkeys(classes, 0)
    for reclaimer in tree:
        if reclaimer.name == victim:
            continue
        key = _naive_class(tree, config, reclaimer.name, victim)
        window = classes[key]
        expected = naive_reclaim(tree, config, reclaimer.name, victim)
        assert (window.min_runtime, window.resolved_from) == expected
        members[key] += 1
    members.pop((Reclaimers.UNKNOWN, None))
    # A class is listed only when a queue of the tree is in it.
    assert all(count > 0 for count in members.values())


@given(
    windows=st.lists(
        st.builds(
            RuleWindow,
            st.sampled_from(list(ProtectionRule)),
            st.sampled_from(list(Reclaimers)),
            st.integers(0, 10**5).map(s),
            st.none(),
        ),
        min_size=1,
        max_size=6,
    ),
    elapsed=st.integers(-10, 2 * 10**5).map(s),
)
def test_definite_means_every_window_and_possible_some(
    windows: list[RuleWindow], elapsed: timedelta
) -> None:
    end = T0 + elapsed
    judged = judge(T0, end, windows)
    shortest = min(w.min_runtime for w in windows)
    longest = max(w.min_runtime for w in windows)
    if end < T0 + shortest:
        assert judged.verdict is Verdict.DEFINITE
    elif end < T0 + longest:
        assert judged.verdict is Verdict.POSSIBLE
    else:
        assert judged.verdict is Verdict.NONE
        assert judged.cut_short is None
    if judged.verdict is not Verdict.NONE:
        assert judged.cut_short == T0 + longest - end
    for rule in judged.rules:
        assert rule.protected == (end < rule.protected_until)
        assert rule.cut_short == (rule.protected_until - end if rule.protected else s(0))


@given(
    data=st.data(),
    tree=random_trees(),
    config=configs,
    elapsed=st.integers(-5, 10**6 + 10).map(s),
)
def test_a_rule_sets_verdict_from_its_extremes_is_the_judgement_of_every_window(
    data: st.DataObject, tree: QueueTree, config: MinRuntimeConfig, elapsed: timedelta
) -> None:
    victim = data.draw(st.one_of(st.none(), queue_names(tree)))
    run_rules = RunRules(tree, NodePoolConfigs({"default": config}))
    rule_set = run_rules.rules(victim, "default")
    assert rule_set is run_rules.rules(victim, "default")
    judged = run_rules.judge(victim, "default", T0, T0 + elapsed)
    assert rule_set.verdict(T0, T0 + elapsed) == (judged.verdict, judged.cut_short)
