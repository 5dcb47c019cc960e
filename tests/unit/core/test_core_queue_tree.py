from __future__ import annotations

from datetime import timedelta

import pytest
from core_testkit import design_tree, random_trees, s
from hypothesis import given
from hypothesis import strategies as st

from minruntime.core import (
    DuplicateQueueError,
    InvalidQueueError,
    NegativeDurationError,
    Queue,
    QueueCycleError,
    QueueTree,
)


def test_paths_run_from_root_to_queue() -> None:
    tree = design_tree()
    assert tree.path("leaf2") == ("A", "B", "C", "leaf2")
    assert tree.path("A") == ("A",)
    assert tree.parent_of("leaf3") == "D"
    assert tree.parent_of("A") is None
    assert set(tree.children_of("B")) == {"C", "D"}
    assert tree.roots() == ("A",)


def test_queue_is_keyword_only_and_frozen() -> None:
    with pytest.raises(TypeError):
        Queue("a")  # type: ignore[call-arg]
    queue = Queue(name="a")
    with pytest.raises(AttributeError):
        queue.name = "b"  # type: ignore[misc]


@pytest.mark.parametrize("field", ["preempt_min_runtime", "reclaim_min_runtime"])
def test_queue_rejects_negative_durations(field: str) -> None:
    with pytest.raises(NegativeDurationError, match="must not be negative"):
        Queue(name="a", **{field: timedelta(seconds=-1)})  # type: ignore[arg-type]


def test_queue_rejects_an_empty_name_and_parent() -> None:
    with pytest.raises(InvalidQueueError):
        Queue(name="")
    with pytest.raises(InvalidQueueError):
        Queue(name="a", parent="")


def test_container_protocol() -> None:
    tree = design_tree()
    assert len(tree) == 7
    assert "leaf1" in tree
    assert "nope" not in tree
    assert tree.get("nope") is None
    assert [queue.name for queue in tree][:2] == ["A", "B"]
    with pytest.raises(KeyError):
        tree.path("nope")


def test_unknown_parent_is_a_root_until_the_parent_appears() -> None:
    tree = QueueTree([Queue(name="child", parent="later")])
    assert tree.path("child") == ("child",)
    assert tree.roots() == ("child",)
    grown = tree.with_queue(Queue(name="later", parent=None))
    assert grown.path("child") == ("later", "child")
    assert tree.path("child") == ("child",)  # the old tree is untouched


def test_duplicate_names_are_rejected() -> None:
    with pytest.raises(DuplicateQueueError, match="duplicate queue name 'a'") as caught:
        QueueTree([Queue(name="a"), Queue(name="b"), Queue(name="a", parent="b")])
    assert caught.value.kind == "duplicate_queue"


def test_self_parent_is_a_cycle() -> None:
    with pytest.raises(QueueCycleError, match="would create a cycle: a -> a"):
        QueueTree([Queue(name="a", parent="a")])
    with pytest.raises(QueueCycleError, match="would create a cycle: a -> a") as caught:
        QueueTree([]).with_queue(Queue(name="a", parent="a"))
    assert caught.value.kind == "queue_cycle"


def test_two_cycle_in_constructor_names_the_cycle() -> None:
    with pytest.raises(QueueCycleError, match=r"a -> b -> a"):
        QueueTree([Queue(name="a", parent="b"), Queue(name="b", parent="a")])


def test_cycle_via_with_queue_keeps_the_old_tree() -> None:
    tree = QueueTree([Queue(name="a"), Queue(name="b", parent="a"), Queue(name="c", parent="b")])
    with pytest.raises(QueueCycleError) as caught:
        tree.with_queue(Queue(name="a", parent="c"))
    assert str(caught.value).startswith("queue change would create a cycle: a -> c -> b -> a")
    assert caught.value.cycle == ("a", "c", "b", "a")
    assert tree.path("c") == ("a", "b", "c")
    assert tree.get("a") == Queue(name="a")


def test_long_cycle_via_with_queue() -> None:
    tree = QueueTree(
        [Queue(name="q0")] + [Queue(name=f"q{i}", parent=f"q{i - 1}") for i in range(1, 50)]
    )
    with pytest.raises(QueueCycleError) as caught:
        tree.with_queue(Queue(name="q0", parent="q49"))
    assert len(caught.value.cycle) == 51
    assert caught.value.cycle[0] == caught.value.cycle[-1] == "q0"


