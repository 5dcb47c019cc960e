"""Hypothesis properties of the resolver against naive references of SEMANTICS.md §4."""

from __future__ import annotations

from datetime import timedelta

from core_testkit import (
    configs,
    naive_path,
    naive_preempt,
    naive_reclaim,
    queue_names,
    random_trees,
    reclaimer_and_victim,
)
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import MinRuntimeConfig, Queue, QueueTree, Resolver


@given(random_trees(), configs, st.data())
def test_cached_resolver_equals_naive_reference(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    resolver = Resolver(tree, config)
    # Several queries per resolver so later ones hit what earlier ones cached.
    for _ in range(10):
        reclaimer, victim = reclaimer_and_victim(tree, data)
        result = resolver.reclaim_min_runtime(reclaimer, victim)
        assert (result.min_runtime, result.source) == naive_reclaim(tree, config, reclaimer, victim)
        preempt = resolver.preempt_min_runtime(victim)
        assert (preempt.min_runtime, preempt.source) == naive_preempt(tree, config, victim)


@given(random_trees(), configs, st.data())
def test_lca_equals_queue_method_when_reclaimer_is_the_victim_queue(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    name = data.draw(queue_names(tree))
    lca = Resolver(tree, MinRuntimeConfig(reclaim_resolve_method="lca"))
    by_queue = Resolver(tree, MinRuntimeConfig(reclaim_resolve_method="queue"))
    assert lca.reclaim_min_runtime(name, name) == by_queue.reclaim_min_runtime(name, name)


@given(random_trees(), configs, st.data())
def test_reclaim_source_is_on_the_victim_path_or_none(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    reclaimer, victim = reclaimer_and_victim(tree, data)
    source = Resolver(tree, config).reclaim_min_runtime(reclaimer, victim).source
    assert source is None or source in tree.path(victim)


@given(random_trees(), configs, st.data())
def test_preempt_is_the_first_set_value_on_the_path(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    victim = data.draw(st.sampled_from([queue.name for queue in tree]))
    expected: tuple[timedelta, str | None] = (config.default_preempt_min_runtime, None)
    for name in reversed(naive_path(tree, victim)):
        queue = tree.get(name)
        assert queue is not None
        if queue.preempt_min_runtime is not None:
            expected = (queue.preempt_min_runtime, name)
            break
    result = Resolver(tree, config).preempt_min_runtime(victim)
    assert (result.min_runtime, result.source) == expected


@given(random_trees(), configs, st.data())
def test_inserting_an_unset_queue_above_a_queue_never_changes_preempt(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    target = tree.get(data.draw(st.sampled_from([queue.name for queue in tree])))
    assert target is not None
    inserted = tree.with_queue(Queue(name="inserted", parent=target.parent)).with_queue(
        Queue(
            name=target.name,
            parent="inserted",
            preempt_min_runtime=target.preempt_min_runtime,
            reclaim_min_runtime=target.reclaim_min_runtime,
        )
    )
    before, after = Resolver(tree, config), Resolver(inserted, config)
    for queue in tree:
        assert after.preempt_min_runtime(queue.name).min_runtime == (
            before.preempt_min_runtime(queue.name).min_runtime
        )
        assert after.preempt_min_runtime(queue.name).source == (
            before.preempt_min_runtime(queue.name).source
        )


@given(random_trees(), configs, st.data())
def test_trace_agrees_with_the_resolution(
    tree: QueueTree, config: MinRuntimeConfig, data: st.DataObject
) -> None:
    reclaimer, victim = reclaimer_and_victim(tree, data)
    resolver = Resolver(tree, config)
    trace = resolver.trace_reclaim(reclaimer, victim)
    assert trace.resolution == resolver.reclaim_min_runtime(reclaimer, victim)
    if trace.resolution.source is not None:
        assert trace.walked[-1] == trace.resolution.source
