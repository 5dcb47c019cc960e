"""Generated cluster shapes shared by the benchmarks (deterministic for a given Random)."""

from __future__ import annotations

import random


def build_tree(rng: random.Random, count: int) -> list[tuple[str, str | None, int]]:
    """(name, parent, depth) for ``count`` queues in 5 roots, about 6 levels deep."""
    sizes = [5, 20, 100, 400, 1200]
    sizes.append(max(0, count - sum(sizes)))
    queues: list[tuple[str, str | None, int]] = []
    previous: list[str] = []
    for depth, size in enumerate(sizes):
        level = [f"q{depth}-{i}" for i in range(size)]
        for name in level:
            queues.append((name, rng.choice(previous) if previous else None, depth))
        previous = level
    return queues[:count]


def duration(rng: random.Random) -> str | None:
    """Unset 60 %, ``0s`` 10 %, 1-120 minutes 30 %."""
    roll = rng.random()
    if roll < 0.6:
        return None
    if roll < 0.7:
        return "0s"
    return f"{rng.randint(1, 120)}m"
