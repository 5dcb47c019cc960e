"""The free-capacity ledger: exact GPU units, best-fit placement, checkpoints and rollback."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minruntime.core import (
    GPU_UNITS_PER_GPU,
    FreeCapacityLedger,
    MinRuntimeError,
    gpu_units,
    units_to_gpu,
)

G = GPU_UNITS_PER_GPU


def ledger(**free: float) -> FreeCapacityLedger:
    """Nodes named by keyword in pool ``p``; a name starting with ``x`` goes to pool ``x``."""
    return FreeCapacityLedger(
        (name, "x" if name.startswith("x") else "p", gpu_units(gpus)) for name, gpus in free.items()
    )


def test_gpu_units_are_exact_for_common_fractions() -> None:
    assert sum(gpu_units(0.1) for _ in range(10)) == gpu_units(1.0) == G
    assert gpu_units(0.5) * 2 == G
    assert units_to_gpu(gpu_units(2.25)) == 2.25
    for bad in (float("inf"), float("nan"), True, "1"):
        with pytest.raises(MinRuntimeError):
            gpu_units(bad)  # type: ignore[arg-type]


def test_best_fit_takes_the_tightest_node_largest_pod_first() -> None:
    book = ledger(a=8, b=2, c=4)
    assert book.place("p", [gpu_units(4), gpu_units(2)]) == ("c", "b")
    assert book.free_units() == {"a": 8 * G, "b": 0, "c": 0}


def test_ties_go_to_the_first_node_name() -> None:
    book = ledger(b=4, a=4)
    assert book.place("p", [gpu_units(1)]) == ("a",)


def test_a_failed_placement_changes_nothing() -> None:
    book = ledger(a=2, b=2)
    before = book.free_units()
    assert book.place("p", [gpu_units(2), gpu_units(2), gpu_units(1)]) is None
    assert book.free_units() == before
    assert book.place("nowhere", [1]) is None


def test_placement_stays_in_its_pool() -> None:
    book = ledger(a=1, x1=8)
    assert book.place("p", [gpu_units(2)]) is None
    assert book.place("x", [gpu_units(2)]) == ("x1",)
    assert book.pool_of("x1") == "x"
    assert book.pool_of("zz") is None


def test_release_and_rollback() -> None:
    book = ledger(a=1, b=0)
    mark = book.checkpoint()
    book.release("b", gpu_units(3))
    book.release("ghost", gpu_units(3))
    assert book.free("b") == 3 * G
    assert book.total_free("p") == 4 * G
    assert book.max_free("p") == 3 * G
    assert book.place("p", [gpu_units(3)]) == ("b",)
    book.rollback(mark)
    assert book.free_units() == {"a": G, "b": 0}
    assert book.max_free("p") == G
    assert book.max_free("none") == -1


def test_fits_at_looks_at_the_past_and_restores_the_present() -> None:
    book = ledger(a=1)
    mark = book.checkpoint()
    book.release("a", gpu_units(3))
    assert book.fits("p", [gpu_units(4)])
    assert not book.fits_at(mark, "p", [gpu_units(4)])
    assert book.free("a") == 4 * G
    assert book.pools_changed_since(mark) == {"p"}
    assert book.gained_since(mark, "p")
    book.place("p", [gpu_units(3)])
    assert not book.gained_since(mark, "p")


def test_duplicate_node_names_are_rejected() -> None:
    with pytest.raises(MinRuntimeError):
        FreeCapacityLedger([("a", "p", 1), ("a", "p", 2)])


operations = st.lists(
    st.tuples(
        st.sampled_from(["release", "place"]),
        st.sampled_from(["a", "b", "c", "x1", "x2", "ghost"]),
        st.lists(st.sampled_from([0, 1, 2, 4, 8]).map(lambda q: q * G // 4), max_size=4),
    ),
    max_size=30,
)


@settings(max_examples=200, deadline=None)
@given(
    free=st.lists(st.integers(-2, 16).map(lambda q: q * G // 2), min_size=5, max_size=5),
    before=operations,
    after=operations,
)
def test_rollback_restores_the_ledger_exactly(
    free: list[int],
    before: list[tuple[str, str, list[int]]],
    after: list[tuple[str, str, list[int]]],
) -> None:
    book = FreeCapacityLedger(
        (name, "x" if name.startswith("x") else "p", units)
        for name, units in zip(["a", "b", "c", "x1", "x2"], free, strict=True)
    )

    def apply(ops: list[tuple[str, str, list[int]]]) -> None:
        for kind, where, demands in ops:
            if kind == "release":
                book.release(where, sum(demands))
            else:
                book.place("x" if where.startswith("x") else "p", demands)

    def state() -> tuple[dict[str, int], list[int], list[int]]:
        return (
            book.free_units(),
            [book.max_free(pool) for pool in ("p", "x")],
            [book.total_free(pool) for pool in ("p", "x")],
        )

    apply(before)
    mark = book.checkpoint()
    saved = state()
    apply(after)
    # The derived indexes always agree with the per-node values.
    units = book.free_units()
    for pool, names in (("p", "abc"), ("x", ["x1", "x2"])):
        assert book.max_free(pool) == max(units[name] for name in names)
        assert book.total_free(pool) == sum(units[name] for name in names)
    book.rollback(mark)
    assert state() == saved
