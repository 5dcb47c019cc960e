"""Protection windows of a run: examples on the design tree, ids, ranges, and properties."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from core_testkit import T0, configs, design_tree, queue_names, random_trees, s, with_preempt
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    MinRuntimeConfig,
    NodePoolConfigs,
    ProtectedRun,
    ProtectionRule,
    ProtectionWindow,
    ProtectionWindows,
    Queue,
    QueueTree,
    ReclaimResolveMethod,
    Resolver,
)

PREEMPT = ProtectionRule.PREEMPT
RECLAIM = ProtectionRule.RECLAIM


def run(
    queue: str | None, start: datetime = T0, uid: str = "pg", pool: str = "default"
) -> ProtectedRun:
    return ProtectedRun(uid=uid, start_time=start, queue=queue, node_pool=pool)


def summary(windows: tuple[ProtectionWindow, ...]) -> list[tuple[object, ...]]:
    return [(w.rule.value, w.min_runtime, w.resolved_from, w.step_down_queues) for w in windows]


def lca(configs: NodePoolConfigs | None = None) -> ProtectionWindows:
    return ProtectionWindows(with_preempt(design_tree()), configs or NodePoolConfigs())


# --- the design tree ---------------------------------------------------------------------


def test_leaf1_has_its_preempt_window_and_one_reclaim_window_for_steps_into_b_or_c() -> None:
    # Walks from A: nothing set (default 0: no window); from B and C: B's 600s; from leaf1:
    # its own 0s (no window). leaf3 → leaf1 steps into C: 600s from B (SEMANTICS.md §4).
    assert summary(lca().of(run("leaf1"))) == [
        ("preempt", s(300), "leaf1", None),
        ("reclaim", s(600), "B", ("B", "C")),
    ]


def test_leaf3_has_a_window_per_distinct_resolution_of_its_path() -> None:
    # leaf1 → leaf3 steps into D: 60s (D); a reclaimer in A steps into B: 600s (B).
    assert summary(lca().of(run("leaf3"))) == [
        ("preempt", s(600), "B", None),
        ("reclaim", s(600), "B", ("B",)),
        ("reclaim", s(60), "D", ("D", "leaf3")),
    ]


def test_the_queue_method_has_one_reclaim_window_the_walk_from_the_victim_queue() -> None:
    windows = lca(NodePoolConfigs({"default": MinRuntimeConfig(reclaim_resolve_method="queue")}))
    assert summary(windows.of(run("leaf3"))) == [
        ("preempt", s(600), "B", None),
        ("reclaim", s(60), "D", None),
    ]
    assert windows.of(run("leaf3"))[1].reclaim_method is ReclaimResolveMethod.QUEUE
    # leaf1's own 0s applies to every reclaimer: only the preempt window is left.
    assert summary(windows.of(run("leaf1"))) == [("preempt", s(300), "leaf1", None)]


def test_placeholders_and_unknown_queues_use_the_node_pool_defaults() -> None:
    pools = NodePoolConfigs(
        {
            "a100": MinRuntimeConfig(
                default_preempt_min_runtime=s(30), default_reclaim_min_runtime=s(45)
            )
        }
    )
    windows = lca(pools)
    expected = [("preempt", s(30), None, None), ("reclaim", s(45), None, None)]
    assert summary(windows.of(run(None, pool="a100"))) == expected
    assert summary(windows.of(run("nowhere", pool="a100"))) == expected
    # The default pool has no row and no default: nothing protects a placeholder there.
    assert windows.of(run(None)) == ()


def test_zero_windows_are_left_out() -> None:
    tree = QueueTree([Queue(name="flat", preempt_min_runtime=s(0), reclaim_min_runtime=s(0))])
    assert ProtectionWindows(tree, NodePoolConfigs()).of(run("flat")) == ()


def test_a_window_ends_at_start_plus_min_runtime() -> None:
    (preempt, _) = lca().of(run("leaf1"))
    assert preempt.protected_until == T0 + s(300)


def test_a_window_is_elapsed_time_even_across_a_daylight_saving_change() -> None:
    # Europe/Berlin's 2026-03-29 has 23 hours; a day-long window is still 24 hours long.
    berlin = ZoneInfo("Europe/Berlin")
    tree = QueueTree([Queue(name="daily", preempt_min_runtime=timedelta(days=1))])
    start = datetime(2026, 3, 28, 13, 0, tzinfo=berlin)
    (window,) = ProtectionWindows(tree, NodePoolConfigs()).of(run("daily", start=start))
    assert window.protected_until == datetime(2026, 3, 29, 12, 0, tzinfo=UTC)  # 14:00 there
    assert window.protected_until - start == timedelta(hours=24)
    assert window.protected_until.tzinfo is UTC


# --- ids ---------------------------------------------------------------------------------


def test_ids_are_uuid5_stable_and_independent_of_the_start_time_offset() -> None:
    first = lca().of(run("leaf3"))
    again = lca().of(run("leaf3", start=T0.astimezone(timezone(timedelta(hours=2)))))
    assert [w.id for w in first] == [w.id for w in again]
    assert all(uuid.UUID(w.id).version == 5 for w in first)
    assert len({w.id for w in first}) == len(first)


@pytest.mark.parametrize(
    "other",
    [
        run("leaf3", uid="pg-2"),
        run("leaf3", start=T0 + s(1)),
    ],
)
def test_ids_differ_for_another_podgroup_or_run(other: ProtectedRun) -> None:
    ids = {w.id for w in lca().of(run("leaf3"))}
    assert ids.isdisjoint(w.id for w in lca().of(other))


def test_a_changed_resolution_is_a_new_window() -> None:
    tree = with_preempt(design_tree()).with_queue(
        Queue(name="D", parent="B", reclaim_min_runtime=s(90))
    )
    before = {w.id for w in lca().of(run("leaf3"))}
    after = {w.id for w in ProtectionWindows(tree, NodePoolConfigs()).of(run("leaf3"))}
    # The preempt window and B's reclaim window are unchanged; D's is a new window.
    assert len(before & after) == 2
    assert len(after - before) == 1


# --- ranges ------------------------------------------------------------------------------


def test_ending_between_is_half_open_and_sorted() -> None:
    windows = lca()
    runs = [run("leaf3", uid="late", start=T0 + s(10)), run("leaf3", uid="early")]
    ending = windows.ending_between(runs, T0 + s(60), T0 + s(600))
    # (after, until]: "early"'s 60s window ends exactly at `after` and is left out; its 600s
    # windows end exactly at `until` and are in.
    assert [(w.run.uid, w.min_runtime) for w in ending] == [
        ("late", s(60)),
        ("early", s(600)),
        ("early", s(600)),
    ]
    assert [w.protected_until for w in ending] == sorted(w.protected_until for w in ending)


def test_spans_are_every_positive_min_runtime_in_use() -> None:
    pools = NodePoolConfigs({"gpu": MinRuntimeConfig(default_reclaim_min_runtime=s(7))})
    assert lca(pools).spans() == {s(60), s(180), s(300), s(600), s(7)}


# --- properties ----------------------------------------------------------------------------


@given(random_trees(), configs, st.data())
def test_every_reclaimer_finds_its_window_by_its_step_down_queue(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    victim = data.draw(queue_names(tree))
    reclaimer = data.draw(st.sampled_from([q.name for q in tree]))
    windows = ProtectionWindows(tree, NodePoolConfigs({"default": config}))
    reclaim = [w for w in windows.of(run(victim)) if w.rule is RECLAIM]
    resolution = Resolver(tree, config).resolve_for(victim, reclaimer)
    if reclaimer == victim:
        return  # the preempt rule, below
    if resolution.min_runtime == timedelta(0):
        assert all(resolution.start not in (w.step_down_queues or ()) for w in reclaim)
        return
    matching = [
        w for w in reclaim if w.step_down_queues is None or resolution.start in w.step_down_queues
    ]
    assert len(matching) == 1
    assert (matching[0].min_runtime, matching[0].resolved_from) == (
        resolution.min_runtime,
        resolution.source,
    )


@given(random_trees(), configs, st.data())
def test_the_preempt_window_is_the_preempt_resolution(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    victim = data.draw(queue_names(tree))
    windows = ProtectionWindows(tree, NodePoolConfigs({"default": config})).of(run(victim))
    resolution = Resolver(tree, config).preempt_min_runtime(victim)
    preempt = [(w.min_runtime, w.resolved_from) for w in windows if w.rule is PREEMPT]
    expected = [(resolution.min_runtime, resolution.source)]
    assert preempt == (expected if resolution.min_runtime > timedelta(0) else [])


@given(random_trees(), configs, st.data())
def test_windows_are_distinct_positive_and_step_downs_partition_part_of_the_path(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    victim = data.draw(queue_names(tree))
    windows = ProtectionWindows(tree, NodePoolConfigs({"default": config}))
    found = windows.of(run(victim))
    assert all(w.min_runtime > timedelta(0) for w in found)
    assert len({w.id for w in found}) == len(found)
    assert {w.min_runtime for w in found} <= windows.spans()
    step_downs = [q for w in found for q in (w.step_down_queues or ())]
    assert len(step_downs) == len(set(step_downs))
    if victim in tree:
        assert set(step_downs) <= set(tree.path(victim))


@given(
    random_trees(),
    configs,
    st.data(),
    st.integers(0, 10**6),
    st.integers(0, 10**6),
)
def test_ranges_split_without_gaps_or_overlaps(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject, first: int, second: int
) -> None:
    victim = data.draw(queue_names(tree))
    windows = ProtectionWindows(tree, NodePoolConfigs({"default": config}))
    runs = [run(victim)]
    low, high = sorted((first, second))
    start, middle, end = T0, T0 + s(low), T0 + s(high)
    whole = windows.ending_between(runs, start, end)
    halves = windows.ending_between(runs, start, middle) + windows.ending_between(runs, middle, end)
    assert sorted(w.id for w in whole) == sorted(w.id for w in halves)
