"""Exact verdicts on runs whose eviction the scheduler attributed (core.attribution)."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from core_testkit import (
    T0,
    configs,
    design_tree,
    naive_preempt,
    naive_reclaim,
    queue_names,
    random_trees,
    running,
    s,
    submission,
    with_preempt,
)
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    Attribution,
    EndedRun,
    ExactJudgement,
    ExactVerdict,
    Inexact,
    MinRuntimeConfig,
    NodePoolConfigs,
    PodGroupState,
    QueueTree,
    Reclaimers,
    Release,
    RuleWindow,
    RunRules,
    Verdict,
    applied_window,
    ended_run,
    exact_judgement,
    fold,
    inexact,
    judge,
    run_verdict,
)


def rules(tree: QueueTree, **config: Any) -> RunRules:
    return RunRules(tree, NodePoolConfigs({"default": MinRuntimeConfig(**config)}))


def run(
    queue: str | None,
    ran: float,
    attribution: Attribution | None,
    *,
    core: int = 0,
    preemptibility: str = "preemptible",
) -> EndedRun:
    return EndedRun(
        "pg",
        queue,
        "default",
        preemptibility,
        T0,
        T0 + s(ran),
        "evicted",
        Decimal(1),
        core,
        attribution,
    )


def exact(run_rules: RunRules, evicted: EndedRun) -> ExactJudgement:
    judged = exact_judgement(run_rules, evicted)
    assert judged is not None
    return judged


def window_of(judged: ExactJudgement) -> RuleWindow:
    assert judged.rule is not None
    return judged.rule.window


def event(action: str | None, queue: str | None = None, at: datetime | None = None) -> Attribution:
    return Attribution("event", action, "team/big", queue, at)


# --- the rule that applied, on the design tree ----------------------------------------------


def test_a_preempt_is_judged_by_the_preempt_window_of_the_runs_queue_alone() -> None:
    # leaf1's preempt window is 300s (SEMANTICS.md §4); the reclaim windows do not matter.
    tree = rules(with_preempt(design_tree()))
    inside = exact(tree, run("leaf1", 200, event("preempt", "leaf1")))
    assert inside.verdict is ExactVerdict.VIOLATED
    assert (window_of(inside).min_runtime, window_of(inside).resolved_from) == (s(300), "leaf1")
    assert inside.cut_short == s(100)
    # Strict: at exactly start + window the run is no longer protected.
    at_end = exact_judgement(tree, run("leaf1", 300, event("preempt")))
    assert at_end is not None
    assert (at_end.verdict, at_end.cut_short) == (ExactVerdict.HONOURED, None)


def test_a_reclaim_is_judged_by_the_window_resolved_for_the_reclaimers_queue() -> None:
    # SEMANTICS.md §4 worked examples (lca): leaf1 -> leaf2 = 180s (leaf2); leaf3 -> leaf1 =
    # 600s (B; leaf1's 0s ignored); leaf1 -> leaf3 = 60s (D).
    tree = rules(design_tree())
    by_leaf1 = exact(tree, run("leaf2", 100, event("reclaim", "leaf1")))
    by_leaf3 = exact(tree, run("leaf1", 100, event("reclaim", "leaf3")))
    by_leaf2 = exact(tree, run("leaf1", 100, event("reclaim", "leaf2")))
    assert (by_leaf1.verdict, window_of(by_leaf1).resolved_from) == (ExactVerdict.VIOLATED, "leaf2")
    assert (window_of(by_leaf1).reclaimers, window_of(by_leaf1).lca) == (Reclaimers.BELOW, "C")
    assert window_of(by_leaf3).min_runtime == s(600)
    assert by_leaf3.verdict is ExactVerdict.VIOLATED
    # leaf2 and leaf1 share C: the walk starts at leaf1, whose 0s lets it go at once.
    assert window_of(by_leaf2).min_runtime == s(0)
    assert by_leaf2.verdict is ExactVerdict.HONOURED
    # Today's verdict over every possible preemptor would have called the last one possible.
    assert run_verdict(tree.rules("leaf1", "default"), run("leaf1", 100, None))[0] == (
        Verdict.POSSIBLE
    )


def test_a_reclaimer_queue_not_in_the_tree_meets_the_pools_default() -> None:
    tree = rules(design_tree(), default_reclaim_min_runtime=s(120))
    judged = exact(tree, run("leaf1", 100, event("reclaim", "gone")))
    assert window_of(judged).reclaimers is Reclaimers.UNKNOWN
    assert (window_of(judged).min_runtime, window_of(judged).resolved_from) == (s(120), None)
    assert judged.verdict is ExactVerdict.VIOLATED


def test_method_queue_walks_from_the_victim_whoever_reclaims() -> None:
    tree = rules(design_tree(), reclaim_resolve_method="queue")
    judged = exact(tree, run("leaf1", 100, event("reclaim", "leaf3")))
    assert (window_of(judged).min_runtime, window_of(judged).reclaimers) == (s(0), Reclaimers.ANY)
    assert judged.verdict is ExactVerdict.HONOURED


@pytest.mark.parametrize("action", ["consolidation", "stalegangeviction"])
def test_actions_kai_does_not_guard_are_unguarded_never_violations(action: str) -> None:
    tree = rules(with_preempt(design_tree()))
    # Cut 290s short of its preempt window, and holding a semi-preemptible core: still unguarded.
    evicted = run("leaf1", 10, event(action), core=2, preemptibility="semi-preemptible")
    judged = exact_judgement(tree, evicted)
    assert judged is not None
    assert (judged.verdict, judged.rule, judged.cut_short) == (ExactVerdict.UNGUARDED, None, None)
    assert applied_window(tree, evicted) is None


@pytest.mark.parametrize(
    ("attribution", "why"),
    [
        (Attribution("annotation", at=T0), Inexact.NO_ACTION),
        (Attribution("condition"), Inexact.NO_ACTION),
        (Attribution("event", "backfill", "ns/x", "leaf2"), Inexact.UNKNOWN_ACTION),
        (Attribution("event", "reclaim", "ns/x"), Inexact.NO_EVICTOR_QUEUE),
    ],
)
def test_an_attribution_that_names_no_rule_keeps_todays_verdict(
    attribution: Attribution, why: Inexact
) -> None:
    tree = rules(with_preempt(design_tree()))
    assert inexact(attribution) is why
    assert exact_judgement(tree, run("leaf1", 100, attribution)) is None


def test_a_preempt_needs_no_evictor_queue() -> None:
    assert inexact(Attribution("event", "preempt")) is None


def test_a_semi_preemptible_core_makes_a_guarded_eviction_violated_whatever_its_window() -> None:
    tree = rules(design_tree())
    evicted = run("leaf1", 5000, event("preempt"), core=1, preemptibility="semi-preemptible")
    judged = exact_judgement(tree, evicted)
    assert judged is not None
    assert judged.verdict is ExactVerdict.VIOLATED
    # No window still protected it: nothing was cut short.
    assert judged.cut_short is None


def test_the_schedulers_own_time_is_the_instant_when_it_lies_within_the_run() -> None:
    tree = rules(with_preempt(design_tree()))
    # Evicted at 290s (KAI's Event), the pods gone at 330s: cut 10s short of the 300s window.
    judged = exact_judgement(tree, run("leaf1", 330, event("preempt", at=T0 + s(290))))
    assert judged is not None
    assert (judged.verdict, judged.instant, judged.cut_short) == (
        ExactVerdict.VIOLATED,
        T0 + s(290),
        s(10),
    )
    # A time outside the run (a late Event of an earlier run, a clock ahead): the run's end.
    for at in (T0 - s(1), T0 + s(400)):
        late = exact_judgement(tree, run("leaf1", 330, event("preempt", at=at)))
        assert late is not None
        assert (late.verdict, late.instant) == (ExactVerdict.HONOURED, T0 + s(330))


def test_an_unattributed_run_has_no_exact_verdict() -> None:
    assert exact_judgement(rules(design_tree()), run("leaf1", 1, None)) is None


# --- ended_by through the fold ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "ended_by"),
    [
        ("deleted", "evicted"),
        (None, "evicted"),
        ("completed", "evicted"),
        ("evicted", "evicted"),
        ("preempted", "preempted"),
        ("requeued", "requeued"),
    ],
)
def test_an_attributed_release_ends_the_run_as_an_eviction(
    reason: str | None, ended_by: str
) -> None:
    state = running(fold(fold_empty(), submission()))
    attribution = event("reclaim", "leaf2", T0 + s(50))
    release = Release(None, T0 + s(60), reason, attribution)
    after = fold(state, release)
    ended = ended_run(state, after, release, T0 + s(60))
    assert ended is not None
    assert (ended.ended_by, ended.eviction, ended.attribution) == (ended_by, True, attribution)
    # KAI requeues an evicted gang: pending again, its preemption delay re-armed.
    assert (after.status, after.evicted_at) == ("pending", T0 + s(60))


def test_a_plain_deletion_stays_deleted() -> None:
    state = running(fold(fold_empty(), submission()))
    release = Release(None, T0 + s(60), "deleted")
    after = fold(state, release)
    ended = ended_run(state, after, release, T0 + s(60))
    assert ended is not None
    assert (ended.ended_by, ended.eviction, ended.attribution) == ("deleted", False, None)
    assert after.status == "finished"


def fold_empty() -> PodGroupState:
    return PodGroupState("pg")


# --- properties ---------------------------------------------------------------------------------

actions = st.sampled_from(["preempt", "reclaim", "consolidation", "stalegangeviction"])


@given(
    data=st.data(),
    tree=random_trees(),
    config=configs,
    action=actions,
    ran=st.integers(0, 10**6).map(s),
    at=st.one_of(st.none(), st.integers(-100, 10**6 + 100).map(lambda n: T0 + s(n))),
    core=st.integers(0, 2),
)
def test_an_exact_verdict_is_the_judgement_of_the_one_window_that_applied(
    data: st.DataObject,
    tree: QueueTree,
    config: MinRuntimeConfig,
    action: str,
    ran: timedelta,
    at: datetime | None,
    core: int,
) -> None:
    victim = data.draw(st.one_of(st.none(), queue_names(tree)))
    reclaimer = data.draw(st.one_of(queue_names(tree), st.just("not-a-queue")))
    run_rules = RunRules(tree, NodePoolConfigs({"default": config}))
    attribution = Attribution("event", action, "ns/evictor", reclaimer, at)
    evicted = EndedRun("pg", victim, "default", "preemptible", T0, T0 + ran, "evicted", None, core)
    evicted = evicted._replace(attribution=attribution)
    judged = exact_judgement(run_rules, evicted)
    assert judged is not None
    instant = at if at is not None and T0 <= at <= T0 + ran else T0 + ran
    assert judged.instant == instant
    if action in ("consolidation", "stalegangeviction"):
        # Never a violation, whatever the windows and the core.
        assert judged.verdict is ExactVerdict.UNGUARDED
        return
    window = applied_window(run_rules, evicted)
    assert window is not None
    assert judged.rule is not None
    # The one window agrees with judge() on it; violated iff it still protected the run at
    # the instant (strict), or a core was held.
    assert judged.rule == judge(T0, instant, [window]).rules[0]
    protected = instant < T0 + window.min_runtime
    assert (judged.verdict is ExactVerdict.VIOLATED) == (protected or core > 0)
    assert judged.cut_short == (T0 + window.min_runtime - instant if protected else None)
    # The window is the Resolver's answer, and one of the windows the run met.
    if victim is None:
        expected = (
            (config.default_preempt_min_runtime, None)
            if action == "preempt"
            else (config.default_reclaim_min_runtime, None)
        )
    elif action == "preempt":
        expected = naive_preempt(tree, config, victim)
    else:
        expected = naive_reclaim(tree, config, reclaimer, victim)
    assert (window.min_runtime, window.resolved_from) == expected
    if victim is None or reclaimer != victim:
        assert window in run_rules.windows(victim, "default")


@given(
    data=st.data(),
    tree=random_trees(),
    config=configs,
    ran=st.integers(0, 10**6).map(s),
    source=st.sampled_from(["annotation", "condition"]),
)
def test_a_run_without_a_usable_attribution_keeps_todays_verdict(
    data: st.DataObject, tree: QueueTree, config: MinRuntimeConfig, ran: timedelta, source: str
) -> None:
    victim = data.draw(st.one_of(st.none(), queue_names(tree)))
    run_rules = RunRules(tree, NodePoolConfigs({"default": config}))
    plain = EndedRun("pg", victim, "default", "preemptible", T0, T0 + ran, "evicted", None)
    for attribution in (None, Attribution(source, at=T0)):
        evicted = plain._replace(attribution=attribution)
        assert exact_judgement(run_rules, evicted) is None
        assert run_verdict(run_rules.rules(victim, "default"), evicted) == run_verdict(
            run_rules.rules(victim, "default"), plain
        )