def test_with_queue_moves_a_whole_subtree() -> None:
    tree = design_tree().with_queue(Queue(name="C", parent="D"))
    assert tree.path("leaf1") == ("A", "B", "D", "C", "leaf1")
    assert set(tree.children_of("D")) == {"leaf3", "C"}
    assert tree.children_of("B") == ("D",)
    assert design_tree().path("leaf1") == ("A", "B", "C", "leaf1")


def test_with_queue_replaces_values_without_moving() -> None:
    tree = design_tree().with_queue(Queue(name="D", parent="B", reclaim_min_runtime=s(5)))
    queue = tree.get("D")
    assert queue is not None
    assert queue.reclaim_min_runtime == s(5)
    assert tree.path("leaf3") == ("A", "B", "D", "leaf3")
    assert len(tree) == 7


def test_without_queue_makes_children_roots_and_they_reattach_later() -> None:
    tree = design_tree().without_queue("B")
    assert "B" not in tree
    assert tree.path("leaf1") == ("C", "leaf1")
    assert tree.path("leaf3") == ("D", "leaf3")
    assert set(tree.roots()) == {"A", "C", "D"}
    assert tree.children_of("A") == ()
    back = tree.with_queue(Queue(name="B", parent="A"))
    assert back.path("leaf1") == ("A", "B", "C", "leaf1")


def test_without_unknown_queue_is_a_no_op() -> None:
    tree = design_tree()
    assert tree.without_queue("nope") is tree


def test_deep_tree_needs_no_recursion() -> None:
    depth = 5000
    queues = [Queue(name="q0")] + [Queue(name=f"q{i}", parent=f"q{i - 1}") for i in range(1, depth)]
    tree = QueueTree(reversed(queues))
    assert len(tree.path(f"q{depth - 1}")) == depth
    moved = tree.with_queue(Queue(name="q1", parent=None))
    assert moved.path(f"q{depth - 1}")[0] == "q1"


def test_trees_compare_by_content() -> None:
    assert design_tree() == design_tree()
    assert hash(design_tree()) == hash(design_tree())
    assert design_tree() != design_tree().without_queue("leaf1")


@given(random_trees(), st.data())
def test_incremental_updates_equal_a_rebuild(tree: QueueTree, data: st.DataObject) -> None:
    names = [queue.name for queue in tree]
    name = data.draw(st.sampled_from([*names, "fresh"]))
    parent = data.draw(st.sampled_from([None, "ghost", *names]))
    if data.draw(st.booleans()):
        try:
            updated = tree.with_queue(Queue(name=name, parent=parent))
        except QueueCycleError:
            return
        expected = [q for q in tree if q.name != name] + [Queue(name=name, parent=parent)]
    else:
        updated = tree.without_queue(name)
        expected = [q for q in tree if q.name != name]
    rebuilt = QueueTree(expected)
    assert dict(updated.paths()) == dict(rebuilt.paths())
    for queue in rebuilt:
        assert set(updated.children_of(queue.name)) == set(rebuilt.children_of(queue.name))


def test_cycle_through_a_parent_that_did_not_exist_yet_is_rejected() -> None:
    # `a` waits under `b`, which is unknown (so `a` is a root); upserting `b` under `a`
    # closes a cycle that no computed path shows. It must be rejected, not loop forever.
    from minruntime.core import Queue, QueueCycleError, QueueTree

    tree = QueueTree([Queue(name="a", parent="b")])
    assert tree.path("a") == ("a",)
    with pytest.raises(QueueCycleError, match="a -> b"):
        tree.with_queue(Queue(name="b", parent="a"))
    longer = tree.with_queue(Queue(name="c", parent="a"))
    with pytest.raises(QueueCycleError, match="b -> c -> a -> b"):
        longer.with_queue(Queue(name="b", parent="c"))
    assert longer.with_queue(Queue(name="b")).path("c") == ("b", "a", "c")


@given(
    st.lists(
        st.tuples(st.sampled_from("abcdef"), st.one_of(st.none(), st.sampled_from("abcdefgh"))),
        max_size=30,
    )
)
def test_random_upserts_with_dangling_parents_match_a_rebuild(
    upserts: list[tuple[str, str | None]],
) -> None:
    from minruntime.core import Queue, QueueCycleError, QueueTree

    tree = QueueTree()
    for name, parent in upserts:
        try:
            tree = tree.with_queue(Queue(name=name, parent=parent))
        except QueueCycleError:
            continue
        rebuilt = QueueTree(list(tree))
        assert {q.name: tree.path(q.name) for q in tree} == {
            q.name: rebuilt.path(q.name) for q in rebuilt
        }
