"""Fitting gangs of GPU pods onto nodes, with a free-capacity ledger that rolls back cheaply.

GPU amounts are floats on the wire (fractions allowed). Inside the ledger they are whole
numbers of micro-GPUs, so sums are exact: two 0.5 pods fill one GPU, and ten 0.1 pods fill
exactly one GPU instead of 0.9999999999999999.

Placement is best-fit decreasing: the largest pod first, each onto the node of the pool with
the least free capacity that still holds it, ties to the node whose name sorts first. It keeps
large holes whole for large pods (what KAI's default GPU bin-packing aims for) and it is
deterministic. It is a heuristic: it may miss a packing that exists, but every placement it
returns is real, so a decision built on it never over-commits a node.
"""

from __future__ import annotations

import math
from bisect import bisect_left, insort
from collections.abc import Iterable, Sequence

from minruntime.core.errors import MinRuntimeError
from minruntime.core.gpus import GPU_UNITS_PER_GPU


def gpu_units(gpu: float) -> int:
    """Return ``gpu`` GPUs as whole micro-GPUs (the ledger's exact unit)."""
    if isinstance(gpu, bool) or not isinstance(gpu, int | float) or not math.isfinite(gpu):
        raise MinRuntimeError(f"a GPU amount must be a finite number, got {gpu!r}")
    return round(gpu * GPU_UNITS_PER_GPU)


def units_to_gpu(units: int) -> float:
    """Return micro-GPUs as GPUs."""
    return units / GPU_UNITS_PER_GPU


class FreeCapacityLedger:
    """Free GPU units per node, indexed by node pool, with an undo log for checkpoints.

    Every change is logged as (node, old, new). A checkpoint is the log's length; rolling back
    undoes only the entries after it, so the cost is proportional to what a trial touched,
    never to the number of nodes.
    """

    __slots__ = ("_free", "_index", "_log", "_names", "_pool_of", "_sorted", "_total")

    def __init__(self, nodes: Iterable[tuple[str, str, int]]) -> None:
        """Build the ledger from (node name, node pool, free units); names must be unique."""
        entries = sorted(nodes)
        self._names = [name for name, _, _ in entries]
        self._index = {name: index for index, name in enumerate(self._names)}
        if len(self._index) != len(self._names):
            raise MinRuntimeError("node names must be unique")
        self._pool_of = [pool for _, pool, _ in entries]
        self._free = [free for _, _, free in entries]
        # Per pool: (free units, node index) in ascending order, for best-fit by bisection.
        self._sorted: dict[str, list[tuple[int, int]]] = {}
        self._total: dict[str, int] = {}
        for index, (_, pool, free) in enumerate(entries):
            self._sorted.setdefault(pool, []).append((free, index))
            self._total[pool] = self._total.get(pool, 0) + free
        for order in self._sorted.values():
            order.sort()
        self._log: list[tuple[int, int, int]] = []

    def free(self, node: str) -> int:
        """Return the free units of ``node`` (0 for an unknown node)."""
        index = self._index.get(node)
        return 0 if index is None else self._free[index]

    def free_units(self) -> dict[str, int]:
        """Return every node's free units, by node name."""
        return dict(zip(self._names, self._free, strict=True))

    def pool_of(self, node: str) -> str | None:
        """Return the node pool of ``node``, or None for an unknown node."""
        index = self._index.get(node)
        return None if index is None else self._pool_of[index]

    def max_free(self, pool: str) -> int:
        """Return the largest free capacity of one node of ``pool`` (-1 without nodes)."""
        order = self._sorted.get(pool)
        return order[-1][0] if order else -1

    def total_free(self, pool: str) -> int:
        """Return the free capacity of ``pool`` summed over its nodes."""
        return self._total.get(pool, 0)

    def checkpoint(self) -> int:
        """Return a mark that ``rollback`` can restore."""
        return len(self._log)

    def rollback(self, checkpoint: int) -> None:
        """Undo every change made after ``checkpoint``."""
        log = self._log
        while len(log) > checkpoint:
            index, old, _ = log.pop()
            self._set(index, old)

    def release(self, node: str, units: int) -> None:
        """Give ``units`` back to ``node`` (a virtual eviction); unknown nodes are ignored."""
        index = self._index.get(node)
        if index is not None and units:
            self._change(index, self._free[index] + units)

    def place(self, pool: str, demands: Sequence[int]) -> tuple[str, ...] | None:
        """Best-fit every demand, in order, on ``pool``; return the nodes, or None and no change."""
        order = self._sorted.get(pool)
        if order is None:
            return None
        mark = len(self._log)
        nodes: list[str] = []
        for need in demands:
            position = bisect_left(order, (need, -1))
            if position == len(order):
                self.rollback(mark)
                return None
            free, index = order[position]
            if need:
                self._change(index, free - need)
            nodes.append(self._names[index])
        return tuple(nodes)

    def fits(self, pool: str, demands: Sequence[int]) -> bool:
        """Tell whether ``place`` would succeed, without changing anything."""
        mark = len(self._log)
        placed = self.place(pool, demands) is not None
        self.rollback(mark)
        return placed

    def fits_at(self, checkpoint: int, pool: str, demands: Sequence[int]) -> bool:
        """Tell whether ``demands`` fit in the ledger as it was at ``checkpoint``; no change."""
        later = self._log[checkpoint:]
        self.rollback(checkpoint)
        try:
            return self.fits(pool, demands)
        finally:
            for index, _, new in later:
                self._change(index, new)

    def gained_since(self, checkpoint: int, pool: str) -> bool:
        """True if some node of ``pool`` has more free capacity now than at ``checkpoint``."""
        before: dict[int, int] = {}
        for index, old, _ in self._log[checkpoint:]:
            before.setdefault(index, old)
        return any(
            self._pool_of[index] == pool and self._free[index] > old
            for index, old in before.items()
        )

    def pools_changed_since(self, checkpoint: int) -> set[str]:
        """Return the pools with at least one node changed after ``checkpoint``."""
        return {self._pool_of[index] for index, _, _ in self._log[checkpoint:]}

    def _change(self, index: int, new: int) -> None:
        self._log.append((index, self._free[index], new))
        self._set(index, new)

    def _set(self, index: int, new: int) -> None:
        old = self._free[index]
        if old == new:
            return
        pool = self._pool_of[index]
        order = self._sorted[pool]
        del order[bisect_left(order, (old, index))]
        insort(order, (new, index))
        self._free[index] = new
        self._total[pool] += new - old
